/* lockstep serve: internal interfaces between the HTTP front end (http.c), the scheduler and
 * slot workers (slots.c) and the command (cmd_serve.c). Uses only include/lockstep.h from
 * the engine. */
#ifndef LS_SERVER_H
#define LS_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lockstep.h"
#include "request.h"
#include "stop.h"
#include "tools.h"

typedef struct srv_config {
    const char *model_path, *host, *api_key, *draft_kind, *draft_path, *alias;
    int port; /* -1: no listening socket (connections come from srv_http_adopt) */
    int parallel, n_ctx, n_threads, n_batch, block_size, timeout_s, queue_cap;
    int tensor_parallel;    /* -tp: slot sessions refuse it at attach until the batcher runs ranks */
    int queue_timeout_s;    /* a request still queued after this long gets 503 */
    int header_timeout_s;   /* a connection must deliver its request (headers + body) within this */
    int shutdown_timeout_s; /* SIGTERM/SIGINT: grace for running generations */
    bool allow_inexact;
    bool no_webui; /* --no-webui: no chat page at / (404 like any unknown path) */
} srv_config;

/* One request's life: created by the connection thread, run by a slot worker. Reference
 * counted (connection + worker); the mutex guards everything the two sides share. */
typedef struct srv_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    struct srv_job *next; /* queue link */
    ls_request req;
    int32_t *prompt;
    int32_t n_prompt;
    char id[64];
    long long created;
    int fd;             /* client socket, for disconnect checks (-1 unknown) */
    double deadline_ms; /* monotonic; generation stops (finish "length") past it (set when it starts) */
    double queued_ms;   /* monotonic time of srv_submit (for --queue-timeout) */
    /* results */
    ls_stopbuf text;
    char *out; /* streaming: SSE bytes not yet read by the connection */
    size_t out_len, out_cap, out_read;
    bool done, cancel, timed_out;
    int status; /* 0 ok, else HTTP status of a failure */
    char errmsg[256];
    ls_gen_stats stats;
    const char *finish_reason;
    /* Logprobs (req.logprobs; tools/server/logprobs.c): one entry per emitted token, with the
     * byte offset of its text in the generated text; lp[0, lp_sent) were streamed already. */
    struct srv_lp *lp;
    int n_lp, cap_lp, lp_sent;
    size_t lp_off; /* bytes of the emitted tokens' texts so far */
    /* Tool calls (tool_calls.c): the model family's convention, whether calls may come out,
     * whether the stream holds the text back (it may still be a call), the parsed output. */
    int tool_style, tool_rc;
    bool tool_active, tool_hold;
    ls_tool_output tool_out;
} srv_job;

typedef struct srv_slot {
    struct srv_server *srv;
    int index;
    ls_session *session;
    ls_drafter *drafter;
    /* What the session's cache holds (prompt + emitted tokens of its last request), for
     * prefix reuse: [0, n_cached) */
    int32_t *cached;
    int32_t n_cached, n_hist;
    bool idle; /* waiting for a job (under srv_server.mu) */
    pthread_t thread;
    bool started;
} srv_slot;

typedef struct srv_server {
    srv_config cfg;
    ls_model *model, *draft_model;
    char model_id[256];
    int32_t n_vocab, n_ctx;
    srv_slot *slots;
    int n_slots;
    ls_batcher *batcher; /* every slot's forwards run in its shared steps */
    /* stopping: no new requests (shutdown began); abort_gen: end running generations now
     * (they finish with finish_reason "length", streams with a final chunk and [DONE]). */
    atomic_bool ready, stopping, abort_gen;
    /* queue + metrics, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job *qhead, *qtail;
    int qlen, active;
    int http_active; /* HTTP requests whose response is not complete yet (http.c) */
    unsigned long long req_by_status[600];
    unsigned long long prompt_tokens, prompt_tokens_cached, generated_tokens, cancelled, spec_requests, spec_rounds,
        spec_drafted, spec_accepted, spec_declined;
    unsigned long long spec_accepted_at[LS_SPEC_MAX_BLOCK], spec_proposed_at[LS_SPEC_MAX_BLOCK];
    double busy_ms, busy_since; /* time with at least one active slot (for tok/s) */
    char spec_state[64];        /* "off", "probing", "passed", "declined", "inexact" */
    char spec_detail[256];
    unsigned long long seq;
} srv_server;

