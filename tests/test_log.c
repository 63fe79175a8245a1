/* LS_LOG_ONCE (core/log.h): per call site, the first occurrence is logged at its level
 * and later ones at DEBUG, so a condition that repeats per layer, round or request still
 * surfaces once without flooding. Checked through the test sink. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/log.h"

enum { MAX_MSGS = 4096 };

typedef struct {
    ls_log_level level;
    char text[512];
} record;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static record g_recs[MAX_MSGS];
static int g_n;

static void sink(ls_log_level level, const char *msg, void *ud) {
    (void)ud;
    pthread_mutex_lock(&g_mu);
    if (g_n < MAX_MSGS) {
        g_recs[g_n].level = level;
        snprintf(g_recs[g_n].text, sizeof g_recs[g_n].text, "%s", msg);
    }
    g_n++;
    pthread_mutex_unlock(&g_mu);
}

static int setup(void **state) {
    (void)state;
    g_n = 0;
    ls_log_set_sink(sink, NULL);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ls_log_set_sink(NULL, NULL);
    ls_log_set_level(LS_LOG_INFO);
    return 0;
}

static int count_level(ls_log_level level) {
    int n = 0;
    for (int i = 0; i < g_n && i < MAX_MSGS; i++) n += g_recs[i].level == level;
    return n;
}

/* Each function below is its own call site (its own once-flag). */
static void site_a(int i) {
    LS_LOG_ONCE(LS_LOG_WARN, "site A: layer %d has no fused kernel, using %s", i, "the reference");
}
static void site_b(int i) {
    LS_LOG_ONCE(LS_LOG_WARN, "site B %d", i);
}
static void site_c(int i) {
    LS_LOG_ONCE(LS_LOG_WARN, "site C %d", i);
}
static void site_quiet(int i) {
    LS_LOG_ONCE(LS_LOG_WARN, "quiet site %d", i);
}
static void site_error(int i) {
    LS_LOG_ONCE(LS_LOG_ERROR, "error site %d", i);
}
static void site_threads(int i) {
    LS_LOG_ONCE(LS_LOG_WARN, "threaded site %d", i);
}
static void site_muted(int i) {
    LS_LOG_ONCE(LS_LOG_WARN, "muted site %d", i);
}

/* 1000 calls at DEBUG level: one WARN (the first, text intact), then 999 DEBUG. */
static void test_once_then_debug(void **state) {
    (void)state;
    ls_log_set_level(LS_LOG_DEBUG);
    for (int i = 0; i < 1000; i++) site_a(i);
    assert_int_equal(g_n, 1000);
    assert_int_equal(count_level(LS_LOG_WARN), 1);
    assert_int_equal(count_level(LS_LOG_DEBUG), 999);
    assert_int_equal(g_recs[0].level, LS_LOG_WARN);
    assert_string_equal(g_recs[0].text, "site A: layer 0 has no fused kernel, using the reference");
    for (int i = 1; i < 1000; i++) {
        char want[128];
        snprintf(want, sizeof want, "site A: layer %d has no fused kernel, using the reference", i);
        assert_int_equal(g_recs[i].level, LS_LOG_DEBUG);
        assert_string_equal(g_recs[i].text, want);
    }
}

/* At the default INFO level the repeats are invisible: exactly one message. */
static void test_repeats_hidden_above_debug(void **state) {
    (void)state;
    ls_log_set_level(LS_LOG_INFO);
    for (int i = 0; i < 1000; i++) site_quiet(i);
    assert_int_equal(g_n, 1);
    assert_int_equal(g_recs[0].level, LS_LOG_WARN);
    assert_string_equal(g_recs[0].text, "quiet site 0");
    /* and a site's level is its own: an ERROR site surfaces at ERROR */
    for (int i = 0; i < 10; i++) site_error(i);
    assert_int_equal(g_n, 2);
    assert_int_equal(g_recs[1].level, LS_LOG_ERROR);
    /* a level above the site's hides even the first occurrence */
    ls_log_set_level(LS_LOG_NONE);
    for (int i = 0; i < 10; i++) site_muted(i);
    assert_int_equal(g_n, 2);
}

/* Two different call sites each surface once, interleaved. */
static void test_sites_independent(void **state) {
    (void)state;
    ls_log_set_level(LS_LOG_DEBUG);
    for (int i = 0; i < 100; i++) {
        site_b(i);
        site_c(i);
    }
    assert_int_equal(g_n, 200);
    assert_int_equal(count_level(LS_LOG_WARN), 2);
    assert_int_equal(g_recs[0].level, LS_LOG_WARN);
    assert_string_equal(g_recs[0].text, "site B 0");
    assert_int_equal(g_recs[1].level, LS_LOG_WARN);
    assert_string_equal(g_recs[1].text, "site C 0");
    for (int i = 2; i < 200; i++) assert_int_equal(g_recs[i].level, LS_LOG_DEBUG);
}

/* A long first message reaches the sink whole. */
static void test_first_text_intact(void **state) {
    (void)state;
    char big[400];
    for (size_t i = 0; i < sizeof big - 1; i++) big[i] = (char)('a' + i % 26);
    big[sizeof big - 1] = 0;
    ls_log_set_level(LS_LOG_WARN);
    for (int i = 0; i < 3; i++) LS_LOG_ONCE(LS_LOG_WARN, "long: %s|end %d", big, i);
    assert_int_equal(g_n, 1);
    char want[512];
    snprintf(want, sizeof want, "long: %s|end 0", big);
    assert_string_equal(g_recs[0].text, want);
}

/* Many threads racing on one site: still exactly one WARN. */
static void *hammer(void *arg) {
    (void)arg;
    for (int i = 0; i < 500; i++) site_threads(i);
    return NULL;
}

static void test_once_across_threads(void **state) {
    (void)state;
    ls_log_set_level(LS_LOG_DEBUG);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, hammer, NULL), 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    assert_int_equal(g_n, 2000);
    assert_int_equal(count_level(LS_LOG_WARN), 1);
    assert_int_equal(count_level(LS_LOG_DEBUG), 1999);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_once_then_debug, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repeats_hidden_above_debug, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sites_independent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_text_intact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_once_across_threads, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
