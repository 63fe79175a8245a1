/* The CUDA backend's list of recorded launches (src/kernels/cuda/launch_list.h), host code
 * only (no GPU needed; CTest runs it wherever the CUDA backend is built): closures run in
 * the order they were pushed, each exactly once per run_all; clear() destroys each closure
 * exactly once (they may own shared state), and the list takes a second step's closures after
 * it; a closure larger than a block gets one of its own; captures stay aligned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <memory>
#include <vector>

extern "C" {
#include <cmocka.h>
}

#include "kernels/cuda/launch_list.h"

namespace {

struct Big {
    alignas(16) unsigned char pad[100000]; /* larger than a block (64 KiB) */
};

void test_order_and_lifetime(void **) {
    ls::cuda::LaunchList l;
    std::vector<int> seen;
    auto live = std::make_shared<int>(7);
    for (int step = 0; step < 2; step++) {
        assert_true(l.empty());
        for (int i = 0; i < 3000; i++) { /* several blocks' worth */
            uint64_t a = (uint64_t)i * 3, b = a + 1, c2 = a + 2;
            l.push([&seen, live, i, a, b, c2] {
                assert_int_equal((int)(a + b + c2), 9 * i + 3);
                seen.push_back(i);
            });
        }
        assert_false(l.empty());
        assert_int_equal(live.use_count(), 3001); /* each closure holds one */
        l.run_all();
        l.run_all(); /* a capture may run them again: same order */
        assert_int_equal((int)seen.size(), 6000);
        for (int i = 0; i < 6000; i++) assert_int_equal(seen[(size_t)i], i % 3000);
        int probe = 0; /* one more after the others: it runs last, once a run */
        l.push([&probe, &seen] {
            assert_int_equal((int)seen.size(), 9000);
            probe++;
        });
        l.run_all();
        assert_int_equal(probe, 1);
        seen.clear();
        l.clear();
        assert_int_equal(live.use_count(), 1); /* every closure destroyed once */
    }
}

void test_big_and_aligned(void **) {
    ls::cuda::LaunchList l;
    auto big = std::make_shared<Big>();
    big->pad[99999] = 42;
    int sum = 0;
    for (int round = 0; round < 2; round++) {
        l.push([&sum] { sum += 1; });
        l.push([big, &sum] {
            assert_int_equal((uintptr_t)big.get() % 16, 0);
            sum += big->pad[99999];
        });
        Big local{};
        local.pad[0] = 5;
        l.push([local, &sum] { /* a closure of ~100 KB: a block of its own */
            assert_int_equal((uintptr_t)&local % 16, 0);
            sum += local.pad[0];
        });
        l.push([&sum] { sum += 100; });
        l.run_all();
        l.clear();
    }
    assert_int_equal(sum, 2 * (1 + 42 + 5 + 100));
    assert_int_equal(big.use_count(), 1);
}

} // namespace

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_lifetime),
        cmocka_unit_test(test_big_and_aligned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
