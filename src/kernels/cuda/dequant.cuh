/* Device-side weight decoding for the CUDA matmul (matmul.cu): one traits struct per weight
 * type, each giving
 *   - the lane "chunk": E elements a lane loads and decodes at once (E/4 quads of 4
 *     consecutive k each; kpos(ci, q) is the row offset of quad q of chunk ci), how to load
 *     its raw bytes into registers (16-byte loads where the layout allows, aligned words and
 *     funnel shifts for 2-byte aligned blocks), prep (per-chunk scales) and dq (a group of
 *     GS quads dequantized to f32) with the CPU reference's formula and roundings
 *     (src/kernels/cpu/dequant.c, mlx_affine.c), and
 *   - ref32(): 32 elements computed one by one exactly like the reference, for get_rows,
 *     written straight to the output row (bit-identical to the CPU dequantizer, signed
 *     zeros and NaNs included).
 *
 * Exactness of the fast path: for a small unsigned integer q, the float f = 2^23 + q is made
 * by placing q in the mantissa of 0x4B000000 (one byte permute); then
 *   fmaf(a, f, -a * 2^23) = round(a * (2^23 + q) - a * 2^23) = round(a * q)
 * because a * 2^23 is exact (a power-of-two scaling). So "a * (float)q" costs one fma and
 * has the reference's rounding. For types whose integer is signed (q - offset) the exact
 * difference f - (2^23 + offset) is formed first, then multiplied (two ops, same rounding
 * as the reference's (float)(q - offset) * d). The only difference from the reference is
 * the sign of an exact zero product (+0 here where a negative scale times q = 0 gives -0),
 * which cannot change any sum except the sign of an exactly-zero output. get_rows uses the
 * reference expressions themselves and is bit-exact.
 *
 * Every function here is a pure function of the weight bytes and the chunk index: nothing
 * depends on M or on which activation rows share a tile. */
#ifndef LS_KERNELS_CUDA_DEQUANT_CUH
#define LS_KERNELS_CUDA_DEQUANT_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/backend.h"

namespace ls::q {

/* ---- the per-launch weight description (passed by value to kernels) ---- */
struct Ctx {
    const uint8_t *w;   /* row-major rows of row_bytes */
    uint64_t row_bytes;
    int64_t N, K;       /* rows, cols */
    int nch;            /* chunks per row (K / E) */
    int a16;            /* w and row_bytes are 16-byte aligned: 16-byte loads */
    /* MLX affine only */
    const uint8_t *sc, *bi;
    int sb_kind;        /* 0 f32, 1 f16, 2 bf16 */
    int gshift;         /* log2(group / 32) */
    int64_t ng;         /* groups per row */
    int kw;             /* mmq.cu: k-warps (a function of the shape) */
};

/* ---- conversions ---- */

/* The reference's ls_f16_to_f32 bit for bit (NaN payloads too). */
__device__ __forceinline__ float f16_exact(uint32_t h) {
    const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0) return __uint_as_float(sign);
        const float v = __fmul_rn(__uint2float_rn(mant), 1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (mant << 13));
    return __uint_as_float(sign | ((exp + 112) << 23) | (mant << 13));
}
/* f16 -> f32 by the hardware conversion: the same value for every non-NaN input. */
__device__ __forceinline__ float f16f(uint32_t h) {
    return __half2float(__ushort_as_half((unsigned short)(h & 0xffffu)));
}
__device__ __forceinline__ float bf16f(uint32_t b) {
    return __uint_as_float((b & 0xffffu) << 16);
}

/* The exponent bits of 2^23, kept in constant memory so the compiler cannot fold it: the
 * byte permute below then takes its selector as the immediate (one instruction per element,
 * no selector register to rematerialize). */
static __constant__ uint32_t k_magic = 0x4B000000u;
/* 2^23 + byte b of v (b a compile-time constant after unrolling). */
__device__ __forceinline__ float mag(uint32_t v, int b) {
    return __uint_as_float(__byte_perm(v, k_magic, 0x7440u | (unsigned)b));
}
/* 2^23 + v for v < 2^23 */
__device__ __forceinline__ float magv(uint32_t v) {
    return __uint_as_float(v | 0x4B000000u);
}
constexpr float TWO23 = 8388608.0f;

/* ---- loads (read-only path) ---- */
__device__ __forceinline__ uint32_t ldw(const uint8_t *p) {
    return __ldg(reinterpret_cast<const unsigned int *>(p));
}
__device__ __forceinline__ uint32_t ldh(const uint8_t *p) {
    return __ldg(reinterpret_cast<const unsigned short *>(p));
}
__device__ __forceinline__ uint32_t ldb(const uint8_t *p) {
    return __ldg(reinterpret_cast<const unsigned char *>(p));
}

/* NWD words at a 2-byte aligned address: aligned words and funnel shifts. The extra word
 * is only read when p is not 4-aligned, and then it holds bytes of the field itself. */
