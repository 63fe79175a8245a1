/* Which device a model's sessions run on, and making its constants readable there
 * (docs/cuda.md 3): the file mappings and the owned f32 vectors are mapped once per device
 * kind (the CUDA kind uploads them; the CPU maps nothing), then every session, batcher and
 * drafter of the model on that kind shares the one copy. */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "format/safetensors.h"
#include "model/model.h"

int ls_model_for_each_range(const ls_model *m, ls_range_fn fn, void *ud) {
    const void *base;
    size_t size;
    if (m->gguf) {
        ls_gguf_mapping(m->gguf, &base, &size);
        if (size && fn(ud, base, size) != 0) return -1;
    }
    if (m->st)
        for (int32_t i = 0; i < ls_st_n_files(m->st); i++) {
            ls_st_file_mapping(m->st, i, &base, &size);
            if (size && fn(ud, base, size) != 0) return -1;
        }
    for (int i = 0; i < m->n_owned; i++)
        if (fn(ud, m->owned[i], m->owned_bytes[i]) != 0) return -1;
    return 0;
}

typedef struct {
    const ls_device_kind *kind;
    char *err;
    size_t errlen;
} map_ctx;

static int map_one(void *ud, const void *base, size_t bytes) {
    map_ctx *c = ud;
    return c->kind->map_const(base, bytes, c->err, c->errlen);
}

static int unmap_one(void *ud, const void *base, size_t bytes) {
    (void)bytes;
    ((const ls_device_kind *)ud)->unmap_const(base);
    return 0;
}

int ls_model_map(ls_model *m, const ls_device_kind *kind, char *err, size_t errlen) {
    for (int i = 0; i < m->n_mapped; i++)
        if (m->mapped[i] == kind) return LS_OK;
    LS_ASSERT(m->n_mapped < LS_MAX_DEVICE_KINDS);
    map_ctx c = {kind, err, errlen};
    if (ls_model_for_each_range(m, map_one, &c) != 0) {
        ls_model_for_each_range(m, unmap_one, (void *)kind); /* unmap of an unmapped range is a no-op */
        return LS_ERR_NOMEM;
    }
    m->mapped[m->n_mapped++] = kind;
    return LS_OK;
}

void ls_model_unmap_all(ls_model *m) {
    for (int i = 0; i < m->n_mapped; i++) ls_model_for_each_range(m, unmap_one, (void *)m->mapped[i]);
    m->n_mapped = 0;
}

const ls_device_kind *ls_model_kind_for(ls_model *m, const char *name, char *err, size_t errlen) {
    const ls_device_kind *k;
    if (!name || !*name)
        k = m->device ? m->device : ls_device_kind_find(ls_device_default());
    else if (strcmp(name, "auto") == 0)
        k = ls_device_kind_find(ls_device_default());
    else
        k = ls_device_kind_find(name);
    if (!k) {
        snprintf(err, errlen, "device '%s' is not available in this build (built: cpu%s)", name,
#ifdef LS_HAVE_CUDA
                 ", cuda"
#else
                 ""
#endif
        );
        return NULL;
    }
    if (!k->available()) {
        snprintf(err, errlen, "device '%s' is not available here (no usable GPU found)", k->name);
        return NULL;
    }
    if (ls_model_map(m, k, err, errlen) != LS_OK) return NULL;
    return k;
}

int ls_model_set_device(ls_model *m, const char *device, char *err, size_t errlen) {
    const ls_device_kind *k = ls_model_kind_for(m, device && *device ? device : "auto", err, errlen);
    if (!k) return LS_ERR_ARG;
    m->device = k;
    /* A GPU is worth saying; the CPU on a machine without one is the quiet default. */
    ls_log(strcmp(k->name, "cpu") ? LS_LOG_INFO : LS_LOG_DEBUG, "device: %s (%s)", k->name, k->device_name());
    return LS_OK;
}

const char *ls_model_device(const ls_model *m) {
    return m->device ? m->device->name : ls_device_default();
}

const char *ls_device_name_of(const char *kind) {
    const ls_device_kind *k = ls_device_kind_find(kind);
    return k && k->available() ? k->device_name() : "unavailable";
}
