/* Exactness probe: chain vs block on throw-away sessions, with localization. See probe.h. */
#include "decode/probe.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/tp.h"

enum { N_SHORT = 3, MAX_K = LS_SPEC_MAX_BLOCK };

/* ---- capture: rows of every (layer, stage, block position) of both arms -------------- */

static size_t cap_slot(const ls_probe_capture *c, int32_t layer, ls_stage st, int32_t r) {
    return ((size_t)(layer + 1) * LS_STAGE_COUNT + st) * (size_t)c->k + (size_t)r;
}

int ls_probe_capture_init(ls_probe_capture *c, int32_t n_layer, int32_t k, int64_t width) {
    memset(c, 0, sizeof *c);
    c->n_layer = n_layer;
    c->k = k;
    c->width = width;
    size_t slots = (size_t)(n_layer + 1) * LS_STAGE_COUNT * (size_t)k;
    for (int a = 0; a < 2; a++) {
        c->rows[a] = malloc(sizeof(float) * slots * (size_t)width);
        c->have[a] = calloc(slots, sizeof(bool));
        if (!c->rows[a] || !c->have[a]) {
            ls_probe_capture_free(c);
            return LS_ERR_NOMEM;
        }
    }
    return LS_OK;
}

void ls_probe_capture_free(ls_probe_capture *c) {
    for (int a = 0; a < 2; a++) {
        free(c->rows[a]);
        free(c->have[a]);
        c->rows[a] = NULL;
        c->have[a] = NULL;
    }
}

void ls_probe_capture_reset(ls_probe_capture *c, int32_t p0) {
    c->p0 = p0;
    size_t slots = (size_t)(c->n_layer + 1) * LS_STAGE_COUNT * (size_t)c->k;
    for (int a = 0; a < 2; a++) memset(c->have[a], 0, sizeof(bool) * slots);
}

void ls_probe_capture_rows(ls_probe_capture *c, int arm, int32_t layer, ls_stage st, const float *rows, int32_t n,
                           int64_t width, int32_t pos0) {
    if (arm < 0 || arm > 1 || layer < -1 || layer >= c->n_layer || (unsigned)st >= LS_STAGE_COUNT) return;
    int64_t keep = width < c->width ? width : c->width;
    for (int32_t i = 0; i < n; i++) {
        int32_t r = pos0 + i - c->p0;
        if (r < 0 || r >= c->k) continue; /* prefill rows are not part of the comparison */
        size_t sl = cap_slot(c, layer, st, r);
        float *dst = c->rows[arm] + sl * (size_t)c->width;
        memcpy(dst, rows + (int64_t)i * width, sizeof(float) * (size_t)keep);
        if (keep < c->width) memset(dst + keep, 0, sizeof(float) * (size_t)(c->width - keep));
        c->have[arm][sl] = true;
    }
}

static bool cap_row_differs(const ls_probe_capture *c, int32_t layer, ls_stage st, int32_t r) {
    size_t sl = cap_slot(c, layer, st, r);
    if (!c->have[0][sl] || !c->have[1][sl]) return false;
    return memcmp(c->rows[0] + sl * (size_t)c->width, c->rows[1] + sl * (size_t)c->width,
                  sizeof(float) * (size_t)c->width) != 0;
}

int32_t ls_probe_capture_diff_rows(const ls_probe_capture *c, int32_t layer, ls_stage st) {
    int32_t n = 0;
    if (layer < -1 || layer >= c->n_layer || (unsigned)st >= LS_STAGE_COUNT) return 0;
    for (int32_t r = 0; r < c->k; r++) n += cap_row_differs(c, layer, st, r);
    return n;
}

bool ls_probe_capture_compare(const ls_probe_capture *c, ls_probe_divergence *first) {
    /* Execution order: every layer's sub-ops, then the output stages (slot layer -1). */
    for (int32_t l = 0; l <= c->n_layer; l++) {
        int32_t layer = l < c->n_layer ? l : -1;
        int st0 = layer < 0 ? LS_STAGE_FINAL_NORM : LS_STAGE_ATTENTION;
        int st1 = layer < 0 ? LS_STAGE_COUNT : LS_STAGE_FINAL_NORM;
        for (int st = st0; st < st1; st++)
            for (int32_t r = 0; r < c->k; r++)
                if (cap_row_differs(c, layer, (ls_stage)st, r)) {
                    if (first) *first = (ls_probe_divergence){layer, (ls_stage)st, c->p0 + r};
                    return true;
                }
    }
    return false;
}

/* The session's capture hook: records into the arm being run. */
typedef struct {
    ls_probe_capture *cap;
    int arm;
} capture_hook;

