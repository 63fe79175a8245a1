/* The host collective (kernels/collective.h), N = 1..4 ranks as threads:
 *  (a) exact all-reduce: every rank's result row is memcmp-identical to the rank-order sum
 *      (rank 0 + rank 1 + ... in that order) computed here, for m = 1..64 rows, so a row's
 *      bits do not depend on how many rows travel with it, and the replicas agree;
 *  (b) the check can fail: the plain (ring-order) all-reduce at N = 3 and 4 gives some row
 *      a different sum for some m, which (a)'s comparison catches (at N = 2 it cannot: a + b
 *      == b + a, see collective.h).
 * Partials are random with exponents spread over 2^-10..2^10 so that the order of the
 * additions changes the rounding; element (rank, row, col) has the same value for every m. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/threads.h"
#include "kernels/collective.h"

enum { D = 37, MAX_M = 64 };

static float value(int rank, int row, int col) {
    uint64_t h = ((uint64_t)rank * 1000003u + (uint64_t)row) * 1000033u + (uint64_t)col + 12345;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    float mant = (float)(h & 0xffffff) / 16777216.0f - 0.5f;
    int e = (int)((h >> 24) % 21) - 10;
    return mant * (float)(1 << (e + 10)) / 1024.0f;
}

typedef struct {
    ls_collective *c;
    int m;
    float *bufs[LS_MAX_RANKS]; /* [m][D] per rank */
} job;

static void rank_fn(void *arg, int rank, int nth) {
    (void)nth;
    job *j = arg;
    j->c->all_reduce(j->c, rank, j->bufs[rank], j->m, D);
}

/* Runs one all-reduce of m rows over n ranks; returns how many result rows differ from the
 * rank-order sum (or between ranks). */
static int run_case(int n, int m, ls_reduce_mode mode, ls_pool *pool) {
    ls_collective *c = ls_collective_host_create(n, (int64_t)MAX_M * D, mode);
    assert_non_null(c);
    job j = {.c = c, .m = m};
    for (int r = 0; r < n; r++) {
        j.bufs[r] = malloc(sizeof(float) * MAX_M * D);
        assert_non_null(j.bufs[r]);
        for (int i = 0; i < m; i++)
            for (int k = 0; k < D; k++) j.bufs[r][i * D + k] = value(r, i, k);
    }
    ls_pool_run(pool, rank_fn, &j);
    int bad = 0;
    for (int i = 0; i < m; i++) {
        float want[D];
        for (int k = 0; k < D; k++) {
            float acc = value(0, i, k);
            for (int r = 1; r < n; r++) acc += value(r, i, k);
            want[k] = acc;
        }
        for (int r = 0; r < n; r++)
            if (memcmp(want, j.bufs[r] + i * D, sizeof want) != 0) {
                bad++;
                break;
            }
    }
    for (int r = 0; r < n; r++) free(j.bufs[r]);
    c->free(c);
    return bad;
}

static void test_exact_invariant(void **st) {
    (void)st;
    for (int n = 1; n <= 4; n++) {
        ls_pool *pool = ls_pool_create(n);
        assert_non_null(pool);
        for (int m = 1; m <= MAX_M; m++) assert_int_equal(run_case(n, m, LS_REDUCE_EXACT, pool), 0);
        ls_pool_free(pool);
    }
}

static void test_plain_order_detected(void **st) {
    (void)st;
    for (int n = 3; n <= 4; n++) {
        ls_pool *pool = ls_pool_create(n);
        assert_non_null(pool);
        int bad = 0;
        for (int m = 1; m <= MAX_M; m++) bad += run_case(n, m, LS_REDUCE_PLAIN, pool);
        assert_true(bad > 0);
        ls_pool_free(pool);
    }
}

static void test_bad_args(void **st) {
    (void)st;
    assert_null(ls_collective_host_create(0, 10, LS_REDUCE_EXACT));
    assert_null(ls_collective_host_create(LS_MAX_RANKS + 1, 10, LS_REDUCE_EXACT));
    assert_null(ls_collective_host_create(2, 0, LS_REDUCE_EXACT));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_exact_invariant),
                                       cmocka_unit_test(test_plain_order_detected), cmocka_unit_test(test_bad_args)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
