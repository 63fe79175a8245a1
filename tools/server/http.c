/* lockstep serve: the HTTP front end (libmicrohttpd, one thread per connection; streaming
 * responses block in the content reader until the slot worker produced more bytes).
 *
 * Framing (docs/server_http.md): our own accept loop checks each connection's request line
 * before handing the socket to libmicrohttpd (MHD_add_connection); the request handler checks
 * Content-Length / Transfer-Encoding / Host / field names when the headers are in; where
 * libmicrohttpd answers a malformed request itself (a bad Content-Length value, a bad chunk,
 * header syntax, a later request line on a kept-alive connection), its log hook writes our JSON
 * answer first and closes our side, so its own answer (HTML, and for a bad Content-Length sent
 * with two header blocks by 0.9.75) never reaches the client. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

#include "http_framing.h"
#include "http_watch.h"
#include "server.h"
#include "webui.h"

enum { BODY_LIMIT = 8 << 20 };
/* Connections held at once (plus 4 per slot), by libmicrohttpd and, separately, by the accept
 * loop while it waits for their request lines. Far above the worker count so that idle or slow
 * clients cannot lock others out: each must deliver its request within --header-timeout (the
 * accept loop sheds its oldest connections first when full). */
enum { LS_SRV_MAX_CONNECTIONS = 1024 };

static struct MHD_Daemon *g_daemon;
static srv_server *g_srv;
static int g_port;

typedef struct {
    char *body;
    size_t len, cap;
    bool too_large;
} conn_ctx;

/* The connection this thread serves (libmicrohttpd runs one thread per connection): set by
 * on_uri once a request line is parsed, read by on_mhd_log to answer libmicrohttpd's own
 * error responses. `responded`: this request has an answer already (ours or the hook's). */
static _Thread_local struct {
    struct MHD_Connection *c;
    int fd;
    bool responded;
    bool answered_raw; /* on_mhd_log answered: libmicrohttpd's complaints that follow are not news */
} t_conn;

/* ---- responses ------------------------------------------------------------------- */

static void count_status(srv_server *s, int status) {
    pthread_mutex_lock(&s->mu);
    if (status >= 100 && status < 600) s->req_by_status[status]++;
    pthread_mutex_unlock(&s->mu);
}

/* Queue response r (and drop our reference): the connection has its answer, /metrics counts it. */
static enum MHD_Result queue_counted(srv_server *s, struct MHD_Connection *c, int status, struct MHD_Response *r) {
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    if (t_conn.c == c) t_conn.responded = true;
    count_status(s, status);
    return rc;
}

/* `close`: the connection is closed after this response (framing errors: what follows the
 * headers cannot be trusted to be a body or a next request). */
static enum MHD_Result send_text(srv_server *s, struct MHD_Connection *c, int status, const char *ctype,
                                 const char *body, size_t n, int retry_after, bool close) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after);
        MHD_add_response_header(r, "Retry-After", ra);
    }
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (close) MHD_add_response_header(r, "Connection", "close");
    return queue_counted(s, c, status, r);
}

static enum MHD_Result send_json(srv_server *s, struct MHD_Connection *c, int status, cJSON *o, int retry_after) {
    char *txt = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!txt) return MHD_NO;
    enum MHD_Result rc = send_text(s, c, status, "application/json", txt, strlen(txt), retry_after, false);
    cJSON_free(txt);
    return rc;
}

static enum MHD_Result send_error_ex(srv_server *s, struct MHD_Connection *c, int status, const char *message,
                                     const char *param, const char *code, bool close) {
    char *txt = ls_http_error_body(status, message, param, code);
    if (!txt) return MHD_NO;
    enum MHD_Result rc = send_text(s, c, status, "application/json", txt, strlen(txt), status == 503 ? 1 : 0, close);
    cJSON_free(txt);
    return rc;
}

static enum MHD_Result send_error(srv_server *s, struct MHD_Connection *c, int status, const char *message,
                                  const char *param, const char *code) {
    return send_error_ex(s, c, status, message, param, code, false);
}

static enum MHD_Result send_lsr_error(srv_server *s, struct MHD_Connection *c, const ls_req_error *e) {
    return send_error(s, c, e->status ? e->status : 400, e->message, e->param, e->code);
}

