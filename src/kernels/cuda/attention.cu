/* Attention of the CUDA backend (backend.h ls_attn_args; docs/cuda.md section 2).
 *
 * Batch invariance by construction. The keys a query row sees, [lo, hi] (backend.h), are
 * cut into chunks ALIGNED TO ABSOLUTE POSITIONS: chunk c is [256c, 256c + 256) intersected
 * with [lo, hi]. Which chunks a row has, and what each chunk computes, follow from the
 * row's own position (and window flags) alone, never from m, the grid or the SM count.
 *
 * Two kernels, always both, for every m:
 *  1. k_attn_part, one block of 8 warps per (chunk, tile of up to qn query vectors of one
 *     kv head, kv head). A query vector is one row's one head. For each query vector whose
 *     visible range meets the chunk, with the same instruction sequence whatever else the
 *     tile holds:
 *       s_k   = (q . k_k) * scale for its visible keys k of the chunk. The dot product has
 *               one fixed order for a head dim hd = 32 E: lane l of a warp owns the E
 *               contiguous dims [l E, l E + E) and sums their products in increasing d
 *               (fmaf), then the 32 lane sums are added by a fixed xor butterfly (16, 8, 4,
 *               2, 1; both partners add the same two values, so every lane ends with the
 *               same bits). Keys outside the query's range get -inf;
 *       mx    = max of the s_k (exact in any order);
 *       p_k   = expf(s_k - mx) (exactly 0 for -inf); sum = lane l adds keys l, l + 32, ..
 *               of the chunk in that order, then the xor butterfly;
 *       o[d]  = warp w (of 8) sums fmaf(p_k, v_k[d], .) over the visible keys w, w + 8,
 *               w + 16, .. of the chunk in increasing position, then the 8 warp sums are
 *               added in warp order ((o_0 + o_1) + o_2) + .. ;
 *     and stores (mx, sum, o[0..hd)) in a scratch slot of that (row, head, chunk). Warp w
 *     handles the chunk's keys w, w + 8, ..: each lane reads its E elements of the key's
 *     K / V row straight from memory into registers (16-byte loads where aligned; a warp
 *     reads a row's contiguous hd elements), shared by every query vector of the tile.
 *     The tile only decides what is loaded and which warp computes what; no query's
 *     arithmetic sees another query's data. A warp's loop visits only the iterations that
 *     hold keys of the tile's visible union (a decode step early in a chunk would otherwise
 *     walk all 256 positions to give most of them -inf); the softmax treats keys outside a
 *     vector's range as -inf itself, so the sums are those of the full walk, bit for bit
 *     (adding an exact 0 or taking max with -inf changes nothing). The kernel comes in two register-tile
 *     variants (up to 2 query vectors a tile with 8 keys in flight a warp, for decode; up
 *     to 16 / 8 / 4 for hd <= 128 / 256 / 512 otherwise) that run the same arithmetic per
 *     query (the multi-value butterfly in warp_sum_multi pairs lanes exactly as the
 *     single-value one), so the variant a launch picks never shows in the bits.
 *  2. k_attn_combine, one block per (row, head): folds the row's chunk partials in
 *     increasing position order with the online-softmax rescale
 *       M' = max(M, mx_c); a = expf(M - M'); b = expf(mx_c - M');
 *       L = L*a + sum_c*b; O[d] = O[d]*a + o_c[d]*b   (each product and sum rounded alone)
 *     and writes out = O * (1 / L) (the CPU backend's final form); a row that sees no key
 *     gets zeros.
 * Every product and sum is an explicit fmaf / __fmul_rn / __fadd_rn, so nvcc's -fmad
 * choices cannot differ between call sites. Rows are processed in groups when the scratch
 * (allocated at backend creation) cannot hold all of them at once; a row's partials and
 * combine are the same whatever group it is in.
 *
 * Shared memory of the partial kernel: probabilities [qn][256] and the 8 warps' output
 * partials [8][qn][hd] (qn * hd <= 2048: at most 80 KB). The query vectors live in
 * registers (qn x E floats a lane).
 *
 * Measured on an H200 (tests/cuda/test_cuda_ops.cu --bench, f16 KV, 2026-12-01): decode
 * hd 256, 32 / 16 heads, 4096 keys 52 us (1.3 TB/s of K / V), window 1024 34 us; prefill
 * 512 rows over 512 keys 0.51 ms. CUDA cores in f32 (tensor cores would round q and p to
 * f16 / tf32: 1e-3, not the 1e-5 the tests hold the CPU to). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/quant_act.cuh"

namespace {

constexpr int CH = 256; /* keys per chunk, aligned to absolute positions */
constexpr int NW = 8;   /* warps of the partial kernel */
constexpr int NT = NW * 32;
constexpr int QMAX = 16; /* query vectors per block, at most */
constexpr int CT = 128;  /* threads of the combine kernel: hd <= 4 * CT */
static_assert(CH % (NW * 4) == 0 && CH == 8 * 32, "the kernels assume these shapes");

