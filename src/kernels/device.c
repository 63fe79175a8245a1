/* Device kinds by name, and the default choice (docs/cuda.md 4): CUDA when this build has
 * it and a GPU answers, else the CPU. */
#include <string.h>

#include "kernels/backend.h"

const ls_device_kind *ls_device_kind_find(const char *name) {
    if (!name || strcmp(name, "cpu") == 0) return &ls_device_cpu;
#ifdef LS_HAVE_CUDA
    if (strcmp(name, "cuda") == 0) return &ls_device_cuda;
#endif
    return NULL;
}

const char *ls_device_default(void) {
#ifdef LS_HAVE_CUDA
    if (ls_device_cuda.available()) return "cuda";
#endif
    return "cpu";
}
