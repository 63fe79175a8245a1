/* Counter-based randomness keyed on (seed, absolute position): the uniform used to
 * sample position p is a pure function of the seed and p, so classic and speculative
 * decoding draw the same number for the same position (docs/speculative.md section 5). */
#ifndef LS_DECODE_RNG_H
#define LS_DECODE_RNG_H

#include <stdint.h>

static inline uint64_t ls_mix64(uint64_t z) { /* SplitMix64 finalizer */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 random bits, for (seed, position, stream). */
static inline float ls_uniform(uint64_t seed, int64_t pos, uint32_t stream) {
    uint64_t z = ls_mix64(seed ^ 0x9e3779b97f4a7c15ull);
    z = ls_mix64(z + (uint64_t)pos * 0xd1b54a32d192ed03ull + ((uint64_t)stream << 32));
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

#endif
