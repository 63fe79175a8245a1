/* Request parsing and validation for `lockstep serve` (see request.h). JSON is parsed with
 * cJSON; this file only checks types, ranges and UTF-8 and copies what it keeps. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "request.h"
#include "tools.h"

int ls_req_fail(ls_req_error *err, int status, const char *param, const char *code, const char *fmt, ...) {
    err->status = status;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    snprintf(err->code, sizeof err->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}

bool ls_req_utf8_valid(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int n;
        unsigned cp, min;
        if ((c & 0xE0) == 0xC0)
            n = 1, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0)
            n = 2, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0)
            n = 3, cp = c & 0x07, min = 0x10000;
        else
            return false;
        if (i + (size_t)n >= len) return false; /* truncated */
        for (int k = 1; k <= n; k++) {
            unsigned cc = s[i + (size_t)k];
            if ((cc & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += (size_t)n + 1;
    }
    return true;
}

/* ---- typed field readers: 0 ok (or absent / null: *present false), -1 error ---------- */

/* The LAST member named `name` (case-sensitive), or NULL: with duplicate keys the last one
 * wins, like Python, JavaScript and llama-server (cJSON's own lookup returns the first). Every
 * lookup in this file goes through it. */
static cJSON *member(const cJSON *obj, const char *name) {
    cJSON *found = NULL, *c;
    if (!cJSON_IsObject(obj)) return NULL;
    cJSON_ArrayForEach(c, obj) {
        if (c->string && strcmp(c->string, name) == 0) found = c;
    }
    return found;
}

static cJSON *field(const cJSON *obj, const char *name) {
    cJSON *f = member(obj, name);
    return (f && !cJSON_IsNull(f)) ? f : NULL;
}

static int get_bool(const cJSON *obj, const char *name, bool *out, ls_req_error *err) {
    cJSON *f = field(obj, name);
    if (!f) return 0;
    if (!cJSON_IsBool(f)) return ls_req_fail(err, 400, name, "invalid_type", "'%s' must be a boolean", name);
    *out = cJSON_IsTrue(f);
    return 0;
}

static int get_num(const cJSON *obj, const char *name, double lo, double hi, bool *present, float *out,
                   ls_req_error *err) {
    cJSON *f = field(obj, name);
    if (!f) return 0;
    if (!cJSON_IsNumber(f)) return ls_req_fail(err, 400, name, "invalid_type", "'%s' must be a number", name);
    double v = f->valuedouble;
    if (!isfinite(v) || v < lo || v > hi)
        return ls_req_fail(err, 400, name, "invalid_value", "'%s' must be in [%g, %g], got %g", name, lo, hi, v);
    *out = (float)v;
    if (present) *present = true;
    return 0;
}

static int get_int(const cJSON *obj, const char *name, double lo, double hi, bool *present, double *out,
                   ls_req_error *err) {
    cJSON *f = field(obj, name);
    if (!f) return 0;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble) || floor(f->valuedouble) != f->valuedouble)
        return ls_req_fail(err, 400, name, "invalid_type", "'%s' must be an integer", name);
    double v = f->valuedouble;
    if (v < lo || v > hi)
        return ls_req_fail(err, 400, name, "invalid_value", "'%s' must be in [%.0f, %.0f], got %.0f", name, lo, hi, v);
    *out = v;
    if (present) *present = true;
    return 0;
}

/* A string value, checked for UTF-8; copied into *out (malloc'ed). */
static int dup_string(const cJSON *f, const char *param, char **out, ls_req_error *err) {
    const char *s = f->valuestring;
    size_t n = strlen(s);
    if (!ls_req_utf8_valid(s, n)) return ls_req_fail(err, 400, param, "invalid_utf8", "'%s' is not valid UTF-8", param);
    *out = malloc(n + 1);
    if (!*out) return ls_req_fail(err, 500, param, NULL, "out of memory");
    memcpy(*out, s, n + 1);
    return 0;
}

/* ---- raw-body checks (the body is valid JSON when check_nul runs) --------------------- */

/* After a failed parse: did the body open more than CJSON_NESTING_LIMIT arrays/objects
 * before the failure offset? (cJSON then fails at the first bracket past the limit.) Brackets
 * inside strings do not count; the text before `off` is valid JSON so far. */