static void on_stage(void *ud, int32_t layer, ls_stage st, const float *rows, int32_t n, int64_t width, int32_t pos0) {
    capture_hook *h = ud;
    ls_probe_capture_rows(h->cap, h->arm, layer, st, rows, n, width, pos0);
}

/* ---- process-wide switches (ls_test_control) -------------------------------------------- */

typedef struct {
    bool on;
    int32_t layer; /* -1 for the final stages */
    ls_stage stage;
} probe_fault;

static atomic_bool g_trace;
/* Guarded by g_memo_mu (with the in-process memo below). */
static pthread_mutex_t g_memo_mu = PTHREAD_MUTEX_INITIALIZER;
static probe_fault g_fault;
static char g_memo_dir[1024];
static int g_memo_n;

void ls_probe_set_trace(bool on) {
    atomic_store(&g_trace, on);
}

bool ls_probe_trace(void) {
    return atomic_load(&g_trace);
}

int ls_probe_set_memo_dir(const char *dir) {
    if (dir && strlen(dir) >= sizeof g_memo_dir - 64) return LS_ERR_ARG; /* room for the file name */
    pthread_mutex_lock(&g_memo_mu);
    snprintf(g_memo_dir, sizeof g_memo_dir, "%s", dir ? dir : "");
    pthread_mutex_unlock(&g_memo_mu);
    return LS_OK;
}

void ls_probe_memo_dir(char *out, size_t cap) {
    pthread_mutex_lock(&g_memo_mu);
    snprintf(out, cap, "%s", g_memo_dir);
    pthread_mutex_unlock(&g_memo_mu);
}

int ls_probe_set_fault(int32_t layer, const char *stage) {
    probe_fault f = {0};
    if (stage) {
        int st = -1;
        for (int i = 0; i < LS_STAGE_COUNT; i++)
            if (!strcmp(stage, ls_stage_name((ls_stage)i))) st = i;
        if (st < 0) return LS_ERR_ARG;
        f.on = true;
        f.stage = (ls_stage)st;
        f.layer = st >= LS_STAGE_FINAL_NORM ? -1 : layer;
    }
    pthread_mutex_lock(&g_memo_mu);
    g_fault = f;
    g_memo_n = 0; /* verdicts reached with another fault setting */
    pthread_mutex_unlock(&g_memo_mu);
    return LS_OK;
}

static probe_fault fault_now(void) {
    pthread_mutex_lock(&g_memo_mu);
    probe_fault f = g_fault;
    pthread_mutex_unlock(&g_memo_mu);
    return f;
}

void ls_probe_fault_describe(char *out, size_t cap) {
    probe_fault f = fault_now();
    if (f.on)
        snprintf(out, cap, "%d:%s", f.layer, ls_stage_name(f.stage));
    else
        snprintf(out, cap, "off");
}

/* ---- one case: prefill a prompt, then chain vs block over K tokens --------------------- */

typedef struct {
    int64_t diff_bytes, total_bytes;
    int32_t first_row;
} case_result;

/* Chain arm: prefill the prompt on a reset session, then K single-token steps. Block arm:
 * roll the same session back to the end of the prompt (the path speculative rounds take)
 * and run the K tokens as one block. The fault switch is on only for that block forward: a
 * faulted prefill would change the keys every block row reads and blame row 0. */
static int run_arm(ls_session *s, const probe_fault *f, const int32_t *prompt, int32_t np, const int32_t *blk,
                   int32_t k, bool chain, float *logits, int64_t nv, char *err, size_t errlen) {
    ls_session_set_fault(s, false, 0, 0);
    if (!chain) {
        if (ls_session_truncate(s, np) != LS_OK) {
            snprintf(err, errlen, "probe: rollback to the prompt end failed");
            return LS_ERR;
        }
        ls_session_set_fault(s, f->on, f->layer, f->stage);
        int rc = ls_session_eval(s, blk, k, 0, logits, err, errlen);
        ls_session_set_fault(s, false, 0, 0);
        return rc;
    }
    if (ls_session_truncate(s, 0) != LS_OK) {
        snprintf(err, errlen, "probe: reset failed");
        return LS_ERR;
    }
    int32_t nb = ls_session_n_batch(s);
    for (int32_t i = 0; i < np; i += nb) {
        int32_t m = np - i < nb ? np - i : nb;
        int rc = ls_session_eval(s, prompt + i, m, m, NULL, err, errlen);
        if (rc != LS_OK) return rc;
    }
    for (int32_t j = 0; j < k; j++) {
        int rc = ls_session_eval(s, blk + j, 1, 0, logits + (int64_t)j * nv, err, errlen);
        if (rc != LS_OK) return rc;
    }
    return LS_OK;
}