/* ---- answers libmicrohttpd never sees ------------------------------------------------ */

/* Writes the error response for *p to a client socket (non-blocking; waits up to 1 s for room)
 * and shuts our side for writing: the client reads exactly this response, then end of file. */
static void answer_raw(srv_server *s, int fd, const ls_http_problem *p) {
    char buf[1024];
    size_t n = ls_http_error_response(p, buf, sizeof buf), off = 0;
    double end = srv_now_ms() + 1000;
    while (off < n) {
        ssize_t w = send(fd, buf + off, n - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && srv_now_ms() < end) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            poll(&pfd, 1, 50);
        } else {
            break;
        }
    }
    shutdown(fd, SHUT_WR);
    if (s) count_status(s, p->status);
}

/* Reads and drops what the client still sends, until it closes (it has our answer and our end
 * of file), `ms` pass or 1 MiB came: closing a socket with unread bytes would send a reset,
 * which may discard the answer before the client reads it. */
static void drain(int fd, int ms) {
    char buf[4096];
    size_t total = 0;
    double end = srv_now_ms() + ms;
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r > 0) {
            if ((total += (size_t)r) > (1u << 20)) return;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return;
        double left = end - srv_now_ms();
        if (left <= 0) return;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        poll(&pfd, 1, (int)ceil(left));
    }
}

/* MHD_OPTION_URI_LOG_CALLBACK: a request line was parsed on this thread's connection. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)cls, (void)uri;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    t_conn.c = c;
    t_conn.fd = ci ? (int)ci->connect_fd : -1;
    t_conn.responded = t_conn.answered_raw = false;
    return NULL; /* the request's con_cls starts NULL (on_request allocates it) */
}

/* MHD_OPTION_EXTERNAL_LOGGER. libmicrohttpd answers some malformed requests itself, without
 * calling the handler: it logs "Error processing request (HTTP response code is %u ('%s'))"
 * (status, HTML body) from the connection's thread, then queues its response. Here we write
 * our JSON answer for the same status first and shut our side: libmicrohttpd's own response
 * then fails to send and it closes the connection. Everything else is printed as before
 * (except, after such an answer, libmicrohttpd's complaint that it could not send its own). */
static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    static const char prefix[] = "Error processing request (HTTP response code is %u";
    if (t_conn.answered_raw && t_conn.c) return;
    /* TCP options on a non-TCP socket (srv_http_adopt of a socketpair): not news either */
    if (!strncmp(fmt, "Setting %s option", 17) || !strncmp(fmt, "Failed to push the data", 23)) return;
    if (t_conn.c && t_conn.fd >= 0 && !t_conn.responded && !strncmp(fmt, prefix, sizeof prefix - 1)) {
        va_list aq;
        va_copy(aq, ap);
        unsigned status = va_arg(aq, unsigned);
        const char *body = va_arg(aq, const char *);
        va_end(aq);
        ls_http_problem p;
        ls_http_problem_from_mhd(status, body, &p);
        t_conn.responded = t_conn.answered_raw = true;
        answer_raw(cls, t_conn.fd, &p);
        drain(t_conn.fd, 1000);
    }
    vfprintf(stderr, fmt, ap);
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

/* The chat page's files (GET /, src/server/webui): embedded at build time, served without the
 * API key (the page asks for it when the API answers 401). */
