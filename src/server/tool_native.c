/* Gemma 4's native tool format (docs/tool_calls.md), as its chat template writes it (the
 * template in llama.cpp's Gemma 4 vocab GGUF, tests/data/tokenizer_bpe): declarations
 * "declaration:NAME{description:<|"|>...<|"|>,parameters:{...}}" (the template's
 * format_function_declaration / format_parameters macros, quirks included), calls
 * "call:NAME{key:value,...}" and responses "response:NAME{key:value,...}" (format_argument:
 * strings between <|"|> marks, keys sorted case-insensitively like Jinja's dictsort, Python's
 * spelling of numbers, True/False/None where Jinja prints Python values), and the parser that
 * turns a generated call back into JSON. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tool_internal.h"

#define Q "<|\"|>"

void ls_tl_put(tl_sb *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *nb = realloc(b->buf, nc);
        if (!nb) {
            b->oom = true;
            return;
        }
        b->buf = nb;
        b->cap = nc;
    }
    memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = 0;
}

void ls_tl_puts(tl_sb *b, const char *s) {
    ls_tl_put(b, s, strlen(s));
}

/* Python's str() of a JSON number: integral values as integers (cJSON does not keep "1.0"
 * apart from "1"), others as repr(float) (the shortest %g that round-trips matches it). */
