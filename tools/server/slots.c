/* lockstep serve: the bounded request queue and the slot workers. Each slot owns one
 * ls_session (and its own drafter) and runs one request at a time on its own thread; the
 * forwards of all slots run in the shared steps of one ls_batcher (decode rows of every
 * active slot in one forward, long prompts in chunks between them). Output never depends
 * on the schedule: the kernels are batch- and thread-count-invariant and sampling is keyed
 * on (seed, position). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "server.h"

double srv_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

srv_job *srv_job_new(void) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->fd = -1;
    ls_stop_init(&j->text);
    return j;
}

void srv_job_release(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0) return;
    ls_request_free(&j->req);
    free(j->prompt);
    free(j->out);
    free(j->lp);
    ls_tool_output_free(&j->tool_out);
    ls_stop_free(&j->text);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

int srv_job_out(srv_job *j, const char *s, size_t n) {
    if (j->out_len + n > j->out_cap) {
        size_t cap = j->out_cap ? j->out_cap : 1024;
        while (cap < j->out_len + n) cap *= 2;
        char *o = realloc(j->out, cap);
        if (!o) return -1;
        j->out = o;
        j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, s, n);
    j->out_len += n;
    return 0;
}

int srv_job_out_json(srv_job *j, cJSON *obj) {
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!s) return -1;
    int rc = srv_job_out(j, "data: ", 6);
    if (!rc) rc = srv_job_out(j, s, strlen(s));
    if (!rc) rc = srv_job_out(j, "\n\n", 2);
    cJSON_free(s);
    return rc;
}

cJSON *srv_usage_json(const ls_gen_stats *st) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", st->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", st->n_generated);
    cJSON_AddNumberToObject(u, "total_tokens", st->n_prompt + st->n_generated);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", st->n_prompt_cached);
    return u;
}

cJSON *srv_timings_json(const ls_gen_stats *st) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "cache_n", st->n_prompt_cached);
    cJSON_AddNumberToObject(t, "prompt_n", st->n_prompt - st->n_prompt_cached);
    cJSON_AddNumberToObject(t, "prompt_ms", st->prefill_ms);
    cJSON_AddNumberToObject(t, "prompt_per_second",
                            st->prefill_ms > 0 ? (st->n_prompt - st->n_prompt_cached) * 1e3 / st->prefill_ms : 0);
    cJSON_AddNumberToObject(t, "predicted_n", st->n_generated);
    cJSON_AddNumberToObject(t, "predicted_ms", st->decode_ms);
    cJSON_AddNumberToObject(t, "predicted_per_second", st->decode_ms > 0 ? st->n_generated * 1e3 / st->decode_ms : 0);
    cJSON_AddNumberToObject(t, "draft_n", (double)st->proposed);
    cJSON_AddNumberToObject(t, "draft_n_accepted", (double)st->accepted);
    cJSON_AddNumberToObject(t, "draft_n_checked", (double)st->checked); /* acceptance = accepted / checked */
    cJSON_AddNumberToObject(t, "max_step_ms", st->max_step_ms);
    return t;
}

/* One streaming chunk: chat.completion.chunk (delta) or text_completion (text). */
cJSON *srv_chunk(const srv_server *s, const srv_job *j, const char *text, size_t n, const char *finish, bool role) {
    bool chat = j->req.kind == LSR_CHAT;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON_AddStringToObject(o, "system_fingerprint", ls_backend_name());
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    char *t = malloc(n + 1);
    if (t) {
        memcpy(t, text ? text : "", n);
        t[n] = 0;
    }
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role) cJSON_AddStringToObject(d, "role", "assistant");
        if (role || n > 0) cJSON_AddStringToObject(d, "content", t ? t : "");
    } else {
        cJSON_AddStringToObject(c, "text", t ? t : "");
    }
    free(t);
    cJSON_AddNullToObject(c, "logprobs");
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    return o;
}