template <int NWD>
__device__ __forceinline__ void ld_a2(uint32_t *o, const uint8_t *p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint8_t *b = reinterpret_cast<const uint8_t *>(a & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(a & 3u) * 8u;
    uint32_t v[NWD + 1];
#pragma unroll
    for (int j = 0; j < NWD; j++) v[j] = ldw(b + 4 * j);
    v[NWD] = ldw(b + 4 * (sh ? NWD : NWD - 1));
#pragma unroll
    for (int j = 0; j < NWD; j++) o[j] = __funnelshift_r(v[j], v[j + 1], sh);
}
/* 16 weight bytes at p that bypass L1 when a16 (weights are streamed once; L1 keeps the
 * activations every warp re-reads), else ld_a2: the integer matmuls' weight loads (mmq.cu,
 * kq_vec.cu). */
__device__ __forceinline__ void ldw16(uint32_t *o, const uint8_t *p, int a16) {
    if (a16) {
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(o[0]), "=r"(o[1]), "=r"(o[2]), "=r"(o[3])
                     : "l"(p));
    } else {
        ld_a2<4>(o, p);
    }
}
/* 16 bytes at p: one 16-byte load when a16 (uniform per launch), else ld_a2. */
__device__ __forceinline__ void ld16(uint32_t *o, const uint8_t *p, int a16) {
    if (a16) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p));
        o[0] = v.x;
        o[1] = v.y;
        o[2] = v.z;
        o[3] = v.w;
    } else {
        ld_a2<4>(o, p);
    }
}

/* Q4_K / Q5_K 6-bit scales and mins of sub-blocks 2g and 2g+1 (the reference's
 * k4_scale_min, two at a time): S0, S1, S2 are the 12 scale bytes as three words. */
__device__ __forceinline__ void k4_pair(uint32_t S0, uint32_t S1, uint32_t S2, int g, uint32_t &sc, uint32_t &mn) {
    const unsigned sh = (unsigned)(g & 1) * 16u;
    const uint32_t A = S0 >> sh, B = S1 >> sh, C = S2 >> sh;
    if (g < 2) {
        sc = A & 0x3f3fu;
        mn = B & 0x3f3fu;
    } else {
        sc = (C & 0x0f0fu) | ((A >> 2) & 0x3030u);
        mn = ((C >> 4) & 0x0f0fu) | ((B >> 2) & 0x3030u);
    }
}

/* Elementwise k4_scale_min exactly as the reference (get_rows). */
__device__ __forceinline__ void k4_scale_min_ref(int j, const uint8_t *q, int &sc, int &m) {
    if (j < 4) {
        sc = (int)(ldb(q + j) & 63);
        m = (int)(ldb(q + j + 4) & 63);
    } else {
        sc = (int)((ldb(q + j + 4) & 15) | ((ldb(q + j - 4) >> 6) << 4));
        m = (int)((ldb(q + j + 4) >> 4) | ((ldb(q + j) >> 6) << 4));
    }
}

/* =========================== float types =========================== */

/* F32: chunk = 4 elements (16 bytes). */
struct TF32 {
    static constexpr int E = 4, QPC = 1, GS = 1, NG = 1, CPT = 4;
    struct Raw {
        uint32_t v[4];
    };
    struct Prep {};
    static __device__ __forceinline__ void load(Raw &r, const uint8_t *tb, int c, int a16, const uint8_t *, const uint8_t *, const Ctx &) {
        ld16(r.v, tb + 16 * c, a16);
    }
    static __device__ __forceinline__ void prep(Prep &, const Raw &, const Ctx &, int) {}
    static __device__ __forceinline__ void dq(float *o, int, const Raw &r, const Prep &) {
#pragma unroll
        for (int e = 0; e < 4; e++) o[e] = __uint_as_float(r.v[e]);
    }
    static __device__ __forceinline__ int qidx(int, int) { return 0; }
    static __device__ __forceinline__ int kpos(int ci, int) { return 4 * ci; }
    static __device__ __forceinline__ void ref32(float *o, const Ctx &c, const uint8_t *row, int64_t, int64_t g) {
        for (int e = 0; e < 32; e++) {
            const int64_t k = 32 * g + e;
            if (k < c.K) o[e] = __uint_as_float(ldw(row + 4 * k)); /* o: the output row at 32g */
        }
    }
};

