/* JSON schema -> grammar nodes (docs/structured_output.md section 2). Supported: type (one
 * name or a list whose alternatives start with distinct bytes), properties (emitted in schema
 * order; optional ones may be skipped), required, additionalProperties (no extra property is
 * ever emitted), items, minItems, maxItems, enum, const, minLength, maxLength, anyOf (with
 * alternatives that start with distinct bytes), and annotations. Any other keyword is an error
 * naming it and its JSON pointer. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "decode/grammar.h"

enum { MAX_SCHEMA_DEPTH = 24, MAX_NODES = 60000, MAX_ALTS = 64 };

typedef struct {
    ls_grammar *g;
    char *err;
    size_t errlen;
} cctx;

static int fail(cctx *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(cctx *c, const char *path, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "%s at %s", msg, path[0] ? path : "#");
    return -1;
}

static bool grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

static void set_first(ls_gnode *n, int b) {
    n->first_bytes[b >> 3] |= (uint8_t)(1u << (b & 7));
}

/* A new node (first bytes set from its kind where they are fixed); -1 when out of room. */
static int32_t new_node(cctx *c, ls_gn_kind kind) {
    ls_grammar *g = c->g;
    if (g->n_nodes >= MAX_NODES) return fail(c, "", "schema too large");
    if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(ls_gnode))) return fail(c, "", "out of memory");
    ls_gnode *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    n->child = -1;
    n->min = 0;
    n->max = -1;
    if (kind == GN_OBJECT) set_first(n, '{');
    if (kind == GN_ARRAY) set_first(n, '[');
    if (kind == GN_STRING) set_first(n, '"');
    if (kind == GN_NUMBER || kind == GN_INTEGER) {
        set_first(n, '-');
        for (int b = '0'; b <= '9'; b++) set_first(n, b);
    }
    return g->n_nodes++;
}

/* A literal node over n JSON values (their unformatted text). */
static int32_t lit_node(cctx *c, const cJSON *const *vals, int n, const char *path) {
    if (n < 1 || n > MAX_ALTS) return fail(c, path, "enum: 1 to %d values are supported", MAX_ALTS);
    ls_grammar *g = c->g;
    int32_t id = new_node(c, GN_LIT);
    if (id < 0) return -1;
    if (!grow((void **)&g->lits, &g->cap_lits, g->n_lits + n, sizeof(ls_glit))) return fail(c, path, "out of memory");
    g->nodes[id].first = g->n_lits;
    g->nodes[id].n = n;
    for (int i = 0; i < n; i++) {
        char *s = cJSON_PrintUnformatted(vals[i]);
        if (!s) return fail(c, path, "out of memory");
        g->lits[g->n_lits++] = (ls_glit){s, (uint32_t)strlen(s)};
        set_first(&g->nodes[id], (uint8_t)s[0]);
    }
    return id;
}

static int32_t word_node(cctx *c, const char *a, const char *b) {
    cJSON *va = cJSON_CreateRaw(a), *vb = b ? cJSON_CreateRaw(b) : NULL;
    const cJSON *v[2] = {va, vb};
    int32_t id = va && (vb || !b) ? lit_node(c, v, b ? 2 : 1, "") : fail(c, "", "out of memory");
    cJSON_Delete(va);
    cJSON_Delete(vb);
    return id;
}

/* A union of member nodes whose first bytes are disjoint (one byte picks the member). */
static int32_t union_node(cctx *c, const int32_t *mem, int n, const char *path) {
    ls_grammar *g = c->g;
    uint8_t seen[32] = {0};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 32; k++) {
            if (seen[k] & g->nodes[mem[i]].first_bytes[k])
                return fail(c, path, "anyOf/type list: alternatives must start with distinct characters");
            seen[k] |= g->nodes[mem[i]].first_bytes[k];
        }
    int32_t id = new_node(c, GN_UNION);
    if (id < 0) return -1;
    if (!grow((void **)&g->members, &g->cap_members, g->n_members + n, sizeof(int32_t)))
        return fail(c, path, "out of memory");
    memcpy(g->members + g->n_members, mem, sizeof(int32_t) * (size_t)n);
    g->nodes[id].first = g->n_members;
    g->nodes[id].n = n;
    g->n_members += n;
    memcpy(g->nodes[id].first_bytes, seen, sizeof seen);
    return id;
}