int srv_submit(srv_server *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    if (atomic_load(&s->stopping)) {
        pthread_mutex_unlock(&s->mu);
        return -2;
    }
    if (s->qlen >= s->cfg.queue_cap) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    pthread_mutex_lock(&j->mu);
    j->refs++;
    j->queued_ms = srv_now_ms();
    pthread_mutex_unlock(&j->mu);
    j->next = NULL;
    if (s->qtail)
        s->qtail->next = j;
    else
        s->qhead = j;
    s->qtail = j;
    s->qlen++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* A streaming job's error event (OpenAI-style error object; caller holds j->mu). */
static void stream_error(srv_job *j, const char *code) {
    cJSON *e = cJSON_CreateObject(), *eo = cJSON_AddObjectToObject(e, "error");
    cJSON_AddStringToObject(eo, "message", j->errmsg);
    cJSON_AddStringToObject(eo, "type", j->status >= 500 ? "server_error" : "invalid_request_error");
    cJSON_AddNullToObject(eo, "param");
    if (code)
        cJSON_AddStringToObject(eo, "code", code);
    else
        cJSON_AddNullToObject(eo, "code");
    srv_job_out_json(j, e);
}

int srv_queue_expire(srv_server *s, bool all) {
    double now = srv_now_ms(), limit = 1e3 * s->cfg.queue_timeout_s;
    srv_job *expired = NULL, **tail = &expired;
    pthread_mutex_lock(&s->mu);
    srv_job *prev = NULL;
    for (srv_job *j = s->qhead, *next; j; j = next) {
        next = j->next;
        /* queued_ms is written once, under s->mu (srv_submit), before the job is linked. */
        if (!all && now - j->queued_ms < limit) {
            prev = j;
            continue;
        }
        if (prev)
            prev->next = next;
        else
            s->qhead = next;
        if (s->qtail == j) s->qtail = prev;
        s->qlen--;
        j->next = NULL;
        *tail = j;
        tail = &j->next;
    }
    pthread_mutex_unlock(&s->mu);
    int n = 0;
    for (srv_job *j = expired, *next; j; j = next, n++) {
        next = j->next;
        pthread_mutex_lock(&j->mu);
        j->status = 503;
        snprintf(j->errmsg, sizeof j->errmsg, "%s",
                 all ? "the server is shutting down"
                     : "the request waited in the queue longer than --queue-timeout; retry later");
        j->finish_reason = "length";
        if (j->req.stream) {
            /* Headers (and for chat the role chunk) may be out: an error event, then [DONE]. */
            stream_error(j, all ? "shutting_down" : "queue_timeout");
            srv_job_out(j, "data: [DONE]\n\n", 14);
        }
        j->done = true;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        srv_job_release(j); /* the worker's reference */
    }
    return n;
}

typedef struct {
    srv_server *s;
    srv_job *j;
    srv_slot *slot;
} gen_ctx;

/* Emitted tokens extend the slot's record of its cache (prompt first, see run_job). */
static void on_token(int32_t id, void *ud) {
    gen_ctx *g = ud;
    srv_slot *sl = g->slot;
    if (sl->n_hist < g->s->n_ctx) sl->cached[sl->n_hist++] = id;
}

/* Each emitted token's logprobs (the request asked for them), in emission order. */
static void on_logprobs(const ls_token_logprobs *lp, void *ud) {
    gen_ctx *g = ud;
    srv_job *j = g->j;
    pthread_mutex_lock(&j->mu);
    if (srv_lp_add(j, g->s->model, lp) != 0 && !j->status) {
        j->status = 500;
        snprintf(j->errmsg, sizeof j->errmsg, "out of memory");
        j->cancel = true;
    }
    pthread_mutex_unlock(&j->mu);
}

/* A streaming chunk for text[before, j->text.sent) with the logprobs of the tokens that start
 * in text sent so far (final: all that are left). Caller holds j->mu. */
static void stream_text(gen_ctx *g, size_t before, const char *finish, bool final) {
    srv_job *j = g->j;
    cJSON *c = srv_chunk(g->s, j, j->text.text ? j->text.text + before : "", j->text.sent - before, finish, false);
    if (j->req.logprobs) {
        int to = srv_lp_upto(j, j->text.sent, final);
        srv_lp_set(c, srv_lp_json(g->s, j, j->lp_sent, to));
        j->lp_sent = to;
    }
    srv_job_out_json(j, c);
}

/* The text callback: stop sequences, cancellation (client gone, shutdown), deadline. A token
 * that reaches here was computed and is counted in usage.completion_tokens, so when a response
 * is still delivered (deadline, shutdown drain) its text joins it and generation then stops; only
 * a request whose client went away drops it (nobody reads that response). */
static bool on_text(const char *text, size_t len, void *ud) {
    gen_ctx *g = ud;
    srv_job *j = g->j;
    pthread_mutex_lock(&j->mu);
    bool go = !j->cancel;
    bool last = atomic_load(&g->s->abort_gen);
    if (go && !last && srv_now_ms() > j->deadline_ms) {
        j->timed_out = true;
        last = true;
    }
    if (go) {
        size_t before = j->text.sent;
        if (ls_stop_append(&j->text, text, len, j->req.stop, j->req.n_stop) != 0) {
            j->status = 500;
            snprintf(j->errmsg, sizeof j->errmsg, "out of memory");
            go = false;
        } else {
            size_t from = before;
            if (j->req.stream && j->text.sent > before && srv_tools_stream_from(j, &from)) {
                stream_text(g, from, NULL, false);
                pthread_cond_broadcast(&j->cv);
            }
            if (last || j->text.hit || srv_tools_call_done(j, text, len)) go = false;
        }
    } else {
        /* Refused (the client went away): this text is not in the response, nor are the
         * logprobs of the tokens it came from. */
        while (j->n_lp > j->lp_sent && j->lp[j->n_lp - 1].off >= j->text.len) j->n_lp--;
    }
    pthread_mutex_unlock(&j->mu);
    return go;
}

/* Polled by the engine between prefill chunks and decode steps: a client that went away
 * (or a shutdown) frees the slot without waiting for the next token. */
static bool job_cancelled(void *ud) {
    gen_ctx *g = ud;
    pthread_mutex_lock(&g->j->mu);
    bool c = g->j->cancel || atomic_load(&g->s->abort_gen);
    pthread_mutex_unlock(&g->j->mu);
    return c;
}

/* A finished request into the server's counters (/metrics, /health). */
static void count_job(srv_server *s, bool drafted, int rc, const ls_gen_stats *st, bool cancelled) {
    pthread_mutex_lock(&s->mu);
    s->prompt_tokens += (unsigned long long)st->n_prompt;
    s->prompt_tokens_cached += (unsigned long long)st->n_prompt_cached;
    s->generated_tokens += (unsigned long long)st->n_generated;
    if (cancelled) s->cancelled++;
    if (drafted && rc == LS_OK) {
        s->spec_requests++;
        s->spec_rounds += (unsigned long long)st->verify_rounds; /* plain steps are not verify blocks */
        s->spec_drafted += (unsigned long long)st->proposed;
        s->spec_accepted += (unsigned long long)st->accepted;
        for (int i = 0; i < LS_SPEC_MAX_BLOCK; i++) {
            s->spec_accepted_at[i] += (unsigned long long)st->accepted_at[i];
            s->spec_proposed_at[i] += (unsigned long long)st->proposed_at[i];
        }
        if (st->spec_declined) {
            s->spec_declined++;
            snprintf(s->spec_state, sizeof s->spec_state, "declined");
            snprintf(s->spec_detail, sizeof s->spec_detail, "%s (last request)", st->spec_declined);
        }
    }
    pthread_mutex_unlock(&s->mu);
}

static void run_job(srv_slot *slot, srv_job *j) {
    srv_server *s = slot->srv;
    ls_gen_params gp = ls_gen_default_params();
    const ls_request *r = &j->req;
    if (r->temperature_set) gp.sampling.temperature = r->temperature;
    if (r->top_p_set) gp.sampling.top_p = r->top_p;
    if (r->top_k_set) gp.sampling.top_k = r->top_k;
    if (r->min_p_set) gp.sampling.min_p = r->min_p;
    if (r->repeat_penalty_set) gp.sampling.repeat_penalty = r->repeat_penalty;
    gp.sampling.presence_penalty = r->presence_penalty;
    gp.sampling.frequency_penalty = r->frequency_penalty;
    if (r->seed_set) {
        gp.sampling.seed = r->seed;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        gp.sampling.seed =
            ((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20)) * 0x9E3779B97F4A7C15ull + (uint64_t)(uintptr_t)j;
    }
    gp.n_predict = r->max_tokens >= 0 ? r->max_tokens : -1;
    gp.drafter = slot->drafter;
    gp.block_size = s->cfg.block_size;
    gp.allow_inexact = s->cfg.allow_inexact;
    gp.cancelled = job_cancelled;
    gp.ignore_eos = r->ignore_eos;
    gp.on_token = on_token;
    if (r->logprobs) {
        gp.on_logprobs = on_logprobs;
        gp.n_top_logprobs = r->top_logprobs;
    }
    gp.grammar = r->grammar;
    /* Prefix reuse: the longest common prefix with what this slot's cache holds. */
    int32_t common = 0;
    while (common < slot->n_cached && common < j->n_prompt && slot->cached[common] == j->prompt[common]) common++;
    gp.n_reuse = common;

    gen_ctx g = {s, j, slot};
    ls_gen_stats st;
    memset(&st, 0, sizeof st);
    char err[512] = "";
    int rc = LS_OK;
    pthread_mutex_lock(&j->mu);
    /* Not started yet and shutting down: 503, like the queued requests (srv_queue_expire). */
    bool skip = j->cancel || atomic_load(&s->stopping);
    /* --timeout counts from the start of generation, not from the time queued. */
    j->deadline_ms = srv_now_ms() + 1e3 * s->cfg.timeout_s;
    pthread_mutex_unlock(&j->mu);
    if (skip) {
        rc = LS_ERR;
        snprintf(err, sizeof err, "server shutting down or request cancelled");
    } else {
        memcpy(slot->cached, j->prompt, sizeof(int32_t) * (size_t)j->n_prompt);
        slot->n_hist = j->n_prompt;
        slot->n_cached = 0; /* unknown while generating */
        rc = ls_generate(slot->session, j->prompt, j->n_prompt, &gp, on_text, &g, &st, err, sizeof err);
        /* The cache holds [0, pos) of prompt + emitted tokens (ls_generate's contract). */
        int32_t pos = ls_session_pos(slot->session);
        slot->n_cached = rc == LS_OK ? (pos < slot->n_hist ? pos : slot->n_hist) : 0;
    }
    /* Server counters first, so /metrics already includes this request when its client has
     * the response (lock order: s->mu is never taken while holding a job's mutex). */
    pthread_mutex_lock(&j->mu);
    bool cancelled = j->cancel || atomic_load(&s->abort_gen);
    pthread_mutex_unlock(&j->mu);
    count_job(s, gp.drafter != NULL, rc, &st, cancelled);

    pthread_mutex_lock(&j->mu);
    j->stats = st;
    if (rc != LS_OK && !j->status) {
        j->status = skip ? 503 : 500;
        snprintf(j->errmsg, sizeof j->errmsg, "%.200s", err);
    }
    size_t held = j->text.sent; /* streamed so far */
    if (!j->text.hit) ls_stop_finish(&j->text);
    const char *sr = st.stop_reason ? st.stop_reason : "length";
    j->finish_reason = j->text.hit || !strcmp(sr, "eos") ? "stop" : "length";
    srv_tools_finish(s, j, &held);
    if (j->req.stream) {
        /* What the stop buffer held back, then the final chunk(s) and [DONE]. */
        if (j->status) {
            stream_error(j, NULL);
        } else {
            if (j->text.sent > held) stream_text(&g, held, NULL, true);
            cJSON *fin = srv_chunk(s, j, NULL, 0, j->finish_reason, false);
            srv_tools_choice(j, cJSON_GetArrayItem(cJSON_GetObjectItem(fin, "choices"), 0));
            if (j->req.logprobs && j->lp_sent < srv_lp_upto(j, j->text.sent, true)) {
                int to = srv_lp_upto(j, j->text.sent, true);
                srv_lp_set(fin, srv_lp_json(s, j, j->lp_sent, to));
                j->lp_sent = to;
            }
            cJSON_AddItemToObject(fin, "timings", srv_timings_json(&st));
            srv_job_out_json(j, fin);
            if (j->req.include_usage) {
                cJSON *u = srv_chunk(s, j, NULL, 0, NULL, false);
                cJSON_DeleteItemFromObject(u, "choices");
                cJSON_AddArrayToObject(u, "choices");
                cJSON_AddItemToObject(u, "usage", srv_usage_json(&st));
                srv_job_out_json(j, u);
            }
        }
        srv_job_out(j, "data: [DONE]\n\n", 14);
    }
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static int32_t common_prefix(const srv_slot *sl, const srv_job *j) {
    int32_t n = 0;
    while (n < sl->n_cached && n < j->n_prompt && sl->cached[n] == j->prompt[n]) n++;
    return n;
}

/* The idle slot whose cache shares the longest prefix with the job's prompt, `me` on ties
 * (llama-server's slot selection by prompt similarity): a follow-up request lands where its
 * conversation already is. Caller holds s->mu; an idle slot's record is not being written. */
static srv_slot *best_slot(srv_server *s, srv_slot *me, const srv_job *j) {
    srv_slot *best = me;
    int32_t best_n = common_prefix(me, j);
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl == me || !sl->idle) continue;
        int32_t n = common_prefix(sl, j);
        if (n > best_n) best = sl, best_n = n;
    }
    return best;
}