static bool nested_too_deep(const char *json, size_t len, size_t off) {
    long depth = 0;
    bool in_str = false;
    size_t stop = off < len ? off + 1 : len;
    for (size_t i = 0; i < stop; i++) {
        char ch = json[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = false;
        } else if (ch == '"') {
            in_str = true;
        } else if (ch == '[' || ch == '{') {
            if (++depth > CJSON_NESTING_LIMIT) return true;
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    return false;
}

/* Does the string token starting after the quote at json[i] hold a NUL (escaped \u0000 or a
 * raw byte)? Sets *close to the index of the closing quote. */
static bool string_has_nul(const char *json, size_t len, size_t i, size_t *close) {
    bool nul = false;
    size_t j = i + 1;
    while (j < len && json[j] != '"') {
        if (json[j] == '\0') nul = true;
        if (json[j] == '\\') {
            if (j + 5 < len && json[j + 1] == 'u' && memcmp(json + j + 2, "0000", 4) == 0) nul = true;
            j++; /* skip the escaped character (a \uXXXX's hex digits are plain characters) */
        }
        j++;
    }
    *close = j;
    return nul;
}

/* cJSON stores C strings, so a NUL inside a string (escaped \u0000, or a raw byte) would
 * silently truncate it: refuse the body, naming the field (a path like
 * "messages[1].content[0].text"). Runs on the raw text of a body cJSON accepted. */
enum { NUL_PATH_DEPTH = 16 };
static int check_nul(const char *json, size_t len, ls_req_error *err) {
    bool any = false; /* fast path: no candidate at all */
    for (size_t i = 0; i < len && !any; i++)
        any = json[i] == '\0' ||
              (json[i] == '\\' && i + 5 < len && json[i + 1] == 'u' && memcmp(json + i + 2, "0000", 4) == 0);
    if (!any) return 0;
    struct {
        bool obj;
        int index;
        size_t key, key_len; /* the current key's raw text (object) */
    } st[NUL_PATH_DEPTH];
    int depth = 0; /* containers open; only the first NUL_PATH_DEPTH are named */
    bool want_key = false;
    for (size_t i = 0; i < len; i++) {
        char ch = json[i];
        if (ch == '{' || ch == '[') {
            if (depth < NUL_PATH_DEPTH) {
                st[depth].obj = ch == '{';
                st[depth].index = 0;
                st[depth].key = st[depth].key_len = 0;
            }
            depth++;
            want_key = ch == '{';
        } else if (ch == '}' || ch == ']') {
            depth--;
            want_key = false;
        } else if (ch == ',') {
            if (depth > 0 && depth <= NUL_PATH_DEPTH) {
                if (st[depth - 1].obj)
                    want_key = true;
                else
                    st[depth - 1].index++;
            }
        } else if (ch == ':') {
            want_key = false;
        } else if (ch == '"') {
            size_t close;
            bool nul = string_has_nul(json, len, i, &close);
            bool is_key = want_key && depth > 0 && depth <= NUL_PATH_DEPTH && st[depth - 1].obj;
            if (is_key) {
                st[depth - 1].key = i + 1;
                st[depth - 1].key_len = close - (i + 1);
            }
            if (nul) {
                char path[sizeof err->param];
                size_t n = 0;
                int named = depth < NUL_PATH_DEPTH ? depth : NUL_PATH_DEPTH;
                for (int k = 0; k < named && n < sizeof path - 1; k++) {
                    int w;
                    if (st[k].obj)
                        w = snprintf(path + n, sizeof path - n, "%s%.*s", k ? "." : "", (int)st[k].key_len,
                                     json + st[k].key);
                    else
                        w = snprintf(path + n, sizeof path - n, "[%d]", st[k].index);
                    if (w < 0) break;
                    n += (size_t)w;
                    if (n >= sizeof path) n = sizeof path - 1;
                }
                path[n] = 0;
                /* A key's raw text may hold the NUL itself (or bytes that are not UTF-8):
                 * keep the path printable. */
                for (size_t k = 0; k < n; k++)
                    if ((unsigned char)path[k] < 0x20 || (unsigned char)path[k] >= 0x7f) path[k] = '?';
                return ls_req_fail(err, 400, path, "invalid_value", "'%s': strings must not contain U+0000", path);
            }
            i = close;
        }
    }
    return 0;
}

static int parse_root(const char *json, size_t len, cJSON **root, ls_req_error *err) {
    *root = NULL;
    if (len == 0) return ls_req_fail(err, 400, NULL, "invalid_json", "empty request body; expected a JSON object");
    const char *end = NULL;
    cJSON *r = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!r) {
        size_t off = end && end >= json ? (size_t)(end - json) : 0;
        if (nested_too_deep(json, len, off))
            return ls_req_fail(err, 400, NULL, "invalid_json", "JSON nested deeper than %d levels",
                               CJSON_NESTING_LIMIT);
        return ls_req_fail(err, 400, NULL, "invalid_json", "malformed JSON near byte %zu", off);
    }
    /* Only whitespace may follow the value. */
    for (const char *p = end; p && p < json + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(r);
            return ls_req_fail(err, 400, NULL, "invalid_json", "unexpected data after the JSON value at byte %zu",
                               (size_t)(p - json));
        }
    }
    if (!cJSON_IsObject(r)) {
        cJSON_Delete(r);
        return ls_req_fail(err, 400, NULL, "invalid_json", "the request body must be a JSON object");
    }
    if (check_nul(json, (size_t)(end - json), err) != 0) {
        cJSON_Delete(r);
        return -1;
    }
    *root = r;
    return 0;
}

