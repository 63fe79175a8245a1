/* Logging sink and level. See log.h. */
#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static _Atomic int g_level = LS_LOG_INFO;
static void (*g_sink)(ls_log_level, const char *, void *);
static void *g_sink_ud;

void ls_log_set_level(ls_log_level level) {
    g_level = (int)level;
}
ls_log_level ls_log_get_level(void) {
    return (ls_log_level)g_level;
}

void ls_log_set_sink(void (*sink)(ls_log_level, const char *, void *), void *ud) {
    g_sink = sink;
    g_sink_ud = ud;
}

void ls_log(ls_log_level level, const char *fmt, ...) {
    if ((int)level < g_level) return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (g_sink) {
        g_sink(level, buf, g_sink_ud);
        return;
    }
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR", ""};
    fprintf(stderr, "lockstep %s: %s\n", names[level], buf);
}

_Noreturn void ls_assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "lockstep: assertion failed at %s:%d: %s\n", file, line, expr);
    abort();
}