/* F16 / BF16: chunk = 8 elements (16 bytes). */
template <bool BF>
struct THalf {
    static constexpr int E = 8, QPC = 2, GS = 2, NG = 1, CPT = 4;
    struct Raw {
        uint32_t v[4];
    };
    struct Prep {};
    static __device__ __forceinline__ void load(Raw &r, const uint8_t *tb, int c, int a16, const uint8_t *, const uint8_t *, const Ctx &) {
        ld16(r.v, tb + 16 * c, a16);
    }
    static __device__ __forceinline__ void prep(Prep &, const Raw &, const Ctx &, int) {}
    static __device__ __forceinline__ void dq(float *o, int, const Raw &r, const Prep &) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (BF) {
                o[2 * e] = __uint_as_float(r.v[e] << 16);
                o[2 * e + 1] = __uint_as_float(r.v[e] & 0xffff0000u);
            } else {
                o[2 * e] = f16f(r.v[e]);
                o[2 * e + 1] = f16f(r.v[e] >> 16);
            }
        }
    }
    static __device__ __forceinline__ int qidx(int, int u) { return u; }
    static __device__ __forceinline__ int kpos(int ci, int q) { return 8 * ci + 4 * q; }
    static __device__ __forceinline__ void ref32(float *o, const Ctx &c, const uint8_t *row, int64_t, int64_t g) {
        for (int e = 0; e < 32; e++) {
            const int64_t k = 32 * g + e;
            if (k < c.K) {
                const uint32_t h = ldh(row + 2 * k);
                o[e] = BF ? bf16f(h) : f16_exact(h);
            }
        }
    }
};

/* =========================== 32-element ggml blocks =========================== */

/* Q4_0: {f16 d; u8 qs[16]} (18 B); element j: low nibble of qs[j], j + 16: high nibble;
 * value (float)(q - 8) * d. Chunk = one block. */
struct TQ4_0 {
    static constexpr int E = 32, QPC = 8, GS = 2, NG = 4, CPT = 2;
    struct Raw {
        uint32_t d, q[4];
    };
    struct Prep {
        float d;
    };
    static __device__ __forceinline__ void load(Raw &r, const uint8_t *tb, int c, int, const uint8_t *, const uint8_t *, const Ctx &) {
        const uint8_t *b = tb + 18 * c;
        r.d = ldh(b);
        ld_a2<4>(r.q, b + 2);
    }
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &, int) { p.d = f16f(r.d); }
    /* group G = word G of qs: quads G (low nibbles) and 4 + G (high nibbles) */
    static __device__ __forceinline__ void dq(float *o, int G, const Raw &r, const Prep &p) {
        const uint32_t lo = r.q[G] & 0x0f0f0f0fu, hi = (r.q[G] >> 4) & 0x0f0f0f0fu;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            o[e] = __fmul_rn(__fsub_rn(mag(lo, e), TWO23 + 8.0f), p.d);
            o[4 + e] = __fmul_rn(__fsub_rn(mag(hi, e), TWO23 + 8.0f), p.d);
        }
    }
    static __device__ __forceinline__ int qidx(int G, int u) { return G + 4 * u; }
    static __device__ __forceinline__ int kpos(int ci, int q) { return 32 * ci + 4 * q; }
    static __device__ __forceinline__ void ref32(float *o, const Ctx &, const uint8_t *row, int64_t, int64_t g) {
        const uint8_t *b = row + g * 18;
        const float d = f16_exact(ldh(b));
        for (int j = 0; j < 16; j++) {
            const int q = (int)ldb(b + 2 + j);
            o[j] = __fmul_rn((float)((q & 15) - 8), d);
            o[j + 16] = __fmul_rn((float)((q >> 4) - 8), d);
        }
    }
};

/* Q4_1: {f16 d, m; u8 qs[16]} (20 B, 4-aligned); value (float)q * d + m. */
struct TQ4_1 {
    static constexpr int E = 32, QPC = 8, GS = 2, NG = 4, CPT = 2;
    struct Raw {
        uint32_t dm, q[4];
    };
    struct Prep {
        float d, nd, m;
    };
    static __device__ __forceinline__ void load(Raw &r, const uint8_t *tb, int c, int, const uint8_t *, const uint8_t *, const Ctx &) {
        const uint8_t *b = tb + 20 * c;
        r.dm = ldw(b);
#pragma unroll
        for (int j = 0; j < 4; j++) r.q[j] = ldw(b + 4 + 4 * j);
    }
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &, int) {
        p.d = f16f(r.dm);
        p.nd = p.d * -TWO23;
        p.m = f16f(r.dm >> 16);
    }
    static __device__ __forceinline__ void dq(float *o, int G, const Raw &r, const Prep &p) {
        const uint32_t lo = r.q[G] & 0x0f0f0f0fu, hi = (r.q[G] >> 4) & 0x0f0f0f0fu;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            o[e] = __fadd_rn(fmaf(p.d, mag(lo, e), p.nd), p.m);
            o[4 + e] = __fadd_rn(fmaf(p.d, mag(hi, e), p.nd), p.m);
        }
    }
    static __device__ __forceinline__ int qidx(int G, int u) { return G + 4 * u; }
    static __device__ __forceinline__ int kpos(int ci, int q) { return 32 * ci + 4 * q; }
    static __device__ __forceinline__ void ref32(float *o, const Ctx &, const uint8_t *row, int64_t, int64_t g) {
        const uint8_t *b = row + g * 20;
        const float d = f16_exact(ldh(b)), m = f16_exact(ldh(b + 2));
        for (int j = 0; j < 16; j++) {
            const int q = (int)ldb(b + 4 + j);
            o[j] = __fadd_rn(__fmul_rn((float)(q & 15), d), m);
            o[j + 16] = __fadd_rn(__fmul_rn((float)(q >> 4), d), m);
        }
    }
};