/* slots.c */
int srv_slots_start(srv_server *s, char *err, size_t errlen);
void srv_slots_stop(srv_server *s); /* after `stopping` is set: drains the queue, joins */
/* Answers queued requests with 503 and removes them from the queue: those queued longer than
 * --queue-timeout, or all of them when `all` (shutdown). Returns how many. */
int srv_queue_expire(srv_server *s, bool all);
void srv_warmup_probe(srv_server *s);
srv_job *srv_job_new(void);
void srv_job_release(srv_job *j);
/* 0 queued; -1 queue full (503); -2 shutting down. Takes a reference for the worker. */
int srv_submit(srv_server *s, srv_job *j);
/* Append bytes to a job's SSE output (caller holds j->mu). */
int srv_job_out(srv_job *j, const char *s, size_t n);
/* SSE event with the JSON of a chunk (caller holds j->mu). Frees `obj`. */
struct cJSON;
int srv_job_out_json(srv_job *j, struct cJSON *obj);
struct cJSON *srv_chunk(const srv_server *s, const srv_job *j, const char *text, size_t n, const char *finish,
                        bool role);
struct cJSON *srv_usage_json(const ls_gen_stats *st);
struct cJSON *srv_timings_json(const ls_gen_stats *st);
double srv_now_ms(void);

/* logprobs.c */
typedef struct srv_lp {
    ls_token_logprobs lp;
    size_t off; /* where the token's text starts in the generated text (bytes) */
} srv_lp;
/* Record one emitted token's logprobs (from gp.on_logprobs). */
int srv_lp_add(srv_job *j, const ls_model *m, const ls_token_logprobs *lp); /* caller holds j->mu; -1: OOM */
/* Entries that go with text[0, upto): offsets below upto; at the end of generation (final) with
 * no stop sequence hit, every entry. Entries are in offset order, so this is a count. */
int srv_lp_upto(const srv_job *j, size_t upto, bool final);
/* choices[i].logprobs for entries [from, to): chat {"content": [...]}, completions {"tokens",
 * "token_logprobs", "top_logprobs", "text_offset"}; JSON null when the request did not ask. */
struct cJSON *srv_lp_json(const srv_server *s, const srv_job *j, int from, int to);
/* Put `lp` (owned) as the logprobs of a chunk's (or response's) choice 0. */
void srv_lp_set(struct cJSON *obj, struct cJSON *lp);

/* tool_calls.c (docs/tool_calls.md) */
/* The prompt of a chat request with r->tools (sets the job's tool_* fields). */
char *srv_tools_prompt(srv_server *s, srv_job *j, char *err, size_t errlen);
/* A chat request's prompt: srv_tools_prompt when it uses tools, else the model's template. */
char *srv_chat_prompt(srv_server *s, srv_job *j, char *err, size_t errlen);
/* Streaming, caller holds j->mu: false while the text must be held back; true to stream from
 * *from (set to 0 when held text is released). */
bool srv_tools_stream_from(srv_job *j, size_t *from);
/* A forced call (tool_choice required or named) is complete in the text so far, `chunk` the
 * newest text: generation stops there, like a grammar would end it (caller holds j->mu). */
bool srv_tools_call_done(srv_job *j, const char *chunk, size_t n);
/* Generation ended (caller holds j->mu): parse the calls; a held stream gets its tool_calls
 * chunk (then *held = all sent) or its text as content (*held = 0). */
void srv_tools_finish(srv_server *s, srv_job *j, size_t *held);
/* The response's message: content null + tool_calls (true), or false (content is the text);
 * a malformed call adds lockstep_tool_call_error to the choice (srv_tools_choice: only that). */
bool srv_tools_message(const srv_job *j, struct cJSON *msg, struct cJSON *choice);
void srv_tools_choice(const srv_job *j, struct cJSON *choice);

/* http.c */
int srv_http_start(srv_server *s, char *err, size_t errlen);
void srv_http_quiesce(srv_server *s);
void srv_http_stop(srv_server *s);
int srv_http_port(void);
/* Serve a connected socket as if accepted (cfg.port -1 starts the server with no listening
 * socket; the HTTP fuzz target feeds it socketpairs). Takes the socket; -1 if it could not. */
int srv_http_adopt(int fd);

int cmd_serve(int argc, char **argv);

#endif
