/* safetensors reader (docs/gemma.md 6.1): one file, or a checkpoint directory
 * with model.safetensors or model.safetensors.index.json + shards. Files are mmapped
 * read-only; tensors point into the mappings. Every header is validated before use:
 * JSON well-formed, dtypes known, shape products and byte sizes overflow-checked and equal
 * to data_offsets, offsets inside the file, no two tensors overlapping, names unique
 * (also across shards), every weight_map entry present in its shard. */
#ifndef LS_FORMAT_SAFETENSORS_H
#define LS_FORMAT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    LS_ST_F64,
    LS_ST_F32,
    LS_ST_F16,
    LS_ST_BF16,
    LS_ST_I64,
    LS_ST_I32,
    LS_ST_I16,
    LS_ST_I8,
    LS_ST_U8,
    LS_ST_U16,
    LS_ST_U32,
    LS_ST_U64,
    LS_ST_BOOL,
    LS_ST_F8_E4M3,
    LS_ST_F8_E5M2,
    LS_ST_DTYPE_COUNT
} ls_st_dtype;

#define LS_ST_MAX_DIMS 8

typedef struct {
    const char *name; /* owned by the set */
    ls_st_dtype dtype;
    int32_t n_dims;
    int64_t shape[LS_ST_MAX_DIMS]; /* outermost first (row-major), as in the file */
    const void *data;              /* into the mapping */
    uint64_t nbytes;
    int32_t file; /* index of the shard that holds it */
} ls_st_tensor;

typedef struct ls_st_set ls_st_set;

/* Bytes per element; "F32" etc. names as in the format. */
size_t ls_st_dtype_size(ls_st_dtype t);
const char *ls_st_dtype_name(ls_st_dtype t);

/* Open one .safetensors file. Returns 0, or -1 with a message naming the file and the
 * problem in err. */
int ls_st_open_file(const char *path, ls_st_set **out, char *err, size_t errlen);
/* Open a checkpoint directory: model.safetensors.index.json (sharded) if present, else
 * model.safetensors, else the only *.safetensors file in it. */
int ls_st_open_dir(const char *dir, ls_st_set **out, char *err, size_t errlen);
/* Same; flags LS_ST_OPEN_HUGE: read the shards into huge-page memory (src/core/hugemap.h)
 * while their sum stays under ls_hugemap_limit(), the rest mapped as before: for model
 * loading, whose weights are streamed once per decoded token. */
#define LS_ST_OPEN_HUGE 1
int ls_st_open_dir_ex(const char *dir, int flags, ls_st_set **out, char *err, size_t errlen);
void ls_st_close(ls_st_set *s);

/* Validate a whole file image held in memory (header + data) without keeping it: the same
 * checks as ls_st_open_file. For the fuzz target and tests. */
int ls_st_validate_buffer(const uint8_t *buf, size_t len, char *err, size_t errlen);

/* The mapped bytes of file i (< ls_st_n_files) that tensors point into. */
int32_t ls_st_n_files(const ls_st_set *s);
void ls_st_file_mapping(const ls_st_set *s, int32_t i, const void **base, size_t *size);
int64_t ls_st_count(const ls_st_set *s);
const ls_st_tensor *ls_st_at(const ls_st_set *s, int64_t i);
/* NULL when absent. */
const ls_st_tensor *ls_st_find(const ls_st_set *s, const char *name);
/* Element count (product of the shape). */
int64_t ls_st_nelem(const ls_st_tensor *t);

#endif
