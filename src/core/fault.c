/* Allocation fault injection (fault.h). */
#include "core/fault.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lockstep.h"

static const char *const g_site_names[LS_FAULT_SITE_COUNT] = {"sampler", "model", "tokenizer"};
static atomic_int g_armed[LS_FAULT_SITE_COUNT];

int ls_fault_arm(const char *site, int count) {
    if (!site || count < 0) return LS_ERR_ARG;
    for (int i = 0; i < LS_FAULT_SITE_COUNT; i++)
        if (!strcmp(site, g_site_names[i])) {
            atomic_store(&g_armed[i], count);
            return LS_OK;
        }
    return LS_ERR_ARG;
}

bool ls_fault_hit(ls_fault_site site) {
    atomic_int *a = &g_armed[site];
    int n = atomic_load_explicit(a, memory_order_relaxed);
    while (n > 0)
        if (atomic_compare_exchange_weak(a, &n, n - 1)) return true;
    return false;
}

void *ls_fault_malloc(ls_fault_site site, size_t bytes) {
    return ls_fault_hit(site) ? NULL : malloc(bytes);
}

void *ls_fault_calloc(ls_fault_site site, size_t n, size_t size) {
    return ls_fault_hit(site) ? NULL : calloc(n, size);
}

void ls_fault_describe(char *buf, size_t cap) {
    size_t off = 0;
    if (cap) buf[0] = 0;
    for (int i = 0; i < LS_FAULT_SITE_COUNT; i++) {
        int n = atomic_load(&g_armed[i]);
        if (n <= 0 || off >= cap) continue;
        int w = snprintf(buf + off, cap - off, "%s%s:%d", off ? "," : "", g_site_names[i], n);
        if (w > 0) off += (size_t)w;
    }
    if (!off && cap) snprintf(buf, cap, "off");
}