static enum MHD_Result send_asset(srv_server *s, struct MHD_Connection *c, const ls_webui_asset *a) {
    struct MHD_Response *r = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", a->content_type);
    MHD_add_response_header(r, "Content-Security-Policy", LS_WEBUI_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return queue_counted(s, c, 200, r);
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
    enum MHD_Result rc = send_text(s, c, 200, "text/plain; version=0.0.4", b, n, 0, false);
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

/* A streaming response: its job and its connection. While the reader waits for the worker the
 * silence is the server's (a prefill, a slow step), not the client's, so the connection's
 * inactivity timeout (--timeout) is off during the wait and back on once there is something
 * to send (libmicrohttpd counts it afresh when it goes from off to on): it bounds a client
 * that stops reading, never a generation that takes long to produce its next bytes. Before,
 * a stream whose prompt took longer than --timeout to prefill lost its connection with no
 * body at all (docs/server_http.md, point 4). */
typedef struct {
    srv_job *j;
    struct MHD_Connection *c;
    unsigned timeout_s;
    bool waiting; /* the inactivity timeout is off */
} stream_ctx;

static void stream_timeout(stream_ctx *sc, bool waiting) {
    if (sc->waiting == waiting) return;
    sc->waiting = waiting;
    MHD_set_connection_option(sc->c, MHD_CONNECTION_OPTION_TIMEOUT, waiting ? 0u : sc->timeout_s);
}

/* Streaming: hand MHD what the worker produced, waiting (bounded polls) for more. Runs on the
 * connection's own thread (one per connection), where its options may be changed. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *sc = cls;
    srv_job *j = sc->j;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->out_read < j->out_len) {
            size_t n = j->out_len - j->out_read;
            if (n > max) n = max;
            memcpy(buf, j->out + j->out_read, n);
            j->out_read += n;
            pthread_mutex_unlock(&j->mu);
            stream_timeout(sc, false);
            return (ssize_t)n;
        }
        if (j->done) {
            pthread_mutex_unlock(&j->mu);
            stream_timeout(sc, false);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (!sc->waiting) {
            pthread_mutex_unlock(&j->mu);
            stream_timeout(sc, true);
            pthread_mutex_lock(&j->mu);
            continue;
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
    stream_ctx *sc = cls;
    srv_job *j = sc->j;
    pthread_mutex_lock(&j->mu);
    if (!j->done) j->cancel = true; /* the client went away: the worker stops at its next token */
    pthread_mutex_unlock(&j->mu);
    srv_job_release(j);
    free(sc);
}

/* The 200 response of a submitted streaming job: the reader hands over what the worker writes.
 * On failure the job is cancelled (the worker drops it at its next token) and released. */
static enum MHD_Result queue_stream(srv_server *s, struct MHD_Connection *c, srv_job *j) {
    stream_ctx *sc = calloc(1, sizeof *sc);
    if (!sc) {
        pthread_mutex_lock(&j->mu);
        j->cancel = true;
        pthread_mutex_unlock(&j->mu);
        srv_job_release(j);
        return MHD_NO;
    }
    *sc = (stream_ctx){.j = j, .c = c, .timeout_s = (unsigned)s->cfg.timeout_s};
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, sc, stream_free);
    if (!r) {
        stream_free(sc);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    return queue_counted(s, c, 200, r);
}

/* Whether the request fits the slot's context: NULL when it does, else the parameter to
 * blame (pparam for the prompt, or "max_tokens") with the OpenAI-style message in msg. */
static const char *context_error(const srv_server *s, const srv_job *j, const char *pparam, char *msg, size_t n) {
    if (j->n_prompt == 0) {
        snprintf(msg, n, "the prompt is empty");
        return pparam;
    }
    if (j->n_prompt >= s->n_ctx) {
        snprintf(msg, n, "This model's maximum context length is %d tokens. However, your prompt has %d tokens.",
                 s->n_ctx, j->n_prompt);
        return pparam;
    }
    if (j->req.max_tokens > 0 && (int64_t)j->n_prompt + j->req.max_tokens > s->n_ctx) {
        snprintf(msg, n,
                 "This model's maximum context length is %d tokens. However, you requested %lld tokens (%d in "
                 "the prompt, %d in the completion).",
                 s->n_ctx, (long long)j->n_prompt + j->req.max_tokens, j->n_prompt, j->req.max_tokens);
        return "max_tokens";
    }
    return NULL;
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
        text = srv_chat_prompt(s, j, err, sizeof err);
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
    char cmsg[256];
    const char *cparam = context_error(s, j, pparam, cmsg, sizeof cmsg);
    if (cparam) {
        srv_job_release(j);
        return send_error(s, c, 400, cmsg, cparam, "context_length_exceeded");
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
    if (j->req.stream) return queue_stream(s, c, j);
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
        if (!srv_tools_message(j, m, ch)) cJSON_AddStringToObject(m, "content", out);
    } else {
        cJSON_AddStringToObject(ch, "text", out);
    }
    cJSON_AddItemToObject(ch, "logprobs", srv_lp_json(s, j, 0, srv_lp_upto(j, j->text.len, true)));
    cJSON_AddStringToObject(ch, "finish_reason", j->finish_reason);
    cJSON_AddItemToObject(o, "usage", srv_usage_json(&j->stats));
    cJSON_AddItemToObject(o, "timings", srv_timings_json(&j->stats));
    srv_job_release(j);
    return send_json(s, c, 200, o, 0);
}

/* ---- dispatch -------------------------------------------------------------------- */

/* The receive deadline of a connection (http_watch.h), kept in its socket context. */
static srv_watch *conn_watch(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* MHD_OPTION_NOTIFY_CONNECTION: a connection starts (its first request's deadline comes from
 * the accept loop) or is about to close its socket. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    (void)cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? srv_watch_open((int)ci->connect_fd) : NULL;
    } else {
        srv_watch_close(*socket_context);
        *socket_context = NULL;
    }
}