/* The nodes for any JSON value (and any string), made once. */
static int32_t any_node(cctx *c) {
    ls_grammar *g = c->g;
    if (g->any >= 0) return g->any;
    int32_t m[6];
    m[0] = new_node(c, GN_OBJECT);
    m[1] = new_node(c, GN_ARRAY);
    m[2] = g->str = new_node(c, GN_STRING);
    m[3] = new_node(c, GN_NUMBER);
    m[4] = word_node(c, "true", "false");
    m[5] = word_node(c, "null", NULL);
    for (int i = 0; i < 6; i++)
        if (m[i] < 0) return -1;
    g->nodes[m[0]].generic = true;
    int32_t u = union_node(c, m, 6, "");
    if (u < 0) return -1;
    g->nodes[m[1]].child = u;
    return g->any = u;
}

static int32_t compile(cctx *c, const cJSON *s, const char *path, int depth);

static bool is_annotation(const char *k) {
    static const char *const ann[] = {"title",   "description", "$schema",  "$id",       "$comment",
                                      "default", "examples",    "readOnly", "writeOnly", "deprecated"};
    for (size_t i = 0; i < sizeof ann / sizeof ann[0]; i++)
        if (strcmp(k, ann[i]) == 0) return true;
    return false;
}

static bool is_supported(const char *k) {
    static const char *const sup[] = {"type",  "properties", "required",  "additionalProperties",
                                      "items", "minItems",   "maxItems",  "enum",
                                      "const", "minLength",  "maxLength", "anyOf"};
    for (size_t i = 0; i < sizeof sup / sizeof sup[0]; i++)
        if (strcmp(k, sup[i]) == 0) return true;
    return is_annotation(k);
}

/* A non-negative integer keyword into *out (absent: unchanged). */
static int get_count(cctx *c, const cJSON *s, const char *key, const char *path, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 1e9 || v->valuedouble != (int64_t)v->valuedouble)
        return fail(c, path, "'%s' must be a non-negative integer", key);
    *out = (int64_t)v->valuedouble;
    return 0;
}

static void child_path(char *out, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(out, cap, "%s/%s%s%s", path[0] ? path : "#", a, b ? "/" : "", b ? b : "");
}

/* Properties in schema order; required ones must be listed there. */
static int32_t object_node(cctx *c, const cJSON *s, const char *path, int depth) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, path, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return fail(c, path, "'required' must be an array of strings");
    int n = props ? cJSON_GetArraySize(props) : 0;
    if (n > MAX_ALTS) return fail(c, path, "at most %d properties per object are supported", MAX_ALTS);
    const cJSON *e;
    cJSON_ArrayForEach(e, req) {
        if (!cJSON_IsString(e)) return fail(c, path, "'required' must be an array of strings");
        if (!cJSON_GetObjectItemCaseSensitive(props, e->valuestring))
            return fail(c, path, "required property '%s' is not in 'properties'", e->valuestring);
    }
    ls_gprop tmp[MAX_ALTS];
    int k = 0;
    cJSON_ArrayForEach(e, props) {
        char sub[512];
        child_path(sub, sizeof sub, path, "properties", e->string);
        int32_t node = compile(c, e, sub, depth + 1);
        if (node < 0) {
            for (int i = 0; i < k; i++) free(tmp[i].key);
            return -1;
        }
        bool required = false;
        const cJSON *r;
        cJSON_ArrayForEach(r, req) required |= strcmp(r->valuestring, e->string) == 0;
        cJSON *ks = cJSON_CreateString(e->string);
        char *key = ks ? cJSON_PrintUnformatted(ks) : NULL;
        cJSON_Delete(ks);
        if (!key) {
            for (int i = 0; i < k; i++) free(tmp[i].key);
            return fail(c, path, "out of memory");
        }
        tmp[k++] = (ls_gprop){key, (uint32_t)strlen(key), node, required};
    }
    ls_grammar *g = c->g;
    int32_t id = new_node(c, GN_OBJECT);
    if (id >= 0 && !grow((void **)&g->props, &g->cap_props, g->n_props + k, sizeof(ls_gprop)))
        id = fail(c, path, "out of memory");
    if (id < 0) {
        for (int i = 0; i < k; i++) free(tmp[i].key);
        return -1;
    }
    memcpy(g->props + g->n_props, tmp, sizeof(ls_gprop) * (size_t)k);
    g->nodes[id].first = g->n_props;
    g->nodes[id].n = k;
    g->n_props += k;
    /* No properties and extra ones allowed: any object. */
    g->nodes[id].generic = !props && !cJSON_IsFalse(addl);
    if (g->nodes[id].generic && any_node(c) < 0) return -1;
    return id;
}

