/* Runtime ISA selection and the (type, ISA) -> kernel lookup.
 *
 * AVX2 kernels need AVX2 + FMA + F16C (the *_avx2.c files are compiled with all three).
 * AVX512 adds the AVX-512 VNNI tiles (tile_avx512.c) on top of AVX2.
 * ls_test_control(LS_TESTCTL_ISA, "scalar") (the CLI's --isa scalar, LOCKSTEP_ISA=scalar)
 * forces the scalar reference everywhere ("avx2": no AVX-512 kernels), which gives the same bits (tests memcmp the
 * two), only slower: useful to rule out a SIMD bug in the field. */
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "lockstep.h"
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "kernels/cpu/cpu_kernels.h"

/* What the hardware can run, ignoring the environment. F16C is read from cpuid (leaf 1,
 * ECX bit 29) because clang 14's __builtin_cpu_supports does not know "f16c". */
static ls_isa isa_hw_detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    unsigned a, b, c, d;
    int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c)) return LS_ISA_SCALAR;
    /* the AVX-512 units need F, BW, VL and VNNI; __builtin_cpu_supports also checks that the
     * OS saves the AVX-512 state */
    if (ls_tile_avx512_get(LS_TYPE_Q8_0) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        return LS_ISA_AVX512;
    return LS_ISA_AVX2;
#endif
    return LS_ISA_SCALAR;
}

/* Both answers are computed once: kernels ask on hot paths (and some callers keep their own
 * copy of the answer). The benign race on first use stores the same value from every
 * thread. g_force_scalar is read when g_isa is resolved. */
static int g_hw = -1;
static atomic_int g_isa = -1;
static atomic_int g_force = -1; /* the highest level allowed, -1: no limit */

static ls_isa isa_hw(void) {
    if (g_hw < 0) g_hw = (int)isa_hw_detect();
    return (ls_isa)g_hw;
}

ls_isa ls_cpu_isa_hw(void) {
    return isa_hw();
}

static int isa_limited(int force) {
    const int hw = (int)isa_hw();
    return force >= 0 && force < hw ? force : hw;
}

ls_isa ls_cpu_isa(void) {
    int v = atomic_load_explicit(&g_isa, memory_order_relaxed);
    if (v < 0) {
        v = isa_limited(atomic_load(&g_force));
        atomic_store(&g_isa, v);
    }
    return (ls_isa)v;
}

int ls_cpu_isa_set(const char *isa) {
    int force;
    if (isa && !strcmp(isa, "scalar"))
        force = LS_ISA_SCALAR;
    else if (isa && !strcmp(isa, "avx2"))
        force = LS_ISA_AVX2;
    else if (!isa || !strcmp(isa, "auto"))
        force = -1;
    else
        return LS_ERR_ARG;
    const int want = isa_limited(force);
    int v = atomic_load(&g_isa);
    if (v >= 0) return v == want ? LS_OK : LS_ERR; /* already chosen: the kernels keep it */
    atomic_store(&g_force, force);
    return LS_OK;
}

ls_vec_dot_fn ls_vec_dot_get(ls_type wt, ls_isa isa) {
    /* never hand out a kernel the CPU would fault on */
    if (isa >= LS_ISA_AVX2 && isa_hw() >= LS_ISA_AVX2) {
        ls_vec_dot_fn f = ls_vec_dot_avx2_get(wt);
        if (f) return f;
    }
    return ls_vec_dot_scalar_get(wt);
}