typedef struct {
    ls_http_fields f;
    char te[256]; /* Transfer-Encoding values joined */
    size_t te_len;
    bool te_long;
} field_scan;

static enum MHD_Result scan_field(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    field_scan *fs = cls;
    if (!key || !*key) {
        fs->f.bad_field_name = true;
        return MHD_YES;
    }
    for (const char *k = key; *k; k++)
        if (*k <= ' ' || *k == 0x7F || strchr("\"(),/:;<=>?@[\\]{}", *k)) fs->f.bad_field_name = true;
    if (!strcasecmp(key, "Content-Length")) {
        fs->f.n_content_length++;
    } else if (!strcasecmp(key, "Host")) {
        fs->f.n_host++;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        fs->f.n_transfer_encoding++;
        size_t vn = value ? strlen(value) : 0;
        if (fs->te_len + vn + 2 > sizeof fs->te) {
            fs->te_long = true;
        } else {
            if (fs->te_len) fs->te[fs->te_len++] = ',';
            memcpy(fs->te + fs->te_len, value ? value : "", vn);
            fs->te_len += vn;
            fs->te[fs->te_len] = 0;
        }
    }
    return MHD_YES;
}

/* The framing rules libmicrohttpd does not enforce (ls_http_check_fields), on the first call
 * of a request (headers in, body not read). Returns 0 or fills *p. */
static int check_framing(struct MHD_Connection *c, const char *version, ls_http_problem *p) {
    field_scan fs;
    memset(&fs, 0, sizeof fs);
    fs.f.http_minor = version && !strncmp(version, "HTTP/1.", 7) ? version[7] - '0' : 1;
    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_field, &fs);
    fs.f.transfer_encoding = fs.te_long ? "too long" : fs.te;
    return ls_http_check_fields(&fs.f, p);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
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
        ls_http_problem p;
        if (check_framing(c, version, &p) != 0) {
            cc->too_large = true; /* ignore any body bytes */
            return send_error_ex(s, c, p.status, p.message, NULL, p.code, true);
        }
        /* libmicrohttpd has checked the value: decimal digits that fit 64 bits */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > BODY_LIMIT) {
            cc->too_large = true;
            return send_error_ex(s, c, 413, "request body too large (limit 8 MiB)", NULL, "request_too_large", true);
        }
        return MHD_YES;
    }
    /* libmicrohttpd 0.9.75 makes this call (data pointer, no bytes) when bytes follow a request
     * without a body that sent "Expect: 100-continue": not the final call (that one has no data
     * pointer), nothing to take; the final call follows. */
    if (upload_data && !*upload_data_size) return MHD_YES;
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
    if (cc->too_large)
        return send_error_ex(s, c, 413, "request body too large (limit 8 MiB)", NULL, "request_too_large", true);
    /* The whole request is in: from now on the connection may stay quiet as long as a
     * generation may run (--timeout); until now it had --header-timeout (daemon default, and
     * the total deadline of http_watch.h), so idle or slow clients cannot hold connections. */
    if (!srv_watch_disarm(conn_watch(c))) return MHD_NO; /* too late: the socket is shut */
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
    const ls_webui_asset *asset = s->cfg.no_webui ? NULL : ls_webui_find(url);
    if (asset) {
        if (!get && strcmp(method, "HEAD") != 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "use GET for %.100s", url);
            return send_error(s, c, 405, msg, NULL, "method_not_allowed");
        }
        return send_asset(s, c, asset);
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
    srv_server *s = cls;
    if (t_conn.c == c) t_conn.responded = false;      /* a next request on this connection may follow */
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) { /* it has --header-timeout to arrive whole */
        srv_watch_rearm(conn_watch(c));
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)s->cfg.header_timeout_s);
    }
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

