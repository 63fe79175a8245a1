/* GGUF reader (v2/v3): mmap, metadata of every type (nested arrays included), tensor infos.
 *
 * The file is hostile input. ls_gguf_open validates everything once: every length, count,
 * offset and dimension is bounds- and overflow-checked, tensor data must lie inside the
 * file, be aligned and not overlap another tensor, types must be known and ne[0] a
 * multiple of the type's block. After a successful open, every pointer handed out is
 * inside the mapping and every size is consistent, so model code can trust the shapes. */
#ifndef LS_FORMAT_GGUF_H
#define LS_FORMAT_GGUF_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    GGUF_VT_U8 = 0,
    GGUF_VT_I8 = 1,
    GGUF_VT_U16 = 2,
    GGUF_VT_I16 = 3,
    GGUF_VT_U32 = 4,
    GGUF_VT_I32 = 5,
    GGUF_VT_F32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_U64 = 10,
    GGUF_VT_I64 = 11,
    GGUF_VT_F64 = 12,
} gguf_vtype;

typedef struct {
    const char *ptr; /* inside the mapping, NOT NUL-terminated */
    uint64_t len;
} gguf_str;

/* One metadata value. Scalars are decoded; strings point into the mapping; arrays keep
 * their element type, count and a pointer to the raw elements (for arrays of strings and
 * nested arrays, the elements are also decoded into items; ls_gguf_arr_str / ls_gguf_arr_sub
 * index them with bounds checks). */
typedef struct gguf_value gguf_value;
struct gguf_value {
    gguf_vtype type;
    union {
        uint64_t u; /* U8..U64, BOOL */
        int64_t i;  /* I8..I64 */
        double f;   /* F32, F64 */
        gguf_str s; /* STRING */
        struct {
            gguf_vtype elem;
            uint64_t count;
            const uint8_t *data;     /* raw little-endian elements (fixed-size element types) */
            const gguf_value *items; /* decoded elements for STRING and ARRAY element types, else NULL */
        } arr;
    } v;
};

typedef struct {
    gguf_str key;
    gguf_value value;
} gguf_kv;

typedef struct {
    char *name;       /* NUL-terminated copy */
    uint32_t type;    /* ggml type id (see kernels/types.h) */
    int n_dims;       /* 1..4 */
    int64_t ne[4];    /* innermost first; unused dims are 1 */
    uint64_t offset;  /* relative to the data section */
    const void *data; /* inside the mapping */
    uint64_t nbytes;
} gguf_tensor;

typedef struct gguf_file gguf_file;
/* The file bytes the tensors point into (the whole mapping). */
void ls_gguf_mapping(const gguf_file *f, const void **base, size_t *size);

/* Open and validate. On failure returns non-zero, *out = NULL, and writes a message naming
 * the problem (e.g. "tensor 'blk.0.attn_q.weight': data [off, end) past end of file (size N)"). */
int ls_gguf_open(const char *path, gguf_file **out, char *err, size_t errlen);
/* Same; flags LS_GGUF_OPEN_HUGE: read the file into huge-page memory (src/core/hugemap.h)
 * when it fits, for a caller that will stream the weights (model loading): opening then
 * costs a read of the whole file, which metadata readers should not pay. */
#define LS_GGUF_OPEN_HUGE 1
int ls_gguf_open_ex(const char *path, int flags, gguf_file **out, char *err, size_t errlen);
/* Same, over caller-owned memory (kept referenced; used by the fuzzer and tests). */
int ls_gguf_open_memory(const void *data, size_t size, gguf_file **out, char *err, size_t errlen);
void ls_gguf_close(gguf_file *f);

uint32_t ls_gguf_version(const gguf_file *f);
uint64_t ls_gguf_n_kv(const gguf_file *f);
const gguf_kv *ls_gguf_kv_at(const gguf_file *f, uint64_t i);
const gguf_value *ls_gguf_find(const gguf_file *f, const char *key); /* NULL if absent */

/* Typed getters: return 0 on success, -1 if absent, -2 if present with an incompatible type
 * or a value out of range for the requested type. Integer getters accept any integer type
 * whose value fits; ls_gguf_get_f32 accepts F32/F64 (and integers). */
int ls_gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int ls_gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
int ls_gguf_get_f32(const gguf_file *f, const char *key, float *out);
int ls_gguf_get_bool(const gguf_file *f, const char *key, int *out);
int ls_gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Array: on success *out is the array value (type GGUF_VT_ARRAY). */
int ls_gguf_get_arr(const gguf_file *f, const char *key, const gguf_value **out);

/* Array elements, bounds-checked, same return codes as the getters (-1: i >= count or not
 * an array; -2: element type doesn't fit). Raw elements sit at arbitrary (unaligned)
 * offsets in the mapping; these decode them safely. */
int ls_gguf_arr_str(const gguf_value *arr, uint64_t i, gguf_str *out);          /* STRING elements */
int ls_gguf_arr_sub(const gguf_value *arr, uint64_t i, const gguf_value **out); /* ARRAY elements */
int ls_gguf_arr_i64(const gguf_value *arr, uint64_t i, int64_t *out);           /* integers that fit */
int ls_gguf_arr_f32(const gguf_value *arr, uint64_t i, float *out);             /* F32/F64/integers */

/* Arrays nest at most this deep (an array of arrays is depth 2); deeper files are rejected. */
#define GGUF_MAX_ARRAY_DEPTH 8

const char *ls_gguf_vtype_name(uint32_t type);    /* "u8", "string", ...; "?" if unknown */
uint32_t ls_gguf_alignment(const gguf_file *f);   /* general.alignment, default 32 */
uint64_t ls_gguf_data_offset(const gguf_file *f); /* file offset of the data section */

uint64_t ls_gguf_n_tensors(const gguf_file *f);
const gguf_tensor *ls_gguf_tensor_at(const gguf_file *f, uint64_t i);
const gguf_tensor *ls_gguf_find_tensor(const gguf_file *f, const char *name); /* NULL if absent */

#endif