/* Bits 0..3 of x to bit 4 of bytes 0..3 (the fifth bits of four Q5 elements). */
__device__ __forceinline__ uint32_t spread4(uint32_t x) {
    return (((x & 0xfu) * 0x00204081u) & 0x01010101u) << 4;
}

/* Q5_0: {f16 d; u8 qh[4]; u8 qs[16]} (22 B); fifth bit of element j = bit j of qh (LE u32);
 * value (float)(q - 16) * d. */
struct TQ5_0 {
    static constexpr int E = 32, QPC = 8, GS = 2, NG = 4, CPT = 2;
    struct Raw {
        uint32_t d, qh, q[4];
    };
    struct Prep {
        float d;
    };
    static __device__ __forceinline__ void load(Raw &r, const uint8_t *tb, int c, int, const uint8_t *, const uint8_t *, const Ctx &) {
        const uint8_t *b = tb + 22 * c;
        r.d = ldh(b);
        uint32_t t[5];
        ld_a2<5>(t, b + 2);
        r.qh = t[0];
#pragma unroll
        for (int j = 0; j < 4; j++) r.q[j] = t[j + 1];
    }
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &, int) { p.d = f16f(r.d); }
    static __device__ __forceinline__ void dq(float *o, int G, const Raw &r, const Prep &p) {
        const uint32_t lo = (r.q[G] & 0x0f0f0f0fu) | spread4(r.qh >> (4 * G));
        const uint32_t hi = ((r.q[G] >> 4) & 0x0f0f0f0fu) | spread4(r.qh >> (16 + 4 * G));
#pragma unroll
        for (int e = 0; e < 4; e++) {
            o[e] = __fmul_rn(__fsub_rn(mag(lo, e), TWO23 + 16.0f), p.d);
            o[4 + e] = __fmul_rn(__fsub_rn(mag(hi, e), TWO23 + 16.0f), p.d);
        }
    }
    static __device__ __forceinline__ int qidx(int G, int u) { return G + 4 * u; }
    static __device__ __forceinline__ int kpos(int ci, int q) { return 32 * ci + 4 * q; }
    static __device__ __forceinline__ void ref32(float *o, const Ctx &, const uint8_t *row, int64_t, int64_t g) {
        const uint8_t *b = row + g * 22;
        const float d = f16_exact(ldh(b));
        const uint32_t qh = ldb(b + 2) | (ldb(b + 3) << 8) | (ldb(b + 4) << 16) | (ldb(b + 5) << 24);
        for (int j = 0; j < 16; j++) {
            const int q = (int)ldb(b + 6 + j);
            const int lo = (q & 15) | (int)(((qh >> j) & 1) << 4);
            const int hi = (q >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            o[j] = __fmul_rn((float)(lo - 16), d);
            o[j + 16] = __fmul_rn((float)(hi - 16), d);
        }
    }
};

/* Q5_1: {f16 d, m; u8 qh[4]; u8 qs[16]} (24 B, 8-aligned); value (float)q * d + m. */
struct TQ5_1 {
    static constexpr int E = 32, QPC = 8, GS = 2, NG = 4, CPT = 2;
    struct Raw {
        uint32_t dm, qh, q[4];
    };
    struct Prep {
        float d, nd, m;
    };
    static __device__ __forceinline__ void load(Raw &r, const uint8_t *tb, int c, int, const uint8_t *, const uint8_t *, const Ctx &) {
        const uint8_t *b = tb + 24 * c;
        r.dm = ldw(b);
        r.qh = ldw(b + 4);
#pragma unroll
        for (int j = 0; j < 4; j++) r.q[j] = ldw(b + 8 + 4 * j);
    }
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &, int) {
        p.d = f16f(r.dm);
        p.nd = p.d * -TWO23;
        p.m = f16f(r.dm >> 16);
    }
    static __device__ __forceinline__ void dq(float *o, int G, const Raw &r, const Prep &p) {
        const uint32_t lo = (r.q[G] & 0x0f0f0f0fu) | spread4(r.qh >> (4 * G));
        const uint32_t hi = ((r.q[G] >> 4) & 0x0f0f0f0fu) | spread4(r.qh >> (16 + 4 * G));
#pragma unroll
        for (int e = 0; e < 4; e++) {
            o[e] = __fadd_rn(fmaf(p.d, mag(lo, e), p.nd), p.m);
            o[4 + e] = __fadd_rn(fmaf(p.d, mag(hi, e), p.nd), p.m);
        }
    }
    static __device__ __forceinline__ int qidx(int G, int u) { return G + 4 * u; }
    static __device__ __forceinline__ int kpos(int ci, int q) { return 32 * ci + 4 * q; }
    static __device__ __forceinline__ void ref32(float *o, const Ctx &, const uint8_t *row, int64_t, int64_t g) {
        const uint8_t *b = row + g * 24;
        const float d = f16_exact(ldh(b)), m = f16_exact(ldh(b + 2));
        const uint32_t qh = ldb(b + 4) | (ldb(b + 5) << 8) | (ldb(b + 6) << 16) | (ldb(b + 7) << 24);
        for (int j = 0; j < 16; j++) {
            const int q = (int)ldb(b + 8 + j);
            const int lo = (q & 15) | (int)(((qh >> j) & 1) << 4);
            const int hi = (q >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            o[j] = __fadd_rn(__fmul_rn((float)lo, d), m);
            o[j + 16] = __fadd_rn(__fmul_rn((float)hi, d), m);
        }
    }
};

