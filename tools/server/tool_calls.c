/* lockstep serve: tool calls (docs/tool_calls.md) between the request (src/server/tools.h)
 * and the responses: the prompt in the model's convention, streams held back while the output
 * may still be a call, and the calls (or the report of a malformed one) in the response. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server.h"
#include "tools.h"

char *srv_tools_prompt(srv_server *s, srv_job *j, char *err, size_t errlen) {
    j->tool_style = ls_model_chat_style(s->model) == 4 ? 4 : 3;
    j->tool_active = ls_tools_active(&j->req);
    j->tool_hold = j->tool_active && j->req.stream;
    return ls_tools_prompt(j->tool_style, &j->req, err, errlen);
}

char *srv_chat_prompt(srv_server *s, srv_job *j, char *err, size_t errlen) {
    if (j->req.tools) return srv_tools_prompt(s, j, err, errlen);
    return ls_chat_apply(s->model, j->req.messages, j->req.n_messages, err, errlen);
}

bool srv_tools_stream_from(srv_job *j, size_t *from) {
    if (!j->tool_hold) return true;
    if (ls_tools_hold(j->tool_style, &j->req, j->text.text ? j->text.text : "", j->text.sent)) return false;
    j->tool_hold = false; /* not a call: what was held goes out now, as content */
    *from = 0;
    return true;
}

bool srv_tools_call_done(srv_job *j, const char *chunk, size_t n) {
    if (!j->tool_active || !ls_tools_forced(&j->req)) return false;
    if (!memchr(chunk, '}', n) && !memchr(chunk, '>', n)) return false; /* no call ends here */
    ls_tool_output o;
    int rc = ls_tools_parse_output(j->tool_style, &j->req, j->text.text, "call", &o);
    ls_tool_output_free(&o);
    return rc == 1;
}

void srv_tools_finish(srv_server *s, srv_job *j, size_t *held) {
    if (!j->tool_active || j->status) return;
    char prefix[80];
    const char *dash = strchr(j->id, '-');
    snprintf(prefix, sizeof prefix, "call_%s", dash ? dash + 1 : j->id);
    j->tool_rc = ls_tools_parse_output(j->tool_style, &j->req, j->text.text, prefix, &j->tool_out);
    if (j->tool_rc == 1) j->finish_reason = "tool_calls";
    if (!j->tool_hold) return;
    if (j->tool_rc == 1) {
        /* One chunk with the whole calls, the arguments complete (not in pieces). */
        cJSON *c = srv_chunk(s, j, NULL, 0, NULL, false);
        cJSON *d = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "choices"), 0), "delta");
        cJSON_AddItemToObject(d, "tool_calls", ls_tools_calls_json(&j->tool_out, true));
        srv_job_out_json(j, c);
        *held = j->text.sent; /* the text is the calls: not sent as content */
    } else {
        *held = 0; /* all of the held text goes out as content */
    }
}

void srv_tools_choice(const srv_job *j, cJSON *choice) {
    if (j->tool_active && j->tool_rc < 0 && !j->status)
        cJSON_AddStringToObject(choice, "lockstep_tool_call_error", j->tool_out.error);
}

bool srv_tools_message(const srv_job *j, cJSON *msg, cJSON *choice) {
    srv_tools_choice(j, choice);
    if (!j->tool_active || j->tool_rc != 1) return false;
    cJSON_AddNullToObject(msg, "content");
    cJSON_AddItemToObject(msg, "tool_calls", ls_tools_calls_json(&j->tool_out, false));
    return true;
}
