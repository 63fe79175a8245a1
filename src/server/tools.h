/* Tool calls for `lockstep serve` (docs/tool_calls.md): the request's `tools`, `tool_choice`,
 * assistant `tool_calls` and `role: "tool"` messages (parsed and validated into ls_tool_req),
 * the prompt with each model family's convention (Gemma 3: a prompt convention with
 * ```tool_code / ```tool_output blocks; Gemma 4: its template's native tokens), the prefill that
 * forces a call, and the model's output parsed back into calls. Pure functions (no model, no
 * I/O), unit-tested in tests/test_tool_calls.c. */
#ifndef LS_SERVER_TOOLS_H
#define LS_SERVER_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "request.h"

enum {
    LS_TOOLS_MAX = 128,      /* tools per request */
    LS_TOOLS_MAX_CALLS = 64, /* calls per assistant message (and parsed from one output) */
};

typedef enum { LS_TC_AUTO = 0, LS_TC_NONE, LS_TC_REQUIRED, LS_TC_NAMED } ls_tool_choice;

typedef struct {
    char *name;
    char *function; /* the `function` object, compact JSON */
} ls_tool_def;

typedef struct {
    char *id, *name;
    char *arguments; /* JSON text of an object */
} ls_tool_call;

typedef struct ls_tool_req {
    ls_tool_def *tools;
    int n_tools;
    bool choice_set;
    ls_tool_choice choice;
    int named; /* LS_TC_NAMED: index into tools */
    /* Per message (n_msgs = the request's n_messages): an assistant's calls, a tool message's id. */
    int n_msgs;
    ls_tool_call **calls;
    int *n_calls;
    char **call_id;
} ls_tool_req;

/* After parse_messages: reads `tools`, `tool_choice` and the messages' `tool_calls` /
 * `tool_call_id` from the body's root object. Sets r->tools (NULL when the request uses none
 * of them). 0, or -1 with *err (a 400 naming the field). */
struct cJSON;
int ls_tools_parse(const struct cJSON *root, ls_request *r, ls_req_error *err);
void ls_tools_free(ls_tool_req *t);

/* Calls may come out of this request's generation: tools given and tool_choice not none. */
bool ls_tools_active(const ls_request *r);
/* tool_choice required or a named function: the prompt ends with the start of a call. */
bool ls_tools_forced(const ls_request *r);

/* The prompt for a request with r->tools, in the template of `style` (3 or 4), generation
 * prompt and forcing prefill included. Malloc'ed, or NULL + err (a 400: bad message order). */
char *ls_tools_prompt(int style, const ls_request *r, char *err, size_t errlen);
/* The text the prompt ends with to force a call ("" when not forced). Static or malloc'ed
 * into *owned (free it). */
const char *ls_tools_prefill(int style, const ls_request *r, char **owned);

/* While streaming: must the generated text so far (without the prefill) be held back because
 * it may still turn out to be a call? */
bool ls_tools_hold(int style, const ls_request *r, const char *text, size_t n);

typedef struct {
    ls_tool_call *calls;
    int n_calls;
    char error[256]; /* a malformed call: why ("" otherwise) */
} ls_tool_output;
/* Parses the generated text (the prefill is put back in front first). Returns 1 with calls
 * (ids "<id_prefix>_<index>"), 0 when the text is plain content, -1 when it is a malformed
 * call (out->error says why; the text stays content). */
int ls_tools_parse_output(int style, const ls_request *r, const char *text, const char *id_prefix, ls_tool_output *out);
void ls_tool_output_free(ls_tool_output *o);
/* message.tool_calls (stream: with "index") as JSON. */
struct cJSON *ls_tools_calls_json(const ls_tool_output *o, bool stream);

#endif