static void *worker(void *arg) {
    srv_slot *slot = arg;
    srv_server *s = slot->srv;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        slot->idle = true;
        while (!s->qhead && !atomic_load(&s->stopping)) pthread_cond_wait(&s->cv, &s->mu);
        srv_job *j = s->qhead;
        if (!j) break; /* stopping and the queue is drained */
        if (!atomic_load(&s->stopping) && best_slot(s, slot, j) != slot) {
            /* Leave it to the slot that has its prefix: wake it, wait for the next change. */
            pthread_cond_broadcast(&s->cv);
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        slot->idle = false;
        s->qhead = j->next;
        if (!s->qhead) s->qtail = NULL;
        s->qlen--;
        if (s->qhead) pthread_cond_broadcast(&s->cv); /* more work: the other idle slots look again */
        if (s->active++ == 0) s->busy_since = srv_now_ms();
        pthread_mutex_unlock(&s->mu);
        run_job(slot, j);
        srv_job_release(j);
        pthread_mutex_lock(&s->mu);
        if (--s->active == 0) s->busy_ms += srv_now_ms() - s->busy_since;
    }
    slot->idle = false;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* One batcher for all slots: its steps carry every active slot's rows (decode tokens,
 * verify blocks, prefill chunks of n_batch rows) through one forward. Budgets: one
 * prefill chunk plus a full verify block from every slot; logits for a verify block per
 * slot. */