static int32_t array_node(cctx *c, const cJSON *s, const char *path, int depth) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items))
        return fail(c, path, "unsupported keyword 'items' (tuple form)");
    char sub[512];
    child_path(sub, sizeof sub, path, "items", NULL);
    int32_t child = items ? compile(c, items, sub, depth + 1) : any_node(c);
    if (child < 0) return -1;
    int64_t mn = 0, mx = -1;
    if (get_count(c, s, "minItems", path, &mn) || get_count(c, s, "maxItems", path, &mx)) return -1;
    if (mx >= 0 && mn > mx) return fail(c, path, "minItems > maxItems");
    if (mn > 65535 || mx > 65535) return fail(c, path, "minItems/maxItems above 65535 are not supported");
    int32_t id = new_node(c, GN_ARRAY);
    if (id < 0) return -1;
    c->g->nodes[id].child = child;
    c->g->nodes[id].min = mn;
    c->g->nodes[id].max = mx;
    return id;
}

/* One type name with the keywords that apply to it. */
static int32_t typed_node(cctx *c, const cJSON *s, const char *type, const char *path, int depth) {
    if (strcmp(type, "object") == 0) return object_node(c, s, path, depth);
    if (strcmp(type, "array") == 0) return array_node(c, s, path, depth);
    if (strcmp(type, "boolean") == 0) return word_node(c, "true", "false");
    if (strcmp(type, "null") == 0) return word_node(c, "null", NULL);
    if (strcmp(type, "number") == 0) return new_node(c, GN_NUMBER);
    if (strcmp(type, "integer") == 0) return new_node(c, GN_INTEGER);
    if (strcmp(type, "string") != 0) return fail(c, path, "unknown type '%s'", type);
    int64_t mn = 0, mx = -1;
    if (get_count(c, s, "minLength", path, &mn) || get_count(c, s, "maxLength", path, &mx)) return -1;
    if (mx >= 0 && mn > mx) return fail(c, path, "minLength > maxLength");
    int32_t id = new_node(c, GN_STRING);
    if (id < 0) return -1;
    c->g->nodes[id].min = mn;
    c->g->nodes[id].max = mx;
    return id;
}