/* ---- accepting --------------------------------------------------------------------- */

/* One thread accepts connections and holds each until its request line is complete (peeking:
 * the bytes stay in the socket for libmicrohttpd), checks it (ls_http_check_request_line),
 * then hands the socket to libmicrohttpd or answers 400/414/505 itself. So libmicrohttpd never
 * sees a malformed first request line, which it would answer with an HTML page or, for a line
 * without a space ("GARBAGE"), not at all. Waiting connections are in accept order (all have the
 * same --header-timeout, so the oldest expires first and is shed first when the cap is
 * reached); answered ones wait (1 s at most) for the client to close before we do. */
typedef struct pend {
    struct pend *prev, *next;
    int fd;
    bool draining;
    size_t drained; /* bytes read and dropped while draining */
    double deadline_ms;
    socklen_t addrlen;
    struct sockaddr_storage addr;
} pend;

typedef struct {
    pend *head, *tail;
    int n;
} pend_list;

static struct {
    int epfd, listen_fd, cmd[2];
    pthread_t thread;
    bool running;
    pend_list wait, drain; /* only the accept thread touches these */
    pend *dead;            /* closed during this epoll batch (its events may follow): freed after it */
    int cap;
    double paused_until; /* out of file descriptors: accept() again after this */
} g_acc = {.epfd = -1, .listen_fd = -1, .cmd = {-1, -1}};

static char g_tag_listen, g_tag_cmd; /* epoll tags of the listening socket and the command pipe */
enum { CMD_QUIESCE = -1, CMD_STOP = -2 };

static void pend_unlink(pend_list *l, pend *p) {
    if (p->prev)
        p->prev->next = p->next;
    else
        l->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        l->tail = p->prev;
    p->prev = p->next = NULL;
    l->n--;
}

static void pend_append(pend_list *l, pend *p) {
    p->prev = l->tail;
    p->next = NULL;
    if (l->tail)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
    l->n++;
}

/* Leaves the lists (and epoll); `close_fd` false when the socket went to libmicrohttpd. */
static void pend_drop(pend *p, bool close_fd) {
    pend_unlink(p->draining ? &g_acc.drain : &g_acc.wait, p);
    epoll_ctl(g_acc.epfd, EPOLL_CTL_DEL, p->fd, NULL);
    if (close_fd) close(p->fd);
    p->fd = -1;
    p->next = g_acc.dead;
    g_acc.dead = p;
}

static void pend_close(pend *p) {
    pend_drop(p, true);
}

static void free_dead(void) {
    while (g_acc.dead) {
        pend *p = g_acc.dead;
        g_acc.dead = p->next;
        free(p);
    }
}

static void pend_add(int fd, const struct sockaddr *addr, socklen_t addrlen) {
    if (g_acc.wait.n >= g_acc.cap) pend_close(g_acc.wait.head); /* shed the oldest */
    pend *p = calloc(1, sizeof *p);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP};
    ev.data.ptr = p;
    if (!p || epoll_ctl(g_acc.epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        free(p);
        close(fd);
        return;
    }
    p->fd = fd;
    p->deadline_ms = srv_now_ms() + 1e3 * (g_srv ? g_srv->cfg.header_timeout_s : 10);
    if (addrlen > sizeof p->addr) addrlen = sizeof p->addr;
    if (addr && addrlen) memcpy(&p->addr, addr, addrlen);
    p->addrlen = addrlen;
    pend_append(&g_acc.wait, p);
}

static void set_rcvlowat(int fd, int n) {
    setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &n, sizeof n);
}

