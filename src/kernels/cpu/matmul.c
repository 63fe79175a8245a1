/* The matmul driver: Y[m][n] = dot(W row n, X row m).
 *
 * Batch invariance (docs/speculative.md section 2) holds by construction: every Y element is
 * produced by the one kernel family for (weight type, ISA) on the same weight bytes and
 * the same activation bytes, whatever M or the thread count:
 *  - activations are quantized per row into scratch (a row's bytes never depend on M);
 *  - threads split N (output columns) in groups of 8 rows; K is never split;
 *  - Q4_0/Q5_0/Q8_0 use the tile kernels (ls_tile_fn): four (row, activation) outputs
 *    per register, each running the single-row kernel's float sequence whatever the
 *    tile shape, so any M, any tiling and any thread split give the same bits; on a CPU
 *    with AVX-512 VNNI the tiles of tile_avx512.c, whose activation rows are the same
 *    Q8_0 bytes laid out for them (ls_quantize_act_row_q8v);
 *  - the eight-row AVX2 kernels run the single-row kernel's float sequence per lane for
 *    any number (1..4) of activation rows at once, and the leftover rows (N % 8) use the
 *    single-row kernel itself, so an output gives the same bits whether it lands in an
 *    eight-row group or not and whatever its neighbours (the tests use N = 37 and
 *    M = 1..17 for that).
 * Speed: weight-stationary tiling. Each thread walks its rows in tiles sized to stay in
 * L1 and, for each tile, loops over all activation rows of an L2-sized chunk (hundreds of
 * rows), so a weight byte comes from memory once per chunk, not once per row, and the
 * kernels decode it once for four activation rows. With M = 1 this is a plain GEMV
 * streaming the weights (with software prefetch) at memory bandwidth. */
#include <stdatomic.h>
#include <stdint.h>

#include "core/log.h"
#include "kernels/cpu/cpu_kernels.h"

/* Weight bytes per tile when M > 1: about half of a 32 KiB L1, leaving room for the
 * activation rows and Y. Activation bytes per chunk: a quarter of a 1 MiB L2, so a
 * chunk is read from L2 (not L3) for every weight tile. */
enum { MM_TILE_BYTES = 16 * 1024, MM_CHUNK_BYTES = 256 * 1024 };
/* Quantize activations on the calling thread below this many elements: a second pool
 * round trip costs more than quantizing a few rows. */
enum { MM_QUANT_INLINE_ELEMS = 1 << 16 };

typedef struct {
    const uint8_t *W; /* [N][w_row bytes] */
    size_t w_row;
    int64_t N, K, M;
    const uint8_t *A; /* [M][a_row bytes]: quantized activations, or X itself for float weights */
    size_t a_row;
    float *Y; /* [M][y_stride] */
    int64_t y_stride;
    int64_t tile_rows; /* weight rows per L1 tile, multiple of 8 */
    int64_t m_chunk;   /* activation rows per L2 chunk, multiple of LS_GEMM8_MAX_ACT */
    ls_vec_dot_fn dot;
    ls_gemm8_fn gemm8; /* NULL for the scalar ISA */
    ls_tile_fn tile;   /* NULL for the scalar ISA and types without tile kernels */
    int64_t piece;     /* weight rows a thread takes at a time, multiple of 8 */
    atomic_llong next; /* first row of the next piece nobody took */
} mm_job;

typedef struct {
    const float *X; /* [M][x_stride] */
    int64_t x_stride, M, K;
    uint8_t *A; /* [M][a_row bytes] */
    size_t a_row;
    ls_type act;
    int q8v; /* the AVX-512 tiles' layout of the Q8_0 bytes */
} mm_quant_job;

static void mm_quant_rows(const mm_quant_job *q, int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; m++) {
        if (q->q8v)
            ls_quantize_act_row_q8v(q->X + m * q->x_stride, q->A + m * q->a_row, q->K);
        else
            ls_quantize_act_row(q->act, q->X + m * q->x_stride, q->A + m * q->a_row, q->K);
    }
}

static void mm_quant_worker(void *arg, int ith, int nth) {
    const mm_quant_job *q = arg;
    long m0, m1;
    ls_split(q->M, ith, nth, &m0, &m1);
    mm_quant_rows(q, m0, m1);
}

