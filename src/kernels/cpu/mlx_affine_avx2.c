/* AVX2 kernels for MLX affine-quantized weights: one ymm lane per lane j of the fixed order
 * in cpu_kernels.h, so each output is bit-identical to the scalar emulation in
 * mlx_affine.c. Tiles of R weight rows x C activation rows (4x1, 2x2, 1x2..1x4) only share
 * the decoding of a weight chunk and the loads of x between outputs, and keep 2*R*C
 * independent fma chains in flight (the order's even/odd partial sums: one chain per
 * output would wait on fma latency); every output still runs its own sequence, so the
 * tile shape (hence M and the thread split) never changes a bit.
 *
 * Decoding eight codes (one step of the lanes) from the bits*8/8 = bits bytes that hold
 * them: 8-bit zero-extends bytes; 2/3/4-bit broadcast the (<= 32-bit) word and shift each
 * lane by j*bits; 5/6-bit split the 40/48 bits in two halves of four codes. Reads are
 * exactly `bits` bytes (memcpy of a constant size), never past the row. */
#include "kernels/cpu/cpu_kernels.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <string.h>

#include "core/f16.h"
#include "core/log.h"

#define MLX_INLINE static inline __attribute__((always_inline))

typedef struct {
    const uint8_t *q, *sc, *bi;
    size_t row_bytes, sb_row; /* bytes per packed row, per row of scales */
    ls_type sbt;
    int64_t ng, group;
} mctx;

static mctx mctx_of(const ls_weight *w) {
    const size_t sz = w->sb_type == LS_TYPE_F32 ? 4 : 2;
    mctx m = {
        .q = w->data,
        .sc = w->scales,
        .bi = w->biases,
        .row_bytes = (size_t)w->row_bytes,
        .sb_row = (size_t)(w->cols / w->group) * sz,
        .sbt = w->sb_type,
        .ng = w->cols / w->group,
        .group = w->group,
    };
    return m;
}

MLX_INLINE float sb_at(const uint8_t *row, ls_type t, int64_t g) {
    if (t == LS_TYPE_F32) {
        float f;
        memcpy(&f, row + 4 * g, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + 2 * g, 2);
    return t == LS_TYPE_F16 ? _cvtsh_ss(h) : ls_bf16_to_f32(h);
}

/* The eight codes at p as floats (exact: q < 256). */
MLX_INLINE __m256 dec8(const uint8_t *p, const int bits) {
    __m256i v;
    if (bits == 8) {
        return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
    } else if (bits <= 4) {
        uint32_t u = 0;
        memcpy(&u, p, (size_t)(bits < 4 ? bits : 4)); /* = bits (the min only quiets -O0 warnings) */
        v = _mm256_srlv_epi32(_mm256_set1_epi32((int)u),
                              _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 4 * bits, 5 * bits, 6 * bits, 7 * bits));
    } else {
        uint64_t u = 0;
        memcpy(&u, p, (size_t)(bits < 8 ? bits : 8));
        const __m128i lo = _mm_set1_epi32((int)(uint32_t)u), hi = _mm_set1_epi32((int)(uint32_t)(u >> (4 * bits)));
        v = _mm256_srlv_epi32(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1),
                              _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 0, bits, 2 * bits, 3 * bits));
    }
    return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32((1 << bits) - 1)));
}

/* (l0+l4, l1+l5, l2+l6, l3+l7) -> (a0+a2, a1+a3) -> b0+b1, as dot_tree8 in dot_f32.c. */
MLX_INLINE float tree8(__m256 v) {
    const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_shuffle_ps(b, b, 1)));
}

