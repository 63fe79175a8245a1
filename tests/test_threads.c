/* Thread pool: every share runs exactly once per job, including a job posted the instant
 * the pool is created (before workers are scheduled: a past deadlock), and pools of many
 * sizes are created and freed repeatedly without hangs or leaks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "core/threads.h"

typedef struct {
    atomic_int hits[16];
    int nth_seen;
} job;

static void fn(void *arg, int ith, int nth) {
    job *j = arg;
    atomic_fetch_add(&j->hits[ith], 1);
    j->nth_seen = nth;
}

static void test_immediate_jobs(void **st) {
    (void)st;
    for (int round = 0; round < 200; round++) {
        int n = 1 + round % 4;
        ls_pool *p = ls_pool_create(n);
        assert_non_null(p);
        job j = {0};
        for (int k = 0; k < 50; k++) ls_pool_run(p, fn, &j);
        for (int i = 0; i < n; i++) assert_int_equal(atomic_load(&j.hits[i]), 50);
        assert_int_equal(j.nth_seen, n);
        ls_pool_free(p);
    }
}

static void test_split_covers(void **st) {
    (void)st;
    for (int nth = 1; nth <= 7; nth++)
        for (long n = 0; n < 50; n++) {
            long prev = 0;
            for (int i = 0; i < nth; i++) {
                long b, e;
                ls_split(n, i, nth, &b, &e);
                assert_int_equal(b, prev);
                assert_true(e >= b);
                prev = e;
            }
            assert_int_equal(prev, n);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_immediate_jobs), cmocka_unit_test(test_split_covers)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
