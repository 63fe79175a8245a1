/* Sampler: greedy ties, position-keyed determinism, the filters, and the penalties. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "lockstep.h"

static ls_sampling plain(float temp) {
    ls_sampling s = ls_sampling_default();
    s.temperature = temp;
    s.top_k = 0;
    s.top_p = 1.0f;
    s.min_p = 0.0f;
    s.seed = 1234;
    return s;
}

static void test_greedy_ties_lowest_id(void **st) {
    (void)st;
    float l[6] = {0, 3, 1, 3, -1, 2};
    ls_sampling s = plain(0);
    assert_int_equal(ls_sample(&s, l, 6, NULL, 0), 1);
}

/* Greedy picks what `if (l[i] > l[best]) best = i` picks, on random rows of every length
 * 1..70 (the eight-lane pass and its tail), with ties, -0.0 / +0.0, infinities and NaN (a
 * NaN never wins; a NaN at index 0 stays). */
static void test_greedy_matches_scalar_scan(void **st) {
    (void)st;
    ls_sampling s = plain(0);
    uint64_t r = 99;
    float l[70];
    for (int n = 1; n <= 70; n++)
        for (int draw = 0; draw < 40; draw++) {
            for (int i = 0; i < n; i++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                const int v = (int)(r >> 59); /* 0..31: small range, many ties */
                l[i] = v == 31 ? NAN : v == 30 ? -0.0f : v == 29 ? INFINITY : v == 28 ? -INFINITY : (float)(v % 7);
            }
            if (draw == 0) l[0] = NAN;
            int32_t best = 0;
            for (int i = 1; i < n; i++)
                if (l[i] > l[best]) best = i;
            assert_int_equal(ls_sample(&s, l, n, NULL, 0), best);
        }
}

static void test_position_keyed_pure(void **st) {
    (void)st;
    float l[50];
    for (int i = 0; i < 50; i++) l[i] = sinf((float)i) * 2;
    ls_sampling s = plain(1.0f);
    int differs = 0;
    for (int pos = 0; pos < 200; pos++) {
        int32_t a = ls_sample(&s, l, 50, NULL, pos), b = ls_sample(&s, l, 50, NULL, pos);
        assert_int_equal(a, b); /* same (seed, pos) -> same token */
        if (a != ls_sample(&s, l, 50, NULL, pos + 1)) differs++;
    }
    assert_true(differs > 50); /* and the draw really depends on the position */
    ls_sampling s2 = s;
    s2.seed = 99;
    int seed_differs = 0;
    for (int pos = 0; pos < 100; pos++)
        seed_differs += ls_sample(&s, l, 50, NULL, pos) != ls_sample(&s2, l, 50, NULL, pos);
    assert_true(seed_differs > 20);
}

static void test_distribution(void **st) {
    (void)st;
    float l[2] = {0.0f, logf(2.0f)}; /* p = 1/3, 2/3 */
    ls_sampling s = plain(1.0f);
    int ones = 0, n = 30000;
    for (int pos = 0; pos < n; pos++) ones += ls_sample(&s, l, 2, NULL, pos) == 1;
    double f = (double)ones / n;
    assert_true(fabs(f - 2.0 / 3.0) < 0.015);
}

static void test_filters(void **st) {
    (void)st;
    float l[5] = {5, 4.9f, 0, -1, -2};
    ls_sampling s = plain(1.0f);
    s.top_k = 1;
    for (int pos = 0; pos < 100; pos++) assert_int_equal(ls_sample(&s, l, 5, NULL, pos), 0);
    s = plain(1.0f);
    s.min_p = 0.5f; /* only tokens with p >= 0.5 * p_max survive: ids 0 and 1 */
    for (int pos = 0; pos < 300; pos++) assert_true(ls_sample(&s, l, 5, NULL, pos) <= 1);
    s = plain(1.0f);
    s.top_p = 0.3f; /* the best token alone reaches 0.3 */
    for (int pos = 0; pos < 100; pos++) assert_int_equal(ls_sample(&s, l, 5, NULL, pos), 0);
}

static void test_penalties(void **st) {
    (void)st;
    float l[4] = {2.0f, 1.9f, 0.0f, 0.0f};
    int32_t hist[3] = {0, 0, 3};
    ls_sampling s = plain(0);
    assert_int_equal(ls_sample(&s, l, 4, hist, 3), 0);
    s.repeat_penalty = 1.2f; /* 2.0 / 1.2 < 1.9 */
    assert_int_equal(ls_sample(&s, l, 4, hist, 3), 1);
    s = plain(0);
    s.frequency_penalty = 0.06f; /* 2.0 - 2*0.06 = 1.88 < 1.9 */
    assert_int_equal(ls_sample(&s, l, 4, hist, 3), 1);
    s = plain(0);
    s.presence_penalty = 0.2f;
    assert_int_equal(ls_sample(&s, l, 4, hist, 3), 1);
    s.repeat_last_n = 0; /* window of 0: no penalty */
    assert_int_equal(ls_sample(&s, l, 4, hist, 3), 0);
    /* The logits buffer itself is never modified. */
    assert_true(l[0] == 2.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_ties_lowest_id),
        cmocka_unit_test(test_greedy_matches_scalar_scan),
        cmocka_unit_test(test_position_keyed_pure),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_penalties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
