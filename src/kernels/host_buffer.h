/* Host buffers for downloaded rows (logits): page-locked where the backend has such memory,
 * plain aligned memory otherwise (host_buffer.c). */
#ifndef LS_KERNELS_HOST_BUFFER_H
#define LS_KERNELS_HOST_BUFFER_H

#include <stddef.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* `bytes` of host memory, 64-byte aligned: from be's host_alloc when it has one and it
 * succeeds, else plain memory; NULL when out of memory or bytes is 0. */
void *ls_host_buffer_alloc(ls_backend *be, size_t bytes);
/* Frees what ls_host_buffer_alloc returned (NULL: nothing); no backend needed. */
void ls_host_buffer_free(void *p);

#ifdef __cplusplus
}
#endif

#endif
