/* Standalone GPU test of the CUDA matmul / get_rows kernels (src/kernels/cuda/matmul.cu,
 * cuda_matmul.h). No framework: one line per weight type, exit status 0 = pass, 1 = a
 * failure, 77 = no CUDA device.
 *
 * For every weight type (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K and
 * MLX affine with bits 2,3,4,5,6,8, groups 32/64/128, f32/f16/bf16 scales), on random weights
 * (whole random blocks: every bit pattern of scales and quants, finite f16 fields, negative
 * scales included) and random activations:
 *  (a) batch invariance, bit for bit (for the integer path also with every call forced
 *      through each tensor-core tile kernel, ls_cuda_mmq_policy(2) and (4): (4) is mmq_tile.cu's block
 *      tiles, or for aligned Q4_K and Q6_K the decoded tiles of mmq_dtile.cu / mmq_dtile6.cu): every row of an M-row call, M in {1,2,3,4,5,7,8,9,15,
 *      16,17,31,33,64} (and 512 for Q4_K, Q6_K, Q8_0, MLX 4/8-bit: mmq_mma.cu's tiles), memcmp-equal to that row computed alone
 *      (M = 1); also as part of a call whose rows start at an offset (other tile slots) and
 *      with activations at a 4-byte (not 16-byte) aligned address;
 *  (b) accuracy: per activation row, ||y - y_ref|| / ||y_ref|| < 1e-5 (2e-4 for the types of
 *      the integer path, mmq.cu: 16-bit activations; 2e-2 for Q4_K / Q6_K, whose K-quant kernels
 *      take the CPU's 8-bit Q8_K activations and must equal the host statement of their order
 *      bit for bit, kq_format.cuh), y_ref in double from
 *      the CPU reference dequantizer (ls_type_get()->dequantize_row,
 *      ls_mlx_affine_dequantize_row);
 *  (c) get_rows bit-identical to the CPU dequantizer (and zero rows for out-of-range ids);
 *  every output buffer is poisoned (NaN) before each call and checked fully written;
 *  (d) the launch merging of a recorded step (docs/cuda.md 2b): three weights of one type in
 *      one grouped launch (ls_cuda_mmq_group) == three separate calls, with and without the
 *      activations already quantized; add_rmsnorm / gelu_mul that quantize their output
 *      (ls_cuda_add_rmsnorm_q, ls_cuda_gelu_mul_q) followed by a matmul told so == the plain
 *      op then the matmul, outputs and residual bit for bit, for both activation layouts.
 * Some cases put the weights at a 2- or 4-byte offset to run the unaligned load path.
 *
 * --bench: M = 1, 2, 4, 5, 8, 16, 64, 512 (LS_BENCH_POLICY: the kernel policies to run, e.g. "13") on 21504x5376 and 5376x21504 (rows x cols) Q4_K, Q6_K, Q8_0 and
 * MLX 4/8-bit (bf16 scales, group 64), several weight copies rotated so L2 does not hold
 * them; prints weight GB/s (and a device-to-device copy for the ceiling).
 */
// Build, from the repository root (the GPU machine has no cJSON: compile the CPU sources):
//   mkdir -p build/cudatest
//   for f in src/core/log.c src/core/threads.c src/kernels/types.c src/kernels/cpu/*.c; do case $f in *_avx2.c) x="-mavx2 -mfma -mf16c";; *) x="";; esac; gcc -std=c11 -O2 -D_GNU_SOURCE -ffp-contract=off -fno-fast-math $x -I src -c $f -o build/cudatest/$(basename $f .c).o || exit 1; done
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90,code=sm_90 -Xcompiler=-ffp-contract=off -I src -o build/test_cuda_matmul tests/cuda/test_cuda_matmul.cu src/kernels/cuda/matmul.cu build/cudatest/*.o -lm -lpthread
// or against the library: nvcc ... tests/cuda/test_cuda_matmul.cu build/release/liblockstep.a -lcjson -lm -lpthread
// Run: build/test_cuda_matmul [--quick] [--bench]   (--bench: LS_BENCH_ONLY=q4_k|q6_k|q8_0|mlx4|mlx8|bf16
// and LS_BENCH_M=1|2|4|8|16|512 (or a list: 1,2,4) restrict it, e.g. to profile one launch with ncu;
// LS_BENCH_NROWS=16|32: the narrow kernel's MLX 4-bit block rows; LS_BENCH_KW=124 runs every
// call at 1, 2, then 4 k-warps: ls_cuda_mmq_kw_override, different bits, timing only)
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_matmul.h"
#include "kernels/cuda/cuda_ops.h"
extern "C" {
#include "core/f16.h"
#include "kernels/cpu/cpu_kernels.h"
}

namespace {

#define CK(call)                                                                                                   \
    do {                                                                                                           \
        cudaError_t e_ = (call);                                                                                   \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));                \
            exit(1);                                                                                               \
        }                                                                                                          \
    } while (0)

/* Activation scratch of the integer matmul (cuda_matmul.h): 512 rows of the widest K used
 * here (larger calls run in passes). */
size_t g_scratch_bytes;
void *g_scratch;
void *scratch() {
    if (!g_scratch) {
        g_scratch_bytes = ls_cuda_mmq_scratch_bytes(512, 21504);
        CK(cudaMalloc(&g_scratch, g_scratch_bytes));
    }
    return g_scratch;
}
size_t scratch_bytes() {
    scratch();
    return g_scratch_bytes;
}