/* Q8_0: {f16 d; i8 qs[32]} (34 B); value (float)q * d. */
struct TQ8_0 {
    static constexpr int E = 32, QPC = 8, GS = 2, NG = 4, CPT = 2;
    struct Raw {
        uint32_t d, q[8];
    };
    struct Prep {
        float d;
    };
    static __device__ __forceinline__ void load(Raw &r, const uint8_t *tb, int c, int, const uint8_t *, const uint8_t *, const Ctx &) {
        const uint8_t *b = tb + 34 * c;
        r.d = ldh(b);
        ld_a2<8>(r.q, b + 2);
    }
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &, int) { p.d = f16f(r.d); }
    /* group G: words 2G, 2G + 1 = quads 2G, 2G + 1; (q ^ 0x80) = q + 128 as unsigned */
    static __device__ __forceinline__ void dq(float *o, int G, const Raw &r, const Prep &p) {
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const uint32_t v = r.q[2 * G + u] ^ 0x80808080u;
#pragma unroll
            for (int e = 0; e < 4; e++) o[4 * u + e] = __fmul_rn(__fsub_rn(mag(v, e), TWO23 + 128.0f), p.d);
        }
    }
    static __device__ __forceinline__ int qidx(int G, int u) { return 2 * G + u; }
    static __device__ __forceinline__ int kpos(int ci, int q) { return 32 * ci + 4 * q; }
    static __device__ __forceinline__ void ref32(float *o, const Ctx &, const uint8_t *row, int64_t, int64_t g) {
        const uint8_t *b = row + g * 34;
        const float d = f16_exact(ldh(b));
        for (int j = 0; j < 32; j++) o[j] = __fmul_rn((float)(int8_t)ldb(b + 2 + j), d);
    }
};

/* =========================== 256-element K-quants =========================== */

/* Q4_K: {f16 d, dmin; u8 scales[12]; u8 qs[128]} (144 B). Group g (0..3) of 64 elements
 * is qs[32g .. 32g + 32): low nibbles are elements 64g + l (sub-block 2g), high nibbles
 * 64g + 32 + l (sub-block 2g + 1); value d1 * q - m1 with d1 = d * sc, m1 = dmin * m.
 * Chunk = one group (64 elements, 16-byte header + 32 bytes of qs). */
struct TQ4_K {
    static constexpr int E = 64, QPC = 16, GS = 2, NG = 8, CPT = 1;
    struct Raw {
        uint32_t h[4], q[8];
    };
    struct Prep {
        float d1, nd1, m1, d2, nd2, m2;
    };
    static __device__ __forceinline__ void load(Raw &r, const uint8_t *tb, int c, int a16, const uint8_t *, const uint8_t *, const Ctx &) {
        const uint8_t *b = tb + 144 * (c >> 2);
        const int g = c & 3;
        ld16(r.h, b, a16);
        ld16(r.q, b + 16 + 32 * g, a16);
        ld16(r.q + 4, b + 32 + 32 * g, a16);
    }
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &, int ci) {
        const float d = f16f(r.h[0]), dmin = f16f(r.h[0] >> 16);
        uint32_t sc, mn;
        k4_pair(r.h[1], r.h[2], r.h[3], ci & 3, sc, mn);
        /* d * (float)sc exactly rounded, as fmaf(d, 2^23 + sc, -d 2^23) (see the top) */
        const float nd = d * -TWO23, ndm = dmin * -TWO23;
        p.d1 = fmaf(d, mag(sc, 0), nd);
        p.d2 = fmaf(d, mag(sc, 1), nd);
        p.m1 = fmaf(dmin, mag(mn, 0), ndm);
        p.m2 = fmaf(dmin, mag(mn, 1), ndm);
        p.nd1 = p.d1 * -TWO23;
        p.nd2 = p.d2 * -TWO23;
    }
    /* group G = qs word G: quads G (low nibbles, sub-block 2g) and 8 + G (high, 2g + 1) */
    static __device__ __forceinline__ void dq(float *o, int G, const Raw &r, const Prep &p) {
        const uint32_t lo = r.q[G] & 0x0f0f0f0fu, hi = (r.q[G] >> 4) & 0x0f0f0f0fu;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            o[e] = __fsub_rn(fmaf(p.d1, mag(lo, e), p.nd1), p.m1);
            o[4 + e] = __fsub_rn(fmaf(p.d2, mag(hi, e), p.nd2), p.m2);
        }
    }
    static __device__ __forceinline__ int qidx(int G, int u) { return G + 8 * u; }
    static __device__ __forceinline__ int kpos(int ci, int q) { return 64 * ci + 4 * q; }
    /* get_rows: 32-element group g = sub-block j of block g / 8 */
    static __device__ __forceinline__ void ref32(float *o, const Ctx &, const uint8_t *row, int64_t, int64_t g) {
        const uint8_t *b = row + (g >> 3) * 144;
        const int j = (int)(g & 7);
        const float d = f16_exact(ldh(b)), dmin = f16_exact(ldh(b + 2));
        int sc, m;
        k4_scale_min_ref(j, b + 4, sc, m);
        const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)m);
        const uint8_t *q = b + 16 + 32 * (j >> 1);
        for (int l = 0; l < 32; l++) {
            const uint32_t v = ldb(q + l);
            o[l] = __fsub_rn(__fmul_rn(d1, (float)((j & 1) ? (v >> 4) : (v & 15))), m1);
        }
    }
};

