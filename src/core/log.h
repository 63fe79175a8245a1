/* Logging: levels, one sink (stderr), and a rate-limited helper.
 *
 * LS_LOG_ONCE(level, ...) logs the first occurrence at `level` and later ones at DEBUG,
 * per call site: use it for any condition that can repeat per layer, per round or per
 * request, so the first occurrence still surfaces and the flood does not. */
#ifndef LS_CORE_LOG_H
#define LS_CORE_LOG_H

#include <stdatomic.h>

typedef enum { LS_LOG_DEBUG = 0, LS_LOG_INFO = 1, LS_LOG_WARN = 2, LS_LOG_ERROR = 3, LS_LOG_NONE = 4 } ls_log_level;

void ls_log_set_level(ls_log_level level);
ls_log_level ls_log_get_level(void);
void ls_log(ls_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Test hook: when set, messages go to this callback instead of stderr. */
void ls_log_set_sink(void (*sink)(ls_log_level level, const char *msg, void *ud), void *ud);

#define LS_DEBUG(...) ls_log(LS_LOG_DEBUG, __VA_ARGS__)
#define LS_INFO(...)  ls_log(LS_LOG_INFO, __VA_ARGS__)
#define LS_WARN(...)  ls_log(LS_LOG_WARN, __VA_ARGS__)
#define LS_ERROR(...) ls_log(LS_LOG_ERROR, __VA_ARGS__)

#define LS_LOG_ONCE(level, ...)                                                                                        \
    do {                                                                                                               \
        static atomic_int ls_once_flag_;                                                                               \
        ls_log(atomic_exchange(&ls_once_flag_, 1) ? LS_LOG_DEBUG : (level), __VA_ARGS__);                              \
    } while (0)

/* Always-on invariant check: prints file:line and aborts. For programming errors only,
 * never for bad input (bad input returns an error). */
#define LS_ASSERT(cond)                                                                                                \
    do {                                                                                                               \
        if (!(cond)) ls_assert_fail(__FILE__, __LINE__, #cond);                                                        \
    } while (0)
_Noreturn void ls_assert_fail(const char *file, int line, const char *expr);

#endif
