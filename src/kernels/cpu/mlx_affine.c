/* MLX affine-quantized weights: validation, the reference unpacker/dequantizer, the
 * scalar dot product (the bit-exact emulation of the AVX2 kernel, order documented in
 * cpu_kernels.h) and the batch-invariant matmul driver.
 *
 * Why a per-group integer-times-float sum plus a bias term, not "dequantize then dot":
 * sum_c (s q_c + b) x_c = s * sum q_c x_c + b * sum x_c, so the weight side needs only
 * q -> float (exact) and one fma per element, and sum x_c (xs) depends on the activation
 * row alone: it is computed once per row per call and shared by every weight row, which
 * keeps each output a function of (weight row, activation row) only.
 *
 * Batch invariance holds by construction: every output is ls_mlx_affine_dot_isa's
 * sequence of float operations on the same inputs; threads split the rows of W (never K);
 * the AVX2 tiles run that sequence per lane whatever the tile shape. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "core/f16.h"
#include "core/log.h"
#include "kernels/cpu/cpu_kernels.h"

/* As matmul.c: weight bytes per tile when M > 1 (about half of L1) and activation bytes
 * per chunk (a quarter of L2). A tile of weight rows is decoded against every activation
 * row of a chunk while both are in cache. */
enum { MLX_TILE_BYTES = 16 * 1024, MLX_CHUNK_BYTES = 256 * 1024 };

uint32_t ls_mlx_affine_unpack(const uint8_t *row, int32_t bits, int64_t c) {
    const uint64_t pos = (uint64_t)c * (uint64_t)bits;
    const uint64_t b = pos >> 3;
    const unsigned sh = (unsigned)(pos & 7);
    uint32_t v = (uint32_t)row[b] >> sh;
    if (sh + (unsigned)bits > 8) v |= (uint32_t)row[b + 1] << (8 - sh); /* never reads past the row */
    return v & ((1u << bits) - 1);
}