/* Readable (or closed) waiting connection: look at what came so far. */
static void pend_step(pend *p, uint32_t events) {
    if (p->fd < 0) return; /* closed earlier in this batch */
    if (p->draining) {     /* at most 64 KiB a wake-up, 1 MiB in all: a flood cannot hold this thread */
        char buf[4096];
        ssize_t r = 0;
        for (int i = 0; i < 16 && (r = recv(p->fd, buf, sizeof buf, MSG_DONTWAIT)) > 0; i++) p->drained += (size_t)r;
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) || p->drained > (1u << 20))
            pend_close(p);
        return;
    }
    char buf[2 * LS_HTTP_LINE_MAX + 4]; /* a full buffer always decides (see the check) */
    ssize_t r = recv(p->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) pend_close(p);
        return;
    }
    bool eof = r == 0 || (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR));
    ls_http_problem pr;
    switch (ls_http_check_request_line(buf, (size_t)r, eof, &pr)) {
    case LS_HTTP_LINE_MORE: set_rcvlowat(p->fd, (int)r + 1); return; /* wake again when more came */
    case LS_HTTP_LINE_EMPTY: pend_close(p); return;
    case LS_HTTP_LINE_OK: {
        set_rcvlowat(p->fd, 1);
        int fd = p->fd;
        srv_watch_handoff(fd, p->deadline_ms, false); /* the whole request: same deadline */
        pend_drop(p, false);
        /* on failure (e.g. libmicrohttpd's connection cap) it closes the socket */
        if (MHD_add_connection(g_daemon, fd, p->addrlen ? (const struct sockaddr *)&p->addr : NULL, p->addrlen) !=
            MHD_YES)
            srv_watch_handoff(fd, 0, true);
        return;
    }
    case LS_HTTP_LINE_BAD:
        set_rcvlowat(p->fd, 1);
        answer_raw(g_srv, p->fd, &pr);
        pend_unlink(&g_acc.wait, p);
        p->draining = true;
        p->deadline_ms = srv_now_ms() + 1000;
        pend_append(&g_acc.drain, p);
        return;
    }
}

static void accept_some(void) {
    for (int k = 0; k < 64; k++) {
        struct sockaddr_storage a;
        socklen_t al = sizeof a;
        int fd = accept4(g_acc.listen_fd, (struct sockaddr *)&a, &al, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            pend_add(fd, (struct sockaddr *)&a, al);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            if (g_acc.wait.head) { /* out of descriptors: shed the oldest waiting connection */
                pend_close(g_acc.wait.head);
                continue;
            }
            epoll_ctl(g_acc.epfd, EPOLL_CTL_DEL, g_acc.listen_fd, NULL);
            g_acc.paused_until = srv_now_ms() + 100;
        }
        return;
    }
}

static void *accept_main(void *arg) {
    (void)arg;
    for (;;) {
        free_dead();
        double now = srv_now_ms();
        while (g_acc.wait.head && g_acc.wait.head->deadline_ms <= now) pend_close(g_acc.wait.head);
        while (g_acc.drain.head && g_acc.drain.head->deadline_ms <= now) pend_close(g_acc.drain.head);
        if (g_acc.paused_until && g_acc.paused_until <= now && g_acc.listen_fd >= 0) {
            struct epoll_event ev = {.events = EPOLLIN};
            ev.data.ptr = &g_tag_listen;
            epoll_ctl(g_acc.epfd, EPOLL_CTL_ADD, g_acc.listen_fd, &ev);
            g_acc.paused_until = 0;
        }
        double next = INFINITY;
        if (g_acc.wait.head) next = g_acc.wait.head->deadline_ms;
        if (g_acc.drain.head && g_acc.drain.head->deadline_ms < next) next = g_acc.drain.head->deadline_ms;
        if (g_acc.paused_until && g_acc.paused_until < next) next = g_acc.paused_until;
        int timeout = isinf(next) ? -1 : (int)ceil(next - now);
        struct epoll_event ev[64];
        int n = epoll_wait(g_acc.epfd, ev, 64, timeout < 0 ? -1 : timeout);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == &g_tag_listen) {
                accept_some();
            } else if (ev[i].data.ptr == &g_tag_cmd) {
                int cmd;
                while (read(g_acc.cmd[0], &cmd, sizeof cmd) == (ssize_t)sizeof cmd) {
                    if (cmd >= 0) { /* a connected socket handed over (srv_http_adopt) */
                        struct sockaddr_storage a;
                        socklen_t al = sizeof a;
                        if (getpeername(cmd, (struct sockaddr *)&a, &al) != 0) al = 0;
                        pend_add(cmd, (struct sockaddr *)&a, al);
                    } else if (g_acc.listen_fd >= 0) { /* quiesce or stop: accept no more */
                        epoll_ctl(g_acc.epfd, EPOLL_CTL_DEL, g_acc.listen_fd, NULL);
                        close(g_acc.listen_fd);
                        g_acc.listen_fd = -1;
                        g_acc.paused_until = 0;
                    }
                    if (cmd == CMD_STOP) {
                        while (g_acc.wait.head) pend_close(g_acc.wait.head);
                        while (g_acc.drain.head) pend_close(g_acc.drain.head);
                        free_dead();
                        return NULL;
                    }
                }
            } else {
                pend_step(ev[i].data.ptr, ev[i].events);
            }
        }
    }
}