static void put_num(tl_sb *b, double v) {
    char s[64];
    if (!isfinite(v)) {
        ls_tl_puts(b, v != v ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e17) {
        snprintf(s, sizeof s, "%.0f", v);
    } else {
        for (int p = 1; p <= 17; p++) {
            snprintf(s, sizeof s, "%.*g", p, v);
            if (strtod(s, NULL) == v) break;
        }
    }
    ls_tl_puts(b, s);
}

/* Jinja's {{ x }} of a JSON value (Python str()). Containers: their JSON text. */
static void put_py(tl_sb *b, const cJSON *v) {
    if (!v)
        return; /* undefined prints nothing */
    else if (cJSON_IsString(v))
        ls_tl_puts(b, v->valuestring);
    else if (cJSON_IsNumber(v))
        put_num(b, v->valuedouble);
    else if (cJSON_IsBool(v))
        ls_tl_puts(b, cJSON_IsTrue(v) ? "True" : "False");
    else if (cJSON_IsNull(v))
        ls_tl_puts(b, "None");
    else {
        char *t = cJSON_PrintUnformatted(v);
        if (t) ls_tl_puts(b, t);
        cJSON_free(t);
    }
}

/* Jinja truthiness (undefined and null false, empty string/array/object false, 0 false). */
static bool truthy(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return false;
    if (cJSON_IsString(v)) return v->valuestring[0] != 0;
    if (cJSON_IsNumber(v)) return v->valuedouble != 0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return v->child != NULL;
    return true;
}

static cJSON *get(const cJSON *o, const char *k) {
    cJSON *found = NULL, *c;
    if (!cJSON_IsObject(o)) return NULL;
    cJSON_ArrayForEach(c, o) {
        if (c->string && !strcmp(c->string, k)) found = c;
    }
    return found;
}

static int ci_cmp(const char *a, const char *b) {
    for (;; a++, b++) {
        int ca = (*a >= 'A' && *a <= 'Z') ? *a + 32 : (unsigned char)*a;
        int cb = (*b >= 'A' && *b <= 'Z') ? *b + 32 : (unsigned char)*b;
        if (ca != cb || !ca) return ca - cb;
    }
}

/* An object's members in Jinja dictsort order (case-insensitive, stable). Malloc'ed; *n set. */
static cJSON **sorted(const cJSON *o, int *n) {
    *n = 0;
    int cnt = cJSON_IsObject(o) ? cJSON_GetArraySize(o) : 0;
    cJSON **a = malloc(sizeof *a * (size_t)(cnt > 0 ? cnt : 1)), *c;
    if (!a) return NULL;
    if (cnt) cJSON_ArrayForEach(c, o) a[(*n)++] = c;
    for (int i = 1; i < *n; i++)
        for (int k = i; k > 0 && ci_cmp(a[k - 1]->string, a[k]->string) > 0; k--) {
            cJSON *t = a[k];
            a[k] = a[k - 1];
            a[k - 1] = t;
        }
    return a;
}

/* The template's `value | upper`: a string upper-cased, a list as Python prints it. */
static void put_upper(tl_sb *b, const cJSON *v) {
    tl_sb t = {0};
    if (cJSON_IsArray(v)) {
        const cJSON *e;
        ls_tl_puts(&t, "[");
        cJSON_ArrayForEach(e, v) {
            if (e != v->child) ls_tl_puts(&t, ", ");
            ls_tl_puts(&t, "'");
            put_py(&t, e);
            ls_tl_puts(&t, "'");
        }
        ls_tl_puts(&t, "]");
    } else {
        put_py(&t, v);
    }
    for (size_t i = 0; i < t.len; i++)
        if (t.buf[i] >= 'a' && t.buf[i] <= 'z') t.buf[i] = (char)(t.buf[i] - 32);
    if (t.buf) ls_tl_puts(b, t.buf);
    free(t.buf);
}

void ls_tl_format_argument(tl_sb *b, const cJSON *v, bool escape_keys) {
    if (cJSON_IsString(v)) {
        ls_tl_puts(b, Q);
        ls_tl_puts(b, v->valuestring);
        ls_tl_puts(b, Q);
    } else if (cJSON_IsBool(v)) {
        ls_tl_puts(b, cJSON_IsTrue(v) ? "true" : "false");
    } else if (cJSON_IsObject(v)) {
        int n;
        cJSON **kv = sorted(v, &n);
        ls_tl_puts(b, "{");
        for (int i = 0; kv && i < n; i++) {
            if (i) ls_tl_puts(b, ",");
            if (escape_keys) ls_tl_puts(b, Q);
            ls_tl_puts(b, kv[i]->string);
            if (escape_keys) ls_tl_puts(b, Q);
            ls_tl_puts(b, ":");
            ls_tl_format_argument(b, kv[i], escape_keys);
        }
        free(kv);
        ls_tl_puts(b, "}");
    } else if (cJSON_IsArray(v)) {
        const cJSON *e;
        ls_tl_puts(b, "[");
        cJSON_ArrayForEach(e, v) {
            if (e != v->child) ls_tl_puts(b, ",");
            ls_tl_format_argument(b, e, escape_keys);
        }
        ls_tl_puts(b, "]");
    } else {
        put_py(b, v);
    }
}

/* "<|"|>a<|"|>,<|"|>b<|"|>" for a list. */
static void put_qlist(tl_sb *b, const cJSON *l) {
    const cJSON *e;
    if (!cJSON_IsArray(l)) return;
    cJSON_ArrayForEach(e, l) {
        if (e != l->child) ls_tl_puts(b, ",");
        ls_tl_puts(b, Q);
        put_py(b, e);
        ls_tl_puts(b, Q);
    }
}

static void format_parameters(tl_sb *b, const cJSON *props);

static void format_items(tl_sb *b, const cJSON *items) {
    int n;
    cJSON **kv = sorted(items, &n);
    bool first = false;
    ls_tl_puts(b, ",items:{");
    for (int i = 0; kv && i < n; i++) {
        const cJSON *v = kv[i];
        const char *k = v->string;
        if (cJSON_IsNull(v)) continue;
        if (first) ls_tl_puts(b, ",");
        first = true;
        if (!strcmp(k, "properties")) {
            ls_tl_puts(b, "properties:{");
            if (cJSON_IsObject(v)) format_parameters(b, v);
            ls_tl_puts(b, "}");
        } else if (!strcmp(k, "required")) {
            ls_tl_puts(b, "required:[");
            put_qlist(b, v);
            ls_tl_puts(b, "]");
        } else if (!strcmp(k, "type")) {
            ls_tl_puts(b, "type:");
            if (cJSON_IsString(v)) {
                ls_tl_puts(b, Q);
                put_upper(b, v);
                ls_tl_puts(b, Q);
            } else {
                const cJSON *e;
                ls_tl_puts(b, "[");
                cJSON_ArrayForEach(e, v) {
                    if (e != v->child) ls_tl_puts(b, ",");
                    ls_tl_puts(b, Q);
                    put_upper(b, e);
                    ls_tl_puts(b, Q);
                }
                ls_tl_puts(b, "]");
            }
        } else {
            ls_tl_puts(b, k);
            ls_tl_puts(b, ":");
            ls_tl_format_argument(b, v, true);
        }
    }
    free(kv);
    ls_tl_puts(b, "}");
}

static void put_comma(tl_sb *b, bool *add_comma) {
    if (*add_comma)
        ls_tl_puts(b, ",");
    else
        *add_comma = true;
}

/* One property of format_parameters. */
static void format_property(tl_sb *b, const cJSON *value) {
    bool add_comma = false;
    ls_tl_puts(b, value->string);
    ls_tl_puts(b, ":{");
    if (truthy(get(value, "description"))) {
        ls_tl_puts(b, "description:" Q);
        put_py(b, get(value, "description"));
        ls_tl_puts(b, Q);
        add_comma = true;
    }
    if (truthy(get(value, "nullable"))) {
        put_comma(b, &add_comma);
        ls_tl_puts(b, "nullable:true");
    }
    tl_sb ty = {0};
    put_upper(&ty, get(value, "type"));
    const char *t = ty.buf ? ty.buf : "";
    if (!strcmp(t, "STRING")) {
        if (truthy(get(value, "enum"))) {
            put_comma(b, &add_comma);
            ls_tl_puts(b, "enum:");
            ls_tl_format_argument(b, get(value, "enum"), true);
        }
    } else if (!strcmp(t, "OBJECT")) {
        ls_tl_puts(b, ",properties:{");
        const cJSON *p = get(value, "properties");
        format_parameters(b, cJSON_IsObject(p) ? p : value);
        ls_tl_puts(b, "}");
        if (truthy(get(value, "required"))) {
            ls_tl_puts(b, ",required:[");
            put_qlist(b, get(value, "required"));
            ls_tl_puts(b, "]");
        }
    } else if (!strcmp(t, "ARRAY")) {
        const cJSON *it = get(value, "items");
        if (cJSON_IsObject(it) && it->child) format_items(b, it);
    }
    put_comma(b, &add_comma);
    ls_tl_puts(b, "type:" Q);
    ls_tl_puts(b, t);
    ls_tl_puts(b, Q "}");
    free(ty.buf);
}

static void format_parameters(tl_sb *b, const cJSON *props) {
    static const char *const standard[] = {"description", "type", "properties", "required", "nullable"};
    int n;
    cJSON **kv = sorted(props, &n);
    bool first = false;
    for (int i = 0; kv && i < n; i++) {
        bool skip = false;
        for (size_t k = 0; k < sizeof standard / sizeof *standard; k++) skip |= !strcmp(kv[i]->string, standard[k]);
        if (skip) continue;
        if (first) ls_tl_puts(b, ",");
        first = true;
        format_property(b, kv[i]);
    }
    free(kv);
}

void ls_tl_format_declaration(tl_sb *b, const cJSON *f) {
    ls_tl_puts(b, "declaration:");
    put_py(b, get(f, "name"));
    ls_tl_puts(b, "{description:" Q);
    put_py(b, get(f, "description"));
    ls_tl_puts(b, Q);
    const cJSON *p = get(f, "parameters");
    if (truthy(p)) {
        ls_tl_puts(b, ",parameters:{");
        if (truthy(get(p, "properties"))) {
            ls_tl_puts(b, "properties:{");
            format_parameters(b, get(p, "properties"));
            ls_tl_puts(b, "},");
        }
        if (truthy(get(p, "required"))) {
            ls_tl_puts(b, "required:[");
            put_qlist(b, get(p, "required"));
            ls_tl_puts(b, "],");
        }
        if (truthy(get(p, "type"))) {
            ls_tl_puts(b, "type:" Q);
            put_upper(b, get(p, "type"));
            ls_tl_puts(b, Q "}");
        }
    }
    ls_tl_puts(b, "}");
}

/* ---- parsing a generated call back ------------------------------------------------- */

static void skip_ws(const char **p, const char *e) {
    while (*p < e && (**p == ' ' || **p == '\n' || **p == '\t' || **p == '\r')) (*p)++;
}

static bool starts(const char *p, const char *e, const char *s) {
    size_t n = strlen(s);
    return (size_t)(e - p) >= n && !memcmp(p, s, n);
}

/* A <|"|>-quoted string: returns the text (malloc'ed) and moves *p past the closing mark. */
static char *nat_string(const char **p, const char *e) {
    const char *s = *p + 5, *q = s;
    while (q < e && !starts(q, e, Q)) q++;
    if (q >= e) return NULL;
    char *t = malloc((size_t)(q - s) + 1);
    if (!t) return NULL;
    memcpy(t, s, (size_t)(q - s));
    t[q - s] = 0;
    *p = q + 5;
    return t;
}

static cJSON *nat_value(const char **p, const char *e, int depth);

static cJSON *nat_container(const char **p, const char *e, int depth, bool obj) {
    cJSON *c = obj ? cJSON_CreateObject() : cJSON_CreateArray();
    char close = obj ? '}' : ']';
    (*p)++;
    skip_ws(p, e);
    if (*p < e && **p == close) {
        (*p)++;
        return c;
    }
    for (;;) {
        char *key = NULL;
        if (obj) {
            skip_ws(p, e);
            if (starts(*p, e, Q)) {
                key = nat_string(p, e);
            } else {
                const char *k = *p;
                while (*p < e && **p != ':' && **p != '}' && **p != ',') (*p)++;
                const char *ke = *p;
                while (ke > k && (ke[-1] == ' ' || ke[-1] == '\n')) ke--;
                if ((key = malloc((size_t)(ke - k) + 1))) memcpy(key, k, (size_t)(ke - k)), key[ke - k] = 0;
            }
            if (!key || !*key || *p >= e || **p != ':') goto bad;
            (*p)++;
        }
        cJSON *v = nat_value(p, e, depth + 1);
        if (!v) goto bad;
        if (obj)
            cJSON_AddItemToObject(c, key, v);
        else
            cJSON_AddItemToArray(c, v);
        free(key);
        key = NULL;
        skip_ws(p, e);
        if (*p < e && **p == ',') {
            (*p)++;
            continue;
        }
        if (*p < e && **p == close) {
            (*p)++;
            return c;
        }
    bad:
        free(key);
        cJSON_Delete(c);
        return NULL;
    }
}

static cJSON *nat_value(const char **p, const char *e, int depth) {
    skip_ws(p, e);
    if (*p >= e || depth > 64) return NULL;
    if (starts(*p, e, Q)) {
        char *s = nat_string(p, e);
        cJSON *v = s ? cJSON_CreateString(s) : NULL;
        free(s);
        return v;
    }
    if (**p == '{' || **p == '[') return nat_container(p, e, depth, **p == '{');
    const char *s = *p;
    while (*p < e && **p != ',' && **p != '}' && **p != ']') (*p)++;
    const char *z = *p;
    while (z > s && (z[-1] == ' ' || z[-1] == '\n')) z--;
    size_t n = (size_t)(z - s);
    char lit[64];
    if (n == 0) return NULL;
    if (n < sizeof lit) {
        memcpy(lit, s, n);
        lit[n] = 0;
        if (!strcmp(lit, "true") || !strcmp(lit, "True")) return cJSON_CreateTrue();
        if (!strcmp(lit, "false") || !strcmp(lit, "False")) return cJSON_CreateFalse();
        if (!strcmp(lit, "None") || !strcmp(lit, "null")) return cJSON_CreateNull();
        char *end;
        double d = strtod(lit, &end);
        if (*end == 0 && isfinite(d)) return cJSON_CreateNumber(d);
    }
    return NULL; /* a bare word is not a value of the format */
}

int ls_tl_parse_native_call(const char **p, const char *e, char **name, char **args, char *why, size_t whylen) {
    *name = *args = NULL;
    if (!starts(*p, e, "call:")) {
        snprintf(why, whylen, "expected 'call:' after <|tool_call>");
        return -1;
    }
    const char *s = *p + 5, *q = s;
    while (q < e && *q != '{' && *q != '<' && *q != '\n') q++;
    if (q >= e || *q != '{' || q == s) {
        snprintf(why, whylen, "malformed call: expected call:NAME{...}");
        return -1;
    }
    *name = malloc((size_t)(q - s) + 1);
    if (!*name) return -1;
    memcpy(*name, s, (size_t)(q - s));
    (*name)[q - s] = 0;
    *p = q;
    cJSON *v = nat_container(p, e, 0, true);
    if (!v) {
        snprintf(why, whylen, "malformed arguments of the call of '%.64s'", *name);
        return -1;
    }
    *args = cJSON_PrintUnformatted(v);
    cJSON_Delete(v);
    if (starts(*p, e, "<tool_call|>")) *p += 12;
    return *args ? 0 : -1;
}
