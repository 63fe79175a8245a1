/* Tool calls, request side (tools.h, docs/tool_calls.md): `tools`, `tool_choice`, assistant
 * `tool_calls` and tool messages' `tool_call_id`, validated like OpenAI (400 naming the field).
 * The JSON Schema check is structural: `type` a known type name (or an array of them),
 * `properties` an object of schemas, `required` an array of strings, `items` a schema, `enum`
 * an array, `description` a string. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tools.h"

/* The last member named `name` (duplicate keys: the last wins, like request.c). */
static cJSON *tl_member(const cJSON *obj, const char *name) {
    cJSON *found = NULL, *c;
    if (!cJSON_IsObject(obj)) return NULL;
    cJSON_ArrayForEach(c, obj) {
        if (c->string && strcmp(c->string, name) == 0) found = c;
    }
    return found && !cJSON_IsNull(found) ? found : NULL;
}

static char *tl_dup(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static bool valid_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static bool known_type(const cJSON *t) {
    static const char *const types[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    if (!cJSON_IsString(t)) return false;
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(t->valuestring, types[i])) return true;
    return false;
}

/* A JSON Schema (the parts the templates read). 0 or a 400 with `param`. */
static int check_schema(const cJSON *s, const char *param, ls_req_error *err) {
    if (!cJSON_IsObject(s))
        return ls_req_fail(err, 400, param, "invalid_value", "'%s' must be a JSON Schema object", param);
    const cJSON *t = tl_member(s, "type");
    if (t && cJSON_IsArray(t)) {
        const cJSON *e;
        if (cJSON_GetArraySize(t) == 0)
            return ls_req_fail(err, 400, param, "invalid_value", "'%s': 'type' must not be an empty array", param);
        cJSON_ArrayForEach(e, t) {
            if (!known_type(e)) t = NULL;
        }
        if (!t) return ls_req_fail(err, 400, param, "invalid_value", "'%s': 'type' must name JSON Schema types", param);
    } else if (t && !known_type(t)) {
        return ls_req_fail(err, 400, param, "invalid_value",
                           "'%s': 'type' must be one of object, array, string, number, integer, boolean, null (or an "
                           "array of them)",
                           param);
    }
    const cJSON *d = tl_member(s, "description");
    if (d && !cJSON_IsString(d))
        return ls_req_fail(err, 400, param, "invalid_value", "'%s': 'description' must be a string", param);
    const cJSON *p = tl_member(s, "properties");
    if (p) {
        if (!cJSON_IsObject(p))
            return ls_req_fail(err, 400, param, "invalid_value", "'%s': 'properties' must be an object", param);
        const cJSON *e;
        cJSON_ArrayForEach(e, p) {
            if (check_schema(e, param, err)) return -1;
        }
    }
    const cJSON *r = tl_member(s, "required");
    if (r) {
        const cJSON *e;
        bool ok = cJSON_IsArray(r);
        if (ok) cJSON_ArrayForEach(e, r) ok &= cJSON_IsString(e);
        if (!ok)
            return ls_req_fail(err, 400, param, "invalid_value", "'%s': 'required' must be an array of strings", param);
    }
    const cJSON *en = tl_member(s, "enum");
    if (en && !cJSON_IsArray(en))
        return ls_req_fail(err, 400, param, "invalid_value", "'%s': 'enum' must be an array", param);
    const cJSON *it = tl_member(s, "items");
    if (it && check_schema(it, param, err)) return -1;
    return 0;
}

static int parse_tool(const cJSON *t, int i, ls_tool_def *out, ls_req_error *err) {
    char param[64];
    snprintf(param, sizeof param, "tools[%d]", i);
    const cJSON *type = tl_member(t, "type");
    if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0)
        return ls_req_fail(err, 400, param, "invalid_value",
                           "'%s' must be an object {\"type\": \"function\", \"function\": {...}}", param);
    const cJSON *f = tl_member(t, "function");
    snprintf(param, sizeof param, "tools[%d].function", i);
    if (!cJSON_IsObject(f)) return ls_req_fail(err, 400, param, "invalid_type", "'%s' must be an object", param);
    const cJSON *name = tl_member(f, "name");
    snprintf(param, sizeof param, "tools[%d].function.name", i);
    if (!name) return ls_req_fail(err, 400, param, "missing_required_parameter", "'%s' is required", param);
    if (!cJSON_IsString(name) || !valid_name(name->valuestring))
        return ls_req_fail(err, 400, param, "invalid_value", "'%s' must match ^[a-zA-Z0-9_-]{1,64}$", param);
    const cJSON *d = tl_member(f, "description");
    snprintf(param, sizeof param, "tools[%d].function.description", i);
    if (d && !cJSON_IsString(d)) return ls_req_fail(err, 400, param, "invalid_type", "'%s' must be a string", param);
    const cJSON *p = tl_member(f, "parameters");
    snprintf(param, sizeof param, "tools[%d].function.parameters", i);
    if (p && check_schema(p, param, err)) return -1;
    out->name = tl_dup(name->valuestring);
    out->function = cJSON_PrintUnformatted(f);
    if (!out->name || !out->function) return ls_req_fail(err, 500, "tools", NULL, "out of memory");
    return 0;
}

