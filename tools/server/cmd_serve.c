/* lockstep serve: an OpenAI-compatible HTTP server (see README "Server"). Start-up order:
 * listen first (so /health answers 503 while loading), load the model, create every slot's
 * session up front, run the exactness probe when a drafter is configured, then serve until
 * SIGINT/SIGTERM: a graceful drain (new requests and queued ones get 503, running generations
 * get up to --shutdown-timeout seconds, then end with finish_reason "length"; every response
 * is completed before the HTTP daemon stops), exit 0. A second signal exits at once. */
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "server.h"

static void serve_usage(FILE *f) {
    fprintf(f, "usage: lockstep serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--parallel N] [-c N] [-t N] [-b N]\n"
               "                      [--api-key KEY] [--draft ngram|model|assistant] [--model-draft PATH]\n"
               "                      [--draft-block-size K] [--allow-inexact] [--timeout S] [--alias NAME]\n"
               "                      [--queue-timeout S] [--shutdown-timeout S] [--header-timeout S] [--no-webui]\n"
               "  Endpoints: POST /v1/chat/completions, /v1/completions, /tokenize, /detokenize;\n"
               "             GET /v1/models, /health, /metrics; GET / is a chat page.\n"
               "  --parallel N   slots (sequences decoded concurrently, each with its own KV cache); default 1;\n"
               "                 up to 2*N more requests wait in a queue, beyond that 503 + Retry-After\n"
               "  -c N           context per slot (default: the model's training context)\n"
               "  -t N           threads of the forward steps (default: all cores); all slots' decode rows\n"
               "                 run in one forward per step\n"
               "  -b N           prompt chunk: most prompt tokens of one request per step (default 64),\n"
               "                 so a long prompt does not stall the other streams; it also caps K (a verify\n"
               "                 block is K rows; -b 1 turns speculation off)\n"
               "  --port 0       picks a free port (printed on stderr)\n"
               "  --timeout S    the longest a generation may run, counted from its start (then\n"
               "                 finish_reason \"length\"), and the idle limit once a request is in; default 600\n"
               "  --header-timeout S  a connection must send its whole request within S seconds of going\n"
               "                 quiet, or it is closed (default 10): idle sockets cannot hold the server\n"
               "  --queue-timeout S  a request still waiting for a slot after S seconds gets 503 (default 600)\n"
               "  --shutdown-timeout S  on SIGTERM/SIGINT: stop accepting, answer queued requests 503, let\n"
               "                 running generations go on for up to S seconds (default 10), then end them\n"
               "                 with finish_reason \"length\" and exit 0; a second signal exits at once\n"
               "  --api-key KEY  require 'Authorization: Bearer KEY' (not for /health and the chat page)\n"
               "  --no-webui     no chat page at / (by default GET / serves it, embedded in the binary)\n");
}

static int g_sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    unsigned char b = (unsigned char)sig;
    ssize_t r = write(g_sig_pipe[1], &b, 1);
    (void)r;
}

