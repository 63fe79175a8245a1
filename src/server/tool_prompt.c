/* Tool calls: the prompt, the forcing prefill and the output parser for each model family
 * (tools.h, docs/tool_calls.md).
 *
 * Gemma 3 (its template has no tool role): the prompt convention of Google's Gemma 3
 * function-calling guide. The function definitions (JSON) and an instruction go into the
 * system text (which the template folds into the first user turn); the model answers
 *   ```tool_code
 *   {"name": "NAME", "arguments": {...}}
 *   ```
 * an assistant's calls are rendered so in its turn, and tool results go back in a user turn as
 * ```tool_output blocks (consecutive results, and a user message right after them, share the
 * turn).
 *
 * Gemma 4: its template's native tokens (tool_native.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tool_internal.h"

static const char G3_INTRO[] = "You have access to these functions:\n";
static const char G3_HOWTO[] =
    "\nTo call a function, reply with a ```tool_code block holding {\"name\": <function name>, \"arguments\": "
    "<the arguments as a JSON object>}. The result comes back in a ```tool_output block.";

static const char *trimmed(const char *s, size_t *n) {
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
    size_t k = strlen(s);
    while (k && (s[k - 1] == ' ' || s[k - 1] == '\n' || s[k - 1] == '\t' || s[k - 1] == '\r')) k--;
    *n = k;
    return s;
}

static void g3_tools_block(tl_sb *b, const ls_tool_req *t) {
    ls_tl_puts(b, G3_INTRO);
    for (int i = 0; i < t->n_tools; i++) {
        ls_tl_puts(b, t->tools[i].function);
        ls_tl_puts(b, "\n");
    }
    ls_tl_puts(b, G3_HOWTO);
    if (t->choice == LS_TC_REQUIRED) ls_tl_puts(b, "\nCall one of the functions now.");
    if (t->choice == LS_TC_NAMED) {
        ls_tl_puts(b, "\nCall the function ");
        ls_tl_puts(b, t->tools[t->named].name);
        ls_tl_puts(b, " now.");
    }
}

static void g3_call(tl_sb *b, const ls_tool_call *c) {
    size_t n;
    const char *a = trimmed(c->arguments, &n);
    ls_tl_puts(b, "```tool_code\n{\"name\": \"");
    ls_tl_puts(b, c->name);
    ls_tl_puts(b, "\", \"arguments\": ");
    ls_tl_put(b, a, n);
    ls_tl_puts(b, "}\n```");
}

typedef struct {
    ls_message *m;
    tl_sb *text; /* one per output message */
    int n;
} msg_list;

static tl_sb *push(msg_list *l, const char *role) {
    l->m[l->n].role = role;
    return &l->text[l->n++];
}

/* The messages in the Gemma 3 convention (texts in l->text). */
static void g3_messages(const ls_request *r, msg_list *l) {
    const ls_tool_req *t = r->tools;
    int i = 0;
    if (ls_tools_active(r)) {
        tl_sb *sys = push(l, "system");
        if (r->n_messages && !strcmp(r->messages[0].role, "system")) {
            ls_tl_puts(sys, r->messages[0].content);
            ls_tl_puts(sys, "\n\n");
            i = 1;
        }
        g3_tools_block(sys, t);
    }
    bool tool_run = false; /* the last message is a user turn holding tool results */
    for (; i < r->n_messages; i++) {
        const char *role = r->messages[i].role, *c = r->messages[i].content;
        if (!strcmp(role, "tool") || (!strcmp(role, "user") && tool_run)) {
            tl_sb *u = tool_run ? &l->text[l->n - 1] : push(l, "user");
            if (tool_run) ls_tl_puts(u, "\n\n");
            if (!strcmp(role, "tool")) {
                ls_tl_puts(u, "```tool_output\n");
                ls_tl_puts(u, c);
                ls_tl_puts(u, "\n```");
            } else {
                ls_tl_puts(u, c);
            }
            tool_run = !strcmp(role, "tool");
            continue;
        }
        tool_run = false;
        tl_sb *m = push(l, role);
        if (!strcmp(role, "assistant") && t->n_calls[i] > 0) {
            size_t n;
            const char *a = trimmed(c, &n);
            ls_tl_put(m, a, n);
            for (int k = 0; k < t->n_calls[i]; k++) {
                if (k || n) ls_tl_puts(m, "\n");
                g3_call(m, &t->calls[i][k]);
            }
        } else {
            ls_tl_puts(m, c);
        }
    }
}