static int parse_tools_array(const cJSON *root, ls_tool_req *t, ls_req_error *err) {
    const cJSON *tools = tl_member(root, "tools");
    if (!tools) return 0;
    if (!cJSON_IsArray(tools)) return ls_req_fail(err, 400, "tools", "invalid_type", "'tools' must be an array");
    int n = cJSON_GetArraySize(tools);
    if (n > LS_TOOLS_MAX)
        return ls_req_fail(err, 400, "tools", "invalid_value", "'tools' takes at most %d tools", LS_TOOLS_MAX);
    t->tools = calloc((size_t)(n > 0 ? n : 1), sizeof *t->tools);
    if (!t->tools) return ls_req_fail(err, 500, "tools", NULL, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, tools) {
        if (parse_tool(e, t->n_tools, &t->tools[t->n_tools], err)) {
            t->n_tools++; /* freed with the rest */
            return -1;
        }
        for (int k = 0; k < t->n_tools; k++)
            if (!strcmp(t->tools[k].name, t->tools[t->n_tools].name)) {
                char param[64];
                snprintf(param, sizeof param, "tools[%d].function.name", t->n_tools);
                int rc = ls_req_fail(err, 400, param, "invalid_value", "duplicate function name '%s'",
                                     t->tools[t->n_tools].name);
                t->n_tools++;
                return rc;
            }
        t->n_tools++;
    }
    return 0;
}

static int parse_choice(const cJSON *root, ls_tool_req *t, ls_req_error *err) {
    const cJSON *c = tl_member(root, "tool_choice");
    if (!c) return 0;
    t->choice_set = true;
    if (cJSON_IsString(c)) {
        const char *v = c->valuestring;
        if (!strcmp(v, "auto"))
            t->choice = LS_TC_AUTO;
        else if (!strcmp(v, "none"))
            t->choice = LS_TC_NONE;
        else if (!strcmp(v, "required"))
            t->choice = LS_TC_REQUIRED;
        else
            return ls_req_fail(err, 400, "tool_choice", "invalid_value",
                               "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}");
    } else {
        const cJSON *type = tl_member(c, "type"), *f = tl_member(c, "function");
        const cJSON *name = tl_member(f, "name");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 || !cJSON_IsString(name))
            return ls_req_fail(err, 400, "tool_choice", "invalid_value",
                               "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}");
        t->choice = LS_TC_NAMED;
        t->named = -1;
        for (int i = 0; i < t->n_tools; i++)
            if (!strcmp(t->tools[i].name, name->valuestring)) t->named = i;
        if (t->named < 0)
            return ls_req_fail(err, 400, "tool_choice", "invalid_value",
                               "'tool_choice' names function '%.64s', which is not in 'tools'", name->valuestring);
    }
    if ((t->choice == LS_TC_REQUIRED) && t->n_tools == 0)
        return ls_req_fail(err, 400, "tool_choice", "invalid_value", "'tool_choice' \"required\" needs 'tools'");
    return 0;
}

