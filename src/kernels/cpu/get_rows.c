/* Embedding lookup: gather table rows and dequantize them with the reference
 * dequantizer. Row i of the output depends only on ids[i], so it is batch-invariant;
 * the bits equal dequantize_row of that row, the same values any other path sees. */
#include "core/log.h"
#include "kernels/cpu/cpu_kernels.h"

void ls_get_rows(ls_type t, const void *table, int64_t row_elems, const int32_t *ids, int64_t n, float *dst) {
    const ls_type_traits *tr = ls_type_get(t);
    LS_ASSERT(tr != NULL && tr->dequantize_row != NULL);
    const size_t row = ls_row_size(t, row_elems);
    LS_ASSERT(row != 0);
    const uint8_t *base = table; /* [rows][row bytes] */
    for (int64_t i = 0; i < n; i++) {
        LS_ASSERT(ids[i] >= 0); /* ids were validated against the vocabulary by the caller */
        tr->dequantize_row(base + (size_t)ids[i] * row, dst + i * row_elems, row_elems);
    }
}