/* Message content: a string, or an array of {"type": "text", "text": string} parts (joined).
 * Absent or null (only allowed on assistant messages; the caller checks): "". */
static int parse_content(const cJSON *c, const char *param, char **out, ls_req_error *err) {
    if (!c || cJSON_IsNull(c)) {
        *out = strdup("");
        return *out ? 0 : ls_req_fail(err, 500, param, NULL, "out of memory");
    }
    if (cJSON_IsString(c)) return dup_string(c, param, out, err);
    if (!cJSON_IsArray(c))
        return ls_req_fail(err, 400, param, "invalid_type", "'%s' must be a string or an array of text parts", param);
    size_t total = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = member(part, "type");
        const cJSON *text = member(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 ||
            !cJSON_IsString(text))
            return ls_req_fail(err, 400, param, "invalid_value",
                               "'%s': only {\"type\": \"text\", \"text\": ...} parts "
                               "are supported",
                               param);
        total += strlen(text->valuestring);
    }
    char *buf = malloc(total + 1);
    if (!buf) return ls_req_fail(err, 500, param, NULL, "out of memory");
    size_t n = 0;
    cJSON_ArrayForEach(part, c) {
        const char *t = member(part, "text")->valuestring;
        size_t k = strlen(t);
        memcpy(buf + n, t, k);
        n += k;
    }
    buf[n] = 0;
    if (!ls_req_utf8_valid(buf, n)) {
        free(buf);
        return ls_req_fail(err, 400, param, "invalid_utf8", "'%s' is not valid UTF-8", param);
    }
    *out = buf;
    return 0;
}

static int parse_messages(const cJSON *root, ls_request *r, ls_req_error *err) {
    const cJSON *msgs = field(root, "messages");
    if (!msgs) return ls_req_fail(err, 400, "messages", "missing_required_parameter", "'messages' is required");
    if (!cJSON_IsArray(msgs)) return ls_req_fail(err, 400, "messages", "invalid_type", "'messages' must be an array");
    int n = cJSON_GetArraySize(msgs);
    if (n == 0) return ls_req_fail(err, 400, "messages", "invalid_value", "'messages' must not be empty");
    if (n > LSR_MAX_MESSAGES)
        return ls_req_fail(err, 400, "messages", "invalid_value", "too many messages (%d > %d)", n, LSR_MAX_MESSAGES);
    r->messages = calloc((size_t)n, sizeof *r->messages);
    if (!r->messages) return ls_req_fail(err, 500, "messages", NULL, "out of memory");
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, msgs) {
        char param[64];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return ls_req_fail(err, 400, param, "invalid_type", "'%s' must be an object", param);
        const cJSON *role = member(m, "role");
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!cJSON_IsString(role)) return ls_req_fail(err, 400, param, "invalid_type", "'%s' must be a string", param);
        const char *rs = role->valuestring;
        const char *canon = !strcmp(rs, "system") || !strcmp(rs, "developer") ? "system"
                            : !strcmp(rs, "user")                             ? "user"
                            : !strcmp(rs, "assistant")                        ? "assistant"
                            : !strcmp(rs, "tool")                             ? "tool"
                                                                              : NULL;
        if (!canon)
            return ls_req_fail(err, 400, param, "invalid_value",
                               "'%s' must be one of system, developer, user, assistant, tool", param);
        r->messages[i].role = canon; /* static string */
        snprintf(param, sizeof param, "messages[%d].content", i);
        char *content = NULL;
        const cJSON *c = member(m, "content");
        bool assistant = strcmp(rs, "assistant") == 0;
        if (!c && !assistant)
            return ls_req_fail(err, 400, param, "missing_required_parameter", "'%s' is required", param);
        /* Like OpenAI: null content is for assistant messages only (as "" here). */
        if (cJSON_IsNull(c) && !assistant)
            return ls_req_fail(err, 400, param, "invalid_type",
                               "'%s' must be a string or an array of text parts (null is only allowed on assistant "
                               "messages)",
                               param);
        if (parse_content(c, param, &content, err) != 0) return -1;
        r->messages[i].content = content;
        r->n_messages = ++i;
    }
    return 0;
}

