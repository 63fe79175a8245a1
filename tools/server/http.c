/* lockstep serve: the HTTP front end (libmicrohttpd, one thread per connection; streaming
 * responses block in the content reader until the slot worker produced more bytes). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "server.h"

enum { BODY_LIMIT = 8 << 20 };
/* Connections held at once (plus 4 per slot). Far above the worker count so that idle or slow
 * clients cannot lock others out: each must deliver its request within --header-timeout. */
enum { LS_SRV_MAX_CONNECTIONS = 1024 };

static struct MHD_Daemon *g_daemon;
static MHD_socket g_listen_fd = MHD_INVALID_SOCKET;
static int g_port;

typedef struct {
    char *body;
    size_t len, cap;
    bool too_large;
} conn_ctx;

/* ---- responses ------------------------------------------------------------------- */

static void count_status(srv_server *s, int status) {
    pthread_mutex_lock(&s->mu);
    if (status >= 100 && status < 600) s->req_by_status[status]++;
    pthread_mutex_unlock(&s->mu);
}

static enum MHD_Result send_text(srv_server *s, struct MHD_Connection *c, int status, const char *ctype,
                                 const char *body, size_t n, int retry_after) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after);
        MHD_add_response_header(r, "Retry-After", ra);
    }
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    count_status(s, status);
    return rc;
}

static enum MHD_Result send_json(srv_server *s, struct MHD_Connection *c, int status, cJSON *o, int retry_after) {
    char *txt = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!txt) return MHD_NO;
    enum MHD_Result rc = send_text(s, c, status, "application/json", txt, strlen(txt), retry_after);
    cJSON_free(txt);
    return rc;
}

static enum MHD_Result send_error(srv_server *s, struct MHD_Connection *c, int status, const char *message,
                                  const char *param, const char *code) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", status >= 500 ? "server_error" : "invalid_request_error");
    if (param && *param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    if (code && *code)
        cJSON_AddStringToObject(e, "code", code);
    else
        cJSON_AddNullToObject(e, "code");
    return send_json(s, c, status, o, status == 503 ? 1 : 0);
}

static enum MHD_Result send_lsr_error(srv_server *s, struct MHD_Connection *c, const ls_req_error *e) {
    return send_error(s, c, e->status ? e->status : 400, e->message, e->param, e->code);
}

/* ---- helpers --------------------------------------------------------------------- */