/* One assistant message's `tool_calls`. */
static int parse_calls(const cJSON *tc, int mi, ls_tool_req *t, ls_req_error *err) {
    char param[96];
    snprintf(param, sizeof param, "messages[%d].tool_calls", mi);
    if (!cJSON_IsArray(tc)) return ls_req_fail(err, 400, param, "invalid_type", "'%s' must be an array", param);
    int n = cJSON_GetArraySize(tc);
    if (n > LS_TOOLS_MAX_CALLS)
        return ls_req_fail(err, 400, param, "invalid_value", "'%s' takes at most %d calls", param, LS_TOOLS_MAX_CALLS);
    if (n == 0) return 0;
    t->calls[mi] = calloc((size_t)n, sizeof **t->calls);
    if (!t->calls[mi]) return ls_req_fail(err, 500, param, NULL, "out of memory");
    const cJSON *c;
    int k = 0;
    cJSON_ArrayForEach(c, tc) {
        snprintf(param, sizeof param, "messages[%d].tool_calls[%d]", mi, k);
        const cJSON *id = tl_member(c, "id"), *type = tl_member(c, "type"), *f = tl_member(c, "function");
        const cJSON *name = tl_member(f, "name"), *args = tl_member(f, "arguments");
        if (!cJSON_IsObject(c) || !cJSON_IsString(id) || (type && !cJSON_IsString(type)) ||
            (type && strcmp(type->valuestring, "function") != 0) || !cJSON_IsString(name) ||
            !valid_name(name->valuestring) || !(cJSON_IsString(args) || cJSON_IsObject(args)))
            return ls_req_fail(err, 400, param, "invalid_value",
                               "'%s' must be {\"id\": string, \"type\": \"function\", \"function\": {\"name\": "
                               "string, \"arguments\": string}}",
                               param);
        cJSON *obj = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
        bool ok = cJSON_IsObject(args) || cJSON_IsObject(obj);
        cJSON_Delete(obj);
        if (!ok)
            return ls_req_fail(err, 400, param, "invalid_value", "'%s.function.arguments' must be a JSON object",
                               param);
        ls_tool_call *call = &t->calls[mi][k];
        t->n_calls[mi] = ++k;
        call->id = tl_dup(id->valuestring);
        call->name = tl_dup(name->valuestring);
        call->arguments = cJSON_IsString(args) ? tl_dup(args->valuestring) : cJSON_PrintUnformatted(args);
        if (!call->id || !call->name || !call->arguments) return ls_req_fail(err, 500, param, NULL, "out of memory");
    }
    return 0;
}

/* A tool message answers a call of the latest assistant message with calls. */
static int parse_tool_msg(const cJSON *m, int mi, int last_calls, ls_tool_req *t, ls_req_error *err) {
    char param[96];
    snprintf(param, sizeof param, "messages[%d].tool_call_id", mi);
    const cJSON *id = tl_member(m, "tool_call_id");
    if (!id) return ls_req_fail(err, 400, param, "missing_required_parameter", "'%s' is required", param);
    if (!cJSON_IsString(id)) return ls_req_fail(err, 400, param, "invalid_type", "'%s' must be a string", param);
    bool found = false;
    for (int k = 0; last_calls >= 0 && k < t->n_calls[last_calls]; k++)
        found |= !strcmp(t->calls[last_calls][k].id, id->valuestring);
    if (!found)
        return ls_req_fail(err, 400, param, "invalid_value",
                           "'%s' does not name a call of the preceding assistant message's 'tool_calls'", param);
    t->call_id[mi] = tl_dup(id->valuestring);
    return t->call_id[mi] ? 0 : ls_req_fail(err, 500, param, NULL, "out of memory");
}