int srv_slots_start(srv_server *s, char *err, size_t errlen) {
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    if (!s->slots) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int32_t block = s->cfg.draft_kind ? s->cfg.block_size : 1;
    ls_batcher_params bp = ls_batcher_default_params();
    bp.n_threads = s->cfg.n_threads;
    bp.n_ctx = s->cfg.n_ctx;
    bp.max_rows = s->cfg.n_batch + s->n_slots * block;
    bp.max_logit_rows = s->n_slots * block;
    char e[512];
    if (ls_batcher_create(s->model, &bp, &s->batcher, e, sizeof e) != LS_OK) {
        snprintf(err, errlen, "%s", e);
        return -1;
    }
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        sl->srv = s;
        sl->index = i;
        ls_session_params sp = ls_session_default_params();
        sp.n_ctx = s->cfg.n_ctx;
        sp.n_threads = s->cfg.n_threads;
        sp.n_batch = s->cfg.n_batch;
        sp.tensor_parallel = s->cfg.tensor_parallel;
        if (ls_session_create(s->model, &sp, &sl->session, e, sizeof e) != LS_OK) {
            snprintf(err, errlen, "slot %d of %d: %s (try a smaller -c or --parallel)", i + 1, s->n_slots, e);
            return -1;
        }
        if (ls_session_attach(sl->session, s->batcher, e, sizeof e) != LS_OK) {
            snprintf(err, errlen, "slot %d: %s", i + 1, e);
            return -1;
        }
        s->n_ctx = ls_session_n_ctx(sl->session);
        if (!(sl->cached = malloc(sizeof(int32_t) * (size_t)s->n_ctx))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        if (s->cfg.draft_kind && !strcmp(s->cfg.draft_kind, "ngram")) {
            if (ls_drafter_ngram_create(LS_NGRAM_DEFAULT_MIN, LS_NGRAM_DEFAULT_MAX, &sl->drafter, e, sizeof e) !=
                LS_OK) {
                snprintf(err, errlen, "drafter: %s", e);
                return -1;
            }
        } else if (s->cfg.draft_kind && !strcmp(s->cfg.draft_kind, "assistant")) {
            if (ls_drafter_assistant_create(s->cfg.draft_path, s->model, s->n_ctx, 1, &sl->drafter, e, sizeof e) !=
                LS_OK) {
                snprintf(err, errlen, "assistant drafter '%s': %s", s->cfg.draft_path, e);
                return -1;
            }
        } else if (s->cfg.draft_kind) {
            if (ls_drafter_model_create(s->draft_model, s->model, s->n_ctx, s->cfg.n_threads, &sl->drafter, e,
                                        sizeof e) != LS_OK) {
                snprintf(err, errlen, "draft model (slot %d): %s", i + 1, e);
                return -1;
            }
        }
    }
    for (int i = 0; i < s->n_slots; i++) {
        if (pthread_create(&s->slots[i].thread, NULL, worker, &s->slots[i]) != 0) {
            snprintf(err, errlen, "cannot start slot thread %d", i + 1);
            return -1;
        }
        s->slots[i].started = true;
    }
    return 0;
}