uint64_t g_rng = 0x9E3779B97F4A7C15ull;
uint64_t rnd() {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
float frand() { /* [-1, 1) */
    return (float)((double)(rnd() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}
uint16_t rf16(float scale) { /* a finite f16, either sign */
    return ls_f32_to_f16(frand() * scale);
}
uint16_t rbf16(float scale) {
    const float f = frand() * scale;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

struct Case {
    const char *name;
    ls_type type;
    int bits, group;
    ls_type sb;
    int64_t N, K;
    int woff; /* byte offset of the weights from a 256-aligned address */
    bool big; /* also M = 512 */
};

/* Fill one row of a ggml type with random blocks: random bytes, then finite f16 scale
 * fields (small, either sign). Float types: random values. */
void random_row(ls_type t, uint8_t *row, int64_t K) {
    const ls_type_traits *tr = ls_type_get(t);
    const size_t rb = ls_row_size(t, K);
    if (t == LS_TYPE_F32 || t == LS_TYPE_F16 || t == LS_TYPE_BF16) {
        std::vector<float> f(K);
        for (int64_t k = 0; k < K; k++) f[k] = frand();
        ls_quantize_row_ref(t, f.data(), row, K);
        return;
    }
    for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)rnd();
    const int64_t nb = K / tr->blck;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = row + b * tr->type_size;
        uint16_t h[2];
        switch (t) {
        case LS_TYPE_Q4_0:
        case LS_TYPE_Q5_0:
        case LS_TYPE_Q8_0:
            h[0] = rf16(0.05f);
            memcpy(blk, h, 2);
            break;
        case LS_TYPE_Q4_1:
        case LS_TYPE_Q5_1:
            h[0] = rf16(0.05f), h[1] = rf16(0.5f);
            memcpy(blk, h, 4);
            break;
        case LS_TYPE_Q4_K:
        case LS_TYPE_Q5_K:
            h[0] = rf16(0.01f), h[1] = rf16(0.01f);
            memcpy(blk, h, 4);
            break;
        case LS_TYPE_Q6_K:
            h[0] = rf16(0.002f);
            memcpy(blk + 208, h, 2);
            break;
        default: break;
        }
    }
}

struct Weight {
    ls_weight w;          /* device pointers */
    std::vector<uint8_t> data, sc, bi; /* host copies */
    ls_weight hw;         /* host pointers (CPU reference) */
    void *dbase = nullptr, *dsc = nullptr, *dbi = nullptr;
};

/* byte offsets of MLX scale / bias arrays from their 256-aligned allocations (0: aligned) */
int g_sb_off[2] = {0, 0};

void make_weight(const Case &c, Weight &W) {
    memset(&W.w, 0, sizeof W.w);
    W.w.type = c.type;
    W.w.rows = c.N;
    W.w.cols = c.K;
    if (c.type == LS_TYPE_MLX_AFFINE) {
        W.w.bits = c.bits, W.w.group = c.group, W.w.sb_type = c.sb;
        W.w.row_bytes = (uint64_t)(c.K * c.bits / 8);
        W.data.resize(W.w.row_bytes * c.N);
        for (auto &b : W.data) b = (uint8_t)rnd();
        const int64_t nsb = c.N * (c.K / c.group);
        const size_t sbs = c.sb == LS_TYPE_F32 ? 4 : 2;
        W.sc.resize(nsb * sbs), W.bi.resize(nsb * sbs);
        for (int64_t i = 0; i < nsb; i++) {
            const float s = frand() * 0.05f, b = frand() * 0.5f;
            if (c.sb == LS_TYPE_F32) {
                memcpy(&W.sc[4 * i], &s, 4), memcpy(&W.bi[4 * i], &b, 4);
            } else {
                const uint16_t hs = c.sb == LS_TYPE_F16 ? rf16(0.05f) : rbf16(0.05f);
                const uint16_t hb = c.sb == LS_TYPE_F16 ? rf16(0.5f) : rbf16(0.5f);
                memcpy(&W.sc[2 * i], &hs, 2), memcpy(&W.bi[2 * i], &hb, 2);
            }
        }
    } else {
        W.w.row_bytes = ls_row_size(c.type, c.K);
        W.data.resize(W.w.row_bytes * c.N);
        for (int64_t n = 0; n < c.N; n++) random_row(c.type, &W.data[n * W.w.row_bytes], c.K);
    }
    CK(cudaMalloc(&W.dbase, W.data.size() + 256));
    uint8_t *dd = (uint8_t *)W.dbase + c.woff;
    CK(cudaMemcpy(dd, W.data.data(), W.data.size(), cudaMemcpyHostToDevice));
    W.w.data = dd;
    W.hw = W.w;
    W.hw.data = W.data.data();
    if (c.type == LS_TYPE_MLX_AFFINE) {
        CK(cudaMalloc(&W.dsc, W.sc.size() + 16));
        CK(cudaMalloc(&W.dbi, W.bi.size() + 16));
        uint8_t *ds = (uint8_t *)W.dsc + g_sb_off[0], *db = (uint8_t *)W.dbi + g_sb_off[1];
        CK(cudaMemcpy(ds, W.sc.data(), W.sc.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db, W.bi.data(), W.bi.size(), cudaMemcpyHostToDevice));
        W.w.scales = ds, W.w.biases = db;
        W.hw.scales = W.sc.data(), W.hw.biases = W.bi.data();
    }
}

void free_weight(Weight &W) {
    cudaFree(W.dbase);
    if (W.dsc) cudaFree(W.dsc);
    if (W.dbi) cudaFree(W.dbi);
}

/* CPU dequantized row n */
void cpu_row(const Weight &W, int64_t n, float *dst) {
    if (W.w.type == LS_TYPE_MLX_AFFINE)
        ls_mlx_affine_dequantize_row(&W.hw, n, dst);
    else
        ls_type_get(W.w.type)->dequantize_row(W.data.data() + n * W.w.row_bytes, dst, W.w.cols);
}

/* Whether W takes the K-quant format and order (src/kernels/cuda/kq_format.cuh). */
bool kq_weight(const Weight &W) {
    return (W.w.type == LS_TYPE_Q4_K || W.w.type == LS_TYPE_Q6_K) && ls_cuda_mmq_act_key(&W.w) == 2;
}

/* The K-quant order on the host, written from kq_format.cuh's statement alone: Q8_K
 * activations from the CPU backend's quantizer, exact integer sums, then the f32 steps
 * (fmaf, products rounded on their own, as the GPU's): its y must be the GPU's bit for bit. */
void kq_ref(const Weight &W, const float *x, float *y) {
    const int64_t K = W.w.cols, N = W.w.rows, nsb = K / 256;
    std::vector<ls_block_q8_k> a((size_t)nsb);
    ls_quantize_act_row(LS_TYPE_Q8_K, x, a.data(), K);
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *row = W.data.data() + n * W.w.row_bytes;
        float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t c = 0; c < nsb; c++) {
            const ls_block_q8_k &q8 = a[(size_t)c];
            float &acc = p[c % 8];
            if (W.w.type == LS_TYPE_Q4_K) {
                const uint8_t *b = row + 144 * c, *scl = b + 4, *qs = b + 16;
                uint16_t h[2];
                memcpy(h, b, 4);
                int isc = 0, im = 0;
                for (int j = 0; j < 8; j++) {
                    int sc, m;
                    if (j < 4) {
                        sc = scl[j] & 63, m = scl[j + 4] & 63;
                    } else {
                        sc = (scl[j + 4] & 15) | ((scl[j - 4] >> 6) << 4);
                        m = (scl[j + 4] >> 4) | ((scl[j] >> 6) << 4);
                    }
                    int s = 0;
                    for (int i = 0; i < 32; i++) {
                        const int qv = j % 2 ? qs[32 * (j / 2) + i] >> 4 : qs[32 * (j / 2) + i] & 15;
                        s += qv * q8.qs[32 * j + i];
                    }
                    isc += sc * s;
                    im += m * (q8.bsums[2 * j] + q8.bsums[2 * j + 1]);
                }
                const float d = ls_f16_to_f32(h[0]), dmin = ls_f16_to_f32(h[1]);
                const float ad = q8.d * d, am = q8.d * dmin;
                acc = fmaf(ad, (float)isc, acc);
                acc = fmaf(-am, (float)im, acc);
            } else {
                const uint8_t *b = row + 210 * c, *ql = b, *qh = b + 128;
                const int8_t *scl = (const int8_t *)(b + 192);
                uint16_t dh;
                memcpy(&dh, b + 208, 2);
                int isc = 0;
                for (int e = 0; e < 256; e += 16) { /* 16-element groups */
                    int s = 0;
                    for (int i = e; i < e + 16; i++) {
                        const int hf = i / 128, t = (i % 128) / 32, l = i % 32;
                        const uint8_t qlb = ql[64 * hf + 32 * (t & 1) + l];
                        const int lo = t >= 2 ? qlb >> 4 : qlb & 15;
                        const int qv = lo | (((qh[32 * hf + l] >> (2 * t)) & 3) << 4);
                        s += (qv - 32) * q8.qs[i];
                    }
                    const int hf = e / 128, t = (e % 128) / 32, half = (e % 32) / 16;
                    isc += scl[8 * hf + 2 * t + half] * s;
                }
                const float ad = q8.d * ls_f16_to_f32(dh);
                acc = fmaf(ad, (float)isc, acc);
            }
        }
        float v = p[0];
        for (int u = 1; u < (nsb < 8 ? nsb : 8); u++) v = v + p[u];
        y[n] = v;
    }
}