static int parse_history(const cJSON *root, const ls_request *r, ls_tool_req *t, bool *used, ls_req_error *err) {
    int n = r->n_messages;
    t->calls = calloc((size_t)n, sizeof *t->calls);
    t->n_calls = calloc((size_t)n, sizeof *t->n_calls);
    t->call_id = calloc((size_t)n, sizeof *t->call_id);
    if (!t->calls || !t->n_calls || !t->call_id) return ls_req_fail(err, 500, "messages", NULL, "out of memory");
    t->n_msgs = n;
    const cJSON *m;
    int i = 0, last_calls = -1;
    cJSON_ArrayForEach(m, tl_member(root, "messages")) {
        if (i >= n) break;
        const char *role = r->messages[i].role;
        const cJSON *tc = tl_member(m, "tool_calls");
        if (tc && strcmp(role, "assistant") != 0) {
            char param[64];
            snprintf(param, sizeof param, "messages[%d].tool_calls", i);
            return ls_req_fail(err, 400, param, "invalid_value", "'%s' is only allowed on assistant messages", param);
        }
        if (tc) {
            *used = true;
            if (parse_calls(tc, i, t, err)) return -1;
            if (t->n_calls[i] > 0) last_calls = i;
        } else if (!strcmp(role, "tool")) {
            *used = true;
            if (parse_tool_msg(m, i, last_calls, t, err)) return -1;
        } else if (!strcmp(role, "user")) {
            last_calls = -1;
        }
        i++;
    }
    return 0;
}

int ls_tools_parse(const cJSON *root, ls_request *r, ls_req_error *err) {
    r->tools = NULL;
    ls_tool_req *t = calloc(1, sizeof *t);
    if (!t) return ls_req_fail(err, 500, "tools", NULL, "out of memory");
    bool used = tl_member(root, "tools") || tl_member(root, "tool_choice");
    if (parse_tools_array(root, t, err) || parse_choice(root, t, err) || parse_history(root, r, t, &used, err)) {
        r->tools = t; /* the caller frees the request, and this with it */
        return -1;
    }
    if (!used) {
        ls_tools_free(t);
        return 0;
    }
    r->tools = t;
    return 0;
}

void ls_tools_free(ls_tool_req *t) {
    if (!t) return;
    for (int i = 0; i < t->n_tools; i++) {
        free(t->tools[i].name);
        cJSON_free(t->tools[i].function);
    }
    free(t->tools);
    /* calls/call_id have one entry per message; n_calls says how many calls were filled */
    for (int i = 0; t->calls && t->n_calls && t->call_id && i < t->n_msgs; i++) {
        for (int k = 0; k < t->n_calls[i]; k++) {
            free(t->calls[i][k].id);
            free(t->calls[i][k].name);
            free(t->calls[i][k].arguments);
        }
        free(t->calls[i]);
        free(t->call_id[i]);
    }
    free(t->calls);
    free(t->n_calls);
    free(t->call_id);
    free(t);
}

bool ls_tools_active(const ls_request *r) {
    return r->tools && r->tools->n_tools > 0 && r->tools->choice != LS_TC_NONE;
}

bool ls_tools_forced(const ls_request *r) {
    return ls_tools_active(r) && (r->tools->choice == LS_TC_REQUIRED || r->tools->choice == LS_TC_NAMED);
}

void ls_tool_output_free(ls_tool_output *o) {
    if (!o) return;
    for (int i = 0; i < o->n_calls; i++) {
        free(o->calls[i].id);
        free(o->calls[i].name);
        free(o->calls[i].arguments);
    }
    free(o->calls);
    o->calls = NULL;
    o->n_calls = 0;
}

cJSON *ls_tools_calls_json(const ls_tool_output *o, bool stream) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < o->n_calls; i++) {
        cJSON *c = cJSON_CreateObject(), *f;
        if (stream) cJSON_AddNumberToObject(c, "index", i);
        cJSON_AddStringToObject(c, "id", o->calls[i].id);
        cJSON_AddStringToObject(c, "type", "function");
        f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(f, "name", o->calls[i].name);
        cJSON_AddStringToObject(f, "arguments", o->calls[i].arguments);
        cJSON_AddItemToArray(a, c);
    }
    return a;
}
