/* The chronological sliding-window KV layout is rollback-safe: for every query row of a
 * block (before and after compaction, after rollbacks) the keys it reduces over, in order,
 * are exactly those a single-token chain would see. Keys carry their position and a
 * "version" (which write produced them), so a stale key after a rollback is detected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/kv_cache.h"

enum { ROW = 2, MAXPOS = 4000 };

/* What the chain would have stored for each position (the latest write wins). */
static uint16_t truth[MAXPOS][ROW];

static void write_block(ls_kv_layer *c, int32_t pos0, int32_t m, uint16_t version) {
    assert_int_equal(ls_kv_reserve(c, m), 0);
    for (int32_t r = 0; r < m; r++) {
        uint16_t *k = ls_kv_k(c, pos0 + r), *v = ls_kv_v(c, pos0 + r);
        uint16_t val[ROW] = {(uint16_t)((pos0 + r) & 0xffff), version};
        memcpy(k, val, sizeof val);
        memcpy(v, val, sizeof val);
        memcpy(truth[pos0 + r], val, sizeof val);
    }
    ls_kv_commit(c, pos0 + m);
}

/* The keys query position p reads from the cache, in the order attention reads them,
 * must equal the chain's keys [max(0, p-W+1), p]. */
static void check_query(ls_kv_layer *c, int32_t p) {
    int32_t lo = c->window > 0 && p - c->window + 1 > 0 ? p - c->window + 1 : 0;
    assert_true(lo >= c->first_pos);
    assert_true(p < ls_kv_end(c));
    for (int32_t j = lo; j <= p; j++) {
        assert_memory_equal(ls_kv_k(c, j), truth[j], sizeof truth[j]);
        assert_memory_equal(ls_kv_v(c, j), truth[j], sizeof truth[j]);
    }
}

static void run_schedule(int32_t window, int32_t kmax, unsigned seed) {
    ls_kv_layer c;
    assert_int_equal(ls_kv_init(&c, window + kmax, ROW, window), 0);
    srand(seed);
    uint16_t version = 1;
    int32_t pos = 0, compactions = 0, rollbacks = 0;
    while (pos < 3000) {
        int32_t m = 1 + rand() % kmax;
        int32_t first_before = c.first_pos;
        write_block(&c, pos, m, version++);
        if (c.first_pos != first_before) compactions++;
        for (int32_t r = 0; r < m; r++) check_query(&c, pos + r);
        /* Accept a prefix (a verify block keeps 1..m rows), roll back the rest. */
        int32_t keep = 1 + rand() % m;
        if (keep < m) rollbacks++;
        assert_int_equal(ls_kv_truncate(&c, pos + keep), 0);
        pos += keep;
        assert_int_equal(ls_kv_end(&c), pos);
        /* The chain's view of the last kept position is unchanged by the rollback. */
        check_query(&c, pos - 1);
    }
    assert_true(compactions > 10);
    assert_true(rollbacks > 10);
    ls_kv_free(&c);
}

static void test_sliding_rollback_small(void **st) {
    (void)st;
    for (unsigned seed = 1; seed <= 5; seed++) run_schedule(8, 4, seed);
}

static void test_sliding_rollback_gemma_geometry(void **st) {
    (void)st;
    run_schedule(512, 8, 7);
}

static void test_full_layer_append_only(void **st) {
    (void)st;
    ls_kv_layer c;
    assert_int_equal(ls_kv_init(&c, 64, ROW, 0), 0);
    write_block(&c, 0, 40, 1);
    assert_int_equal(ls_kv_truncate(&c, 30), 0);
    write_block(&c, 30, 34, 2);
    for (int32_t p = 0; p < 64; p++) check_query(&c, p);
    assert_int_equal(ls_kv_reserve(&c, 1), -1); /* full: no room, clear failure */
    ls_kv_free(&c);
}

static void test_rollback_past_compaction_refused(void **st) {
    (void)st;
    ls_kv_layer c;
    assert_int_equal(ls_kv_init(&c, 12, ROW, 8), 0);
    for (int32_t p = 0; p < 40; p += 4) write_block(&c, p, 4, 1);
    assert_true(c.first_pos > 0);
    assert_int_equal(ls_kv_truncate(&c, c.first_pos - 1), -1); /* keys gone: refuse */
    /* A position the cache still holds, but whose window reaches before first_pos: the next
     * row would need dropped keys (prefix reuse asks for such resumes). */
    int32_t fp = c.first_pos, end = ls_kv_end(&c);
    assert_false(ls_kv_can_truncate(&c, fp + 1));
    assert_true(ls_kv_can_truncate(&c, fp + 8 - 1));
    assert_true(ls_kv_can_truncate(&c, 0));
    assert_int_equal(ls_kv_truncate(&c, fp + 1), -1);
    assert_int_equal(ls_kv_end(&c), end); /* refused: nothing changed */
    /* the earliest resumable position: its window starts exactly at first_pos */
    assert_int_equal(ls_kv_truncate(&c, fp + 8 - 1), 0);
    assert_int_equal(ls_kv_end(&c), fp + 7);
    assert_int_equal(ls_kv_truncate(&c, 0), 0); /* full reset always works */
    assert_int_equal(ls_kv_end(&c), 0);
    ls_kv_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sliding_rollback_small),
        cmocka_unit_test(test_sliding_rollback_gemma_geometry),
        cmocka_unit_test(test_full_layer_append_only),
        cmocka_unit_test(test_rollback_past_compaction_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