static void g4_response(tl_sb *b, const char *name, const char *content) {
    cJSON *v = cJSON_Parse(content);
    ls_tl_puts(b, "<|tool_response>response:");
    ls_tl_puts(b, name);
    if (cJSON_IsObject(v)) {
        ls_tl_format_argument(b, v, false);
    } else {
        cJSON *s = cJSON_CreateString(content);
        ls_tl_puts(b, "{value:");
        ls_tl_format_argument(b, s, false);
        ls_tl_puts(b, "}");
        cJSON_Delete(s);
    }
    cJSON_Delete(v);
    ls_tl_puts(b, "<tool_response|>");
}

static void g4_call(tl_sb *b, const ls_tool_call *c) {
    cJSON *v = cJSON_Parse(c->arguments);
    ls_tl_puts(b, "<|tool_call>call:");
    ls_tl_puts(b, c->name);
    ls_tl_format_argument(b, v, false);
    cJSON_Delete(v);
    ls_tl_puts(b, "<tool_call|>");
}

/* Gemma 4: calls into calls[], tool messages folded into the responses of the assistant
 * message whose call they answer. */
static void g4_messages(const ls_request *r, msg_list *l, tl_sb *calls, tl_sb *resp) {
    const ls_tool_req *t = r->tools;
    int cur = -1, cur_in = -1; /* output / input index of the last assistant with calls */
    for (int i = 0; i < r->n_messages; i++) {
        const char *role = r->messages[i].role, *c = r->messages[i].content;
        if (!strcmp(role, "tool") && cur >= 0) {
            const char *name = "unknown";
            for (int k = 0; k < t->n_calls[cur_in]; k++)
                if (!strcmp(t->calls[cur_in][k].id, t->call_id[i])) name = t->calls[cur_in][k].name;
            g4_response(&resp[cur], name, c);
            continue;
        }
        if (!strcmp(role, "user")) cur = cur_in = -1;
        if (!strcmp(role, "assistant") && t->n_calls[i] > 0) {
            cur = l->n;
            cur_in = i;
            for (int k = 0; k < t->n_calls[i]; k++) g4_call(&calls[l->n], &t->calls[i][k]);
        }
        ls_tl_puts(push(l, strcmp(role, "tool") ? role : "user"), c);
    }
}

static char *g4_tools_text(const ls_request *r) {
    tl_sb b = {0};
    ls_tl_puts(&b, "");
    for (int i = 0; ls_tools_active(r) && i < r->tools->n_tools; i++) {
        cJSON *f = cJSON_Parse(r->tools->tools[i].function);
        ls_tl_puts(&b, "<|tool>");
        ls_tl_format_declaration(&b, f);
        ls_tl_puts(&b, "<tool|>");
        cJSON_Delete(f);
    }
    return b.oom ? (free(b.buf), NULL) : b.buf;
}

