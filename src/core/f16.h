/* IEEE half and bfloat16 conversions (portable, exact; match F16C's round-to-nearest-even). */
#ifndef LS_CORE_F16_H
#define LS_CORE_F16_H

#include <stdint.h>
#include <string.h>

static inline float ls_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t ls_bits_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float ls_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        if (mant == 0) return ls_f32_from_bits(sign);
        /* subnormal: value = mant * 2^-24 (exact in f32) */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return ls_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    return ls_f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

static inline uint16_t ls_f32_to_f16(float f) {
    uint32_t x = ls_bits_from_f32(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0)); /* inf/nan */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);                                  /* overflow */
    if (ax < 0x38800000u) {                                                                   /* subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;                                          /* < 2^-25 rounds to 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t hm = ((ax >> 13) - (112u << 10));
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (hm & 1))) hm++;
    return (uint16_t)(sign | hm);
}

static inline float ls_bf16_to_f32(uint16_t b) {
    return ls_f32_from_bits((uint32_t)b << 16);
}

#endif