void srv_slots_stop(srv_server *s) {
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; s->slots && i < s->n_slots; i++)
        if (s->slots[i].started) pthread_join(s->slots[i].thread, NULL);
    for (int i = 0; s->slots && i < s->n_slots; i++) {
        ls_drafter_free(s->slots[i].drafter);
        ls_session_free(s->slots[i].session);
        free(s->slots[i].cached);
    }
    free(s->slots);
    s->slots = NULL;
    ls_batcher_free(s->batcher);
    s->batcher = NULL;
}

static bool sink(const char *text, size_t len, void *ud) {
    (void)text, (void)len, (void)ud;
    return true;
}

/* With a drafter: run the engine's exactness probe now (through a one-token speculative
 * generation on slot 0, before any worker starts), so /health reports its verdict and the
 * first request does not pay for it. The engine caches the verdict per (model, drafter, K,
 * threads), which every slot shares. The warm-up never allows inexact speculation, so a
 * failed probe shows as "declined" even under --allow-inexact (which then serves it anyway). */
void srv_warmup_probe(srv_server *s) {
    if (!s->cfg.draft_kind) {
        snprintf(s->spec_state, sizeof s->spec_state, "off");
        return;
    }
    int32_t ids[64];
    int64_t n = ls_model_tokenize(s->model, "Hello", 5, true, false, ids, 64);
    ls_gen_params gp = ls_gen_default_params();
    gp.n_predict = 1;
    gp.drafter = s->slots[0].drafter;
    gp.block_size = s->cfg.block_size;
    gp.allow_inexact = false;
    gp.sampling.temperature = 0;
    ls_gen_stats st;
    char err[512];
    int rc = n > 0 && n <= 64 ? ls_generate(s->slots[0].session, ids, (int32_t)n, &gp, sink, NULL, &st, err, sizeof err)
                              : LS_ERR;
    pthread_mutex_lock(&s->mu);
    if (rc != LS_OK) {
        snprintf(s->spec_state, sizeof s->spec_state, "unknown");
        snprintf(s->spec_detail, sizeof s->spec_detail, "warm-up failed: %.200s", n <= 0 ? "tokenize" : err);
    } else if (st.spec_declined) {
        snprintf(s->spec_state, sizeof s->spec_state, s->cfg.allow_inexact ? "inexact" : "declined");
        snprintf(s->spec_detail, sizeof s->spec_detail, "%s%s", st.spec_declined,
                 s->cfg.allow_inexact ? "; speculating anyway (--allow-inexact): output may differ" : "");
    } else {
        snprintf(s->spec_state, sizeof s->spec_state, "passed");
        snprintf(s->spec_detail, sizeof s->spec_detail, "exactness probe passed (K=%d, %.0f ms)", s->cfg.block_size,
                 st.probe_ms);
    }
    pthread_mutex_unlock(&s->mu);
}