/* The peer closed its end (orderly or reset): recv(MSG_PEEK) returns 0 or a hard error. */
static bool peer_closed(int fd) {
    if (fd < 0) return false;
    char ch;
    ssize_t r = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

/* Constant-time check of "Authorization: Bearer KEY" (the scheme is case-insensitive, RFC 9110
 * 11.1; spaces before the key are skipped). */
static bool authorized(srv_server *s, struct MHD_Connection *c) {
    if (!s->cfg.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *key = s->cfg.api_key;
    size_t kn = strlen(key);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    size_t hn = strlen(h);
    unsigned char diff = (unsigned char)(hn != kn);
    for (size_t i = 0; i < kn; i++) diff |= (unsigned char)(key[i] ^ (i < hn ? h[i] : 0));
    return diff == 0;
}

static int32_t *tokenize(const ls_model *m, const char *text, bool add_bos, bool parse_special, int32_t *n) {
    return ls_model_tokenize_alloc(m, text, strlen(text), add_bos, parse_special, n);
}

/* ---- endpoints ------------------------------------------------------------------- */

static enum MHD_Result handle_health(srv_server *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    if (!atomic_load(&s->ready)) {
        cJSON_AddStringToObject(o, "status", atomic_load(&s->stopping) ? "shutting down" : "loading model");
        cJSON_AddStringToObject(o, "backend", ls_backend_name());
        return send_json(s, c, 503, o, 1);
    }
    pthread_mutex_lock(&s->mu);
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddStringToObject(o, "backend", ls_device_name_of(ls_model_device(s->model)));
    cJSON_AddStringToObject(o, "device", ls_model_device(s->model));
    cJSON_AddStringToObject(o, "version", ls_version());
    cJSON_AddNumberToObject(o, "n_ctx", s->n_ctx);
    cJSON *sl = cJSON_AddObjectToObject(o, "slots");
    cJSON_AddNumberToObject(sl, "total", s->n_slots);
    cJSON_AddNumberToObject(sl, "processing", s->active);
    cJSON_AddNumberToObject(sl, "idle", s->n_slots - s->active);
    cJSON_AddNumberToObject(sl, "n_threads", s->cfg.n_threads);
    cJSON *q = cJSON_AddObjectToObject(o, "queue");
    cJSON_AddNumberToObject(q, "depth", s->qlen);
    cJSON_AddNumberToObject(q, "capacity", s->cfg.queue_cap);
    cJSON *sp = cJSON_AddObjectToObject(o, "speculation");
    cJSON_AddStringToObject(sp, "drafter", s->cfg.draft_kind ? s->cfg.draft_kind : "none");
    if (s->cfg.draft_kind) cJSON_AddNumberToObject(sp, "block_size", s->cfg.block_size);
    cJSON_AddStringToObject(sp, "state", s->spec_state);
    cJSON_AddStringToObject(sp, "detail", s->spec_detail);
    cJSON_AddBoolToObject(sp, "allow_inexact", s->cfg.allow_inexact);
    pthread_mutex_unlock(&s->mu);
    return send_json(s, c, 200, o, 0);
}

static enum MHD_Result handle_models(srv_server *s, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "lockstep");
    cJSON_AddItemToArray(d, m);
    return send_json(s, c, 200, o, 0);
}

static enum MHD_Result handle_metrics(srv_server *s, struct MHD_Connection *c) {
    size_t cap = 16384, n = 0;
    char *b = malloc(cap);
    if (!b) return MHD_NO;
#define P(...) n += (size_t)snprintf(b + n, n < cap ? cap - n : 0, __VA_ARGS__)
    pthread_mutex_lock(&s->mu);
    P("# HELP lockstep_requests_total HTTP requests answered, by status code.\n"
      "# TYPE lockstep_requests_total counter\n");
    for (int i = 100; i < 600 && n < cap - 256; i++)
        if (s->req_by_status[i]) P("lockstep_requests_total{status=\"%d\"} %llu\n", i, s->req_by_status[i]);
    P("# HELP lockstep_prompt_tokens_total Prompt tokens processed.\n# TYPE lockstep_prompt_tokens_total counter\n"
      "lockstep_prompt_tokens_total %llu\n",
      s->prompt_tokens);
    P("# HELP lockstep_prompt_tokens_cached_total Prompt tokens reused from a slot's cache (not prefilled).\n"
      "# TYPE lockstep_prompt_tokens_cached_total counter\nlockstep_prompt_tokens_cached_total %llu\n",
      s->prompt_tokens_cached);
    P("# HELP lockstep_generated_tokens_total Tokens generated.\n# TYPE lockstep_generated_tokens_total counter\n"
      "lockstep_generated_tokens_total %llu\n",
      s->generated_tokens);
    P("# HELP lockstep_requests_cancelled_total Generations cancelled (client gone or shutdown).\n"
      "# TYPE lockstep_requests_cancelled_total counter\nlockstep_requests_cancelled_total %llu\n",
      s->cancelled);
    P("# HELP lockstep_slots_active Slots running a request.\n# TYPE lockstep_slots_active gauge\n"
      "lockstep_slots_active %d\n",
      s->active);
    P("# HELP lockstep_slots_total Slots (parallel sequences).\n# TYPE lockstep_slots_total gauge\n"
      "lockstep_slots_total %d\n",
      s->n_slots);
    P("# HELP lockstep_queue_depth Requests waiting for a slot.\n# TYPE lockstep_queue_depth gauge\n"
      "lockstep_queue_depth %d\n",
      s->qlen);
    P("# HELP lockstep_queue_capacity Most requests that may wait.\n# TYPE lockstep_queue_capacity gauge\n"
      "lockstep_queue_capacity %d\n",
      s->cfg.queue_cap);
    P("# HELP lockstep_spec_requests_total Requests served with a drafter.\n"
      "# TYPE lockstep_spec_requests_total counter\nlockstep_spec_requests_total %llu\n",
      s->spec_requests);
    P("# HELP lockstep_spec_drafts_total Speculative rounds (verify blocks).\n"
      "# TYPE lockstep_spec_drafts_total counter\nlockstep_spec_drafts_total %llu\n",
      s->spec_rounds);
    P("# HELP lockstep_spec_draft_tokens_total Draft tokens proposed.\n"
      "# TYPE lockstep_spec_draft_tokens_total counter\nlockstep_spec_draft_tokens_total %llu\n",
      s->spec_drafted);
    P("# HELP lockstep_spec_accepted_tokens_total Draft tokens accepted.\n"
      "# TYPE lockstep_spec_accepted_tokens_total counter\nlockstep_spec_accepted_tokens_total %llu\n",
      s->spec_accepted);
    P("# HELP lockstep_spec_declined_total Requests where speculation was declined (exactness probe).\n"
      "# TYPE lockstep_spec_declined_total counter\nlockstep_spec_declined_total %llu\n",
      s->spec_declined);
    for (int i = 0; i < LS_SPEC_MAX_BLOCK; i++) {
        if (!s->spec_proposed_at[i]) continue;
        if (i == 0)
            P("# HELP lockstep_spec_accepted_at_position_total Draft tokens accepted, by block position (1 = first "
              "draft).\n# TYPE lockstep_spec_accepted_at_position_total counter\n");
        P("lockstep_spec_accepted_at_position_total{position=\"%d\"} %llu\n", i + 1, s->spec_accepted_at[i]);
    }
    double busy = s->busy_ms + (s->active ? srv_now_ms() - s->busy_since : 0);
    P("# HELP lockstep_tokens_per_second Generated tokens per second of time with a request active.\n"
      "# TYPE lockstep_tokens_per_second gauge\nlockstep_tokens_per_second %.3f\n",
      busy > 0 ? s->generated_tokens * 1e3 / busy : 0.0);
    pthread_mutex_unlock(&s->mu);
    if (s->batcher) {
        ls_batcher_stats bs;
        ls_batcher_get_stats(s->batcher, &bs);
        P("# HELP lockstep_batch_steps_total Forward steps (each serves every slot with work).\n"
          "# TYPE lockstep_batch_steps_total counter\nlockstep_batch_steps_total %llu\n",
          (unsigned long long)bs.steps);
        P("# HELP lockstep_batch_rows_total Rows run by forward steps.\n"
          "# TYPE lockstep_batch_rows_total counter\nlockstep_batch_rows_total %llu\n",
          (unsigned long long)bs.rows);
        P("# HELP lockstep_batch_segments_total Slot requests served by forward steps (segments per step = "
          "sequences batched).\n# TYPE lockstep_batch_segments_total counter\nlockstep_batch_segments_total %llu\n",
          (unsigned long long)bs.segments);
        P("# HELP lockstep_batch_max_segments Most sequences one forward step has carried.\n"
          "# TYPE lockstep_batch_max_segments gauge\nlockstep_batch_max_segments %d\n",
          bs.max_segments);
        P("# HELP lockstep_batch_busy_seconds_total Time spent in forward steps.\n"
          "# TYPE lockstep_batch_busy_seconds_total counter\nlockstep_batch_busy_seconds_total %.3f\n",
          bs.busy_ms / 1e3);
    }
#undef P
    if (n >= cap) n = cap - 1;
    enum MHD_Result rc = send_text(s, c, 200, "text/plain; version=0.0.4", b, n, 0);
    free(b);
    return rc;
}

static enum MHD_Result handle_tokenize(srv_server *s, struct MHD_Connection *c, conn_ctx *cc) {
    ls_req_tokenize t;
    ls_req_error e;
    if (ls_req_parse_tokenize(cc->body, cc->len, &t, &e) != 0) return send_lsr_error(s, c, &e);
    int32_t n = 0;
    int32_t *ids = tokenize(s->model, t.content, t.add_special, t.parse_special, &n);
    ls_req_tokenize_free(&t);
    if (!ids) return send_error(s, c, 500, "tokenization failed", NULL, NULL);
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tokens");
    for (int32_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    free(ids);
    return send_json(s, c, 200, o, 0);
}

static enum MHD_Result handle_detokenize(srv_server *s, struct MHD_Connection *c, conn_ctx *cc) {
    ls_req_detokenize d;
    ls_req_error e;
    if (ls_req_parse_detokenize(cc->body, cc->len, &d, &e) != 0) return send_lsr_error(s, c, &e);
    size_t cap = 64 + (size_t)d.n_tokens * 64, n = 0;
    char *out = malloc(cap);
    if (!out) {
        ls_req_detokenize_free(&d);
        return send_error(s, c, 500, "out of memory", NULL, NULL);
    }
    ls_detok st = {0};
    for (int i = 0; i < d.n_tokens; i++) {
        if (d.tokens[i] >= s->n_vocab) {
            char msg[128];
            snprintf(msg, sizeof msg, "token id %d is out of range [0, %d)", d.tokens[i], s->n_vocab);
            ls_req_detokenize_free(&d);
            free(out);
            return send_error(s, c, 400, msg, "tokens", "invalid_value");
        }
        if (cap - n < 512) {
            char *nb = realloc(out, cap * 2);
            if (!nb) break;
            out = nb;
            cap *= 2;
        }
        int k = ls_detok_token(s->model, &st, d.tokens[i], out + n, (int)(cap - n - 16));
        if (k > 0) n += (size_t)k;
    }
    int k = ls_detok_finish(&st, out + n, (int)(cap - n - 1));
    if (k > 0) n += (size_t)k;
    out[n] = 0;
    ls_req_detokenize_free(&d);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", out);
    free(out);
    return send_json(s, c, 200, o, 0);
}

/* Streaming: hand MHD what the worker produced, waiting (bounded polls) for more. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->out_read < j->out_len) {
            size_t n = j->out_len - j->out_read;
            if (n > max) n = max;
            memcpy(buf, j->out + j->out_read, n);
            j->out_read += n;
            pthread_mutex_unlock(&j->mu);
            return (ssize_t)n;
        }
        if (j->done) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        timed_wait(&j->cv, &j->mu, 100);
        if (j->out_read == j->out_len && !j->done && peer_closed(j->fd)) {
            j->cancel = true;
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void stream_free(void *cls) {
    srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    if (!j->done) j->cancel = true; /* the client went away: the worker stops at its next token */
    pthread_mutex_unlock(&j->mu);
    srv_job_release(j);
}

static enum MHD_Result handle_generate(srv_server *s, struct MHD_Connection *c, ls_req_kind kind, conn_ctx *cc) {
    srv_job *j = srv_job_new();
    if (!j) return send_error(s, c, 500, "out of memory", NULL, NULL);
    ls_req_error e;
    if (ls_req_parse(kind, cc->body, cc->len, &j->req, &e) != 0) {
        srv_job_release(j);
        return send_lsr_error(s, c, &e);
    }
    char err[512];
    char *text;
    if (kind == LSR_CHAT) {
        text = ls_chat_apply(s->model, j->req.messages, j->req.n_messages, err, sizeof err);
        if (!text) {
            srv_job_release(j);
            char msg[600];
            snprintf(msg, sizeof msg, "cannot apply the chat template: %s", err);
            return send_error(s, c, 400, msg, "messages", "invalid_value");
        }
    } else {
        text = j->req.prompt;
    }
    j->prompt = tokenize(s->model, text, kind == LSR_COMPLETION, true, &j->n_prompt);
    if (text != j->req.prompt) free(text);
    const char *pparam = kind == LSR_CHAT ? "messages" : "prompt";
    if (!j->prompt) {
        srv_job_release(j);
        return send_error(s, c, 500, "tokenization failed", pparam, NULL);
    }
    if (j->n_prompt == 0 || j->n_prompt >= s->n_ctx ||
        (j->req.max_tokens > 0 && (int64_t)j->n_prompt + j->req.max_tokens > s->n_ctx)) {
        char msg[256];
        bool prompt_only = j->n_prompt >= s->n_ctx || j->n_prompt == 0;
        if (j->n_prompt == 0)
            snprintf(msg, sizeof msg, "the prompt is empty");
        else if (prompt_only)
            snprintf(msg, sizeof msg,
                     "This model's maximum context length is %d tokens. However, your prompt has %d "
                     "tokens.",
                     s->n_ctx, j->n_prompt);
        else
            snprintf(msg, sizeof msg,
                     "This model's maximum context length is %d tokens. However, you requested %lld "
                     "tokens (%d in the prompt, %d in the completion).",
                     s->n_ctx, (long long)j->n_prompt + j->req.max_tokens, j->n_prompt, j->req.max_tokens);
        srv_job_release(j);
        return send_error(s, c, 400, msg, prompt_only ? pparam : "max_tokens", "context_length_exceeded");
    }
    pthread_mutex_lock(&s->mu);
    unsigned long long seq = ++s->seq;
    pthread_mutex_unlock(&s->mu);
    j->created = (long long)time(NULL);
    snprintf(j->id, sizeof j->id, "%s-%llx%06llx", kind == LSR_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)j->created, seq & 0xFFFFFF);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? (int)ci->connect_fd : -1;
    j->deadline_ms = srv_now_ms() + 1e3 * s->cfg.timeout_s;
    if (j->req.stream && kind == LSR_CHAT) srv_job_out_json(j, srv_chunk(s, j, "", 0, NULL, true));

    int q = srv_submit(s, j);
    if (q != 0) {
        srv_job_release(j);
        return q == -1 ? send_error(s, c, 503, "the server is busy: every slot and queue place is taken; retry later",
                                    NULL, "server_busy")
                       : send_error(s, c, 503, "the server is shutting down", NULL, "shutting_down");
    }
    if (j->req.stream) {
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, j, stream_free);
        if (!r) {
            stream_free(j);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result rc = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        count_status(s, 200);
        return rc;
    }
    /* Non-streaming: wait for the worker, watching for the client going away. */
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        timed_wait(&j->cv, &j->mu, 100);
        if (!j->done && peer_closed(j->fd)) {
            j->cancel = true;
            pthread_mutex_unlock(&j->mu);
            srv_job_release(j);
            return MHD_NO;
        }
    }
    pthread_mutex_unlock(&j->mu);
    if (j->status) {
        enum MHD_Result rc = send_error(s, c, j->status, j->errmsg, NULL, NULL);
        srv_job_release(j);
        return rc;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", kind == LSR_CHAT ? "chat.completion" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddStringToObject(o, "system_fingerprint", ls_backend_name());
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, ch);
    cJSON_AddNumberToObject(ch, "index", 0);
    const char *out = j->text.text ? j->text.text : "";
    if (kind == LSR_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(ch, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", out);
    } else {
        cJSON_AddStringToObject(ch, "text", out);
    }
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddStringToObject(ch, "finish_reason", j->finish_reason);
    cJSON_AddItemToObject(o, "usage", srv_usage_json(&j->stats));
    cJSON_AddItemToObject(o, "timings", srv_timings_json(&j->stats));
    srv_job_release(j);
    return send_json(s, c, 200, o, 0);
}