static int send_cmd(int cmd) {
    if (g_acc.cmd[1] < 0) return -1;
    for (;;) {
        ssize_t w = write(g_acc.cmd[1], &cmd, sizeof cmd);
        if (w == (ssize_t)sizeof cmd) return 0;
        if (w < 0 && errno == EINTR) continue;
        return -1;
    }
}

/* Room for the connection cap: raise the soft limit on open files to the hard one. */
static void raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int listen_on(srv_server *s, char *err, size_t errlen) {
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
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, SOMAXCONN) != 0) {
        snprintf(err, errlen, "cannot listen on %s:%d (%s)", s->cfg.host, s->cfg.port, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    socklen_t al = sizeof addr;
    g_port = getsockname(fd, (struct sockaddr *)&addr, &al) == 0 ? ntohs(addr.sin_port) : s->cfg.port;
    g_acc.listen_fd = fd;
    return 0;
}

int srv_http_start(srv_server *s, char *err, size_t errlen) {
    g_srv = s;
    raise_nofile();
    if (srv_watch_start(s->cfg.header_timeout_s) != 0) {
        snprintf(err, errlen, "cannot start the request deadline thread");
        return -1;
    }
    if (s->cfg.port >= 0 && listen_on(s, err, errlen) != 0) {
        srv_watch_stop();
        return -1;
    }
    /* MHD_USE_POLL: connection threads poll() (select() cannot watch descriptors >= 1024) */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET;
    unsigned cap = (unsigned)(LS_SRV_MAX_CONNECTIONS + 4 * s->cfg.parallel);
    g_daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, MHD_OPTION_URI_LOG_CALLBACK,
        on_uri, s, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.header_timeout_s, MHD_OPTION_CONNECTION_LIMIT, cap,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_END);
    g_acc.cap = (int)cap;
    if (!g_daemon || pipe2(g_acc.cmd, O_CLOEXEC | O_NONBLOCK) != 0 || (g_acc.epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        snprintf(err, errlen, "cannot start the HTTP server (%s)", strerror(errno));
        srv_http_stop(s);
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.ptr = &g_tag_cmd;
    epoll_ctl(g_acc.epfd, EPOLL_CTL_ADD, g_acc.cmd[0], &ev);
    if (g_acc.listen_fd >= 0) {
        ev.data.ptr = &g_tag_listen;
        epoll_ctl(g_acc.epfd, EPOLL_CTL_ADD, g_acc.listen_fd, &ev);
    }
    if (pthread_create(&g_acc.thread, NULL, accept_main, NULL) != 0) {
        snprintf(err, errlen, "cannot start the accept thread");
        srv_http_stop(s);
        return -1;
    }
    g_acc.running = true;
    return 0;
}

int srv_http_adopt(int fd) {
    return send_cmd(fd);
}

int srv_http_port(void) {
    return g_port;
}

void srv_http_quiesce(srv_server *s) {
    (void)s;
    send_cmd(CMD_QUIESCE);
}

void srv_http_stop(srv_server *s) {
    (void)s;
    if (g_acc.running) {
        send_cmd(CMD_STOP);
        pthread_join(g_acc.thread, NULL);
        g_acc.running = false;
    }
    if (g_daemon) MHD_stop_daemon(g_daemon);
    g_daemon = NULL;
    srv_watch_stop();
    if (g_acc.listen_fd >= 0) close(g_acc.listen_fd);
    for (int i = 0; i < 2; i++) {
        if (g_acc.cmd[i] >= 0) close(g_acc.cmd[i]);
        g_acc.cmd[i] = -1;
    }
    if (g_acc.epfd >= 0) close(g_acc.epfd);
    g_acc.listen_fd = g_acc.epfd = -1;
}
