/* lockstep serve: an OpenAI-compatible HTTP server (see README "Server"). Start-up order:
 * listen first (so /health answers 503 while loading), load the model, create every slot's
 * session up front, run the exactness probe when a drafter is configured, then serve until
 * SIGINT/SIGTERM: a graceful drain (new requests and queued ones get 503, running generations
 * get up to --shutdown-timeout seconds, then end with finish_reason "length"; every response
 * is completed before the HTTP daemon stops), exit 0. A second signal exits at once. */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "server.h"

static int g_sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    unsigned char b = (unsigned char)sig;
    ssize_t r = write(g_sig_pipe[1], &b, 1);
    (void)r;
}

/* The options of `serve` (the option table, tools/cli/options.c) into the server's
 * configuration, defaults first. False with *rc the exit code when the command ends here. */
static bool serve_config(int argc, char **argv, srv_config *cfg, int *rc) {
    cli_opts o;
    memset(&o, 0, sizeof o);
    o.v[OPT_HOST].s = "127.0.0.1";
    o.v[OPT_PORT].i = 8080;
    o.v[OPT_PARALLEL].i = 1;
    o.v[OPT_BATCH_SIZE].i = 64;
    o.v[OPT_DRAFT_BLOCK_SIZE].i = 4;
    o.v[OPT_TIMEOUT].i = 600;
    o.v[OPT_QUEUE_TIMEOUT].i = 600;
    o.v[OPT_SHUTDOWN_TIMEOUT].i = 10;
    o.v[OPT_HEADER_TIMEOUT].i = 10;
    *rc = cli_opts_parse(CLI_CMD_SERVE, argc, argv, &o);
    if (*rc != CLI_CONTINUE) return false;
    cfg->tensor_parallel = o.given[OPT_TENSOR_PARALLEL] ? o.v[OPT_TENSOR_PARALLEL].i : 0;
    cfg->model_path = o.v[OPT_MODEL].s;
    cfg->host = o.v[OPT_HOST].s;
    cfg->port = o.v[OPT_PORT].i;
    cfg->parallel = o.v[OPT_PARALLEL].i;
    cfg->n_ctx = o.v[OPT_CTX_SIZE].i;
    cfg->n_threads = o.v[OPT_THREADS].i;
    cfg->n_batch = o.v[OPT_BATCH_SIZE].i;
    cfg->api_key = o.v[OPT_API_KEY].s;
    cfg->draft_kind = o.v[OPT_DRAFT].s;
    cfg->draft_path = o.v[OPT_MODEL_DRAFT].s;
    cfg->block_size = o.v[OPT_DRAFT_BLOCK_SIZE].i;
    const char *ai = getenv("LOCKSTEP_ALLOW_INEXACT");
    cfg->allow_inexact = o.v[OPT_ALLOW_INEXACT].on || (ai && *ai && strcmp(ai, "0") != 0);
    cfg->timeout_s = o.v[OPT_TIMEOUT].i;
    cfg->alias = o.v[OPT_ALIAS].s;
    cfg->queue_timeout_s = o.v[OPT_QUEUE_TIMEOUT].i;
    cfg->shutdown_timeout_s = o.v[OPT_SHUTDOWN_TIMEOUT].i;
    cfg->header_timeout_s = o.v[OPT_HEADER_TIMEOUT].i;
    cfg->no_webui = o.v[OPT_NO_WEBUI].on;
    return true;
}

/* Serves until SIGINT/SIGTERM, then drains gracefully (see the top of this file). */
static void serve_until_signal(srv_server *s) {
    const srv_config *cfg = &s->cfg;
    /* Serve: wait for a signal, expiring queued requests past --queue-timeout meanwhile. */
    unsigned char sig = 0;
    for (;;) {
        struct pollfd pfd = {.fd = g_sig_pipe[0], .events = POLLIN};
        if (poll(&pfd, 1, 200) > 0 && read(g_sig_pipe[0], &sig, 1) == 1) break;
        srv_queue_expire(s, false);
    }
    fprintf(stderr, "lockstep serve: %s received, shutting down (up to %d s for running requests; again to exit now)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", cfg->shutdown_timeout_s);
    /* Graceful drain: new requests get 503 (`stopping`), queued ones 503 now, running ones
     * go on until done or the grace period ends (then `abort_gen` ends them at their next
     * token with finish_reason "length"); then wait (bounded) until every response is sent. */
    atomic_store(&s->stopping, true);
    atomic_store(&s->ready, false);
    int n_queued = srv_queue_expire(s, true);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv); /* idle workers exit */
    pthread_mutex_unlock(&s->mu);
    double grace_end = srv_now_ms() + 1e3 * cfg->shutdown_timeout_s;
    bool aborted = false;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int busy = s->active + s->qlen, conns = s->http_active;
        pthread_mutex_unlock(&s->mu);
        if (!busy && !conns) break;
        double now = srv_now_ms();
        if (!aborted && now >= grace_end) {
            fprintf(stderr, "lockstep serve: grace period over, ending %d running generation(s)\n", busy);
            atomic_store(&s->abort_gen, true);
            aborted = true;
        }
        if (aborted && now >= grace_end + 750) break; /* a client that does not read: give up */
        struct pollfd pfd = {.fd = g_sig_pipe[0], .events = POLLIN};
        if (poll(&pfd, 1, 20) > 0 && read(g_sig_pipe[0], &sig, 1) == 1) {
            fprintf(stderr, "lockstep serve: second signal, exiting now\n");
            _exit(128 + sig);
        }
    }
    fprintf(stderr, "lockstep serve: drained (%d queued request(s) answered 503%s), exiting\n", n_queued,
            aborted ? ", running ones cut at the grace period" : "");
}