static int parse_prompt(const cJSON *root, ls_request *r, ls_req_error *err) {
    const cJSON *p = field(root, "prompt");
    if (!p) return ls_req_fail(err, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0)))
        p = cJSON_GetArrayItem(p, 0);
    if (!cJSON_IsString(p))
        return ls_req_fail(err, 400, "prompt", "invalid_type", "'prompt' must be a string (or an array of one string)");
    if (!p->valuestring[0]) return ls_req_fail(err, 400, "prompt", "invalid_value", "'prompt' must not be empty");
    return dup_string(p, "prompt", &r->prompt, err);
}

static int parse_stop(const cJSON *root, ls_request *r, ls_req_error *err) {
    const cJSON *s = field(root, "stop");
    if (!s) return 0;
    if (cJSON_IsString(s)) {
        if (!s->valuestring[0]) return 0;
        if (strlen(s->valuestring) > LSR_MAX_STOP_LEN)
            return ls_req_fail(err, 400, "stop", "invalid_value", "'stop' sequences are limited to %d bytes",
                               LSR_MAX_STOP_LEN);
        if (dup_string(s, "stop", &r->stop[0], err) != 0) return -1;
        r->n_stop = 1;
        return 0;
    }
    if (!cJSON_IsArray(s))
        return ls_req_fail(err, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(s) > LSR_MAX_STOP)
        return ls_req_fail(err, 400, "stop", "invalid_value", "'stop' takes at most %d sequences", LSR_MAX_STOP);
    const cJSON *e;
    cJSON_ArrayForEach(e, s) {
        if (!cJSON_IsString(e))
            return ls_req_fail(err, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings");
        if (!e->valuestring[0]) continue;
        if (strlen(e->valuestring) > LSR_MAX_STOP_LEN)
            return ls_req_fail(err, 400, "stop", "invalid_value", "'stop' sequences are limited to %d bytes",
                               LSR_MAX_STOP_LEN);
        if (dup_string(e, "stop", &r->stop[r->n_stop], err) != 0) return -1;
        r->n_stop++;
    }
    return 0;
}

/* Chat: `logprobs` a boolean, `top_logprobs` an integer 0..20 that needs `logprobs: true`
 * (like OpenAI). Completions: `logprobs` an integer 0..20 (OpenAI allows 0..5), the number of
 * alternatives per token. null = absent. */
static int parse_logprobs(const cJSON *root, ls_request *r, ls_req_error *err) {
    double d;
    bool present = false;
    if (r->kind == LSR_COMPLETION) {
        if (get_int(root, "logprobs", 0, LSR_MAX_TOP_LOGPROBS, &present, &d, err)) return -1;
        if (present) {
            r->logprobs = true;
            r->top_logprobs = (int32_t)d;
        }
        return 0;
    }
    if (get_bool(root, "logprobs", &r->logprobs, err)) return -1;
    if (get_int(root, "top_logprobs", 0, LSR_MAX_TOP_LOGPROBS, &present, &d, err)) return -1;
    if (present && !r->logprobs)
        return ls_req_fail(err, 400, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs' to be true");
    if (present) r->top_logprobs = (int32_t)d;
    return 0;
}

/* Compile one schema for `param` (docs/structured_output.md section 6). */
static int compile_schema(const cJSON *schema, const char *param, ls_request *r, ls_req_error *err) {
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return ls_req_fail(err, 400, param, "invalid_type", "'%s' must be a JSON schema object", param);
    char *text = cJSON_PrintUnformatted(schema);
    if (!text) return ls_req_fail(err, 500, param, NULL, "out of memory");
    char msg[200];
    r->grammar = ls_grammar_json_schema(text, strlen(text), msg, sizeof msg);
    cJSON_free(text);
    if (!r->grammar) return ls_req_fail(err, 400, param, "unsupported_schema", "%s: %s", param, msg);
    return 0;
}

/* response_format (OpenAI: text, json_object, json_schema with json_schema.schema; also
 * llama-server's schema next to the type), llama-server's top-level json_schema, and grammar
 * (GBNF: not supported, a 400). At most one of them. */
static int parse_response_format(const cJSON *root, ls_request *r, ls_req_error *err) {
    const cJSON *rf = field(root, "response_format"), *js = field(root, "json_schema"), *gr = field(root, "grammar");
    if (gr && !(cJSON_IsString(gr) && gr->valuestring[0] == 0))
        return ls_req_fail(err, 400, "grammar", "unsupported_grammar",
                           "grammar: GBNF is not supported, use json_schema or response_format");
    if (rf && js)
        return ls_req_fail(err, 400, "json_schema", "invalid_value", "give response_format or json_schema, not both");
    if (js) return compile_schema(js, "json_schema", r, err);
    if (!rf) return 0;
    const cJSON *type = cJSON_IsObject(rf) ? field(rf, "type") : NULL;
    if (!cJSON_IsString(type))
        return ls_req_fail(err, 400, "response_format", "invalid_type",
                           "'response_format' must be an object with a string 'type'");
    const char *t = type->valuestring;
    const cJSON *schema = field(rf, "schema");
    if (strcmp(t, "text") == 0) return 0;
    if (strcmp(t, "json_object") == 0) {
        if (schema) return compile_schema(schema, "response_format.schema", r, err);
        char msg[200];
        r->grammar = ls_grammar_json_object(msg, sizeof msg);
        return r->grammar ? 0 : ls_req_fail(err, 500, "response_format", NULL, "%s", msg);
    }
    if (strcmp(t, "json_schema") != 0)
        return ls_req_fail(err, 400, "response_format", "invalid_value",
                           "response_format.type must be 'text', 'json_object' or 'json_schema'");
    const cJSON *o = field(rf, "json_schema");
    if (o && !cJSON_IsObject(o))
        return ls_req_fail(err, 400, "response_format", "invalid_type",
                           "'response_format.json_schema' must be an object");
    if (o && field(o, "schema"))
        return compile_schema(field(o, "schema"), "response_format.json_schema.schema", r, err);
    if (schema) return compile_schema(schema, "response_format.schema", r, err);
    return ls_req_fail(err, 400, "response_format", "invalid_value", "response_format.json_schema.schema is required");
}

int ls_req_parse(ls_req_kind kind, const char *json, size_t len, ls_request *out, ls_req_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->kind = kind;
    out->max_tokens = -1;
    out->repeat_penalty = 1.0f;
    cJSON *root;
    if (parse_root(json, len, &root, err) != 0) return -1;
    int rc = -1;
    double d;
    bool present = false;
    if (kind == LSR_CHAT ? parse_messages(root, out, err) : parse_prompt(root, out, err)) goto done;
    if (kind == LSR_CHAT && ls_tools_parse(root, out, err)) goto done;
    const cJSON *model = field(root, "model");
    if (model && !cJSON_IsString(model)) {
        ls_req_fail(err, 400, "model", "invalid_type", "'model' must be a string");
        goto done;
    }
    if (model && dup_string(model, "model", &out->model, err)) goto done;
    /* max_completion_tokens (newer OpenAI name) wins over max_tokens. */
    present = false;
    if (get_int(root, "max_tokens", 1, LSR_MAX_TOKENS, &present, &d, err)) goto done;
    if (present) out->max_tokens = (int32_t)d;
    present = false;
    if (get_int(root, "max_completion_tokens", 1, LSR_MAX_TOKENS, &present, &d, err)) goto done;
    if (present) out->max_tokens = (int32_t)d;
    if (get_num(root, "temperature", 0, 2, &out->temperature_set, &out->temperature, err)) goto done;
    if (get_num(root, "top_p", 0, 1, &out->top_p_set, &out->top_p, err)) goto done;
    if (get_num(root, "min_p", 0, 1, &out->min_p_set, &out->min_p, err)) goto done;
    if (get_num(root, "presence_penalty", -2, 2, NULL, &out->presence_penalty, err)) goto done;
    if (get_num(root, "frequency_penalty", -2, 2, NULL, &out->frequency_penalty, err)) goto done;
    if (get_num(root, "repeat_penalty", 0, 10, &out->repeat_penalty_set, &out->repeat_penalty, err)) goto done;
    present = false;
    if (get_int(root, "top_k", 0, 1 << 24, &out->top_k_set, &d, err)) goto done;
    if (out->top_k_set) out->top_k = (int32_t)d;
    /* seed: any integer representable as a double, negative ones wrap like int64 -> uint64. */
    if (get_int(root, "seed", -9007199254740992.0, 18446744073709549568.0, &out->seed_set, &d, err)) goto done;
    if (out->seed_set) out->seed = d < 0 ? (uint64_t)(int64_t)d : (uint64_t)d;
    present = false;
    if (get_int(root, "n", 1, 1, &present, &d, err)) {
        snprintf(err->message, sizeof err->message, "only n = 1 is supported");
        goto done;
    }
    if (parse_stop(root, out, err)) goto done;
    if (parse_response_format(root, out, err)) goto done;
    if (get_bool(root, "stream", &out->stream, err)) goto done;
    /* llama-server's extension: generate up to max_tokens even past EOS (benchmarks). */
    if (get_bool(root, "ignore_eos", &out->ignore_eos, err)) goto done;
    if (parse_logprobs(root, out, err)) goto done;
    const cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) {
            ls_req_fail(err, 400, "stream_options", "invalid_type", "'stream_options' must be an object");
            goto done;
        }
        if (get_bool(so, "include_usage", &out->include_usage, err)) {
            snprintf(err->param, sizeof err->param, "stream_options.include_usage");
            goto done;
        }
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc != 0) ls_request_free(out);
    return rc;
}