struct Params {
    const float *q;
    float *out;
    const void *k, *v;
    const int32_t *q_pos;
    float *part_o;  /* [mg][n_head][nch][hd] */
    float *part_ml; /* [mg][n_head][nch][2]: chunk max, chunk sum */
    int64_t row0;   /* first row of this group */
    int32_t mg;     /* rows in this group */
    int32_t n_head, n_kv, hd, group, qn;
    int32_t first_pos, n_slots, window;
    int32_t c_first, nch; /* chunks [c_first, c_first + nch) cover the filled slots */
    int32_t strictly_before, vec;
    float scale;
    /* Device memory holding {first_pos, n_slots, c_first, nch} of this call (backend_cuda.cu's
     * step parameters), read by every kernel at entry: a replayed step graph then sees the
     * current cache extent although its kernel arguments were captured steps ago. */
    const int32_t *dyn;
    /* Quantization of the output for the integer matmul that reads it next (quant_act.cuh;
     * the backend decides): qlayout -1 none, else the layout written to xq / xm. */
    int8_t *xq;
    ls::mmq::Meta *xm;
    int qlayout;
    /* 1 when the call's keys lie in one chunk (nch == 1, known when the launch is recorded):
     * the partial kernel finishes each vector itself with k_attn_combine's arithmetic for
     * one chunk (fold_chunk) and no combine kernel runs. */
    int final_out;
};

/* One step of k_attn_combine's fold (shared by the partial kernel's one-chunk finish): the
 * new max and the two rescale factors. Not inlined, so that both kernels run this one
 * compiled sequence on their own operands (the finish passes M = -inf, which the combine
 * loop carries in a register: no call site lets the compiler specialise it). */
__device__ __noinline__ float fold_chunk(float M, float mc, float *a, float *b) {
    const float Mn = fmaxf(M, mc);
    *a = expf(__fsub_rn(M, Mn)); /* 0 for the first chunk (M = -inf) */
    *b = expf(__fsub_rn(mc, Mn));
    return Mn;
}

/* The call's cache extent from device memory (Params::dyn). */
__device__ __forceinline__ Params with_dyn(Params p) {
    p.first_pos = p.dyn[0];
    p.n_slots = p.dyn[1];
    p.c_first = p.dyn[2];
    p.nch = p.dyn[3];
    return p;
}

/* Query vectors a block holds at most for E = hd / 32 dims a lane (register budget): a
 * power of two, qr_for(E) * E <= 64. */
__host__ __device__ constexpr int qr_for(int E) {
    return E <= 4 ? 16 : E <= 8 ? 8 : 4;
}

/* Sums v[0..N) of every lane over the warp's 32 lanes, N a power of two <= 32, returning
 * the sum of v[i] for i = lane >> (5 - log2 N) (lanes that share those bits hold the same
 * bits). Each sum is the xor butterfly 16, 8, 4, 2, 1 of the 32 lane values, whatever N:
 * at distance d a lane adds its own partial and its partner's (a + b == b + a, so both
 * partners hold the same bits); the first log2 N levels just halve the values kept, each
 * lane keeping the half its bit selects. So a value's bits do not depend on N. */
template <int N> __device__ __forceinline__ float warp_sum_multi(float (&v)[N], int lane) {
    int d = 16;
#pragma unroll
    for (int n = N; n > 1; n >>= 1, d >>= 1) {
        const bool upper = (lane & d) != 0;
#pragma unroll
        for (int i = 0; i < n / 2; i++) {
            const float send = upper ? v[i] : v[i + n / 2];
            const float keep = upper ? v[i + n / 2] : v[i];
            v[i] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, d));
        }
    }
    float a = v[0];
    for (; d > 0; d >>= 1) a = __fadd_rn(a, __shfl_xor_sync(0xffffffffu, a, d));
    return a;
}

__host__ __device__ constexpr int log2i(int n) {
    return n <= 1 ? 0 : 1 + log2i(n / 2);
}

inline size_t part_smem_bytes(int hd, int qn) {
    return sizeof(float) * ((size_t)qn * CH + (size_t)NW * qn * hd);
}

/* The keys row `row` sees, [*lo, *hi] (empty when *hi < *lo), exactly as the CPU backend
 * computes them. A visible range outside the filled slots is a caller bug (the CPU
 * backend asserts it): trap rather than read memory nobody wrote. */
__device__ __forceinline__ void visible_range(const Params &p, int64_t row, int32_t *lo, int32_t *hi) {
    const int32_t pos = p.q_pos[row];
    const int32_t last = pos - (p.strictly_before ? 1 : 0);
    int32_t first = 0;
    if (p.window > 0 && pos - p.window + 1 > first) first = pos - p.window + 1;
    if (last >= first && (first < p.first_pos || last - p.first_pos >= p.n_slots)) {
        printf("lockstep cuda attention: row %lld (position %d) sees keys [%d, %d] outside the filled slots "
               "[%d, %d)\n",
               (long long)row, (int)pos, (int)first, (int)last, (int)p.first_pos, (int)(p.first_pos + p.n_slots));
        __trap();
    }
    *lo = first;
    *hi = last;
}

/* E consecutive K or V elements as floats (exact conversion). 16-byte loads when the
 * caches are 16-byte aligned and a lane's E elements are a multiple of 16 bytes. */
template <typename KT, int E> __device__ __forceinline__ void load_slice(const KT *src, float (&out)[E], int vec) {
    if constexpr ((E * sizeof(KT)) % 16 == 0) {
        if (vec) {
            constexpr int N16 = E * (int)sizeof(KT) / 16;
#pragma unroll
            for (int i = 0; i < N16; i++) {
                const uint4 raw = __ldg(reinterpret_cast<const uint4 *>(src) + i);
                if constexpr (sizeof(KT) == 2) {
                    const __half2 *h2 = reinterpret_cast<const __half2 *>(&raw);
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const float2 f = __half22float2(h2[j]);
                        out[8 * i + 2 * j] = f.x;
                        out[8 * i + 2 * j + 1] = f.y;
                    }
                } else {
                    out[4 * i] = __uint_as_float(raw.x);
                    out[4 * i + 1] = __uint_as_float(raw.y);
                    out[4 * i + 2] = __uint_as_float(raw.z);
                    out[4 * i + 3] = __uint_as_float(raw.w);
                }
            }
            return;
        }
    }