char *ls_tools_prompt(int style, const ls_request *r, char *err, size_t errlen) {
    int cap = r->n_messages + 1;
    msg_list l = {calloc((size_t)cap, sizeof *l.m), calloc((size_t)cap, sizeof *l.text), 0};
    tl_sb *calls = calloc((size_t)cap, sizeof *calls), *resp = calloc((size_t)cap, sizeof *resp);
    const char **cp = calloc((size_t)cap, sizeof *cp), **rp = calloc((size_t)cap, sizeof *rp);
    char *tools = style == 4 ? g4_tools_text(r) : NULL, *out = NULL, *owned = NULL;
    bool oom = !l.m || !l.text || !calls || !resp || !cp || !rp || (style == 4 && !tools);
    if (!oom) {
        if (style == 4)
            g4_messages(r, &l, calls, resp);
        else
            g3_messages(r, &l);
        for (int i = 0; i < l.n; i++) {
            oom |= l.text[i].oom || calls[i].oom || resp[i].oom;
            l.m[i].content = l.text[i].buf ? l.text[i].buf : "";
            cp[i] = calls[i].buf;
            rp[i] = resp[i].buf;
        }
    }
    if (oom) {
        snprintf(err, errlen, "out of memory");
    } else {
        ls_chat_tools ct = {tools, cp, rp};
        char *p = ls_chat_render_style(style, l.m, l.n, &ct, err, errlen);
        const char *pre = ls_tools_prefill(style, r, &owned);
        tl_sb b = {0};
        if (p) {
            ls_tl_puts(&b, p);
            ls_tl_puts(&b, pre);
            if (b.oom) snprintf(err, errlen, "out of memory");
            out = b.oom ? (free(b.buf), NULL) : b.buf;
        }
        free(p);
    }
    for (int i = 0; i < cap; i++) {
        if (l.text) free(l.text[i].buf);
        if (calls) free(calls[i].buf);
        if (resp) free(resp[i].buf);
    }
    free(l.m), free(l.text), free(calls), free(resp), free(cp), free(rp), free(tools), free(owned);
    return out;
}

/* The function's parameters require an argument: its arguments object is not empty. */
static bool needs_argument(const ls_tool_def *t) {
    cJSON *f = cJSON_Parse(t->function);
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "parameters"), "required");
    bool yes = cJSON_IsArray(req) && cJSON_GetArraySize(req) > 0;
    cJSON_Delete(f);
    return yes;
}

const char *ls_tools_prefill(int style, const ls_request *r, char **owned) {
    *owned = NULL;
    if (!ls_tools_forced(r)) return "";
    const ls_tool_req *t = r->tools;
    /* "required" with one tool is a call of that tool */
    if (t->choice == LS_TC_REQUIRED && t->n_tools > 1)
        return style == 4 ? "<|tool_call>call:" : "```tool_code\n{\"name\": \"";
    const ls_tool_def *d = &t->tools[t->choice == LS_TC_NAMED ? t->named : 0];
    tl_sb b = {0};
    ls_tl_puts(&b, style == 4 ? "<|tool_call>call:" : "```tool_code\n{\"name\": \"");
    ls_tl_puts(&b, d->name);
    ls_tl_puts(&b, style == 4 ? "{" : needs_argument(d) ? "\", \"arguments\": {\"" : "\", \"arguments\": {");
    *owned = b.buf;
    return b.oom || !b.buf ? "" : b.buf;
}

/* Text (after leading whitespace) that is, or may still become, the start of a call. */
static bool call_start(int style, const char *s, size_t n, bool *complete) {
    static const char *const g3[] = {"```tool_code", "```json", "{", "["};
    static const char *const g4[] = {"<|tool_call>"};
    const char *const *w = style == 4 ? g4 : g3;
    int nw = style == 4 ? 1 : 4;
    for (int i = 0; i < nw; i++) {
        size_t k = strlen(w[i]);
        if (n >= k ? !memcmp(s, w[i], k) : !memcmp(s, w[i], n)) {
            *complete = n >= k;
            return true;
        }
    }
    return false;
}

bool ls_tools_hold(int style, const ls_request *r, const char *text, size_t n) {
    if (!ls_tools_active(r)) return false;
    if (ls_tools_forced(r)) return true;
    while (n && (*text == ' ' || *text == '\n' || *text == '\t' || *text == '\r')) text++, n--;
    bool complete;
    return n == 0 || call_start(style, text, n, &complete);
}