int cmd_serve(int argc, char **argv) {
    int rc;
    static srv_server S; /* reachable from every MHD/worker thread for the process lifetime */
    srv_server *s = &S;
    srv_config *cfg = &s->cfg;
    if (!serve_config(argc, argv, cfg, &rc)) return rc;
    bool draft_ok;
    cfg->draft_kind = cli_resolve_draft(cfg->draft_kind, cfg->draft_path, &draft_ok);
    if (!draft_ok) return CLI_USAGE;
    if (cfg->api_key && !*cfg->api_key) {
        fprintf(stderr, "lockstep: --api-key must not be empty\n");
        return CLI_USAGE;
    }
    if (!cfg->n_threads) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cfg->n_threads = cores > 0 ? (int)cores : 1;
    }
    /* A verify block (K rows) runs in one forward of at most -b rows: a smaller batch caps K,
     * as ls_generate does (a batch of one row leaves no room for a draft). */
    if (cfg->draft_kind && cfg->n_batch < cfg->block_size) {
        if (cfg->n_batch < 2) {
            fprintf(stderr, "lockstep: -b %d leaves no room for a draft: speculation off\n", cfg->n_batch);
            cfg->draft_kind = NULL;
        } else {
            fprintf(stderr, "lockstep: --draft-block-size %d capped to -b %d\n", cfg->block_size, cfg->n_batch);
            cfg->block_size = cfg->n_batch;
        }
    }
    cfg->queue_cap = 2 * cfg->parallel;
    s->n_slots = cfg->parallel;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    snprintf(s->spec_state, sizeof s->spec_state, "%s", cfg->draft_kind ? "probing" : "off");

    /* SIGINT/SIGTERM: the handler (whichever thread takes it) writes the signal number to a
     * pipe; the main thread waits on it. (Blocking the signals in every thread is not enough:
     * a thread started before main, e.g. a sanitizer's, would take the default action.) */
    if (pipe(g_sig_pipe) != 0) {
        perror("lockstep: pipe");
        return CLI_FAIL;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[1024];
    if (srv_http_start(s, err, sizeof err) != 0) {
        fprintf(stderr, "lockstep: %s\n", err);
        return CLI_FAIL;
    }
    fprintf(stderr, "lockstep serve: listening on http://%s:%d (loading model)\n", cfg->host, srv_http_port());
    rc = CLI_FAIL;
    const char *path = cfg->model_path ? cfg->model_path : cli_default_model_path();
    if (!(s->model = cli_open_model(path))) goto out;
    ls_model_info info;
    ls_model_get_info(s->model, &info);
    s->n_vocab = info.n_vocab;
    if (cfg->alias) {
        snprintf(s->model_id, sizeof s->model_id, "%s", cfg->alias);
    } else {
        const char *base = strrchr(path, '/');
        snprintf(s->model_id, sizeof s->model_id, "%s", base ? base + 1 : path);
    }
    if (cfg->draft_kind && !strcmp(cfg->draft_kind, "model") && !(s->draft_model = cli_open_model(cfg->draft_path)))
        goto out;
    if (srv_slots_start(s, err, sizeof err) != 0) {
        fprintf(stderr, "lockstep: cannot create the slots: %s\n", err);
        goto out;
    }
    /* Slot workers are idle until `ready` (requests get 503 before that), so the probe may
     * use slot 0's session from this thread. */
    srv_warmup_probe(s);
    atomic_store(&s->ready, true);
    fprintf(stderr,
            "lockstep serve: ready on http://%s:%d  model=%s slots=%d threads=%d ctx=%d device=%s backend=%s "
            "speculation=%s%s%s\n",
            cfg->host, srv_http_port(), s->model_id, s->n_slots, cfg->n_threads, s->n_ctx, ls_model_device(s->model),
            ls_device_name_of(ls_model_device(s->model)), s->spec_state, *s->spec_detail ? ": " : "", s->spec_detail);
    serve_until_signal(s);
    rc = CLI_OK;
out:
    /* Stop accepting, end what still runs (the text callbacks see `abort_gen`), let the
     * connections finish their responses, then join the workers. */
    atomic_store(&s->stopping, true);
    atomic_store(&s->abort_gen, true);
    atomic_store(&s->ready, false);
    srv_http_quiesce(s);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    srv_http_stop(s);
    srv_slots_stop(s);
    ls_model_close(s->draft_model);
    ls_model_close(s->model);
    return rc;
}