#pragma unroll
    for (int e = 0; e < E; e++) {
        if constexpr (sizeof(KT) == 2)
            out[e] = __half2float(src[e]);
        else
            out[e] = src[e];
    }
}

/* The scores phase of k_attn_part: warp w takes keys w, w + 8, .. of the chunk; lanes split
 * the dims. S[qi][kk] = (q . k) * scale for the keys a query sees, -inf for the others. */
template <typename KT, int E, int QR, int UK>
__device__ __forceinline__ void attn_scores(const Params &p, float *S, const int32_t *s_lo, const int32_t *s_hi,
                                            const int64_t *s_qoff, int qcount, int32_t c0, int32_t ulo, int32_t uhi,
                                            const KT *kb, int64_t slot_stride, int warp, int lane) {
    float qr[QR][E];
#pragma unroll
    for (int qi = 0; qi < QR; qi++)
#pragma unroll
        for (int e = 0; e < E; e++) qr[qi][e] = qi < qcount ? p.q[s_qoff[qi] + lane * E + e] : 0.0f;
    /* iterations whose keys all lie outside the tile's union [ulo, uhi] are skipped: their
     * keys only ever got -inf (the softmax masks them itself) */
    const int kend = uhi - c0;
    for (int k0 = warp + (ulo - c0) / (NW * UK) * (NW * UK); k0 <= kend && k0 < CH; k0 += NW * UK) {
        float kv[UK][E];
#pragma unroll
        for (int u = 0; u < UK; u++) {
            const int32_t key = c0 + k0 + NW * u;
            if (key >= ulo && key <= uhi)
                load_slice<KT, E>(kb + (int64_t)(key - p.first_pos) * slot_stride, kv[u], p.vec);
            else
#pragma unroll
                for (int e = 0; e < E; e++) kv[u][e] = 0.0f;
        }
        constexpr int H = log2i(QR);
#pragma unroll
        for (int u = 0; u < UK; u++) {
            const int kk = k0 + NW * u;
            const int32_t key = c0 + kk;
            if (key < ulo || key > uhi) { /* no query of the tile sees it (warp-uniform) */
                if (lane < qcount) S[lane * CH + kk] = -INFINITY;
                continue;
            }
            /* every query vector of the register tile, branch-free (padding vectors are
             * zeros); the mask is applied after */
            float a[QR];
#pragma unroll
            for (int qi = 0; qi < QR; qi++) {
                a[qi] = 0.0f;
#pragma unroll
                for (int e = 0; e < E; e++) a[qi] = fmaf(kv[u][e], qr[qi][e], a[qi]);
            }
            const float dot = warp_sum_multi<QR>(a, lane);
            const int qi = lane >> (5 - H);
            if ((lane & ((32 >> H) - 1)) == 0 && qi < qcount)
                S[qi * CH + kk] = key >= s_lo[qi] && key <= s_hi[qi] ? __fmul_rn(dot, p.scale) : -INFINITY;
        }
    }
}

/* Chunk max, probabilities (in place in S) and chunk sum of each query vector: one warp per
 * query vector, fixed orders (docs/cuda.md section 2). */
