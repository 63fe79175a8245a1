/* Tool calls: the model's output parsed back (tools.h; what is accepted is listed in
 * docs/tool_calls.md). The prefill that forced a call is put back in front of the generated
 * text first. A call must start the output (after whitespace):
 *   Gemma 3: a ```tool_code (or ```json) block holding one or more JSON call objects (or an
 *            array of them), several blocks in a row allowed (a ```json block whose JSON has
 *            no call's keys is content); or a bare JSON call object /
 *            array of them. A call object is {"name": N, "arguments": {...}} ("parameters"
 *            for "arguments"; "arguments" may be a string holding a JSON object, absent means
 *            {}), or {"tool_call": {...}} / {"function": {...}} around one.
 *   Gemma 4: one or more <|tool_call>call:NAME{...}<tool_call|>.
 * What follows the calls is ignored. A JSON object without "name"/"tool_call"/"function" and
 * anything else is content (1 calls, 0 content, -1 malformed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tool_internal.h"

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

static void ws(const char **p, const char *e) {
    while (*p < e && (**p == ' ' || **p == '\n' || **p == '\t' || **p == '\r')) (*p)++;
}

static bool at(const char *p, const char *e, const char *s) {
    size_t n = strlen(s);
    return (size_t)(e - p) >= n && !memcmp(p, s, n);
}

/* The end of the JSON object/array starting at p (string-aware bracket matching), or NULL. */
static const char *json_end(const char *p, const char *e) {
    int depth = 0;
    bool str = false;
    for (; p < e; p++) {
        if (str) {
            if (*p == '\\')
                p++;
            else if (*p == '"')
                str = false;
        } else if (*p == '"') {
            str = true;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            if (--depth == 0) return p + 1;
        }
    }
    return NULL;
}

static int add_call(const ls_request *r, ls_tool_output *o, char *name, char *args, const char *prefix) {
    const ls_tool_req *t = r->tools;
    int known = -1;
    for (int i = 0; i < t->n_tools; i++)
        if (!strcmp(t->tools[i].name, name)) known = i;
    bool other = (t->choice == LS_TC_NAMED && known != t->named) ||
                 (t->choice == LS_TC_REQUIRED && t->n_tools == 1 && known != 0);
    if (known < 0 || other) {
        snprintf(o->error, sizeof o->error, "the model called %s function '%.64s'",
                 known < 0 ? "an unknown" : "another", name);
        free(name), free(args);
        return -1;
    }
    if (o->n_calls >= LS_TOOLS_MAX_CALLS) {
        free(name), free(args);
        return 0;
    }
    ls_tool_call *n = realloc(o->calls, sizeof *n * (size_t)(o->n_calls + 1));
    char id[96];
    snprintf(id, sizeof id, "%s_%d", prefix, o->n_calls);
    if (!n) {
        free(name), free(args);
        snprintf(o->error, sizeof o->error, "out of memory");
        return -1;
    }
    o->calls = n;
    n[o->n_calls++] = (ls_tool_call){dupn(id, strlen(id)), name, args};
    return 0;
}

/* One JSON call object (Gemma 3). */
static int json_call(const ls_request *r, const cJSON *c, ls_tool_output *o, const char *prefix) {
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(c, "tool_call");
    if (!inner) inner = cJSON_GetObjectItemCaseSensitive(c, "function");
    if (cJSON_IsObject(inner)) c = inner;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "arguments");
    if (!a) a = cJSON_GetObjectItemCaseSensitive(c, "parameters");
    if (!cJSON_IsObject(c) || !cJSON_IsString(name)) {
        snprintf(o->error, sizeof o->error, "a call must be a JSON object with a string \"name\"");
        return -1;
    }
    char *args = NULL;
    if (!a || cJSON_IsNull(a)) {
        args = dupn("{}", 2);
    } else if (cJSON_IsObject(a)) {
        args = cJSON_PrintUnformatted(a);
    } else if (cJSON_IsString(a)) {
        cJSON *v = cJSON_Parse(a->valuestring);
        if (cJSON_IsObject(v)) args = dupn(a->valuestring, strlen(a->valuestring));
        cJSON_Delete(v);
    }
    if (!args) {
        snprintf(o->error, sizeof o->error, "the arguments of the call of '%.64s' are not a JSON object",
                 name->valuestring);
        return -1;
    }
    return add_call(r, o, dupn(name->valuestring, strlen(name->valuestring)), args, prefix);
}