/* Scale or bias i of a row of them, as float (f16/bf16 -> f32 is exact). */
static inline float sb_get(const void *base, ls_type t, int64_t i) {
    const uint8_t *p = base;
    if (t == LS_TYPE_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return t == LS_TYPE_F16 ? ls_f16_to_f32(h) : ls_bf16_to_f32(h);
}

static inline size_t sb_size(ls_type t) {
    return t == LS_TYPE_F32 ? 4 : 2;
}

void ls_mlx_affine_dequantize_row(const ls_weight *w, int64_t row, float *dst) {
    LS_ASSERT(ls_mlx_affine_check(w) == 0 && row >= 0 && row < w->rows);
    const int64_t ng = w->cols / w->group;
    const uint8_t *q = (const uint8_t *)w->data + (size_t)row * w->row_bytes;
    const uint8_t *sc = (const uint8_t *)w->scales + (size_t)(row * ng) * sb_size(w->sb_type);
    const uint8_t *bi = (const uint8_t *)w->biases + (size_t)(row * ng) * sb_size(w->sb_type);
    for (int64_t g = 0; g < ng; g++) {
        const float s = sb_get(sc, w->sb_type, g), b = sb_get(bi, w->sb_type, g);
        for (int64_t c = g * w->group; c < (g + 1) * w->group; c++) {
            /* two roundings, as mlx (-ffp-contract=off keeps the compiler from fusing) */
            const float sq = s * (float)ls_mlx_affine_unpack(q, w->bits, c);
            dst[c] = sq + b;
        }
    }
}

void ls_mlx_affine_get_rows(const ls_weight *w, const int32_t *ids, int64_t n, float *dst) {
    LS_ASSERT(ls_mlx_affine_check(w) == 0);
    for (int64_t i = 0; i < n; i++) {
        LS_ASSERT(ids[i] >= 0 && ids[i] < w->rows); /* ids were validated by the caller */
        ls_mlx_affine_dequantize_row(w, ids[i], dst + i * w->cols);
    }
}

size_t ls_mlx_affine_scratch_size(int64_t K, int32_t group, int64_t M) {
    if (K <= 0 || M <= 0 || group <= 0 || K % group != 0) return 0;
    const uint64_t per_row = (uint64_t)(K / group) * 8u * sizeof(float);
    if ((uint64_t)M > SIZE_MAX / per_row) return 0;
    return (size_t)(per_row * (uint64_t)M);
}

void ls_mlx_affine_xsums(const float *x, int64_t K, int32_t group, float *xs) {
    for (int64_t g = 0; g < K / group; g++) {
        const float *xg = x + g * group;
        for (int j = 0; j < 8; j++) {
            float s = xg[j];
            for (int64_t i = 8; i < group; i += 8) s = s + xg[i + j];
            xs[g * 8 + j] = s;
        }
    }
}

/* The scalar emulation of the eight AVX2 lanes (order in cpu_kernels.h). */
static float mlx_dot_scalar(const ls_weight *w, int64_t row, const float *x, const float *xs) {
    const int64_t ng = w->cols / w->group;
    const uint8_t *q = (const uint8_t *)w->data + (size_t)row * w->row_bytes;
    const uint8_t *sc = (const uint8_t *)w->scales + (size_t)(row * ng) * sb_size(w->sb_type);
    const uint8_t *bi = (const uint8_t *)w->biases + (size_t)(row * ng) * sb_size(w->sb_type);
    float acc[8] = {0};
    for (int64_t g = 0; g < ng; g++) {
        float s0[8] = {0}, s1[8] = {0}; /* even and odd steps of eight */
        for (int64_t i = g * w->group; i < (g + 1) * w->group; i += 16)
            for (int j = 0; j < 8; j++) {
                s0[j] = fmaf((float)ls_mlx_affine_unpack(q, w->bits, i + j), x[i + j], s0[j]);
                s1[j] = fmaf((float)ls_mlx_affine_unpack(q, w->bits, i + 8 + j), x[i + 8 + j], s1[j]);
            }
        const float scale = sb_get(sc, w->sb_type, g), bias = sb_get(bi, w->sb_type, g);
        for (int j = 0; j < 8; j++) {
            acc[j] = fmaf(scale, s0[j] + s1[j], acc[j]);
            acc[j] = fmaf(bias, xs[g * 8 + j], acc[j]);
        }
    }
    const float a0 = acc[0] + acc[4], a1 = acc[1] + acc[5], a2 = acc[2] + acc[6], a3 = acc[3] + acc[7];
    return (a0 + a2) + (a1 + a3);
}

/* AVX2 + FMA + F16C present (the *_avx2.c flags), ignoring a forced scalar ISA: the explicit-ISA
 * entry points must never run an instruction the CPU lacks. Cached; a race stores the
 * same value twice. */
static int mlx_hw_avx2(void) {
    static atomic_int hw = -1;
    int v = atomic_load_explicit(&hw, memory_order_relaxed);
    if (v < 0) {
        v = 0;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_cpu_init();
        unsigned a, b, c, d;
        const int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
        v = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#endif
        atomic_store_explicit(&hw, v, memory_order_relaxed);
    }
    return v;
}

float ls_mlx_affine_dot_isa(ls_isa isa, const ls_weight *w, int64_t row, const float *x, const float *xs) {
    LS_ASSERT(ls_mlx_affine_check(w) == 0 && row >= 0 && row < w->rows);
    if (isa >= LS_ISA_AVX2 && mlx_hw_avx2()) return ls_mlx_affine_dot_avx2(w, row, x, xs);
    return mlx_dot_scalar(w, row, x, xs);
}

typedef struct {
    const ls_weight *w;
    const float *X, *XS; /* [M][x_stride], [M][xs_stride] */
    int64_t x_stride, xs_stride, M;
    float *Y;
    int64_t y_stride;
    int64_t tile_rows; /* weight rows per cache tile */
    int64_t m_chunk;   /* activation rows per cache chunk */
    int avx2;
} mlx_job;

/* Rows [n0, n1) of W against all M activation rows, a cache tile of weight rows at a time
 * (the loop order only decides what stays in cache, never an output's operations). */
static void mlx_rows(const mlx_job *j, int64_t n0, int64_t n1) {
    for (int64_t mc = 0; mc < j->M; mc += j->m_chunk) {
        const int64_t mc1 = mc + j->m_chunk < j->M ? mc + j->m_chunk : j->M;
        const float *X = j->X + mc * j->x_stride, *XS = j->XS + mc * j->xs_stride;
        float *Y = j->Y + mc * j->y_stride;
        for (int64_t t0 = n0; t0 < n1; t0 += j->tile_rows) {
            const int64_t t1 = t0 + j->tile_rows < n1 ? t0 + j->tile_rows : n1;
            if (j->avx2) {
                ls_mlx_affine_rows_avx2(j->w, t0, t1 - t0, X, j->x_stride, XS, j->xs_stride, (int)(mc1 - mc), Y + t0,
                                        j->y_stride);
                continue;
            }
            for (int64_t m = 0; m < mc1 - mc; m++)
                for (int64_t n = t0; n < t1; n++)
                    Y[m * j->y_stride + n] = mlx_dot_scalar(j->w, n, X + m * j->x_stride, XS + m * j->xs_stride);
        }
    }
}

static void mlx_worker(void *arg, int ith, int nth) {
    const mlx_job *j = arg;
    /* whole groups of 4 rows per thread: the AVX2 kernel's widest row tile */
    long g0, g1;
    ls_split((long)((j->w->rows + 3) / 4), ith, nth, &g0, &g1);
    const int64_t n0 = (int64_t)g0 * 4, n1 = (int64_t)g1 * 4 < j->w->rows ? (int64_t)g1 * 4 : j->w->rows;
    if (n0 < n1) mlx_rows(j, n0, n1);
}

void ls_mlx_affine_matmul_isa(ls_isa isa, ls_pool *pool, const ls_weight *w, const float *X, int64_t x_stride,
                              int64_t M, float *Y, int64_t y_stride, void *scratch) {
    LS_ASSERT(ls_mlx_affine_check(w) == 0);
    if (M <= 0) return;
    LS_ASSERT(scratch != NULL && x_stride >= w->cols && y_stride >= w->rows);
    /* the xs sums: O(M K) adds, on the calling thread (a pool round trip costs more) */
    const int64_t xs_stride = w->cols / w->group * 8;
    float *XS = scratch;
    for (int64_t m = 0; m < M; m++) ls_mlx_affine_xsums(X + m * x_stride, w->cols, w->group, XS + m * xs_stride);
    int64_t tile = (int64_t)(MLX_TILE_BYTES / w->row_bytes) / 4 * 4;
    int64_t chunk = (int64_t)(MLX_CHUNK_BYTES / ((uint64_t)w->cols * sizeof(float))) / 4 * 4;
    mlx_job j = {
        .w = w,
        .X = X,
        .XS = XS,
        .x_stride = x_stride,
        .xs_stride = xs_stride,
        .M = M,
        .Y = Y,
        .y_stride = y_stride,
        .tile_rows = M == 1 ? w->rows : (tile < 4 ? 4 : tile), /* M == 1: no reuse to tile for */
        .m_chunk = chunk < 4 ? 4 : chunk,
        .avx2 = isa >= LS_ISA_AVX2 && mlx_hw_avx2(),
    };
    ls_pool_run(pool, mlx_worker, &j);
}

void ls_mlx_affine_matmul(ls_pool *pool, const ls_weight *w, const float *X, int64_t x_stride, int64_t M, float *Y,
                          int64_t y_stride, void *scratch) {
    ls_mlx_affine_matmul_isa(ls_cpu_isa(), pool, w, X, x_stride, M, Y, y_stride, scratch);
}