/* ---- dispatch -------------------------------------------------------------------- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    srv_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        cc = calloc(1, sizeof *cc);
        if (!cc) return MHD_NO;
        *con_cls = cc;
        /* Graceful shutdown (cmd_serve.c) waits for in-progress responses: counted until
         * on_completed, i.e. until MHD has sent the whole response. */
        pthread_mutex_lock(&s->mu);
        s->http_active++;
        pthread_mutex_unlock(&s->mu);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > BODY_LIMIT) {
            cc->too_large = true;
            return send_error(s, c, 413, "request body too large (limit 8 MiB)", NULL, "request_too_large");
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (cc->too_large) return MHD_YES;
        if (cc->len + n > BODY_LIMIT) {
            cc->too_large = true;
            free(cc->body);
            cc->body = NULL;
            cc->len = cc->cap = 0;
            return MHD_YES;
        }
        if (cc->len + n + 1 > cc->cap) {
            size_t cap = cc->cap ? cc->cap : 4096;
            while (cap < cc->len + n + 1) cap *= 2;
            char *b = realloc(cc->body, cap);
            if (!b) return MHD_NO;
            cc->body = b;
            cc->cap = cap;
        }
        memcpy(cc->body + cc->len, upload_data, n);
        cc->len += n;
        cc->body[cc->len] = 0;
        return MHD_YES;
    }
    if (cc->too_large) return send_error(s, c, 413, "request body too large (limit 8 MiB)", NULL, "request_too_large");
    /* The whole request is in: from now on the connection may stay quiet as long as a
     * generation may run (--timeout); until now it had --header-timeout (daemon default), so
     * idle or slow clients cannot hold connections for long. */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.timeout_s);
    if (!cc->body) {
        cc->body = calloc(1, 1);
        if (!cc->body) return MHD_NO;
    }
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health") || !strcmp(url, "/v1/health")) {
        /* HEAD too (load balancers probe with it); libmicrohttpd sends the headers only */
        if (!get && strcmp(method, "HEAD") != 0)
            return send_error(s, c, 405, "use GET for /health", NULL, "method_not_allowed");
        return handle_health(s, c);
    }
    static const struct {
        const char *path;
        int kind; /* 0 models, 1 metrics, 2 chat, 3 completion, 4 tokenize, 5 detokenize */
        bool post;
    } routes[] = {
        {"/v1/models", 0, false},          {"/models", 0, false},          {"/metrics", 1, false},
        {"/v1/chat/completions", 2, true}, {"/chat/completions", 2, true}, {"/v1/completions", 3, true},
        {"/completions", 3, true},         {"/tokenize", 4, true},         {"/detokenize", 5, true},
    };
    int route = -1;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) route = (int)i;
    if (route < 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "unknown endpoint %.100s", url);
        return send_error(s, c, 404, msg, NULL, "not_found");
    }
    if (!authorized(s, c))
        return send_error(s, c, 401, "invalid or missing API key (Authorization: Bearer KEY)", NULL, "invalid_api_key");
    if (routes[route].post ? !post : !get) {
        char msg[160];
        snprintf(msg, sizeof msg, "use %s for %s", routes[route].post ? "POST" : "GET", url);
        return send_error(s, c, 405, msg, NULL, "method_not_allowed");
    }
    if (!atomic_load(&s->ready) || atomic_load(&s->stopping))
        return send_error(s, c, 503, atomic_load(&s->stopping) ? "the server is shutting down" : "loading model", NULL,
                          "unavailable");
    switch (routes[route].kind) {
    case 0: return handle_models(s, c);
    case 1: return handle_metrics(s, c);
    case 2: return handle_generate(s, c, LSR_CHAT, cc);
    case 3: return handle_generate(s, c, LSR_COMPLETION, cc);
    case 4: return handle_tokenize(s, c, cc);
    default: return handle_detokenize(s, c, cc);
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    srv_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (cc) {
        free(cc->body);
        free(cc);
        *con_cls = NULL;
        /* See on_request: one response fewer in progress (graceful shutdown). */
        pthread_mutex_lock(&s->mu);
        s->http_active--;
        pthread_mutex_unlock(&s->mu);
    }
}

int srv_http_start(srv_server *s, char *err, size_t errlen) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)s->cfg.port);
    const char *host = s->cfg.host;
    if (!strcmp(host, "localhost")) host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "--host must be an IPv4 address, got '%s'", s->cfg.host);
        return -1;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    g_daemon =
        MHD_start_daemon(flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                         (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.header_timeout_s,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)(LS_SRV_MAX_CONNECTIONS + 4 * s->cfg.parallel),
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!g_daemon) {
        snprintf(err, errlen, "cannot listen on %s:%d (port in use?)", s->cfg.host, s->cfg.port);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(g_daemon, MHD_DAEMON_INFO_BIND_PORT);
    g_port = di ? di->port : s->cfg.port;
    return 0;
}

int srv_http_port(void) {
    return g_port;
}

void srv_http_quiesce(srv_server *s) {
    (void)s;
    if (g_daemon) g_listen_fd = MHD_quiesce_daemon(g_daemon);
}

void srv_http_stop(srv_server *s) {
    (void)s;
    if (g_daemon) MHD_stop_daemon(g_daemon);
    g_daemon = NULL;
    if (g_listen_fd != MHD_INVALID_SOCKET) close(g_listen_fd);
    g_listen_fd = MHD_INVALID_SOCKET;
}