/* A JSON value at *p holding calls. `fenced`: inside a ```tool_code block (anything there is a
 * call attempt); else an object without a call's keys makes the text content (0). */
static int json_calls(const ls_request *r, const char **p, const char *e, bool fenced, ls_tool_output *o,
                      const char *prefix) {
    const char *z = json_end(*p, e);
    if (!z) {
        snprintf(o->error, sizeof o->error, "the call's JSON is not complete");
        return -1;
    }
    cJSON *v = cJSON_ParseWithLength(*p, (size_t)(z - *p));
    int rc = 1;
    if (!v) {
        snprintf(o->error, sizeof o->error, "the call is not valid JSON");
        rc = -1;
    } else if (cJSON_IsObject(v)) {
        bool callish = cJSON_GetObjectItemCaseSensitive(v, "name") ||
                       cJSON_GetObjectItemCaseSensitive(v, "tool_call") ||
                       cJSON_GetObjectItemCaseSensitive(v, "function");
        if (!callish && !fenced)
            rc = 0;
        else if (json_call(r, v, o, prefix))
            rc = -1;
    } else {
        const cJSON *c;
        bool all = cJSON_GetArraySize(v) > 0;
        cJSON_ArrayForEach(c, v) all &= cJSON_IsObject(c) && cJSON_GetObjectItemCaseSensitive(c, "name");
        if (!all && !fenced)
            rc = 0;
        else
            cJSON_ArrayForEach(c, v) if (rc == 1 && json_call(r, c, o, prefix)) rc = -1;
    }
    cJSON_Delete(v);
    *p = z;
    return rc;
}

static int parse_g3(const ls_request *r, const char *p, const char *e, ls_tool_output *o, const char *prefix) {
    ws(&p, e);
    if (!at(p, e, "```")) {
        if (p < e && (*p == '{' || *p == '[')) return json_calls(r, &p, e, false, o, prefix);
        return 0;
    }
    int blocks = 0;
    while (at(p, e, "```tool_code") || at(p, e, "```json")) {
        bool code = at(p, e, "```tool_code"); /* a ```json block holds a call only if it looks like one */
        p += code ? 12 : 7;
        ws(&p, e);
        int calls = 0;
        while (p < e && (*p == '{' || *p == '[')) {
            int rc = json_calls(r, &p, e, code, o, prefix);
            if (rc < 0) return -1;
            if (rc == 0) return blocks ? 1 : 0; /* data, not a call: content (or what came before) */
            calls++;
            ws(&p, e);
        }
        if (!calls) {
            snprintf(o->error, sizeof o->error, "a ```tool_code block without a JSON call");
            return -1;
        }
        blocks++;
        if (at(p, e, "```")) p += 3;
        ws(&p, e);
    }
    return blocks ? 1 : 0;
}

static int parse_g4(const ls_request *r, const char *p, const char *e, ls_tool_output *o, const char *prefix) {
    ws(&p, e);
    if (!at(p, e, "<|tool_call>")) return 0;
    while (at(p, e, "<|tool_call>")) {
        p += 12;
        char *name, *args;
        if (ls_tl_parse_native_call(&p, e, &name, &args, o->error, sizeof o->error)) {
            free(name), free(args);
            return -1;
        }
        if (add_call(r, o, name, args, prefix)) return -1;
        ws(&p, e);
    }
    return 1;
}

int ls_tools_parse_output(int style, const ls_request *r, const char *text, const char *id_prefix,
                          ls_tool_output *out) {
    memset(out, 0, sizeof *out);
    if (!ls_tools_active(r)) return 0;
    char *owned;
    const char *pre = ls_tools_prefill(style, r, &owned);
    tl_sb b = {0};
    ls_tl_puts(&b, pre);
    ls_tl_puts(&b, text ? text : "");
    free(owned);
    if (b.oom) {
        free(b.buf);
        snprintf(out->error, sizeof out->error, "out of memory");
        return -1;
    }
    const char *s = b.buf ? b.buf : "", *e = s + b.len;
    int rc = style == 4 ? parse_g4(r, s, e, out, id_prefix) : parse_g3(r, s, e, out, id_prefix);
    free(b.buf);
    if (rc == 0 && ls_tools_forced(r)) {
        snprintf(out->error, sizeof out->error, "tool_choice asks for a call and the model wrote none");
        rc = -1;
    }
    if (rc < 0) ls_tool_output_free(out);
    if (rc == 1 && out->n_calls == 0) rc = 0;
    return rc;
}