/* Q5_K: {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]} (176 B); as Q4_K plus a fifth
 * bit: bit 2g of qh[l] for the low nibble of qs[32g + l], bit 2g + 1 for the high one.
 * Chunk = half a group: qs[32g + 16hf .. + 16) and qh[16hf .. + 16) (32 elements). */
struct TQ5_K {
    static constexpr int E = 32, QPC = 8, GS = 2, NG = 4, CPT = 2;
    struct Raw {
        uint32_t h[4], qh[4], q[4];
    };
    struct Prep {
        float d1, nd1, m1, d2, nd2, m2;
        unsigned sh; /* 2g */
    };
    static __device__ __forceinline__ void load(Raw &r, const uint8_t *tb, int c, int a16, const uint8_t *, const uint8_t *, const Ctx &) {
        const uint8_t *b = tb + 176 * (c >> 3);
        const int g = (c >> 1) & 3, hf = c & 1;
        ld16(r.h, b, a16);
        ld16(r.qh, b + 16 + 16 * hf, a16);
        ld16(r.q, b + 48 + 32 * g + 16 * hf, a16);
    }
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &, int ci) {
        const float d = f16f(r.h[0]), dmin = f16f(r.h[0] >> 16);
        uint32_t sc, mn;
        p.sh = 2u * (unsigned)((ci >> 1) & 3);
        k4_pair(r.h[1], r.h[2], r.h[3], (ci >> 1) & 3, sc, mn);
        /* d * (float)sc exactly rounded, as fmaf(d, 2^23 + sc, -d 2^23) (see the top) */
        const float nd = d * -TWO23, ndm = dmin * -TWO23;
        p.d1 = fmaf(d, mag(sc, 0), nd);
        p.d2 = fmaf(d, mag(sc, 1), nd);
        p.m1 = fmaf(dmin, mag(mn, 0), ndm);
        p.m2 = fmaf(dmin, mag(mn, 1), ndm);
        p.nd1 = p.d1 * -TWO23;
        p.nd2 = p.d2 * -TWO23;
    }
    /* group G = word G of the 16-byte runs: quads G (low nibbles, fifth bit 2g) and 4 + G
     * (high nibbles, fifth bit 2g + 1) */
    static __device__ __forceinline__ void dq(float *o, int G, const Raw &r, const Prep &p) {
        const uint32_t h0 = (r.qh[G] >> p.sh) & 0x01010101u, h1 = (r.qh[G] >> (p.sh + 1)) & 0x01010101u;
        const uint32_t lo = (r.q[G] & 0x0f0f0f0fu) | (h0 << 4), hi = ((r.q[G] >> 4) & 0x0f0f0f0fu) | (h1 << 4);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            o[e] = __fsub_rn(fmaf(p.d1, mag(lo, e), p.nd1), p.m1);
            o[4 + e] = __fsub_rn(fmaf(p.d2, mag(hi, e), p.nd2), p.m2);
        }
    }
    static __device__ __forceinline__ int qidx(int G, int u) { return G + 4 * u; }
    static __device__ __forceinline__ int kpos(int ci, int q) {
        return 256 * (ci >> 3) + 64 * ((ci >> 1) & 3) + 16 * (ci & 1) + 32 * (q >> 2) + 4 * (q & 3);
    }
    static __device__ __forceinline__ void ref32(float *o, const Ctx &, const uint8_t *row, int64_t, int64_t g) {
        const uint8_t *b = row + (g >> 3) * 176;
        const int j = (int)(g & 7), gg = j >> 1;
        const float d = f16_exact(ldh(b)), dmin = f16_exact(ldh(b + 2));
        int sc, m;
        k4_scale_min_ref(j, b + 4, sc, m);
        const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)m);
        const uint8_t *qh = b + 16, *q = b + 48 + 32 * gg;
        for (int l = 0; l < 32; l++) {
            const uint32_t v = ldb(q + l), h = ldb(qh + l);
            const int qq = (j & 1) ? (int)((v >> 4) + (((h >> (2 * gg + 1)) & 1) << 4))
                                   : (int)((v & 15) + (((h >> (2 * gg)) & 1) << 4));
            o[l] = __fsub_rn(__fmul_rn(d1, (float)qq), m1);
        }
    }
};

/* Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} (210 B, 2-aligned). Half h (128
 * elements): for l < 32, elements 128h + 32t + l (t = 0..3) take the low (t = 0, 1) or high
 * (t = 2, 3) nibble of ql[64h + l + 32 (t & 1)], bits 2t..2t+1 of qh[32h + l], scale
 * scales[8h + l / 16 + 2t]; value d * sc * (q - 32). Chunk ci: block ci / 4, h = (ci >> 1)
 * & 1, c' = ci & 1: l in [16c', 16c' + 16), all four t (64 elements). */
struct TQ6_K {
    static constexpr int E = 64, QPC = 16, GS = 2, NG = 8, CPT = 1;
    struct Raw {
        uint32_t l0[4], l1[4], qh[4], sc[2], d;
    };
    struct Prep {
        float ds[4];
    };
    static __device__ __forceinline__ void load(Raw &r, const uint8_t *tb, int c, int, const uint8_t *, const uint8_t *, const Ctx &) {
        const uint8_t *b = tb + 210 * (c >> 2);
        const int h = (c >> 1) & 1, cp = c & 1;
        ld_a2<4>(r.l0, b + 64 * h + 16 * cp);
        ld_a2<4>(r.l1, b + 64 * h + 32 + 16 * cp);
        ld_a2<4>(r.qh, b + 128 + 32 * h + 16 * cp);
        ld_a2<2>(r.sc, b + 192 + 8 * h);
        r.d = ldh(b + 208);
    }
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &, int ci) {
        const float d = f16f(r.d);
        /* scales c' + 2t, t = 0..3, of the 8 bytes of this half */
        const uint32_t s4 = __byte_perm(r.sc[0], r.sc[1], (ci & 1) ? 0x7531u : 0x6420u);
        const uint32_t u4 = s4 ^ 0x80808080u; /* int8 sc + 128 */
#pragma unroll
        for (int t = 0; t < 4; t++) p.ds[t] = __fmul_rn(d, __fsub_rn(mag(u4, t), TWO23 + 128.0f));
    }
    /* group G: word w = G >> 1 of the 16-byte runs; t = G & 1 (low nibbles) and t + 2 (high) */
    static __device__ __forceinline__ void dq(float *o, int G, const Raw &r, const Prep &p) {
        const int w = G >> 1, t = G & 1;
        const uint32_t l = t ? r.l1[w] : r.l0[w];
        const uint32_t qh = r.qh[w];
        uint32_t a, b;
        if (t == 0) {
            a = (l & 0x0f0f0f0fu) | ((qh & 0x03030303u) << 4);
            b = ((l >> 4) & 0x0f0f0f0fu) | (qh & 0x30303030u);
        } else {
            a = (l & 0x0f0f0f0fu) | ((qh & 0x0c0c0c0cu) << 2);
            b = ((l >> 4) & 0x0f0f0f0fu) | ((qh & 0xc0c0c0c0u) >> 2);
        }
#pragma unroll
        for (int e = 0; e < 4; e++) {
            o[e] = __fmul_rn(__fsub_rn(mag(a, e), TWO23 + 32.0f), p.ds[t]);
            o[4 + e] = __fmul_rn(__fsub_rn(mag(b, e), TWO23 + 32.0f), p.ds[t + 2]);
        }
    }
    /* quad index q = 4t + w */
    static __device__ __forceinline__ int qidx(int G, int u) { return 4 * ((G & 1) + 2 * u) + (G >> 1); }
    static __device__ __forceinline__ int kpos(int ci, int q) {
        return 256 * (ci >> 2) + 128 * ((ci >> 1) & 1) + 32 * (q >> 2) + 16 * (ci & 1) + 4 * (q & 3);
    }
    static __device__ __forceinline__ void ref32(float *o, const Ctx &, const uint8_t *row, int64_t, int64_t g) {
        const uint8_t *b = row + (g >> 3) * 210;
        const int h = (int)((g >> 2) & 1), t = (int)(g & 3);
        const float d = f16_exact(ldh(b + 208));
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h, *sc = b + 192 + 8 * h;
        for (int l = 0; l < 32; l++) {
            const uint32_t lv = ldb(ql + l + 32 * (t & 1)), hv = ldb(qh + l);
            const int q = (int)(((t >= 2) ? (lv >> 4) : (lv & 15)) | (((hv >> (2 * t)) & 3) << 4)) - 32;
            const float s = (float)(int8_t)ldb(sc + l / 16 + 2 * t);
            o[l] = __fmul_rn(__fmul_rn(d, s), (float)q);
        }
    }
};

/* =========================== MLX affine =========================== */

/* Packed rows (LSB-first bit stream, BITS bits per element), per-group scale s and bias b
 * (f32 / f16 / bf16); value (s * q) + b with two roundings. Chunk = 32 consecutive elements
 * (4 * BITS bytes, inside one group). */