int cmd_serve(int argc, char **argv) {
    enum {
        O_HOST = 256,
        O_PORT,
        O_PAR,
        O_KEY,
        O_DRAFT,
        O_MDRAFT,
        O_DBS,
        O_INEXACT,
        O_TIMEOUT,
        O_ALIAS,
        O_QTIMEOUT,
        O_STIMEOUT,
        O_HTIMEOUT,
        O_NOWEBUI
    };
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"host", required_argument, 0, O_HOST},
                                         {"port", required_argument, 0, O_PORT},
                                         {"parallel", required_argument, 0, O_PAR},
                                         {"ctx-size", required_argument, 0, 'c'},
                                         {"threads", required_argument, 0, 't'},
                                         {"batch-size", required_argument, 0, 'b'},
                                         {"api-key", required_argument, 0, O_KEY},
                                         {"draft", required_argument, 0, O_DRAFT},
                                         {"model-draft", required_argument, 0, O_MDRAFT},
                                         {"draft-block-size", required_argument, 0, O_DBS},
                                         {"allow-inexact", no_argument, 0, O_INEXACT},
                                         {"timeout", required_argument, 0, O_TIMEOUT},
                                         {"alias", required_argument, 0, O_ALIAS},
                                         {"queue-timeout", required_argument, 0, O_QTIMEOUT},
                                         {"shutdown-timeout", required_argument, 0, O_STIMEOUT},
                                         {"header-timeout", required_argument, 0, O_HTIMEOUT},
                                         {"no-webui", no_argument, 0, O_NOWEBUI},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    static srv_server S; /* reachable from every MHD/worker thread for the process lifetime */
    srv_server *s = &S;
    srv_config *cfg = &s->cfg;
    cfg->host = "127.0.0.1";
    cfg->port = 8080;
    cfg->parallel = 1;
    cfg->n_batch = 64;
    cfg->block_size = 4;
    cfg->timeout_s = 600;
    cfg->queue_timeout_s = 600;
    cfg->shutdown_timeout_s = 10;
    cfg->header_timeout_s = 10;
    const char *ai = getenv("LOCKSTEP_ALLOW_INEXACT");
    cfg->allow_inexact = ai && *ai && strcmp(ai, "0") != 0;
    int32_t v;
    optind = 1;
    opterr = 1;
    int o;
    while ((o = getopt_long(argc, argv, "m:c:t:b:h", opts, NULL)) != -1) {
        bool ok = true;
        switch (o) {
        case 'm': cfg->model_path = optarg; break;
        case O_HOST: cfg->host = optarg; break;
        case O_PORT: ok = cli_parse_i32("--port", optarg, 0, 65535, &v), cfg->port = v; break;
        case O_PAR: ok = cli_parse_i32("--parallel", optarg, 1, 256, &v), cfg->parallel = v; break;
        case 'c': ok = cli_parse_i32("-c", optarg, 1, 1 << 24, &v), cfg->n_ctx = v; break;
        case 't': ok = cli_parse_i32("-t", optarg, 1, 512, &v), cfg->n_threads = v; break;
        case 'b': ok = cli_parse_i32("-b", optarg, 1, 4096, &v), cfg->n_batch = v; break;
        case O_KEY: cfg->api_key = optarg; break;
        case O_DRAFT: cfg->draft_kind = optarg; break;
        case O_MDRAFT: cfg->draft_path = optarg; break;
        case O_DBS:
            ok = cli_parse_i32("--draft-block-size", optarg, 2, LS_SPEC_MAX_BLOCK, &v), cfg->block_size = v;
            break;
        case O_INEXACT: cfg->allow_inexact = true; break;
        case O_NOWEBUI: cfg->no_webui = true; break;
        case O_TIMEOUT: ok = cli_parse_i32("--timeout", optarg, 1, 86400, &v), cfg->timeout_s = v; break;
        case O_ALIAS: cfg->alias = optarg; break;
        case O_QTIMEOUT: ok = cli_parse_i32("--queue-timeout", optarg, 1, 86400, &v), cfg->queue_timeout_s = v; break;
        case O_HTIMEOUT: ok = cli_parse_i32("--header-timeout", optarg, 1, 86400, &v), cfg->header_timeout_s = v; break;
        case O_STIMEOUT:
            ok = cli_parse_i32("--shutdown-timeout", optarg, 0, 86400, &v), cfg->shutdown_timeout_s = v;
            break;
        case 'h': serve_usage(stdout); return CLI_OK;
        default: serve_usage(stderr); return CLI_USAGE;
        }
        if (!ok) return CLI_USAGE;
    }
    if (optind < argc) {
        fprintf(stderr, "lockstep: unexpected argument '%s'\n", argv[optind]);
        serve_usage(stderr);
        return CLI_USAGE;
    }
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
    int rc = CLI_FAIL;
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