void ls_request_free(ls_request *r) {
    if (!r) return;
    for (int i = 0; i < r->n_messages; i++) free((char *)r->messages[i].content);
    free(r->messages);
    free(r->prompt);
    free(r->model);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    ls_grammar_free(r->grammar);
    ls_tools_free(r->tools);
    ls_req_kind k = r->kind;
    memset(r, 0, sizeof *r);
    r->kind = k;
}

int ls_req_parse_tokenize(const char *json, size_t len, ls_req_tokenize *out, ls_req_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->parse_special = true;
    cJSON *root;
    if (parse_root(json, len, &root, err) != 0) return -1;
    int rc = -1;
    const cJSON *c = field(root, "content");
    if (!c) {
        ls_req_fail(err, 400, "content", "missing_required_parameter", "'content' is required");
        goto done;
    }
    if (!cJSON_IsString(c)) {
        ls_req_fail(err, 400, "content", "invalid_type", "'content' must be a string");
        goto done;
    }
    if (dup_string(c, "content", &out->content, err)) goto done;
    if (get_bool(root, "add_special", &out->add_special, err)) goto done;
    if (get_bool(root, "parse_special", &out->parse_special, err)) goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc != 0) ls_req_tokenize_free(out);
    return rc;
}

void ls_req_tokenize_free(ls_req_tokenize *t) {
    if (!t) return;
    free(t->content);
    memset(t, 0, sizeof *t);
}