template <int BITS>
struct TMlx {
    static constexpr int E = 32, QPC = 8, GS = 2, NG = 4, CPT = 2;
    struct Raw {
        uint32_t q[BITS], s, b; /* packed quants; raw scale and bias bits */
    };
    struct Prep {
        float s, ns, b;
    };
    static __device__ __forceinline__ uint32_t sb_load(const Ctx &c, const uint8_t *base, int64_t i) {
        return c.sb_kind == 0 ? ldw(base + 4 * i) : ldh(base + 2 * i);
    }
    static __device__ __forceinline__ float sb_conv(const Ctx &c, uint32_t v) {
        return c.sb_kind == 0 ? __uint_as_float(v) : c.sb_kind == 1 ? f16f(v) : bf16f(v);
    }
    /* sbs, sbb: shared addresses of this tile's first scale / bias of the row; sbk: their kind
     * and group shift come from Ctx in prep (the raw bits are kept here) */
    /* sbs, sbb: this row's scales and biases (global) */
    static __device__ __forceinline__ void load(Raw &r, const uint8_t *tb, int c, int a16, const uint8_t *sbs,
                                                const uint8_t *sbb, const Ctx &cx) {
        const uint8_t *p = tb + c * (4 * BITS);
        if constexpr (BITS == 4) {
            ld16(r.q, p, a16);
        } else if constexpr (BITS == 8) {
            ld16(r.q, p, a16);
            ld16(r.q + 4, p + 16, a16);
        } else {
#pragma unroll
            for (int j = 0; j < BITS; j++) r.q[j] = ldw(p + 4 * j);
        }
        const int j = c >> cx.gshift;
        r.s = sb_load(cx, sbs, j);
        r.b = sb_load(cx, sbb, j);
    }
    static __device__ __forceinline__ void prep(Prep &p, const Raw &r, const Ctx &c, int) {
        p.s = sb_conv(c, r.s);
        p.b = sb_conv(c, r.b);
        p.ns = p.s * -TWO23;
    }
    /* q of element e (0..31) of the chunk, as 2^23 + q (e compile-time) */
    static __device__ __forceinline__ float qf(const Raw &r, int e) {
        const int pos = e * BITS, a = pos >> 5, sh = pos & 31;
        const uint32_t mask = (1u << BITS) - 1u;
        if (sh + BITS <= 32) return magv((r.q[a] >> sh) & mask);
        return magv(__funnelshift_r(r.q[a], r.q[a + 1], (unsigned)sh) & mask);
    }
    /* group G: elements 8G .. 8G + 7 (quads 2G, 2G + 1) */
    static __device__ __forceinline__ void dq(float *o, int G, const Raw &r, const Prep &p) {
        if constexpr (BITS == 4) {
            const uint32_t lo = r.q[G] & 0x0f0f0f0fu, hi = (r.q[G] >> 4) & 0x0f0f0f0fu;
#pragma unroll
            for (int e = 0; e < 4; e++) {
                o[2 * e] = __fadd_rn(fmaf(p.s, mag(lo, e), p.ns), p.b);
                o[2 * e + 1] = __fadd_rn(fmaf(p.s, mag(hi, e), p.ns), p.b);
            }
        } else if constexpr (BITS == 8) {
#pragma unroll
            for (int u = 0; u < 2; u++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    o[4 * u + e] = __fadd_rn(fmaf(p.s, mag(r.q[2 * G + u], e), p.ns), p.b);
        } else {
#pragma unroll
            for (int e = 0; e < 8; e++) o[e] = __fadd_rn(fmaf(p.s, qf(r, 8 * G + e), p.ns), p.b);
        }
    }
    static __device__ __forceinline__ int qidx(int G, int u) { return 2 * G + u; }
    static __device__ __forceinline__ int kpos(int ci, int q) { return 32 * ci + 4 * q; }
    static __device__ __forceinline__ void ref32(float *o, const Ctx &c, const uint8_t *row, int64_t nrow, int64_t g) {
        const int64_t i = nrow * c.ng + (g >> c.gshift);
        const float s = sb_conv(c, sb_load(c, c.sc, i)), b = sb_conv(c, sb_load(c, c.bi, i));
        for (int e = 0; e < 32; e++) {
            /* the reference unpacker: byte-wise, never reading past the row */
            const uint64_t pos = (uint64_t)(32 * g + e) * BITS;
            const uint8_t *pb = row + (pos >> 3);
            const unsigned sh = (unsigned)(pos & 7);
            uint32_t v = ldb(pb) >> sh;
            if (sh + BITS > 8) v |= ldb(pb + 1) << (8 - sh);
            v &= (1u << BITS) - 1u;
            o[e] = __fadd_rn(__fmul_rn(s, (float)v), b);
        }
    }
};

/* Validates w for the CUDA matmuls and fills c; returns the dispatch key (the ls_type, or
 * 100 + bits for MLX affine), -1 if unsupported (matmul.cu). */
int mm_prepare(const ls_weight *w, Ctx &c);

} // namespace ls::q

#endif
