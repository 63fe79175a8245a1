/* Layout checks of ls_weight shared by every backend (the loaders validate weights with
 * them before any kernel sees one). */
#include <stdint.h>

#include "kernels/backend.h"

int ls_mlx_affine_check(const ls_weight *w) {
    if (!w || w->type != LS_TYPE_MLX_AFFINE || !w->data || !w->scales || !w->biases) return -1;
    switch (w->bits) {
    case 2:
    case 3:
    case 4:
    case 5:
    case 6:
    case 8: break;
    default: return -1;
    }
    if (w->group != 32 && w->group != 64 && w->group != 128) return -1;
    if (w->sb_type != LS_TYPE_F32 && w->sb_type != LS_TYPE_F16 && w->sb_type != LS_TYPE_BF16) return -1;
    if (w->rows <= 0 || w->cols <= 0 || w->cols % w->group != 0) return -1;
    /* cols is a multiple of 32, so a row is a whole number of bytes (and of u32 words) */
    if (w->cols > INT64_MAX / 8 || w->row_bytes != (uint64_t)(w->cols * w->bits / 8)) return -1;
    return 0;
}