/* y = W x for M rows at dx (device), with poisoned output; returns host copy */
bool run_mm(const Weight &W, const float *dx, int64_t M, float *dy, std::vector<float> &out, const char *what) {
    const int64_t N = W.w.rows;
    CK(cudaMemset(dy, 0xff, (size_t)M * N * sizeof(float)));
    const int rc = ls_cuda_matmul(0, &W.w, dx, M, dy, scratch(), scratch_bytes());
    if (rc != 0) {
        printf("  %s: ls_cuda_matmul returned %d\n", what, rc);
        return false;
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    out.resize((size_t)M * N);
    CK(cudaMemcpy(out.data(), dy, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < out.size(); i++)
        if (isnan(out[i])) {
            printf("  %s: output %zu not written (or NaN)\n", what, i);
            return false;
        }
    return true;
}

bool test_case(const Case &c, bool quick) {
    Weight W;
    make_weight(c, W);
    const int64_t N = c.N, K = c.K;
    const int64_t MX = c.big ? 512 : 64;
    bool ok = true;
    char label[96];
    if (c.type == LS_TYPE_MLX_AFFINE)
        snprintf(label, sizeof label, "mlx%d g%d %s", c.bits, c.group, ls_type_name(c.sb));
    else
        snprintf(label, sizeof label, "%s", ls_type_name(c.type));

    /* activations: MX + 40 rows, also a copy 1 float off 16-byte alignment */
    const int64_t XR = MX + 40;
    std::vector<float> X((size_t)XR * K);
    for (auto &v : X) v = frand();
    float *dx, *dxm, *dy;
    CK(cudaMalloc(&dx, X.size() * sizeof(float)));
    CK(cudaMalloc(&dxm, (X.size() + 4) * sizeof(float)));
    CK(cudaMalloc(&dy, (size_t)XR * N * sizeof(float)));
    CK(cudaMemcpy(dx, X.data(), X.size() * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dxm + 1, X.data(), X.size() * sizeof(float), cudaMemcpyHostToDevice));

    /* (a) reference: every row alone */
    const int64_t NREF = MX + 36;
    std::vector<float> y1((size_t)NREF * N), tmp;
    for (int64_t m = 0; m < NREF && ok; m++) {
        if (!run_mm(W, dx + m * K, 1, dy, tmp, "M=1")) ok = false;
        else memcpy(&y1[m * N], tmp.data(), N * sizeof(float));
    }
    int inv_bad = 0;
    auto cmp_rows = [&](const std::vector<float> &y, int64_t M, int64_t first, const char *what) {
        for (int64_t m = 0; m < M; m++)
            if (memcmp(&y[m * N], &y1[(first + m) * N], N * sizeof(float)) != 0) {
                if (inv_bad++ < 5) {
                    int64_t n = 0;
                    while (n < N && memcmp(&y[m * N + n], &y1[(first + m) * N + n], 4) == 0) n++;
                    printf("  %s: row %lld (M=%lld) differs from M=1 at n=%lld: %.9g vs %.9g\n", what,
                           (long long)(first + m), (long long)M, (long long)n, y[m * N + n], y1[(first + m) * N + n]);
                }
                ok = false;
            }
    };
    static const int64_t Ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 512};
    for (int64_t M : Ms) {
        if (!ok || M > MX) break;
        if (quick && M != 4 && M != 17 && M != 64 && M != 512) continue;
        std::vector<float> y;
        if (!run_mm(W, dx, M, dy, y, "M")) ok = false;
        else cmp_rows(y, M, 0, "batch");
    }
    /* the integer path's two kernels against each other: every call through the
     * tensor-core tiles (mmq_mma.cu), rows compared with the dp4a kernel's M = 1 */
    if (ok && ls_cuda_mmq_key(&W.w) >= 0) {
        ls_cuda_mmq_policy(2);
        for (int64_t M : {1, 2, 16, 17, 33, 64, 512}) {
            if (!ok || M > MX) break;
            std::vector<float> y;
            if (!run_mm(W, dx, M, dy, y, "mma")) ok = false;
            else cmp_rows(y, M, 0, "tensor-core tiles");
        }
        /* the block tiles (mmq_tile.cu) for every call: partial tiles of both sides */
        ls_cuda_mmq_policy(4);
        for (int64_t M : {1, 2, 16, 17, 33, 64, 65, 512}) {
            if (!ok || M > MX) break;
            std::vector<float> y;
            if (!run_mm(W, dx, M, dy, y, "tile")) ok = false;
            else cmp_rows(y, M, 0, "block tiles");
        }
        /* the small-M tensor-core kernel (mmq_small.cu small_launch; K-quants: kq_small.cu) for every call */
        ls_cuda_mmq_policy(3);
        for (int64_t M : {1, 2, 3, 5, 8, 9, 16, 17}) {
            if (!ok || M > MX) break;
            std::vector<float> y;
            if (!run_mm(W, dx, M, dy, y, "small")) ok = false;
            else cmp_rows(y, M, 0, "small-M tensor-core kernel");
        }
        /* the narrow-call kernel (mmq_narrow.cu: MLX 4/8-bit, tensor-map copies) for every call
         * of 1..4 rows it serves: MLX 4/8-bit rows that are 16-byte aligned; every such case
         * must be served (policy 5: a refused launch fails the call) */
        const bool nserve = ls_cuda_mmq_narrow_serves(&W.w, 4) != 0;
        const bool nwant = W.w.type == LS_TYPE_MLX_AFFINE && (W.w.bits == 4 || W.w.bits == 8) &&
                           (uintptr_t)W.w.data % 16 == 0 && W.w.row_bytes % 16 == 0;
        if (nserve != nwant) {
            printf("  narrow-call kernel: serves %d, expected %d\n", (int)nserve, (int)nwant);
            ok = false;
        }
        if (ok && nserve) {
            ls_cuda_mmq_policy(5);
            /* MLX 4-bit: blocks of one and of two m16 tiles a warp (mmq_narrow.cu rows_of) */
            for (int rows : {16, 32}) {
                if (rows == 32 && W.w.bits != 4) break;
                ls_cuda_mmq_narrow_rows(rows);
                for (int64_t M : {1, 2, 3, 4}) {
                    if (!ok || M > MX) break;
                    std::vector<float> y;
                    if (!run_mm(W, dx, M, dy, y, "narrow")) ok = false;
                    else cmp_rows(y, M, 0, rows == 32 ? "narrow-call kernel, 32-row blocks" : "narrow-call kernel");
                }
            }
            ls_cuda_mmq_narrow_rows(0);
        }
        /* and the dp4a kernel (K-quants: kq_vec.cu's) for every call (the default sends M <= 8 to the small
         * one; K-quants 2..16) */
        ls_cuda_mmq_policy(1);
        for (int64_t M : {1, 4, 5, 8}) {
            if (!ok || M > MX) break;
            std::vector<float> y;
            if (!run_mm(W, dx, M, dy, y, "dp4a")) ok = false;
            else cmp_rows(y, M, 0, "dp4a kernel");
        }
        ls_cuda_mmq_policy(0);
        /* the one-row path's compilations (mmq.cu gemv_kernel variants), alone and
         * grouped below: the same bits as the default one */
        for (int v = 0; v < 4 && ok; v++) { /* v & 1: the variant; v & 2: blocks of 4 warps */
            const int prev = ls_cuda_mmq_gemv_variant(v & 1), prevw = ls_cuda_mmq_row1_warps(v & 2 ? 4 : 1);
            std::vector<float> y;
            if (!run_mm(W, dx, 1, dy, y, "gemv")) ok = false;
            else cmp_rows(y, 1, 0, v & 2 ? "one-row variant, blocks of 4 warps" : "one-row variant");
            ls_cuda_mmq_gemv_variant(prev);
            ls_cuda_mmq_row1_warps(prevw);
        }
    }
    if (ok) { /* other tile slots: rows 3.. as a call of 33; unaligned activations: rows 1..5 */
        std::vector<float> y;
        if (!run_mm(W, dx + 3 * K, 33, dy, y, "offset")) ok = false;
        else cmp_rows(y, 33, 3, "offset");
        if (ok && !run_mm(W, dxm + 1 + K, 5, dy, y, "x unaligned")) ok = false;
        else if (ok) cmp_rows(y, 5, 1, "x unaligned");
    }

    /* (a2) the K-quant path in several passes: a scratch of 3 rows' quantized activations (codes
     * and one 48-byte metadata record a superblock, kq_format.cuh) for a call of 7 rows */
    if (ok && kq_weight(W)) {
        const size_t sb3 = 3 * (size_t)(K + K / 256 * 48);
        CK(cudaMemset(dy, 0xff, (size_t)7 * N * sizeof(float)));
        if (ls_cuda_matmul(0, &W.w, dx, 7, dy, scratch(), sb3) != 0) {
            printf("  K-quant call in three passes refused\n");
            ok = false;
        } else {
            CK(cudaDeviceSynchronize());
            std::vector<float> y((size_t)7 * N);
            CK(cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
            cmp_rows(y, 7, 0, "three passes");
        }
    }

    /* (b0) the K-quant order: the GPU's rows == the host's statement of it, bit for bit */
    if (ok && kq_weight(W)) {
        std::vector<float> yr((size_t)N);
        const int64_t MR = MX < 8 ? MX : 8;
        int bad = 0;
        for (int64_t m = 0; m < MR; m++) {
            kq_ref(W, &X[m * K], yr.data());
            for (int64_t n = 0; n < N; n++)
                if (memcmp(&yr[n], &y1[m * N + n], 4) != 0 && bad++ < 3)
                    printf("  K-quant order: row %lld n=%lld: GPU %.9g, host %.9g\n", (long long)m, (long long)n,
                           y1[m * N + n], yr[n]);
        }
        if (bad) ok = false;
    }

    /* (b) accuracy vs double: f32 kernel ~3e-7; the integer path's 16-bit activations
     * (mmq.cu) ~2e-5; the K-quants' 8-bit ones (kq_format.cuh) ~3e-3 */
    const double tol = kq_weight(W) ? 2e-2 : ls_cuda_mmq_key(&W.w) >= 0 ? 2e-4 : 1e-5;
    double worst = 0;
    if (ok) {
        std::vector<float> Wf((size_t)N * K);
        for (int64_t n = 0; n < N; n++) cpu_row(W, n, &Wf[n * K]);
        const int64_t MA = MX < 64 ? MX : 64;
        for (int64_t m = 0; m < MA; m++) {
            double e2 = 0, r2 = 0;
            for (int64_t n = 0; n < N; n++) {
                double s = 0;
                const float *wr = &Wf[n * K], *xr = &X[m * K];
                for (int64_t k = 0; k < K; k++) s += (double)wr[k] * (double)xr[k];
                const double d = (double)y1[m * N + n] - s;
                e2 += d * d, r2 += s * s;
            }
            const double rel = sqrt(e2 / (r2 > 0 ? r2 : 1e-300));
            if (!(rel < tol)) ok = false;
            if (rel > worst || rel != rel) worst = rel;
        }
        if (!(worst < tol)) printf("  accuracy: max rel L2 %.3g >= %.0e\n", worst, tol);
    }

    /* (c) get_rows */
    bool gr_ok = true;
    if (ok) {
        std::vector<int32_t> ids = {0, (int32_t)(N - 1), 5, (int32_t)(rnd() % N), 5, (int32_t)(rnd() % N), (int32_t)N};
        const int64_t n = (int64_t)ids.size();
        int32_t *dids;
        float *dd;
        CK(cudaMalloc(&dids, n * sizeof(int32_t)));
        CK(cudaMalloc(&dd, n * K * sizeof(float)));
        CK(cudaMemcpy(dids, ids.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice));
        CK(cudaMemset(dd, 0xff, n * K * sizeof(float)));
        if (ls_cuda_get_rows(0, &W.w, dids, n, dd) != 0) {
            printf("  get_rows returned an error\n");
            gr_ok = false;
        } else {
            CK(cudaGetLastError());
            std::vector<float> g((size_t)n * K), r(K);
            CK(cudaMemcpy(g.data(), dd, g.size() * sizeof(float), cudaMemcpyDeviceToHost));
            for (int64_t i = 0; i < n; i++) {
                if (ids[i] >= N) std::fill(r.begin(), r.end(), 0.0f);
                else cpu_row(W, ids[i], r.data());
                if (memcmp(&g[i * K], r.data(), K * sizeof(float)) != 0) {
                    int64_t k = 0;
                    while (memcmp(&g[i * K + k], &r[k], 4) == 0) k++;
                    printf("  get_rows: id %d differs at %lld: %.9g vs %.9g\n", ids[i], (long long)k, g[i * K + k], r[k]);
                    gr_ok = false;
                }
            }
        }
        cudaFree(dids);
        cudaFree(dd);
    }
    ok = ok && gr_ok;
    printf("%s %-18s %6lldx%-6lld woff %d: invariance %s, max rel L2 %.2e, get_rows %s\n", ok ? "PASS" : "FAIL", label,
           (long long)N, (long long)K, c.woff, inv_bad ? "FAIL" : "ok", worst, gr_ok ? "ok" : "FAIL");
    cudaFree(dx);
    cudaFree(dxm);
    cudaFree(dy);
    free_weight(W);
    return ok;
}

/* ---- (d) launch merging ---- */

/* host copy of n floats at device d */
std::vector<float> down(const float *d, size_t n) {
    std::vector<float> h(n);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

float *up(const std::vector<float> &h) {
    float *d;
    CK(cudaMalloc(&d, h.size() * sizeof(float)));
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

bool same(const std::vector<float> &a, const std::vector<float> &b, const char *what) {
    if (a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) return true;
    size_t i = 0;
    while (i < a.size() && i < b.size() && memcmp(&a[i], &b[i], 4) == 0) i++;
    printf("  %s: differs at %zu\n", what, i);
    return false;
}

/* grouped launch == separate launches, for one type (three weights, K = 1280) */
bool test_group(const char *label, ls_type t, int bits) {
    const int64_t K = 1280, Ns[3] = {200, 37, 64};
    Weight W[3];
    for (int i = 0; i < 3; i++) {
        const Case c = {label, t, bits, 64, LS_TYPE_BF16, Ns[i], K, 0, false};
        make_weight(c, W[i]);
    }
    bool ok = true;
    /* policy 0: the shape picks the dp4a, the small-M or the narrow-call kernel; 1: the dp4a
     * kernel at every M; 3: the small-M kernel at every M; 5: the narrow-call kernel where it
     * serves (MLX, M <= 4) in blocks of 16 rows; 6: policy 5 with 32-row blocks (MLX 4-bit) */
    for (int pol : {0, 1, 3, 5, 6})
    for (int64_t M : {1, 2, 3, 4, 5, 8, 12}) {
        if (!ok) break;
        ls_cuda_mmq_policy(pol == 6 ? 5 : pol);
        ls_cuda_mmq_narrow_rows(pol == 6 ? 32 : pol == 5 ? 16 : 0);
        std::vector<float> X((size_t)M * K);
        for (auto &v : X) v = frand();
        float *dx = up(X), *ys[3], *yg[3];
        for (int i = 0; i < 3; i++) {
            CK(cudaMalloc(&ys[i], (size_t)M * Ns[i] * sizeof(float)));
            CK(cudaMalloc(&yg[i], (size_t)M * Ns[i] * sizeof(float)));
            CK(cudaMemset(yg[i], 0xff, (size_t)M * Ns[i] * sizeof(float)));
            if (ls_cuda_mmq_ex(0, &W[i].w, dx, M, ys[i], scratch(), scratch_bytes(), 0) != 0) ok = false;
        }
        const ls_weight *ws[3] = {&W[0].w, &W[1].w, &W[2].w};
        /* M = 1: the group under every one-row variant (v & 1) in blocks of one or (v & 2) four
         * warps against the default's separate calls */
        for (int v = M == 1 ? 0 : -1; v < (M == 1 ? 4 : 0) && ok; v++)
        for (int ready = 0; ready < 2 && ok; ready++) {
            /* prev may be -1 (each type's default): restore it whenever a variant was set */
            const bool set = v >= 0;
            const int prev = set ? ls_cuda_mmq_gemv_variant(v & 1) : -1;
            const int prevw = set ? ls_cuda_mmq_row1_warps(v & 2 ? 4 : 1) : 1;
            /* ready: the scratch holds x from a separate call on the first weight just before */
            if (ready && ls_cuda_mmq_ex(0, &W[0].w, dx, M, ys[0], scratch(), scratch_bytes(), 0) != 0) ok = false;
            if (!ls_cuda_mmq_groupable(ws[0], ws[1], M, scratch_bytes()) ||
                ls_cuda_mmq_group(0, 3, ws, dx, M, yg, scratch(), scratch_bytes(), ready) != 0) {
                printf("  %s M=%lld: grouped launch refused\n", label, (long long)M);
                if (set) ls_cuda_mmq_gemv_variant(prev), ls_cuda_mmq_row1_warps(prevw);
                ok = false;
                break;
            }
            CK(cudaGetLastError());
            if (set) ls_cuda_mmq_gemv_variant(prev), ls_cuda_mmq_row1_warps(prevw);
            for (int i = 0; i < 3 && ok; i++)
                ok = same(down(yg[i], (size_t)M * Ns[i]), down(ys[i], (size_t)M * Ns[i]),
                          ready ? "grouped (ready)" : "grouped");
        }
        cudaFree(dx);
        for (int i = 0; i < 3; i++) cudaFree(ys[i]), cudaFree(yg[i]);
    }
    ls_cuda_mmq_policy(0);
    ls_cuda_mmq_narrow_rows(0);
    for (auto &w : W) free_weight(w);
    printf("%s grouped matmul %-8s == separate launches, M 1..12, every small-M kernel\n", ok ? "PASS" : "FAIL", label);
    return ok;
}

/* a producer that quantizes its output for the next matmul == the plain producer + the
 * matmul's own quantization (layout 0: Q5_0, layout 1: MLX 4-bit, layout 2: Q4_K, Q6_K) */
bool test_fused_quant(const char *label, ls_type t, int bits, int64_t K) {
    const Case c = {label, t, bits, 64, LS_TYPE_BF16, 96, K, 0, false};
    Weight W;
    make_weight(c, W);
    const int layout = ls_cuda_mmq_act_key(&W.w);
    bool ok = layout >= 0;
    for (int64_t M : {1, 3, 8}) {
        if (!ok) break;
        const size_t n = (size_t)M * K;
        std::vector<float> X(n), T(n), wp(K), wq(K), G(n), U(n);
        for (auto &v : X) v = frand();
        for (auto &v : T) v = frand() * 3.0f;
        for (auto &v : wp) v = 1.0f + frand() * 0.5f;
        for (auto &v : wq) v = frand();
        for (auto &v : G) v = frand() * 4.0f;
        for (auto &v : U) v = frand();
        float *xa = up(X), *xb = up(X), *dt = up(T), *dwp = up(wp), *dwq = up(wq), *na = up(X), *nb = up(X);
        float *ya, *yb;
        CK(cudaMalloc(&ya, (size_t)M * W.w.rows * sizeof(float)));
        CK(cudaMalloc(&yb, (size_t)M * W.w.rows * sizeof(float)));
        /* add_rmsnorm (scale 0.75: the layer-scalar form) then the matmul of xn */
        ls_cuda_add_rmsnorm(0, xa, dt, dwp, 0.75f, na, dwq, M, K, 1e-6f);
        ok = ok && ls_cuda_matmul_ex(0, &W.w, na, M, ya, scratch(), scratch_bytes(), 0) == 0;
        ls_cuda_add_rmsnorm_q(0, xb, dt, dwp, 0.75f, nb, dwq, M, K, 1e-6f, scratch(), layout);
        ok = ok && ls_cuda_matmul_ex(0, &W.w, nb, M, yb, scratch(), scratch_bytes(), 1) == 0;
        CK(cudaGetLastError());
        ok = ok && same(down(xa, n), down(xb, n), "add_rmsnorm x") && same(down(na, n), down(nb, n), "add_rmsnorm xn") &&
             same(down(ya, (size_t)M * W.w.rows), down(yb, (size_t)M * W.w.rows), "add_rmsnorm -> matmul");
        /* gelu_mul then the matmul of its output */
        float *ga = up(G), *gb = up(G), *du = up(U);
        ls_cuda_gelu_mul(0, ga, du, (int64_t)n);
        ok = ok && ls_cuda_matmul_ex(0, &W.w, ga, M, ya, scratch(), scratch_bytes(), 0) == 0;
        ls_cuda_gelu_mul_q(0, gb, du, (int64_t)n, scratch(), layout);
        ok = ok && ls_cuda_matmul_ex(0, &W.w, gb, M, yb, scratch(), scratch_bytes(), 1) == 0;
        CK(cudaGetLastError());
        ok = ok && same(down(ga, n), down(gb, n), "gelu_mul") &&
             same(down(ya, (size_t)M * W.w.rows), down(yb, (size_t)M * W.w.rows), "gelu_mul -> matmul");
        for (float *p : {xa, xb, dt, dwp, dwq, na, nb, ya, yb, ga, gb, du}) cudaFree(p);
    }
    free_weight(W);
    printf("%s fused quantization %-8s K %-5lld == producer + matmul's own quantization\n", ok ? "PASS" : "FAIL",
           label, (long long)K);
    return ok;
}

/* ---- bench ---- */

void bench_one(const char *label, ls_type t, int bits, int64_t N, int64_t K) {
    const char *only = getenv("LS_BENCH_ONLY"); /* e.g. "q4_k" (profiling one matrix) */
    /* LS_BENCH_KQ=0: Q4_K / Q6_K on the two-plane format instead of the K-quant one */
    if (getenv("LS_BENCH_KQ") && !strcmp(getenv("LS_BENCH_KQ"), "0")) ls_cuda_mmq_kq(0);
    if (only && strcmp(only, label) != 0) return;
    const int group = 64;
    Weight proto;
    Case c = {label, t, bits, group, LS_TYPE_BF16, 64, K, 0, false};
    make_weight(c, proto); /* 64 random rows, replicated */
    const size_t rb = proto.w.row_bytes;
    const size_t wbytes = rb * N;
    const size_t sbbytes = t == LS_TYPE_MLX_AFFINE ? (size_t)N * (K / group) * 2 : 0;
    const int NC = (int)((1200u << 20) / (wbytes + 2 * sbbytes)) + 1; /* > 1.2 GB of copies: far past L2 */
    std::vector<ls_weight> ws(NC);
    std::vector<void *> bufs;
    std::vector<uint8_t> host(wbytes), hsc(sbbytes), hbi(sbbytes);
    for (int64_t n = 0; n < N; n++) memcpy(&host[n * rb], &proto.data[(n % 64) * rb], rb);
    if (sbbytes) {
        const size_t rs = (size_t)(K / group) * 2;
        for (int64_t n = 0; n < N; n++) {
            memcpy(&hsc[n * rs], &proto.sc[(n % 64) * rs], rs);
            memcpy(&hbi[n * rs], &proto.bi[(n % 64) * rs], rs);
        }
    }
    for (int i = 0; i < NC; i++) {
        ws[i] = proto.w;
        ws[i].rows = N;
        void *p;
        CK(cudaMalloc(&p, wbytes));
        CK(cudaMemcpy(p, host.data(), wbytes, cudaMemcpyHostToDevice));
        bufs.push_back(p);
        ws[i].data = p;
        if (sbbytes) {
            CK(cudaMalloc(&p, sbbytes));
            CK(cudaMemcpy(p, hsc.data(), sbbytes, cudaMemcpyHostToDevice));
            bufs.push_back(p);
            ws[i].scales = p;
            CK(cudaMalloc(&p, sbbytes));
            CK(cudaMemcpy(p, hbi.data(), sbbytes, cudaMemcpyHostToDevice));
            bufs.push_back(p);
            ws[i].biases = p;
        }
    }
    free_weight(proto);
    float *dx, *dy;
    std::vector<float> X((size_t)512 * K);
    for (auto &v : X) v = frand();
    CK(cudaMalloc(&dx, X.size() * 4));
    CK(cudaMalloc(&dy, (size_t)512 * N * 4));
    CK(cudaMemcpy(dx, X.data(), X.size() * 4, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("%-10s %6lldx%-6lld %7.1f MB:", label, (long long)N, (long long)K, (wbytes + 2 * sbbytes) / 1e6);
    const char *kwo = getenv("LS_BENCH_KW"); /* e.g. "12": every call at kw 1, then at 2 */
    if (!kwo) kwo = "0";
    const char *nrows = getenv("LS_BENCH_NROWS"); /* narrow kernel, MLX 4-bit: 16 or 32 rows a block */
    if (nrows) ls_cuda_mmq_narrow_rows(atoi(nrows));
    for (const char *kp = kwo; *kp; kp++) {
        ls_cuda_mmq_kw_override(*kp - '0');
        if (kp != kwo) printf("\n  kw %c%*s", *kp, 24, "");
        const char *pols = getenv("LS_BENCH_POLICY"); /* e.g. "13": the dp4a then the small-M kernel */
        if (!pols) pols = "0";
        for (const char *pp = pols; *pp; pp++)
        for (int64_t M : {1, 2, 4, 5, 8, 16, 64, 512}) {
            const char *onlym = getenv("LS_BENCH_M"); /* e.g. "4" or "1,2,4" */
            if (onlym) {
                bool listed = false;
                for (const char *q = onlym; *q; q++)
                    if ((q == onlym || q[-1] == ',') && atoll(q) == M) listed = true;
                if (!listed) continue;
            }
            if (M == 1 && pp != pols) printf("\n  %-27s", "");
            if (M == 1) printf(" p%c", *pp);
            ls_cuda_mmq_policy(*pp - '0');
            if (*pp == '3' && M > 8) continue;
            const int iters = M >= 64 ? 6 : 60;
            const char *gv = getenv("LS_BENCH_GEMV"); /* M = 1 under each one-row variant, e.g. "01" */
            const char *w1 = getenv("LS_BENCH_ROW1W"); /* M = 1 in blocks of 1 and 4 warps: "14" */
            /* M = 1 once per character of `list`, each under set(char - '0') (restored after) */
            auto one_row = [&](const char *list, char tag, int (*set)(int)) {
                for (const char *g = list; *g; g++) {
                    const int prev = set(*g - '0');
                    for (int i = 0; i < NC; i++) ls_cuda_matmul(0, &ws[i], dx, 1, dy, scratch(), scratch_bytes());
                    CK(cudaEventRecord(e0));
                    for (int i = 0; i < iters; i++) ls_cuda_matmul(0, &ws[i % NC], dx, 1, dy, scratch(), scratch_bytes());
                    CK(cudaEventRecord(e1));
                    CK(cudaEventSynchronize(e1));
                    float ms;
                    CK(cudaEventElapsedTime(&ms, e0, e1));
                    const double s = ms / 1e3 / iters;
                    printf("  %c%c %6.1f us %5.0f GB/s", tag, *g, s * 1e6, (wbytes + 2 * sbbytes) / s / 1e9);
                    set(prev);
                }
            };
            if (M == 1 && (w1 || gv) && *pp != '3') {
                if (w1) one_row(w1, 'w', ls_cuda_mmq_row1_warps);
                else one_row(gv, 'v', ls_cuda_mmq_gemv_variant);
                continue;
            }
            for (int i = 0; i < NC; i++)
                if (ls_cuda_matmul(0, &ws[i], dx, M, dy, scratch(), scratch_bytes()) != 0) {
                    printf(" unsupported\n");
                    return;
                }
            CK(cudaEventRecord(e0));
            for (int i = 0; i < iters; i++) ls_cuda_matmul(0, &ws[i % NC], dx, M, dy, scratch(), scratch_bytes());
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            const double s = ms / 1e3 / iters;
            if (M >= 64)
                printf("  M=%lld %7.1f us %5.1f TFLOP/s", (long long)M, s * 1e6, 2.0 * M * N * K / s / 1e12);
            else
                printf("  M=%lld %6.1f us %5.0f GB/s", (long long)M, s * 1e6, (wbytes + 2 * sbbytes) / s / 1e9);
        }
        ls_cuda_mmq_policy(0);
    }
    ls_cuda_mmq_kw_override(0);
    printf("\n");
    CK(cudaGetLastError());
    for (void *p : bufs) cudaFree(p);
    cudaFree(dx);
    cudaFree(dy);
}

/* The device-to-host copy of logits rows (262,144 f32 each, a Gemma vocabulary) into pageable
 * (malloc'd) and page-locked memory: why ls_session_logits_buffer is page-locked (docs/cuda.md
 * 3). Median of 40 copies, each synchronized as cu_download does. */
static void bench_host_copies() {
    const size_t row = sizeof(float) * 262144, most = 4 * row;
    void *d, *pinned;
    CK(cudaMalloc(&d, most));
    CK(cudaMemset(d, 1, most));
    CK(cudaHostAlloc(&pinned, most, cudaHostAllocPortable));
    void *pageable = malloc(most);
    if (!pageable) {
        printf("d2h: out of host memory\n");
        CK(cudaFreeHost(pinned));
        CK(cudaFree(d));
        return;
    }
    memset(pageable, 0, most);
    for (int rows : {1, 4}) {
        printf("d2h %d logits row%s (%zu KB):", rows, rows > 1 ? "s" : "", rows * row >> 10);
        for (void *dst : {pageable, pinned}) {
            std::vector<double> t;
            for (int i = 0; i < 40; i++) {
                const auto a = std::chrono::steady_clock::now();
                CK(cudaMemcpyAsync(dst, d, rows * row, cudaMemcpyDeviceToHost, 0));
                CK(cudaStreamSynchronize(0));
                t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
            }
            std::sort(t.begin(), t.end());
            printf(" %s %.1f us", dst == pinned ? "page-locked" : "pageable", t[t.size() / 2]);
        }
        printf("\n");
    }
    free(pageable);
    CK(cudaFreeHost(pinned));
    CK(cudaFree(d));
}

void bench() {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    printf("device %s, %d SMs, L2 %d MB\n", p.name, p.multiProcessorCount, p.l2CacheSize >> 20);
    { /* ceiling: device-to-device copy, bytes read + written */
        const size_t B = (size_t)1 << 30;
        void *a, *b;
        CK(cudaMalloc(&a, B));
        CK(cudaMalloc(&b, B));
        CK(cudaMemset(a, 1, B));
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        CK(cudaMemcpy(b, a, B, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(e0));
        for (int i = 0; i < 10; i++) CK(cudaMemcpyAsync(b, a, B, cudaMemcpyDeviceToDevice));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        printf("d2d copy: %.0f GB/s (read + write)\n", 2.0 * B * 10 / (ms / 1e3) / 1e9);
        cudaFree(a);
        cudaFree(b);
    }
    bench_host_copies();
    for (int o = 0; o < 2; o++) {
        const int64_t N = o ? 5376 : 21504, K = o ? 21504 : 5376;
        bench_one("q4_k", LS_TYPE_Q4_K, 0, N, K);
        bench_one("q6_k", LS_TYPE_Q6_K, 0, N, K);
        bench_one("q8_0", LS_TYPE_Q8_0, 0, N, K);
        bench_one("mlx4", LS_TYPE_MLX_AFFINE, 4, N, K);
        bench_one("mlx8", LS_TYPE_MLX_AFFINE, 8, N, K);
        bench_one("bf16", LS_TYPE_BF16, 0, N, K);
    }
    /* the 31B's MLX 4-bit attention projections: q / k / v together, o */
    bench_one("mlx4", LS_TYPE_MLX_AFFINE, 4, 16384, 5376);
    bench_one("mlx4", LS_TYPE_MLX_AFFINE, 4, 5376, 8192);
    bench_one("mlx4", LS_TYPE_MLX_AFFINE, 4, 5376, 16384); /* o of the global layers */
}

} // namespace

/* 1 (and a message) when a test left a process-wide dispatch switch off its default (a leak
 * that would run every later test under it, hiding the default paths); the switches are reset
 * either way */
static int switches_left(const char *after) {
    const int v = ls_cuda_mmq_gemv_variant(-1), p = ls_cuda_mmq_policy(0), kw = ls_cuda_mmq_kw_override(0);
    const int nr = ls_cuda_mmq_narrow_rows(0), na = ls_cuda_mmq_narrow(1), kq = ls_cuda_mmq_kq(1);
    const int w1 = ls_cuda_mmq_row1_warps(1);
    if (v == -1 && p == 0 && kw == 0 && nr == 0 && na == 1 && kq == 1 && w1 == 1) return 0;
    printf("FAIL switches left after %s: one-row variant %d, policy %d, kw %d, narrow rows %d, narrow %d, kq %d, "
           "one-row warps %d\n",
           after, v, p, kw, nr, na, kq, w1);
    return 1;
}

int main(int argc, char **argv) {
    bool do_bench = false, quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench")) do_bench = true;
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else {
            fprintf(stderr, "usage: %s [--bench] [--quick]\n", argv[0]);
            return 2;
        }
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    if (do_bench) {
        bench();
        return 0;
    }
    std::vector<Case> cases = {
        {"f32", LS_TYPE_F32, 0, 0, LS_TYPE_F32, 200, 1000, 0, false},
        {"f32u", LS_TYPE_F32, 0, 0, LS_TYPE_F32, 37, 648, 4, false},
        {"f16", LS_TYPE_F16, 0, 0, LS_TYPE_F32, 200, 1000, 0, false},
        {"f16u", LS_TYPE_F16, 0, 0, LS_TYPE_F32, 41, 1160, 2, false},
        {"bf16", LS_TYPE_BF16, 0, 0, LS_TYPE_F32, 200, 1000, 0, false},
        {"bf16u", LS_TYPE_BF16, 0, 0, LS_TYPE_F32, 40, 1160, 2, false},
        {"q4_0", LS_TYPE_Q4_0, 0, 0, LS_TYPE_F32, 200, 1184, 0, false},
        {"q4_0o", LS_TYPE_Q4_0, 0, 0, LS_TYPE_F32, 33, 1120, 2, false},
        {"q4_1", LS_TYPE_Q4_1, 0, 0, LS_TYPE_F32, 200, 1184, 0, false},
        {"q5_0", LS_TYPE_Q5_0, 0, 0, LS_TYPE_F32, 200, 1184, 0, false},
        {"q5_1", LS_TYPE_Q5_1, 0, 0, LS_TYPE_F32, 200, 1184, 0, false},
        {"q8_0", LS_TYPE_Q8_0, 0, 0, LS_TYPE_F32, 200, 1184, 0, true},
        {"q8_0o", LS_TYPE_Q8_0, 0, 0, LS_TYPE_F32, 29, 1120, 2, false},
        {"q4_k", LS_TYPE_Q4_K, 0, 0, LS_TYPE_F32, 200, 1280, 0, true},
        {"q4_ku", LS_TYPE_Q4_K, 0, 0, LS_TYPE_F32, 35, 2816, 2, false},
        {"q5_k", LS_TYPE_Q5_K, 0, 0, LS_TYPE_F32, 200, 1280, 0, false},
        {"q5_ku", LS_TYPE_Q5_K, 0, 0, LS_TYPE_F32, 35, 2816, 2, false},
        {"q6_k", LS_TYPE_Q6_K, 0, 0, LS_TYPE_F32, 200, 1280, 0, true},
        {"q6_kb", LS_TYPE_Q6_K, 0, 0, LS_TYPE_F32, 53, 5376, 0, false},
        /* rows long enough for four and two k-warps (kw_of: 2048 / 1024 chunks, Q6_K 256) */
        {"q8_0k", LS_TYPE_Q8_0, 0, 0, LS_TYPE_F32, 37, 65536, 0, false},
        {"q4_kk", LS_TYPE_Q4_K, 0, 0, LS_TYPE_F32, 21, 65536, 2, false},
        /* 16-byte aligned Q4_K rows (mmq_dtile.cu's decoded tiles under policy 4): two k-warps;
         * and 84 chunks, whose first 20 lanes fold three chunks and the rest two */
        {"q4_kka", LS_TYPE_Q4_K, 0, 0, LS_TYPE_F32, 21, 65536, 0, false},
        {"q4_ka", LS_TYPE_Q4_K, 0, 0, LS_TYPE_F32, 45, 5376, 0, false},
        {"q6_kk", LS_TYPE_Q6_K, 0, 0, LS_TYPE_F32, 29, 8192, 0, false},
        /* four k-warps and a partial last round (264 chunks, 8 past the last full round):
         * the one-row kernel's tail dealt one chunk to a lane (mmq.cu gemv_body) with KW = 4 */
        {"q6_kt", LS_TYPE_Q6_K, 0, 0, LS_TYPE_F32, 23, 8448, 0, false},
    };
    const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    const ls_type sbs[] = {LS_TYPE_F32, LS_TYPE_F16, LS_TYPE_BF16};
    int v = 0;
    for (int b : bits)
        for (int g : groups) {
            const ls_type sb = sbs[v % 3];
            const int64_t K = g == 128 ? 640 : g == 64 ? 704 : 672;
            cases.push_back({"mlx", LS_TYPE_MLX_AFFINE, b, g, sb, (int64_t)(57 + 16 * (v % 4)), K, (v % 5 == 4) ? 4 : 0,
                             false});
            v++;
        }
    cases.push_back({"mlx", LS_TYPE_MLX_AFFINE, 4, 64, LS_TYPE_BF16, 130, 5376, 0, true});
    cases.push_back({"mlx", LS_TYPE_MLX_AFFINE, 8, 64, LS_TYPE_BF16, 130, 5376, 0, true});
    /* MLX 8-bit rows off 16-byte alignment (the small-M kernel's 4-byte-word loader, mmq_small.cu
     * ALN) with f32 scales of group 32 (the widest staged scale span) */
    cases.push_back({"mlx", LS_TYPE_MLX_AFFINE, 8, 32, LS_TYPE_F32, 61, 1344, 4, false});
    cases.push_back({"mlx", LS_TYPE_MLX_AFFINE, 4, 64, LS_TYPE_BF16, 45, 32768, 0, false});
    /* MLX 4-bit with 257 blocks of 32 rows (the last one half past N): the shape's own choice
     * (policy 0) takes the narrow kernel's 32-row blocks at 2..4 rows (mmq_narrow.cu rows_of) */
    cases.push_back({"mlx", LS_TYPE_MLX_AFFINE, 4, 64, LS_TYPE_BF16, 8208, 256, 0, false});
    /* ... and with 169 blocks of short rows (the last half past N), as the 31B's o projections
     * (mmq_narrow.cu R32_MIN_SHORT) */
    cases.push_back({"mlx", LS_TYPE_MLX_AFFINE, 4, 64, LS_TYPE_BF16, 5392, 512, 0, false});
    /* MLX 8-bit one-row calls on the coalesced rounds (mmq.cu Split8) with f32 and f16 scales
     * (the 5376-wide case above: bf16): two full rounds; one full round and dealt tail chunks */
    cases.push_back({"mlx", LS_TYPE_MLX_AFFINE, 8, 32, LS_TYPE_F32, 70, 2048, 0, false});
    cases.push_back({"mlx", LS_TYPE_MLX_AFFINE, 8, 128, LS_TYPE_F16, 45, 1408, 0, false});
    /* MLX 8-bit with 23 chunks: the narrow kernel's last lane group folds 3 of a round's 4, so its
     * second pair holds one chunk (the loop above covers 1, 2 and 4 of 4) */
    cases.push_back({"mlx", LS_TYPE_MLX_AFFINE, 8, 32, LS_TYPE_BF16, 57, 736, 0, false});
    /* MLX 8-bit with four k-warps (2056 chunks) and a partial last round: gemv_body's tail, KW = 4 */
    cases.push_back({"mlx", LS_TYPE_MLX_AFFINE, 8, 64, LS_TYPE_BF16, 13, 65792, 0, false});
    int fails = 0;
    for (const Case &c : cases) fails += !test_case(c, quick) + switches_left(c.name);
    /* MLX scale and bias arrays off 16- and 4-byte alignment, at different offsets (the narrow
     * kernels' staged scales: 4-byte pieces from the boundary below each span) */
    const Case sb_off[] = {{"mlxs", LS_TYPE_MLX_AFFINE, 4, 64, LS_TYPE_BF16, 37, 5376, 0, false},
                           {"mlxs", LS_TYPE_MLX_AFFINE, 8, 128, LS_TYPE_F16, 45, 640, 0, false}};
    g_sb_off[0] = 2, g_sb_off[1] = 4;
    for (const Case &c : sb_off) fails += !test_case(c, quick) + switches_left(c.name);
    /* f32 scales 4 and 12 bytes off: 4-byte pieces with no offset below the span */
    g_sb_off[0] = 4, g_sb_off[1] = 12;
    fails += !test_case({"mlxs", LS_TYPE_MLX_AFFINE, 8, 32, LS_TYPE_F32, 29, 1344, 0, false}, quick);
    g_sb_off[0] = g_sb_off[1] = 0;
    fails += !test_group("q4_0", LS_TYPE_Q4_0, 0) + !test_group("q5_0", LS_TYPE_Q5_0, 0);
    fails += !test_group("q8_0", LS_TYPE_Q8_0, 0) + !test_group("q4_k", LS_TYPE_Q4_K, 0);
    fails += !test_group("q6_k", LS_TYPE_Q6_K, 0) + !test_group("mlx4", LS_TYPE_MLX_AFFINE, 4);
    fails += !test_group("mlx8", LS_TYPE_MLX_AFFINE, 8);
    fails += switches_left("the grouped launches");
    for (int64_t K : {640, 2304, 8192}) { /* the register-resident add_rmsnorm's two sizes, and the general one */
        fails += !test_fused_quant("q5_0", LS_TYPE_Q5_0, 0, K);
        fails += !test_fused_quant("mlx4", LS_TYPE_MLX_AFFINE, 4, K);
        if (K % 256 == 0) { /* the K-quant format */
            fails += !test_fused_quant("q4_k", LS_TYPE_Q4_K, 0, K);
            fails += !test_fused_quant("q6_k", LS_TYPE_Q6_K, 0, K);
        }
    }
    fails += switches_left("the fused quantization");
    /* unsupported shapes answer -1 and launch nothing */
    {
        ls_weight w;
        memset(&w, 0, sizeof w);
        w.type = LS_TYPE_Q8_K, w.rows = 4, w.cols = 256, w.row_bytes = ls_row_size(LS_TYPE_Q8_K, 256);
        w.data = (void *)256;
        const int rc = ls_cuda_matmul(0, &w, (const float *)256, 1, (float *)256, scratch(), scratch_bytes());
        printf("%s q8_k unsupported -> %d\n", rc == -1 ? "PASS" : "FAIL", rc);
        fails += rc != -1;
    }
    printf("%s: %d of %zu cases failed\n", fails ? "FAIL" : "PASS", fails, cases.size() + 4);
    return fails ? 1 : 0;
}