static int run_case(ls_session *s, int32_t k, const probe_fault *f, const int32_t *prompt, int32_t np,
                    const int32_t *blk, float *la, float *lb, ls_probe_capture *cap, case_result *cr, char *err,
                    size_t errlen) {
    int64_t nv = ls_session_n_vocab(s);
    capture_hook hook = {.cap = cap, .arm = 0};
    if (cap) {
        ls_probe_capture_reset(cap, np);
        ls_session_set_capture(s, on_stage, &hook);
    }
    int rc = run_arm(s, f, prompt, np, blk, k, true, la, nv, err, errlen);
    if (rc == LS_OK) {
        hook.arm = 1;
        rc = run_arm(s, f, prompt, np, blk, k, false, lb, nv, err, errlen);
    }
    ls_session_set_capture(s, NULL, NULL);
    if (rc != LS_OK) return rc;
    cr->diff_bytes = 0;
    cr->total_bytes = (int64_t)k * nv * 4;
    cr->first_row = -1;
    const uint8_t *a = (const uint8_t *)la, *b = (const uint8_t *)lb;
    for (int64_t i = 0; i < cr->total_bytes; i++)
        if (a[i] != b[i]) {
            if (cr->first_row < 0) cr->first_row = (int32_t)(i / (nv * 4));
            cr->diff_bytes++;
        }
    return LS_OK;
}

static void trace_report(const ls_probe_capture *c, const ls_model *m) {
    for (int32_t l = -1; l < c->n_layer; l++) {
        char line[256];
        int off = 0;
        const char *kind = l < 0 ? "final" : (m->layers[l].sliding ? "sliding" : "full");
        off += snprintf(line + off, sizeof line - (size_t)off, "probe trace: layer %d (%s):", l, kind);
        for (int st = 0; st < LS_STAGE_COUNT; st++) {
            bool final_stage = st >= LS_STAGE_FINAL_NORM;
            if ((l < 0) != final_stage) continue;
            off += snprintf(line + off, sizeof line - (size_t)off, " %s=%s", ls_stage_name((ls_stage)st),
                            ls_probe_capture_diff_rows(c, l, (ls_stage)st) ? "DIFFERS" : "identical");
        }
        LS_INFO("%s", line);
    }
}

/* The first divergence the capture shows, into res (res->localized false if none). */
static void localize(const ls_probe_capture *cap, const ls_model *model, ls_probe_result *res) {
    ls_probe_divergence dv;
    res->localized = ls_probe_capture_compare(cap, &dv);
    if (res->localized) {
        res->layer = dv.layer;
        res->stage = dv.stage;
        res->position = dv.position;
        res->layer_sliding = dv.layer >= 0 && model->layers[dv.layer].sliding;
    }
}

/* res->message (and res->block_row for a failure), once res->passed is known. */
static void describe(ls_probe_result *res, const case_result *fail_cr, int32_t k, int32_t long_len, int32_t window,
                     const ls_session *s) {
    if (res->passed) {
        snprintf(res->message, sizeof res->message,
                 "exactness probe passed: K=%d, %d prompts (%d short + 1 of %d tokens, beyond the sliding window "
                 "%d), %lld logit bytes of verify blocks byte-identical to the single-token chain (threads=%d, "
                 "device=%s, backend=%s)",
                 k, N_SHORT + 1, N_SHORT, long_len, window, (long long)res->total_bytes, ls_session_n_threads(s),
                 s->kind->name, s->kind->device_name());
        return;
    }
    res->block_row = fail_cr->first_row;
    char where[160];
    if (res->localized)
        snprintf(where, sizeof where, "layer %d (%s) %s at position %d", res->layer,
                 res->layer < 0 ? "output" : (res->layer_sliding ? "sliding" : "full"), ls_stage_name(res->stage),
                 res->position);
    else
        snprintf(where, sizeof where, "not localized (captured stages identical)");
    snprintf(res->message, sizeof res->message,
             "verify block position %d differs from the single-token chain in %lld of %lld logit bytes; first "
             "divergence: %s",
             fail_cr->first_row, (long long)fail_cr->diff_bytes, (long long)fail_cr->total_bytes, where);
}