/* Rows [n0, n1) of W against all M activation rows. Loop nest, outer to inner: chunks of
 * activation rows that fit in L2, tiles of weight rows that fit in L1, activation rows
 * (LS_GEMM8_MAX_ACT at a time), groups of eight weight rows; the rows left over after
 * the groups use the single-row kernel. The order only decides what stays in cache:
 * every output is one kernel call on the same bytes whatever the order. */
static void mm_rows(const mm_job *j, int64_t n0, int64_t n1) {
    for (int64_t mc = 0; mc < j->M; mc += j->m_chunk) {
        const int64_t mc1 = mc + j->m_chunk < j->M ? mc + j->m_chunk : j->M;
        for (int64_t t0 = n0; t0 < n1; t0 += j->tile_rows) {
            const int64_t t1 = t0 + j->tile_rows < n1 ? t0 + j->tile_rows : n1;
            if (j->tile) { /* the whole chunk of activation rows against this weight tile */
                j->tile(j->K, j->W + t0 * j->w_row, j->w_row, t1 - t0, j->A + mc * j->a_row, j->a_row, (int)(mc1 - mc),
                        j->Y + mc * j->y_stride + t0, j->y_stride);
                continue;
            }
            for (int64_t m = mc; m < mc1; m += LS_GEMM8_MAX_ACT) {
                const int nact = mc1 - m < LS_GEMM8_MAX_ACT ? (int)(mc1 - m) : LS_GEMM8_MAX_ACT;
                const uint8_t *a = j->A + m * j->a_row;
                float *y = j->Y + m * j->y_stride;
                int64_t n = t0;
                if (j->gemm8)
                    for (; n + 8 <= t1; n += 8)
                        j->gemm8(j->K, j->W + n * j->w_row, j->w_row, a, j->a_row, nact, y + n, j->y_stride);
                for (; n < t1; n++)
                    for (int c = 0; c < nact; c++)
                        y[c * j->y_stride + n] = j->dot(j->K, j->W + n * j->w_row, a + c * j->a_row);
            }
        }
    }
}

/* Threads take pieces of whole groups of 8 rows (so the eight-row kernel covers every
 * group but the last) from a shared counter until none is left: a thread slowed by its
 * neighbour on the core or by the VM does less, instead of the others waiting for it. Which
 * thread computes an output never changes its bits. */
static void mm_worker(void *arg, int ith, int nth) {
    mm_job *j = arg;
    (void)ith, (void)nth;
    for (;;) {
        const int64_t n0 = (int64_t)atomic_fetch_add_explicit(&j->next, j->piece, memory_order_relaxed);
        if (n0 >= j->N) return;
        mm_rows(j, n0, n0 + j->piece < j->N ? n0 + j->piece : j->N);
    }
}

size_t ls_matmul_scratch_size(ls_type wt, int64_t K, int64_t M) {
    const ls_type_traits *tr = ls_type_get(wt);
    if (!tr || tr->act_type == LS_TYPE_F32 || M <= 0) return 0; /* float weights read X directly */
    size_t row = ls_row_size(tr->act_type, K);
    /* the AVX-512 tiles' layout is larger: reserve it whatever the CPU, so callers size one
     * scratch for any ISA */
    if (ls_tile_avx512_get(wt) && ls_act_q8v_row_size(K) > row) row = ls_act_q8v_row_size(K);
    if (row != 0 && (uint64_t)M > SIZE_MAX / row) return 0;
    return row * (size_t)M;
}

/* Everything of a call but its activations: kernels, tiling, pieces. *q8v and *a_bytes: the
 * activation layout the kernels read. */
