/* Device kinds by name, the default choice (docs/cuda.md 4): CUDA when this build has it
 * and a GPU answers, else the CPU; and the graphs switch of the device backends. */
#include <stdatomic.h>
#include <string.h>

#include "kernels/backend.h"

static atomic_bool g_graphs = true;

void ls_backend_set_graphs(bool on) {
    atomic_store(&g_graphs, on);
}

bool ls_backend_graphs(void) {
    return atomic_load(&g_graphs);
}

static atomic_uint g_cuda_off = 0;

void ls_backend_set_cuda_off(unsigned bits) {
    atomic_store(&g_cuda_off, bits);
}

unsigned ls_backend_cuda_off(void) {
    return atomic_load(&g_cuda_off);
}

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
