/* AVX2 activation quantization, byte-identical to quant_act.c's scalar code (which documents
 * the semantics): the same IEEE operations per element (x * id or iscale * x, then the
 * 1.5 * 2^23 rounding trick), the maximum found order-free (max is exact) and, for Q8_K, the
 * sign taken from the first element of largest magnitude, as the scalar loop does. NaN
 * inputs are skipped by both maxima alike (MAXPS returns its second operand on NaN).
 * test_cpu_tiles compares the two on random rows and edge cases. */
#include "kernels/cpu/quant_act_avx2.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#include <string.h>

#include "core/f16.h"

static inline __m256 qa_abs(__m256 v) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

static inline float qa_hmax(__m256 v) { /* exact: max is order-free on non-NaN values */
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* nearest_int(v) of quant_act.c on eight lanes: (bits(v + 1.5 * 2^23) & 0x7fffff) - 0x400000 */
static inline __m256i qa_nearest(__m256 v) {
    const __m256i b = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.f)));
    return _mm256_sub_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}

/* 32 int32 (four vectors, in order) -> 32 int8 (values in [-127, 127]) */
static inline __m256i qa_pack(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    const __m256i p = _mm256_packs_epi16(ab, cd); /* lanes interleaved by the 128-bit packs */
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

void ls_act_q8_0_block_avx2(const float *x, ls_block_q8_0 *y) {
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        m = _mm256_max_ps(qa_abs(v[i]), m);
    }
    const float amax = qa_hmax(m);
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    y->d = ls_f32_to_f16(d);
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; i++) q[i] = qa_nearest(_mm256_mul_ps(v[i], vid));
    _mm256_storeu_si256((__m256i *)y->qs, qa_pack(q[0], q[1], q[2], q[3]));
}

void ls_act_q8_k_avx2(const float *x, ls_block_q8_k *y, int64_t k) {
    for (int64_t b = 0; b < k / LS_QK_K; b++, x += LS_QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < LS_QK_K; i += 8) m = _mm256_max_ps(qa_abs(_mm256_loadu_ps(x + i)), m);
        const float amax = qa_hmax(m);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0.0f;
        for (int j = 0; j < LS_QK_K; j++) /* the first element of largest magnitude */
            if (__builtin_fabsf(x[j]) == amax) {
                max = x[j];
                break;
            }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i top = _mm256_set1_epi32(127);
        for (int i = 0; i < LS_QK_K; i += 32) {
            __m256i q[4];
            for (int j = 0; j < 4; j++)
                q[j] = _mm256_min_epi32(qa_nearest(_mm256_mul_ps(vs, _mm256_loadu_ps(x + i + 8 * j))), top);
            const __m256i p = qa_pack(q[0], q[1], q[2], q[3]);
            _mm256_storeu_si256((__m256i *)(y[b].qs + i), p);
            /* 16-element sums: int8 -> int16 pairs summed by madd with ones, then halves */
            const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), p); /* pairs */
            const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1)); /* quads */
            int32_t t[8];
            _mm256_storeu_si256((__m256i *)t, s32);
            y[b].bsums[i / 16] = (int16_t)(t[0] + t[1] + t[2] + t[3]);
            y[b].bsums[i / 16 + 1] = (int16_t)(t[4] + t[5] + t[6] + t[7]);
        }
        y[b].d = 1.0f / iscale;
    }
}

void ls_act_q8v_block_avx2(const float *x, ls_act_q8v_block *o) {
    ls_block_q8_0 q;
    ls_act_q8_0_block_avx2(x, &q);
    const __m256i v = _mm256_loadu_si256((const __m256i *)q.qs);
    _mm256_storeu_si256((__m256i *)o->q[0], _mm256_shuffle_epi32(v, 0x00));
    _mm256_storeu_si256((__m256i *)o->q[1], _mm256_shuffle_epi32(v, 0x55));
    _mm256_storeu_si256((__m256i *)o->q[2], _mm256_shuffle_epi32(v, 0xaa));
    _mm256_storeu_si256((__m256i *)o->q[3], _mm256_shuffle_epi32(v, 0xff));
    /* half sums: lanes 0..3 hold elements 0..15, lanes 4..7 elements 16..31 */
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1));
    int32_t t[8];
    _mm256_storeu_si256((__m256i *)t, s);
    const int32_t lo = t[0] + t[1] + t[2] + t[3], hi = t[4] + t[5] + t[6] + t[7];
    for (int r = 0; r < 4; r++) o->neg_sum[r] = -lo, o->neg_sum[4 + r] = -hi;
    o->d = ls_f16_to_f32(q.d);
    memset(o->pad, 0, sizeof o->pad);
}

#else

/* Not built with AVX2 flags: never called (quant_act.c asks ls_cpu_isa() first). */
void ls_act_q8_0_block_avx2(const float *x, ls_block_q8_0 *y) {
    (void)x, (void)y;
}
void ls_act_q8_k_avx2(const float *x, ls_block_q8_k *y, int64_t k) {
    (void)x, (void)y, (void)k;
}
void ls_act_q8v_block_avx2(const float *x, ls_act_q8v_block *o) {
    (void)x, (void)o;
}

#endif