/* Weight rows n..n+R-1 x activation rows 0..C-1 (R, C, bits constant after inlining). */
MLX_INLINE void tile(const mctx *m, const int bits, const int R, const int C, int64_t n, const float *X,
                     int64_t x_stride, const float *XS, int64_t xs_stride, float *Y, int64_t y_stride) {
    __m256 acc[4][4];
    const uint8_t *q[4], *sc[4], *bi[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        q[r] = m->q + (size_t)(n + r) * m->row_bytes;
        sc[r] = m->sc + (size_t)(n + r) * m->sb_row;
        bi[r] = m->bi + (size_t)(n + r) * m->sb_row;
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
    }
    for (int64_t g = 0; g < m->ng; g++) {
        /* two chains per output (even and odd steps): a single fma chain per output would
         * leave the FMA units waiting on latency */
        __m256 s0[4][4], s1[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) s0[r][c] = s1[r][c] = _mm256_setzero_ps();
        const int64_t k0 = g * m->group;
        for (int64_t i = k0; i < k0 + m->group; i += 16) {
            const size_t boff = (size_t)(i / 8) * (size_t)bits;
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const __m256 qa = dec8(q[r] + boff, bits), qb = dec8(q[r] + boff + bits, bits);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) {
                    s0[r][c] = _mm256_fmadd_ps(qa, _mm256_loadu_ps(X + c * x_stride + i), s0[r][c]);
                    s1[r][c] = _mm256_fmadd_ps(qb, _mm256_loadu_ps(X + c * x_stride + i + 8), s1[r][c]);
                }
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m256 vs = _mm256_set1_ps(sb_at(sc[r], m->sbt, g)), vb = _mm256_set1_ps(sb_at(bi[r], m->sbt, g));
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                acc[r][c] = _mm256_fmadd_ps(vs, _mm256_add_ps(s0[r][c], s1[r][c]), acc[r][c]);
                acc[r][c] = _mm256_fmadd_ps(vb, _mm256_loadu_ps(XS + c * xs_stride + g * 8), acc[r][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) Y[c * y_stride + r] = tree8(acc[r][c]);
}

typedef void (*tile_fn)(const mctx *m, int64_t n, const float *X, int64_t x_stride, const float *XS, int64_t xs_stride,
                        float *Y, int64_t y_stride);

typedef struct {
    tile_fn t41, t11, t22, t12, t13, t14;
} tile_set;

#define MLX_TILE(B, R, C)                                                                                              \
    static void tile_##B##_##R##C(const mctx *m, int64_t n, const float *X, int64_t x_stride, const float *XS,         \
                                  int64_t xs_stride, float *Y, int64_t y_stride) {                                     \
        tile(m, B, R, C, n, X, x_stride, XS, xs_stride, Y, y_stride);                                                  \
    }
#define MLX_TILES(B)                                                                                                   \
    MLX_TILE(B, 4, 1)                                                                                                  \
    MLX_TILE(B, 1, 1)                                                                                                  \
    MLX_TILE(B, 2, 2)                                                                                                  \
    MLX_TILE(B, 1, 2)                                                                                                  \
    MLX_TILE(B, 1, 3)                                                                                                  \
    MLX_TILE(B, 1, 4)                                                                                                  \
    static const tile_set tiles_##B = {tile_##B##_41, tile_##B##_11, tile_##B##_22,                                    \
                                       tile_##B##_12, tile_##B##_13, tile_##B##_14};

MLX_TILES(2)
MLX_TILES(3)
MLX_TILES(4)
MLX_TILES(5)
MLX_TILES(6)
MLX_TILES(8)

static const tile_set *tiles_for(int32_t bits) {
    switch (bits) {
    case 2: return &tiles_2;
    case 3: return &tiles_3;
    case 4: return &tiles_4;
    case 5: return &tiles_5;
    case 6: return &tiles_6;
    case 8: return &tiles_8;
    default: LS_ASSERT(!"unsupported bits"); return NULL;
    }
}

void ls_mlx_affine_rows_avx2(const ls_weight *w, int64_t n0, int64_t nrows, const float *X, int64_t x_stride,
                             const float *XS, int64_t xs_stride, int nact, float *Y, int64_t y_stride) {
    const mctx m = mctx_of(w);
    const tile_set *t = tiles_for(w->bits);
    const int64_t n1 = n0 + nrows;
    /* activation rows four at a time (the weight tile stays in L1 across them) */
    for (int c0 = 0; c0 < nact; c0 += 4) {
        const int cn = nact - c0 < 4 ? nact - c0 : 4;
        const float *x = X + c0 * x_stride, *xs = XS + c0 * xs_stride;
        float *y = Y + c0 * y_stride; /* y[c * y_stride + n - n0] for absolute row n */
        int64_t n = n0;
        switch (cn) {
        case 4:
            for (; n < n1; n++) t->t14(&m, n, x, x_stride, xs, xs_stride, y + (n - n0), y_stride);
            break;
        case 3:
            for (; n < n1; n++) t->t13(&m, n, x, x_stride, xs, xs_stride, y + (n - n0), y_stride);
            break;
        case 2:
            for (; n + 2 <= n1; n += 2) t->t22(&m, n, x, x_stride, xs, xs_stride, y + (n - n0), y_stride);
            for (; n < n1; n++) t->t12(&m, n, x, x_stride, xs, xs_stride, y + (n - n0), y_stride);
            break;
        default:
            for (; n + 4 <= n1; n += 4) t->t41(&m, n, x, x_stride, xs, xs_stride, y + (n - n0), y_stride);
            for (; n < n1; n++) t->t11(&m, n, x, x_stride, xs, xs_stride, y + (n - n0), y_stride);
            break;
        }
    }
}

float ls_mlx_affine_dot_avx2(const ls_weight *w, int64_t row, const float *x, const float *xs) {
    const mctx m = mctx_of(w);
    float y;
    tiles_for(w->bits)->t11(&m, row, x, 0, xs, 0, &y, 0);
    return y;
}

#else
/* Not an x86 build with AVX2 flags: never selected (mlx_affine.c checks the CPU). */
void ls_mlx_affine_rows_avx2(const ls_weight *w, int64_t n0, int64_t nrows, const float *X, int64_t x_stride,
                             const float *XS, int64_t xs_stride, int nact, float *Y, int64_t y_stride) {
    for (int c = 0; c < nact; c++)
        for (int64_t n = n0; n < n0 + nrows; n++)
            Y[c * y_stride + n - n0] = ls_mlx_affine_dot_isa(LS_ISA_SCALAR, w, n, X + c * x_stride, XS + c * xs_stride);
}
float ls_mlx_affine_dot_avx2(const ls_weight *w, int64_t row, const float *x, const float *xs) {
    return ls_mlx_affine_dot_isa(LS_ISA_SCALAR, w, row, x, xs);
}
#endif