int ls_probe_run(ls_model *model, const ls_probe_options *opt, ls_probe_result *res, char *err, size_t errlen) {
    memset(res, 0, sizeof *res);
    int32_t k = opt->block_size;
    if (k < 2 || k > MAX_K) {
        snprintf(err, errlen, "probe: block size %d out of range [2, %d]", k, MAX_K);
        return LS_ERR_ARG;
    }
    const ls_config *cfg = &model->cfg;
    probe_fault fault = fault_now();
    if (fault.on && (fault.layer < -1 || fault.layer >= cfg->n_layer)) {
        snprintf(err, errlen, "probe: fault layer %d out of range (the model has %d layers)", fault.layer,
                 cfg->n_layer);
        return LS_ERR_ARG;
    }
    bool trace = opt->trace || ls_probe_trace();
    int32_t long_len = (cfg->sliding_window > 0 ? cfg->sliding_window : 64) + 40;
    int32_t lens[N_SHORT + 1] = {5, 17, 33, long_len};
    ls_session *s = NULL;
    ls_session_params sp = ls_session_default_params();
    sp.n_ctx = long_len + k + 8;
    sp.n_threads = opt->n_threads;
    sp.device = opt->device;
    sp.tensor_parallel = opt->tensor_parallel;
    sp.n_batch = 512 > k ? 512 : k;
    int rc = ls_session_create(model, &sp, &s, err, errlen);
    if (rc != LS_OK) return rc;
    int64_t nv = cfg->n_vocab;
    /* the block's rows and the chain's, in the session's own (page-locked on a GPU) buffer */
    float *la = ls_session_logits_buffer(s, 2 * k), *lb = la ? la + k * nv : NULL;
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)long_len);
    ls_probe_capture cap;
    bool cap_ok = ls_probe_capture_init(&cap, cfg->n_layer, k, cfg->n_embd) == LS_OK;
    if (!la || !lb || !prompt || !cap_ok) {
        snprintf(err, errlen, "probe: out of memory");
        rc = LS_ERR_NOMEM;
        goto done;
    }
    int64_t tot_diff = 0, tot_bytes = 0;
    int32_t fail_case = -1;
    case_result fail_cr = {0};
    uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t)k;
    int32_t blks[N_SHORT + 1][MAX_K];
    for (int c = 0; c <= N_SHORT; c++) {
        int32_t np = lens[c];
        /* Synthetic draws: BOS then pseudo-random ids, random block tokens. */
        for (int32_t i = 0; i < np; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            prompt[i] = i == 0 ? ls_token_bos(model) : (int32_t)(x % (uint64_t)nv);
        }
        for (int32_t j = 0; j < k; j++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            blks[c][j] = (int32_t)(x % (uint64_t)nv);
        }
        case_result cr;
        rc = run_case(s, k, &fault, prompt, np, blks[c], la, lb, trace ? &cap : NULL, &cr, err, errlen);
        if (rc != LS_OK) goto done;
        tot_diff += cr.diff_bytes;
        tot_bytes += cr.total_bytes;
        bool failed = cr.diff_bytes > 0;
        if (trace) {
            LS_INFO("probe trace: K=%d prompt %d (%d tokens): %s", k, c, np, failed ? "DIFFERS" : "identical");
            trace_report(&cap, model);
        }
        if (failed && fail_case < 0) {
            fail_case = c;
            fail_cr = cr;
            /* Localize: rerun this case with capture (unless the trace pass just did). */
            if (!trace) {
                rc = run_case(s, k, &fault, prompt, np, blks[c], la, lb, &cap, &cr, err, errlen);
                if (rc != LS_OK) goto done;
            }
            localize(&cap, model, res);
        }
    }
    res->diff_bytes = tot_diff;
    res->total_bytes = tot_bytes;
    res->passed = tot_diff == 0;
    describe(res, &fail_cr, k, long_len, cfg->sliding_window, s);
done:
    free(prompt);
    if (cap_ok) ls_probe_capture_free(&cap);
    ls_session_free(s);
    return rc;
}

/* ---- memo ------------------------------------------------------------------------ */

typedef struct {
    const ls_model *m;
    const ls_device_kind *kind;
    char drafter[32];
    int32_t k, threads, tp;
    ls_probe_result res;
} memo_entry;

static memo_entry g_memo[64]; /* g_memo_n entries, guarded by g_memo_mu */

/* When the front end names a memo folder (LS_TESTCTL_PROBE_MEMO_DIR; the CLI's default is
 * $XDG_CACHE_HOME/lockstep/probe or ~/.cache/lockstep/probe, docs/settings.md), passing
 * verdicts are also remembered there, keyed by the model file's identity (path, size,
 * mtime), the engine version and build identity (a hash of every engine source, the
 * compilers and flags: ls_build_id), the backend, device kind and device name, drafter, K
 * and thread count, so repeated CLI runs do not pay for the probe each time. Failures are
 * never remembered: they are re-checked (and re-localized) on every start. */