__device__ __forceinline__ void attn_softmax(float *S, const int32_t *s_lo, const int32_t *s_hi, float *s_mx,
                                             float *s_sum, int qcount, int32_t c0, int warp, int lane) {
    for (int qi = warp; qi < qcount; qi += NW) {
        if (s_lo[qi] > s_hi[qi]) continue; /* warp-uniform */
        float *row = S + qi * CH;
        float v[CH / 32];
        float mx = -INFINITY;
        /* keys of the chunk outside the vector's visible range are -inf whether or not the
         * scores loop reached them (it skips iterations outside the tile's union) */
        const int lo = s_lo[qi] - c0, hi = s_hi[qi] - c0;
#pragma unroll
        for (int i = 0; i < CH / 32; i++) {
            const int kk = lane + 32 * i;
            v[i] = kk >= lo && kk <= hi ? row[kk] : -INFINITY;
            mx = fmaxf(mx, v[i]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < CH / 32; i++) {
            const float e = expf(__fsub_rn(v[i], mx)); /* exactly 0 for masked keys */
            row[lane + 32 * i] = e;
            sum = __fadd_rn(sum, e);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
        if (lane == 0) {
            s_mx[qi] = mx;
            s_sum[qi] = sum;
        }
    }
}

/* The block's results: o of each query vector (the 8 warp partials added in warp order;
 * element (qi, e, l) is dim l * E + e), its chunk max and sum. */
template <int E>
__device__ __forceinline__ void attn_store(const Params &p, const float *Op, const int32_t *s_lo, const int32_t *s_hi,
                                           const int64_t *s_slot, const float *s_mx, const float *s_sum, int qcount,
                                           int tid) {
    constexpr int hd = 32 * E;
    for (int o = tid; o < qcount * hd; o += NT) {
        const int qi = o / hd, r = o - qi * hd;
        if (s_lo[qi] > s_hi[qi]) continue;
        float v = Op[(size_t)qi * hd + r];
#pragma unroll
        for (int w = 1; w < NW; w++) v = __fadd_rn(v, Op[((size_t)w * p.qn + qi) * hd + r]);
        const int e = r >> 5, l = r & 31;
        p.part_o[s_slot[qi] * hd + l * E + e] = v;
    }
    if (tid < qcount && s_lo[tid] <= s_hi[tid]) {
        p.part_ml[2 * s_slot[tid]] = s_mx[tid];
        p.part_ml[2 * s_slot[tid] + 1] = s_sum[tid];
    }
}

/* The one-chunk finish (Params::final_out): each vector's output is k_attn_combine's for a
 * single chunk, operation for operation (L = 0 * a + sum * b, O = 0 * a + o * b,
 * out = O * (1 / L), with fold_chunk's a and b), written straight to out; a vector that sees
 * no key gets zeros. Then, when asked, the quantization of the finished vectors (as
 * combine_quant: a barrier, then quads from memory). */
template <int E>
__device__ __forceinline__ void attn_finish(const Params &p, const float *Op, const int32_t *s_lo, const int32_t *s_hi,
                                            const int64_t *s_qoff, const float *s_mx, const float *s_sum, int qcount,
                                            int tid, bool any) {
    constexpr int hd = 32 * E;
    for (int o = tid; o < qcount * hd; o += NT) {
        const int qi = o / hd, r = o - qi * hd;
        const int e = r >> 5, l = r & 31;
        float *out = p.out + s_qoff[qi] + l * E + e;
        if (!any || s_lo[qi] > s_hi[qi]) {
            *out = 0.0f;
            continue;
        }
        float v = Op[(size_t)qi * hd + r];
#pragma unroll
        for (int w = 1; w < NW; w++) v = __fadd_rn(v, Op[((size_t)w * p.qn + qi) * hd + r]);
        float a, b;
        fold_chunk(-INFINITY, s_mx[qi], &a, &b);
        const float L = __fadd_rn(__fmul_rn(0.0f, a), __fmul_rn(s_sum[qi], b));
        const float O = __fadd_rn(__fmul_rn(0.0f, a), __fmul_rn(v, b));
        *out = __fmul_rn(O, __fdiv_rn(1.0f, L));
    }
    if (p.qlayout < 0) return; /* uniform over the grid */
    __syncthreads();
    constexpr int nq = hd / 4; /* quads of a vector, a multiple of 8 */
    const int total = qcount * nq, bound = (total + 31) / 32 * 32;
    for (int g = tid; g < bound; g += NT) {
        const bool live = g < total;
        const int gg = live ? g : total - 1;
        const int qi = gg / nq, qd = gg - qi * nq;
        const float *src = p.out + s_qoff[qi] + 4 * qd;
        const float4 v = make_float4(src[0], src[1], src[2], src[3]);
        const int64_t blk = s_qoff[qi] / 32 + qd / 8;
        if (p.qlayout == 1)
            ls::mmq::quant_quad<true>(v, qd % 8, live, p.xq, p.xm, blk);
        else
            ls::mmq::quant_quad<false>(v, qd % 8, live, p.xq, p.xm, blk);
    }
}

/* QR: the register tile of query vectors (qn <= QR); UK: keys a warp loads before using
 * them. Neither changes any query's arithmetic (see warp_sum_multi; a warp's keys are
 * summed in increasing position whatever UK), so the variant picked for a launch, which
 * follows from the query vectors a tile holds, never shows in the bits. */
template <typename KT, int E, int QR, int UK> __global__ void __launch_bounds__(NT, 2) k_attn_part(const Params p_arg) {
    ls::pdl::enter();
    const Params p = with_dyn(p_arg);
    constexpr int hd = 32 * E;
    extern __shared__ float4 smem4[];
    float *const S = reinterpret_cast<float *>(smem4); /* [qn][CH] scores, then probabilities */
    float *const Op = S + p.qn * CH;                   /* [NW][qn][E][32] warp partials of o */
    __shared__ int32_t s_lo[QMAX], s_hi[QMAX];         /* visible keys of the chunk, absolute */
    __shared__ int64_t s_qoff[QMAX];                   /* query vector offset in q (floats) */
    __shared__ int64_t s_slot[QMAX];                   /* partial slot: (r * n_head + h) * nch + cc */
    __shared__ float s_mx[QMAX], s_sum[QMAX];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int cc = blockIdx.x;
    const int32_t c0 = (p.c_first + cc) * CH; /* absolute position of the chunk's first key */
    const int kvh = blockIdx.z;
    const int64_t j0 = (int64_t)blockIdx.y * p.qn;
    const int64_t nq = (int64_t)p.mg * p.group;
    const int qcount = (int)(nq - j0 < p.qn ? nq - j0 : p.qn);

    if (tid < qcount) {
        const int64_t j = j0 + tid, r = j / p.group;
        const int h = kvh * p.group + (int)(j - r * p.group);
        int32_t lo, hi;
        visible_range(p, p.row0 + r, &lo, &hi);
        s_lo[tid] = lo > c0 ? lo : c0;
        s_hi[tid] = hi < c0 + CH - 1 ? hi : c0 + CH - 1;
        s_qoff[tid] = ((p.row0 + r) * p.n_head + h) * (int64_t)hd;
        s_slot[tid] = (r * p.n_head + h) * (int64_t)p.nch + cc;
    }
    __syncthreads();
    /* Union of the tile's visible keys in this chunk: decides what is loaded, nothing else.
     * Every thread computes the same values, so the early return is block-uniform. */
    int32_t ulo = INT_MAX, uhi = INT_MIN;
    for (int i = 0; i < qcount; i++)
        if (s_lo[i] <= s_hi[i]) {
            ulo = s_lo[i] < ulo ? s_lo[i] : ulo;
            uhi = s_hi[i] > uhi ? s_hi[i] : uhi;
        }
    if (ulo > uhi) {
        if (p.final_out) attn_finish<E>(p, nullptr, s_lo, s_hi, s_qoff, s_mx, s_sum, qcount, tid, false);
        return;
    }

    const int64_t slot_stride = (int64_t)p.n_kv * hd;
    const KT *const kb = reinterpret_cast<const KT *>(p.k) + (int64_t)kvh * hd + lane * E;
    const KT *const vb = reinterpret_cast<const KT *>(p.v) + (int64_t)kvh * hd + lane * E;

    attn_scores<KT, E, QR, UK>(p, S, s_lo, s_hi, s_qoff, qcount, c0, ulo, uhi, kb, slot_stride, warp, lane);
    __syncthreads();

    attn_softmax(S, s_lo, s_hi, s_mx, s_sum, qcount, c0, warp, lane);
    __syncthreads();

    /* ---- o: warp w sums its keys (w, w + 8, .. in increasing position) ---- */
    {
        float acc[QR][E];
#pragma unroll
        for (int qi = 0; qi < QR; qi++)
#pragma unroll
            for (int e = 0; e < E; e++) acc[qi][e] = 0.0f;
        for (int k0 = warp + (ulo - c0) / (NW * UK) * (NW * UK); k0 <= uhi - c0 && k0 < CH; k0 += NW * UK) {
            float vv[UK][E];
#pragma unroll
            for (int u = 0; u < UK; u++) {
                const int32_t key = c0 + k0 + NW * u;
                if (key >= ulo && key <= uhi)
                    load_slice<KT, E>(vb + (int64_t)(key - p.first_pos) * slot_stride, vv[u], p.vec);
            }
#pragma unroll
            for (int u = 0; u < UK; u++) {
                const int kk = k0 + NW * u;
                const int32_t key = c0 + kk;
#pragma unroll
                for (int qi = 0; qi < QR; qi++) {
                    if (qi >= qcount) break;
                    if (key >= s_lo[qi] && key <= s_hi[qi]) { /* warp-uniform */
                        const float pk = S[qi * CH + kk];
#pragma unroll
                        for (int e = 0; e < E; e++) acc[qi][e] = fmaf(pk, vv[u][e], acc[qi][e]);
                    }
                }
            }
        }
#pragma unroll
        for (int qi = 0; qi < QR; qi++) {
            if (qi >= qcount) break;
#pragma unroll
            for (int e = 0; e < E; e++) Op[((warp * p.qn + qi) * E + e) * 32 + lane] = acc[qi][e];
        }
    }
    __syncthreads();
    if (p.final_out)
        attn_finish<E>(p, Op, s_lo, s_hi, s_qoff, s_mx, s_sum, qcount, tid, true);
    else
        attn_store<E>(p, Op, s_lo, s_hi, s_slot, s_mx, s_sum, qcount, tid);
}

/* The finished output vector `out` (hd floats, vector index qv over all rows of the call)
 * quantized when the backend asked (p.qlayout >= 0): thread t takes quad t (hd / 4 <= CT),
 * so a 32-element block's 8 quads sit on 8 consecutive lanes. The block wrote out; a
 * barrier first, then ordinary loads (the same floats). */
__device__ __forceinline__ void combine_quant(const Params &p, const float *out, int64_t qv) {
    if (p.qlayout < 0) return; /* uniform over the grid */
    __syncthreads();
    const int nq = p.hd / 4, t = threadIdx.x;
    const bool live = t < nq;
    const int tq = live ? t : nq - 1;
    if (t >= (nq + 31) / 32 * 32) return; /* whole warps past the vector: no shuffle partner */
    const float4 v = make_float4(out[4 * tq], out[4 * tq + 1], out[4 * tq + 2], out[4 * tq + 3]);
    const int64_t blk = qv * (p.hd / 32) + tq / 8;
    if (p.qlayout == 1)
        ls::mmq::quant_quad<true>(v, tq % 8, live, p.xq, p.xm, blk);
    else
        ls::mmq::quant_quad<false>(v, tq % 8, live, p.xq, p.xm, blk);
}

/* One chunk's partials for k_attn_combine: its max and sum, and this thread's (up to) 4
 * elements of o (d = threadIdx.x + CT t; 0 past hd, never used). */
__device__ __forceinline__ void load_partial(const Params &p, int64_t slot, int hd, float (&v)[6]) {
    v[0] = p.part_ml[2 * slot];
    v[1] = p.part_ml[2 * slot + 1];
    const float *oc = p.part_o + slot * hd;
#pragma unroll
    for (int t = 0; t < 4; t++) {
        const int d = threadIdx.x + CT * t;
        v[2 + t] = d < hd ? oc[d] : 0.0f;
    }
}

__global__ void __launch_bounds__(CT) k_attn_combine(const Params p_arg) {
    ls::pdl::enter();
    const Params p = with_dyn(p_arg);
    const int64_t qv = blockIdx.x; /* r * n_head + h within the group */
    const int64_t r = qv / p.n_head;
    const int h = (int)(qv - r * p.n_head);
    const int hd = p.hd;
    float *out = p.out + ((p.row0 + r) * p.n_head + h) * (int64_t)hd;
    int32_t lo, hi;
    visible_range(p, p.row0 + r, &lo, &hi);
    if (hi < lo) {
        for (int d = threadIdx.x; d < hd; d += CT) out[d] = 0.0f;
        combine_quant(p, out, (p.row0 + r) * p.n_head + h);
        return;
    }
    const int32_t c_lo = lo / CH - p.c_first, c_hi = hi / CH - p.c_first; /* lo >= first_pos >= 0 */
    float M = -INFINITY, L = 0.0f, O[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    /* Chunk c + 1's partials are loaded before chunk c is folded: a long context has one
     * chunk a 256 positions (33 at 8,192 tokens), and folding them one dependent load after
     * another left the block waiting on memory once per chunk. The folds are the same. */
    float cur[6], nxt[6] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    load_partial(p, qv * p.nch + c_lo, hd, cur);
    for (int32_t c = c_lo; c <= c_hi; c++) {
        if (c < c_hi) load_partial(p, qv * p.nch + c + 1, hd, nxt);
        float a, b;
        const float Mn = fold_chunk(M, cur[0], &a, &b);
        L = __fadd_rn(__fmul_rn(L, a), __fmul_rn(cur[1], b));
#pragma unroll
        for (int t = 0; t < 4; t++) {
            const int d = threadIdx.x + CT * t;
            if (d < hd) O[t] = __fadd_rn(__fmul_rn(O[t], a), __fmul_rn(cur[2 + t], b));
        }
        M = Mn;
#pragma unroll
        for (int i = 0; i < 6; i++) cur[i] = nxt[i];
    }
    const float inv = __fdiv_rn(1.0f, L);
#pragma unroll
    for (int t = 0; t < 4; t++) {
        const int d = threadIdx.x + CT * t;
        if (d < hd) out[d] = __fmul_rn(O[t], inv);
    }
    combine_quant(p, out, (p.row0 + r) * p.n_head + h);
}

typedef void (*part_fn)(Params);

/* The decode variant: at most 4 query vectors a tile (a one-row call with groups of up
 * to 4 heads: Gemma 3 270M / 27B, Gemma 4 31B's sliding layers), and a small body: a
 * decode step launches this once per layer among ~15 other kernels, so its code is
 * fetched cold each time, and the general variant's fully unrolled body (51 KB of SASS at
 * hd 256) cost more than its arithmetic (ncu, H200: 15 us a call over 10 keys). Keys in
 * flight per warp: 8 for hd <= 128, 2 above (29 KB at hd 256). */
#ifndef LS_ATTN_QR_SMALL
#define LS_ATTN_QR_SMALL 4
#endif
constexpr int QR_SMALL = LS_ATTN_QR_SMALL;
__host__ __device__ constexpr int uk_for(int E, int QR) {
    return QR == 1 ? (E <= 8 ? 8 : 4) : QR <= QR_SMALL ? (QR_SMALL <= 2 ? (E <= 8 ? 8 : 4) : (E <= 4 ? 8 : 2)) : (E > 12 ? 2 : 4);
}

template <typename KT, int QR> part_fn part_kernel_q(int E) {
    switch (E) {
#define LSC_E(n)                                                                                                       \
    case n: return k_attn_part<KT, n, (QR > qr_for(n) ? qr_for(n) : QR), uk_for(n, QR > qr_for(n) ? qr_for(n) : QR)>;
        LSC_E(1)
        LSC_E(2) LSC_E(3) LSC_E(4) LSC_E(5) LSC_E(6) LSC_E(7) LSC_E(8) LSC_E(9) LSC_E(10) LSC_E(11) LSC_E(12) LSC_E(13)
            LSC_E(14) LSC_E(15) LSC_E(16)
#undef LSC_E
    }
    return nullptr;
}

/* The kernel for head dim 32 E holding up to qn query vectors a tile. */
template <typename KT> part_fn part_kernel(int E, int qn) {
    return qn == 1 ? part_kernel_q<KT, 1>(E) : qn <= QR_SMALL ? part_kernel_q<KT, QR_SMALL>(E) : part_kernel_q<KT, QMAX>(E);
}

/* Calls with at most kSplitMax query vectors (a decode step: one row's heads) may take one
 * vector a block: the group's heads spread over several SMs instead of queueing in one
 * block, and the one-vector body is the smallest. Same bits (see k_attn_part).
 * ls_cuda_attention_set_switches turns it and the one-chunk finish off (A/B runs).
 *
 * The split costs reads: each of a kv head's tiles reads the chunk's K / V rows, so one
 * vector a block reads them nv times where the wide tiles (QR vectors) read them nv / QR
 * times, nv the call's query vectors per kv head (Gemma 4 31B's global layers: 8 times
 * against 2; its sliding layers, 2 against 1). It pays while the grid is small. Measured on
 * an H200, f32 caches, one vector a block vs wide tiles, us (tests/cuda/test_cuda_ops
 * --bench; docs/benchmarks.md twenty-fourth CUDA run):
 *   hd 512, 32 / 4 heads (reads x4): at 160 / 512 / 1,024 keys (1 / 2 / 4 chunks) 26.1 /
 *     38.4 / 39.7 against 35.3 / 49.0 / 49.8; at 2,048 / 3,072 / 4,096 keys (8 / 12 / 16)
 *     64.4 / 102.7 / 123.7 against 55.0 / 61.8 / 65.0;
 *   hd 256, 32 / 16 heads (reads x2): at 160 / 512 keys 17.1 / 25.0 against 21.5 / 31.8, and
 *     with a 1,024 window over 2,048 slots (8 chunks, 4 of them seen) 32.8 against 34.1.
 * So: where the split at most doubles the reads, it is taken while the wide tiles number
 * fewer than the SMs; where it multiplies them more, while its own blocks number at most
 * 1.5 SM counts (the partial kernel runs two blocks an SM). Every row above takes its
 * faster variant (split_pays). */
constexpr int kSplitMax = 8;
int g_split_max = kSplitMax;
bool g_finish = true; /* Params::final_out allowed */
int g_sms = 0;        /* SMs of the device (ls_cuda_attention_init); 0: never split */

/* One vector a block for a call of nv query vectors per kv head, n_kv kv heads, nch chunks,
 * wide tiles of QR vectors? */
bool split_pays(int64_t nv, int32_t nch, int32_t n_kv, int QR) {
    if (nv > g_split_max) return false;
    const int64_t wide_tiles = (nv + QR - 1) / QR;
    if (nv <= 2 * wide_tiles) return (int64_t)nch * n_kv * wide_tiles < g_sms;
    return 2 * (int64_t)nch * n_kv * nv <= 3 * (int64_t)g_sms;
}

} // namespace

void ls_cuda_attention_set_switches(bool finish, bool split) {
    g_finish = finish;
    g_split_max = split ? kSplitMax : 0;
}

void ls_cuda_attention_init(void) {
    int dev = 0;
    LSC_CHECK(cudaGetDevice(&dev));
    LSC_CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, dev));
    for (int E = 1; E <= 16; E++) {
        const int bytes = (int)part_smem_bytes(32 * E, qr_for(E));
        for (int qn : {1, QR_SMALL, qr_for(E)}) {
            LSC_CHECK(
                cudaFuncSetAttribute(part_kernel<float>(E, qn), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
            LSC_CHECK(
                cudaFuncSetAttribute(part_kernel<__half>(E, qn), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        }
    }
}

size_t ls_cuda_attention_scratch_bytes(int64_t max_rows, int64_t max_cols, int64_t max_keys) {
    if (max_rows < 1) max_rows = 1;
    if (max_cols < 32) max_cols = 32;
    if (max_keys < 1) max_keys = 1;
    /* n_head * hd <= max_cols (the query row is the output projection's input), so
     * n_head <= max_cols / 32; a filled range of max_keys slots spans at most
     * max_keys / CH + 2 chunks. */
    const size_t n_head_max = (size_t)(max_cols / 32);
    const size_t nch = (size_t)(max_keys / CH) + 2;
    const size_t per_row = ((size_t)max_cols + 2 * n_head_max) * nch * sizeof(float);
    /* All rows of a call in one group when that takes at most 256 MiB; else as many as fit
     * (at least one). */
    const size_t cap = (size_t)256 << 20;
    size_t rows = (size_t)max_rows;
    if (rows * per_row > cap) rows = cap / per_row;
    if (rows < 1) rows = 1;
    return rows * per_row;
}

/* Head dims below 32 (the tiny test fixtures; no real Gemma has them): one warp per
 * (row, head), lane d holds dim d. Exact two-pass softmax over the visible keys in
 * position order, like the CPU: pass 1 the max score, pass 2 the exp-sum and the output.
 * One warp computes the whole query, so nothing depends on m. */
template <typename KT> __global__ void k_attn_small(const Params p_arg) {
    const Params p = with_dyn(p_arg);
    const int64_t r = blockIdx.x;
    const int h = blockIdx.y, lane = threadIdx.x, hd = p.hd, kvh = h / p.group;
    int32_t lo, hi;
    visible_range(p, r, &lo, &hi);
    float *out = p.out + (r * p.n_head + h) * (int64_t)hd;
    if (hi < lo) {
        if (lane < hd) out[lane] = 0.0f;
        return;
    }
    const float q = lane < hd ? p.q[(r * p.n_head + h) * (int64_t)hd + lane] : 0.0f;
    const int64_t stride = (int64_t)p.n_kv * hd;
    const KT *kb = reinterpret_cast<const KT *>(p.k) + (int64_t)kvh * hd;
    const KT *vb = reinterpret_cast<const KT *>(p.v) + (int64_t)kvh * hd;
    float mx = -INFINITY;
    for (int32_t key = lo; key <= hi; key++) {
        const int64_t at = (int64_t)(key - p.first_pos) * stride;
        float d = lane < hd ? __fmul_rn(q, (float)kb[at + lane]) : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) d = __fadd_rn(d, __shfl_xor_sync(0xffffffffu, d, o));
        mx = fmaxf(mx, __fmul_rn(d, p.scale));
    }
    float sum = 0.0f, acc = 0.0f;
    for (int32_t key = lo; key <= hi; key++) {
        const int64_t at = (int64_t)(key - p.first_pos) * stride;
        float d = lane < hd ? __fmul_rn(q, (float)kb[at + lane]) : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) d = __fadd_rn(d, __shfl_xor_sync(0xffffffffu, d, o));
        const float e = expf(__fsub_rn(__fmul_rn(d, p.scale), mx));
        sum = __fadd_rn(sum, e);
        if (lane < hd) acc = fmaf(e, (float)vb[at + lane], acc);
    }
    if (lane < hd) out[lane] = __fmul_rn(acc, __frcp_rn(sum));
}

void ls_cuda_attention_extent(const ls_attn_args *a, int32_t out[4]) {
    out[0] = a->first_pos;
    out[1] = a->n_slots;
    out[2] = 0;
    out[3] = 0;
    if (a->hd >= 32 && a->n_slots > 0) {
        out[2] = a->first_pos / CH;
        out[3] = (int32_t)(((int64_t)a->first_pos + a->n_slots - 1) / CH - out[2] + 1);
    }
}

void ls_cuda_attention(cudaStream_t st, const ls_attn_args *a, const int32_t *dyn, float *scratch,
                       size_t scratch_bytes, void *qscratch, int qlayout) {
    if (a->m <= 0) return;
    if (!((a->hd >= 32 && a->hd <= 512 && a->hd % 32 == 0) || (a->hd >= 1 && a->hd < 32)))
        LSC_FATAL("attention: head dim %d unsupported (1..31, or 32..512 a multiple of 32)", (int)a->hd);
    if (!(a->n_head > 0 && a->n_kv > 0 && a->n_head % a->n_kv == 0))
        LSC_FATAL("attention: n_head %d / n_kv %d", (int)a->n_head, (int)a->n_kv);
    if (!(a->first_pos >= 0 && a->n_slots >= 0 && a->window >= 0))
        LSC_FATAL("attention: first_pos %d, n_slots %d, window %d", (int)a->first_pos, (int)a->n_slots, (int)a->window);

    Params p;
    p.q = a->q;
    p.out = a->out;
    p.k = a->k;
    p.v = a->v;
    p.q_pos = a->q_pos;
    p.n_head = a->n_head;
    p.n_kv = a->n_kv;
    p.hd = a->hd;
    p.group = a->n_head / a->n_kv;
    const int E = a->hd / 32, QR = qr_for(E);
    p.qn = QR; /* per group below: min(QR, query vectors of the group) */
    p.first_pos = a->first_pos;
    p.n_slots = a->n_slots;
    p.window = a->window;
    p.strictly_before = a->strictly_before ? 1 : 0;
    p.scale = a->scale;
    p.vec = ((uintptr_t)a->k % 16 == 0 && (uintptr_t)a->v % 16 == 0) ? 1 : 0;
    p.dyn = dyn;
    p.qlayout = a->hd >= 32 && qscratch ? qlayout : -1;
    p.final_out = 0;
    p.xq = (int8_t *)qscratch;
    p.xm = qscratch ? ls::mmq::meta_of(qscratch, a->m * a->n_head * (int64_t)a->hd) : nullptr;
    if (a->hd < 32) {
        p.row0 = 0;
        p.mg = (int32_t)a->m;
        const dim3 grid((unsigned)a->m, (unsigned)a->n_head);
        if (a->kv_f32)
            k_attn_small<float><<<grid, 32, 0, st>>>(p);
        else
            k_attn_small<__half><<<grid, 32, 0, st>>>(p);
        LSC_CHECK_LAUNCH();
        return;
    }
    int32_t ext[4];
    ls_cuda_attention_extent(a, ext); /* the host's copy of what dyn holds: grid and scratch layout */
    p.c_first = ext[2];
    p.nch = ext[3];
    p.final_out = p.nch == 1 && g_finish ? 1 : 0;

    /* Rows per group: what the scratch holds, and what the grid's y dimension takes. */
    int64_t rows = a->m;
    if (p.nch > 0) {
        const size_t per_row = (size_t)a->n_head * (size_t)p.nch * ((size_t)a->hd + 2) * sizeof(float);
        const int64_t fit = (int64_t)(scratch_bytes / per_row);
        if (fit < 1)
            LSC_FATAL(
                "attention: one row needs %zu bytes of scratch (n_head %d, hd %d, %d slots), the backend has %zu: "
                "created with too small max_cols / max_keys",
                per_row, (int)a->n_head, (int)a->hd, (int)a->n_slots, scratch_bytes);
        if (rows > fit) rows = fit;
        const int64_t ymax = 65535LL * QR / p.group;
        if (rows > ymax) rows = ymax;
    }
    const int64_t xmax = INT32_MAX / a->n_head;
    if (rows > xmax) rows = xmax;

    for (int64_t row0 = 0; row0 < a->m; row0 += rows) {
        const int64_t mg = a->m - row0 < rows ? a->m - row0 : rows;
        p.row0 = row0;
        p.mg = (int32_t)mg;
        p.part_o = scratch;
        p.part_ml = scratch + (size_t)mg * a->n_head * p.nch * a->hd;
        if (p.nch > 0) {
            /* a tile holds up to QR query vectors (fewer when the group has fewer: less shared
             * memory for decode); which vectors share a tile never changes a vector's bits */
            p.qn = split_pays(mg * p.group, p.nch, p.n_kv, QR) ? 1 : (int32_t)std::min<int64_t>(QR, mg * p.group);
            const part_fn part = a->kv_f32 ? part_kernel<float>(E, p.qn) : part_kernel<__half>(E, p.qn);
            const int64_t tiles = (mg * p.group + p.qn - 1) / p.qn;
            const dim3 grid((unsigned)p.nch, (unsigned)tiles, (unsigned)a->n_kv);
            LSC_CHECK(ls::pdl::launch(part, grid, NT, part_smem_bytes(p.hd, p.qn), st, p));
            LSC_CHECK_LAUNCH();
            if (p.final_out) continue;
        }
        LSC_CHECK(ls::pdl::launch(k_attn_combine, (unsigned)(mg * a->n_head), CT, 0, st, p));
        LSC_CHECK_LAUNCH();
    }
}