/* enum / const / anyOf / a type list: a literal node or a union. */
static int32_t alt_node(cctx *c, const cJSON *s, const char *path, int depth) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cst = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *vals[MAX_ALTS];
    int n = 0;
    if (cst) return lit_node(c, &cst, 1, path);
    if (en) {
        if (!cJSON_IsArray(en)) return fail(c, path, "'enum' must be an array");
        const cJSON *e;
        cJSON_ArrayForEach(e, en) {
            if (n == MAX_ALTS) return fail(c, path, "enum: 1 to %d values are supported", MAX_ALTS);
            vals[n++] = e;
        }
        return lit_node(c, vals, n, path);
    }
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf"),
                *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    int32_t mem[MAX_ALTS];
    const cJSON *e;
    int i = 0;
    if (any) {
        if (!cJSON_IsArray(any) || cJSON_GetArraySize(any) < 1 || cJSON_GetArraySize(any) > MAX_ALTS)
            return fail(c, path, "'anyOf' must be an array of 1 to %d schemas", MAX_ALTS);
        if (type) return fail(c, path, "'anyOf' next to 'type' is not supported");
        cJSON_ArrayForEach(e, any) {
            char sub[512], idx[16];
            snprintf(idx, sizeof idx, "%d", i);
            child_path(sub, sizeof sub, path, "anyOf", idx);
            if ((mem[i++] = compile(c, e, sub, depth + 1)) < 0) return -1;
        }
    } else {
        cJSON_ArrayForEach(e, type) {
            if (!cJSON_IsString(e) || i == MAX_ALTS) return fail(c, path, "'type' must be a string or strings");
            if ((mem[i++] = typed_node(c, s, e->valuestring, path, depth)) < 0) return -1;
        }
        if (i == 0) return fail(c, path, "'type' must be a string or strings");
    }
    return i == 1 ? mem[0] : union_node(c, mem, i, path);
}

static int32_t compile(cctx *c, const cJSON *s, const char *path, int depth) {
    if (depth > MAX_SCHEMA_DEPTH) return fail(c, path, "schema nested deeper than %d levels", MAX_SCHEMA_DEPTH);
    if (cJSON_IsTrue(s)) return any_node(c);
    if (!cJSON_IsObject(s)) return fail(c, path, "a schema must be an object");
    const cJSON *e;
    cJSON_ArrayForEach(e, s) {
        if (!is_supported(e->string)) return fail(c, path, "unsupported keyword '%s'", e->string);
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_GetObjectItemCaseSensitive(s, "enum") || cJSON_GetObjectItemCaseSensitive(s, "const") ||
        cJSON_GetObjectItemCaseSensitive(s, "anyOf") || cJSON_IsArray(type))
        return alt_node(c, s, path, depth);
    if (type && !cJSON_IsString(type)) return fail(c, path, "'type' must be a string or strings");
    if (type) return typed_node(c, s, type->valuestring, path, depth);
    if (cJSON_GetObjectItemCaseSensitive(s, "properties")) return object_node(c, s, path, depth);
    if (cJSON_GetObjectItemCaseSensitive(s, "items")) return array_node(c, s, path, depth);
    return any_node(c);
}

static ls_grammar *grammar_new(void) {
    ls_grammar *g = calloc(1, sizeof *g);
    if (g) g->root = g->any = g->str = -1;
    return g;
}

ls_grammar *ls_grammar_json_schema(const char *schema, size_t len, char *err, size_t errlen) {
    cJSON *s = cJSON_ParseWithLength(schema, len);
    if (!s) {
        snprintf(err, errlen, "the schema is not valid JSON");
        return NULL;
    }
    ls_grammar *g = grammar_new();
    cctx c = {g, err, errlen};
    if (!g) {
        snprintf(err, errlen, "out of memory");
    } else if ((g->root = compile(&c, s, "", 0)) < 0 || (g->str < 0 && any_node(&c) < 0)) {
        ls_grammar_free(g);
        g = NULL;
    }
    cJSON_Delete(s);
    return g;
}

ls_grammar *ls_grammar_json_object(char *err, size_t errlen) {
    ls_grammar *g = grammar_new();
    cctx c = {g, err, errlen};
    if (!g) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    int32_t obj = any_node(&c) < 0 ? -1 : new_node(&c, GN_OBJECT);
    if (obj < 0) {
        ls_grammar_free(g);
        return NULL;
    }
    g->nodes[obj].generic = true;
    g->root = obj;
    return g;
}

void ls_grammar_free(ls_grammar *g) {
    if (!g) return;
    for (int32_t i = 0; i < g->n_props; i++) free(g->props[i].key);
    for (int32_t i = 0; i < g->n_lits; i++) cJSON_free(g->lits[i].s);
    free(g->nodes);
    free(g->props);
    free(g->lits);
    free(g->members);
    free(g);
}