static void mm_setup(mm_job *j, ls_isa isa, ls_pool *pool, ls_type wt, const void *W, int64_t N, int64_t K, int64_t M,
                     float *Y, int64_t y_stride, int *q8v_out, size_t *a_bytes_out) {
    const ls_type_traits *tr = ls_type_get(wt);
    LS_ASSERT(tr != NULL);
    const ls_vec_dot_fn dot = ls_vec_dot_get(wt, isa);
    LS_ASSERT(dot != NULL);
    const size_t w_row = ls_row_size(wt, K);
    LS_ASSERT(w_row != 0); /* K is a positive multiple of the block */

    *j = (mm_job){
        .W = W,
        .w_row = w_row,
        .N = N,
        .K = K,
        .M = M,
        .Y = Y,
        .y_stride = y_stride,
        .dot = dot,
        /* the eight-row kernels only pair with the ISA the single-row one came from */
        .gemm8 = dot == ls_vec_dot_avx2_get(wt) ? ls_gemm8_avx2_get(wt) : NULL,
        .tile = dot == ls_vec_dot_avx2_get(wt) ? ls_tile_avx2_get(wt) : NULL,
    };
    /* the AVX-512 tiles, only where the CPU runs them (ls_cpu_isa_hw) */
    const int q8v = dot == ls_vec_dot_avx2_get(wt) && isa >= LS_ISA_AVX512 && ls_cpu_isa_hw() >= LS_ISA_AVX512 &&
                    ls_tile_avx512_get(wt) != NULL;
    if (q8v) j->tile = ls_tile_avx512_get(wt);
    /* the K-quants' eight-row kernels with 512-bit VNNI (same bits as the AVX2 ones) */
    if (j->gemm8 && isa >= LS_ISA_AVX512 && ls_cpu_isa_hw() >= LS_ISA_AVX512 && ls_gemm8_kq_avx512_get(wt))
        j->gemm8 = ls_gemm8_kq_avx512_get(wt);
    /* the K-quant tiles decode eight rows into a transposed buffer: worth it from about
     * 33 activation rows up; fewer stream through the eight-row kernels, which give the
     * same bits. Measured on the default model (session 9, after the 512-bit eight-row
     * kernels of gemm8_kq_avx512.c): a K-row forward with the tiles from 6 rows against
     * from 65, 1 / 2 threads: K = 8 36.0 / 19.9 ms -> 31.4 / 17.6, K = 16 76.0 / 42.8 ->
     * 75.1 / 40.5, K = 32 128.1 / 73.3 -> 125.5 / 72.5, K = 48 176.1 / 103.0 -> 179.8 /
     * 102.6 (docs/benchmarks.md) */
    if (dot == ls_vec_dot_avx2_get(wt) && isa >= LS_ISA_AVX512 && ls_cpu_isa_hw() >= LS_ISA_AVX512 && M >= 33 &&
        ls_tile_kq_avx512_get(wt))
        j->tile = ls_tile_kq_avx512_get(wt);
    int64_t tile = (int64_t)(MM_TILE_BYTES / w_row) / 8 * 8;
    tile = tile < 8 ? 8 : tile;
    /* pieces: about 8 per thread (balance) but at least one L1 tile (reuse); M == 1 has no
     * reuse to tile for, so a piece is one tile */
    const int nth = ls_pool_size(pool) > 0 ? ls_pool_size(pool) : 1;
    int64_t piece = ((N + 8 * nth - 1) / (8 * nth) + 7) / 8 * 8;
    if (piece < tile) piece = tile;
    j->piece = piece;
    j->tile_rows = M == 1 ? piece : tile;
    atomic_init(&j->next, 0);

    const size_t a_bytes = tr->act_type == LS_TYPE_F32 ? (size_t)K * sizeof(float)
                           : q8v                       ? ls_act_q8v_row_size(K)
                                                       : ls_row_size(tr->act_type, K);
    const int64_t chunk = (int64_t)(MM_CHUNK_BYTES / a_bytes) / LS_GEMM8_MAX_ACT * LS_GEMM8_MAX_ACT;
    j->m_chunk = chunk < LS_GEMM8_MAX_ACT ? LS_GEMM8_MAX_ACT : chunk;
    *q8v_out = q8v;
    *a_bytes_out = a_bytes;
}

