/* Device kinds by name, the default choice (docs/cuda.md 4): CUDA when this build has it
 * and a GPU answers, else the CPU; the graphs switch of the device backends and their step
 * timing totals. */
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

/* Step timing: plain counters, added to by whichever thread ends a step. */
static atomic_bool g_step_timing = false;
static atomic_llong g_steps = 0, g_host_ns = 0, g_device_ns = 0;

void ls_backend_set_step_timing(bool on) {
    atomic_store(&g_step_timing, on);
}

bool ls_backend_step_timing(void) {
    return atomic_load(&g_step_timing);
}

void ls_backend_step_times_add(int64_t host_ns, int64_t device_ns) {
    atomic_fetch_add(&g_steps, 1);
    atomic_fetch_add(&g_host_ns, host_ns);
    atomic_fetch_add(&g_device_ns, device_ns);
}

void ls_backend_step_times_take(int64_t *steps, int64_t *host_ns, int64_t *device_ns) {
    *steps = atomic_exchange(&g_steps, 0);
    *host_ns = atomic_exchange(&g_host_ns, 0);
    *device_ns = atomic_exchange(&g_device_ns, 0);
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