int ls_req_parse_detokenize(const char *json, size_t len, ls_req_detokenize *out, ls_req_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    cJSON *root;
    if (parse_root(json, len, &root, err) != 0) return -1;
    int rc = -1;
    const cJSON *t = field(root, "tokens");
    if (!t) {
        ls_req_fail(err, 400, "tokens", "missing_required_parameter", "'tokens' is required");
        goto done;
    }
    if (!cJSON_IsArray(t)) {
        ls_req_fail(err, 400, "tokens", "invalid_type", "'tokens' must be an array of integers");
        goto done;
    }
    int n = cJSON_GetArraySize(t);
    out->tokens = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!out->tokens) {
        ls_req_fail(err, 500, "tokens", NULL, "out of memory");
        goto done;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, t) {
        if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || floor(e->valuedouble) != e->valuedouble ||
            e->valuedouble < 0 || e->valuedouble > 2147483647.0) {
            ls_req_fail(err, 400, "tokens", "invalid_value", "'tokens' must be non-negative integer token ids");
            goto done;
        }
        out->tokens[out->n_tokens++] = (int32_t)e->valuedouble;
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc != 0) ls_req_detokenize_free(out);
    return rc;
}

void ls_req_detokenize_free(ls_req_detokenize *d) {
    if (!d) return;
    free(d->tokens);
    memset(d, 0, sizeof *d);
}