/* The activations of a call: X itself for float weights, else quantized into scratch. */
static void mm_activations(mm_job *j, ls_pool *pool, ls_type act, int q8v, size_t a_bytes, const float *X,
                           int64_t x_stride, void *scratch) {
    if (act == LS_TYPE_F32) {
        j->A = (const uint8_t *)X;
        j->a_row = (size_t)x_stride * sizeof(float);
        return;
    }
    LS_ASSERT(scratch != NULL);
    mm_quant_job q = {
        .X = X, .x_stride = x_stride, .M = j->M, .K = j->K, .A = scratch, .a_row = a_bytes, .act = act, .q8v = q8v};
    if (j->M * j->K <= MM_QUANT_INLINE_ELEMS || ls_pool_size(pool) == 1)
        mm_quant_rows(&q, 0, j->M);
    else
        ls_pool_run(pool, mm_quant_worker, &q);
    j->A = scratch;
    j->a_row = q.a_row;
}

void ls_matmul_isa(ls_isa isa, ls_pool *pool, ls_type wt, const void *W, int64_t N, int64_t K, const float *X,
                   int64_t x_stride, int64_t M, float *Y, int64_t y_stride, void *scratch) {
    if (M <= 0 || N <= 0) return;
    mm_job j;
    int q8v;
    size_t a_bytes;
    mm_setup(&j, isa, pool, wt, W, N, K, M, Y, y_stride, &q8v, &a_bytes);
    mm_activations(&j, pool, ls_type_get(wt)->act_type, q8v, a_bytes, X, x_stride, scratch);
    ls_pool_run(pool, mm_worker, &j);
}

/* A group: the threads take pieces of the first weight until none is left, then of the
 * next: no barrier between the weights, one pool round for all. */
typedef struct {
    mm_job *jobs;
    int n;
} mm_group_job;

static void mm_group_worker(void *arg, int ith, int nth) {
    mm_group_job *g = arg;
    for (int i = 0; i < g->n; i++) mm_worker(&g->jobs[i], ith, nth);
}

int ls_matmul_group_isa(ls_isa isa, ls_pool *pool, int n, const ls_mm_desc *d, int64_t K, const float *X,
                        int64_t x_stride, int64_t M, void *scratch) {
    if (n < 1 || n > LS_MM_GROUP_MAX) return -1;
    if (M <= 0) return 0;
    mm_job jobs[LS_MM_GROUP_MAX];
    int q8v[LS_MM_GROUP_MAX];
    size_t a_bytes[LS_MM_GROUP_MAX];
    for (int i = 0; i < n; i++) {
        const ls_type_traits *tr = ls_type_get(d[i].type);
        if (!tr || d[i].N <= 0 || ls_row_size(d[i].type, K) == 0) return -1;
        mm_setup(&jobs[i], isa, pool, d[i].type, d[i].W, d[i].N, K, M, d[i].Y, d[i].y_stride, &q8v[i], &a_bytes[i]);
        /* one quantized copy of X serves all only when they read the same layout */
        if (tr->act_type != ls_type_get(d[0].type)->act_type || q8v[i] != q8v[0] || a_bytes[i] != a_bytes[0]) return -1;
    }
    mm_activations(&jobs[0], pool, ls_type_get(d[0].type)->act_type, q8v[0], a_bytes[0], X, x_stride, scratch);
    for (int i = 1; i < n; i++) {
        jobs[i].A = jobs[0].A;
        jobs[i].a_row = jobs[0].a_row;
    }
    mm_group_job g = {.jobs = jobs, .n = n};
    ls_pool_run(pool, mm_group_worker, &g);
    return 0;
}

/* The ISA is resolved once per process (ls_cpu_isa, at its first call). */
void ls_matmul(ls_pool *pool, ls_type wt, const void *W, int64_t N, int64_t K, const float *X, int64_t x_stride,
               int64_t M, float *Y, int64_t y_stride, void *scratch) {
    static atomic_int isa = -1; /* a race only computes the same value twice */
    int v = atomic_load_explicit(&isa, memory_order_relaxed);
    if (v < 0) {
        v = (int)ls_cpu_isa();
        atomic_store_explicit(&isa, v, memory_order_relaxed);
    }
    ls_matmul_isa((ls_isa)v, pool, wt, W, N, K, X, x_stride, M, Y, y_stride, scratch);
}

int ls_matmul_group(ls_pool *pool, int n, const ls_mm_desc *d, int64_t K, const float *X, int64_t x_stride, int64_t M,
                    void *scratch) {
    return ls_matmul_group_isa(ls_cpu_isa(), pool, n, d, K, X, x_stride, M, scratch);
}