static bool disk_cache_path(const ls_session *s, const char *drafter, int32_t k, char *out, size_t cap) {
    char dir[sizeof g_memo_dir];
    ls_probe_memo_dir(dir, sizeof dir);
    if (!dir[0]) return false;
    const ls_model *m = s->model;
    if (!m->path[0] || !m->file_size) return false;
    char key[2000];
    snprintf(key, sizeof key, "%s|%llu|%lld|%s|%s|%s|%s|%s|%s|%d|%d", m->path, (unsigned long long)m->file_size,
             (long long)m->file_mtime, ls_version(), ls_build_id(), ls_backend_name(), s->kind->name,
             s->kind->device_name(), drafter, k, s->n_threads);
    if (s->tp) /* the verdict holds for this rank count (docs/design.md, "Tensor parallelism") */
        snprintf(key + strlen(key), sizeof key - strlen(key), "|tp%d", s->tp->n);
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = key; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return snprintf(out, cap, "%s/%016llx.pass", dir, (unsigned long long)h) < (int)cap;
}

static bool disk_cache_read(const char *path, ls_probe_result *res) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    memset(res, 0, sizeof *res);
    bool ok = fgets(res->message, sizeof res->message, f) != NULL;
    fclose(f);
    if (!ok) return false;
    res->message[strcspn(res->message, "\n")] = 0;
    res->passed = true;
    return true;
}

static void disk_cache_write(const char *path, const ls_probe_result *res) {
    char dir[1100];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(dir, 0755);
            *p = '/';
        }
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "%s\n", res->message);
    if (fclose(f) == 0)
        rename(tmp, path);
    else
        remove(tmp);
}

void ls_probe_run_cached(ls_session *s, const char *drafter, int32_t block_size, ls_probe_result *res) {
    const ls_model *m = s->model;
    int32_t tp = s->tp ? s->tp->n : 0;
    pthread_mutex_lock(&g_memo_mu);
    for (int i = 0; i < g_memo_n; i++) {
        memo_entry *e = &g_memo[i];
        if (e->m == m && e->kind == s->kind && e->k == block_size && e->threads == s->n_threads && e->tp == tp &&
            !strcmp(e->drafter, drafter)) {
            *res = e->res;
            pthread_mutex_unlock(&g_memo_mu);
            return;
        }
    }
    pthread_mutex_unlock(&g_memo_mu);
    ls_probe_options opt = {
        .block_size = block_size, .n_threads = s->n_threads, .device = s->kind->name, .tensor_parallel = tp};
    char cache_path[1100];
    bool use_disk = disk_cache_path(s, drafter, block_size, cache_path, sizeof cache_path);
    /* A trace or an injected fault always runs the probe for real. */
    if (ls_probe_trace() || fault_now().on) use_disk = false;
    char err[256];
    if (use_disk && disk_cache_read(cache_path, res)) {
        LS_INFO("%s (verdict cached on disk)", res->message);
    } else if (ls_probe_run(s->model, &opt, res, err, sizeof err) != LS_OK) {
        memset(res, 0, sizeof *res);
        snprintf(res->message, sizeof res->message, "exactness probe could not run: %s", err);
    } else if (res->passed) {
        LS_INFO("%s", res->message);
        if (use_disk) disk_cache_write(cache_path, res);
    }
    pthread_mutex_lock(&g_memo_mu);
    if (g_memo_n < 64) {
        memo_entry *e = &g_memo[g_memo_n++];
        e->m = m;
        e->kind = s->kind;
        snprintf(e->drafter, sizeof e->drafter, "%s", drafter);
        e->k = block_size;
        e->threads = s->n_threads;
        e->tp = tp;
        e->res = *res;
    }
    pthread_mutex_unlock(&g_memo_mu);
}

/* ---- public entry ------------------------------------------------------------------- */

int ls_probe(ls_model *m, const ls_probe_params *p, bool *passed, char *msg, size_t msglen, char *err, size_t errlen) {
    ls_probe_options opt = {.block_size = p->block_size,
                            .n_threads = p->n_threads > 0 ? p->n_threads : 0,
                            .trace = p->trace,
                            .tensor_parallel = p->tensor_parallel};
    ls_probe_result r;
    *passed = false;
    int rc = ls_probe_run(m, &opt, &r, err, errlen);
    if (rc != LS_OK) return rc;
    *passed = r.passed;
    snprintf(msg, msglen, "%s", r.message);
    return LS_OK;
}
