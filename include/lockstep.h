/* lockstep: an LLM inference engine whose speculative decoding never changes a byte of
 * what the model says. This is the whole public API; the CLI and the server use nothing
 * else.
 *
 * Objects and lifetimes:
 *   ls_model    immutable weights (mmapped) + tokenizer + config, shared by sessions;
 *   ls_session  one sequence: KV cache, position, scratch buffers, a thread pool;
 *   ls_session  runs on a device ("cpu" or "cuda": ls_model_set_device, --device);
 *   ls_sampling sampling settings; token choice is a pure function of (logits row, history,
 *               seed, absolute position), so any decoding schedule picks the same tokens.
 * Errors: functions return 0 (LS_OK) or a negative code, and write a message into the
 * caller's err buffer. Nothing here exits or aborts on bad input. */
#ifndef LOCKSTEP_H
#define LOCKSTEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { LS_OK = 0, LS_ERR = -1, LS_ERR_NOMEM = -2, LS_ERR_CONTEXT = -3, LS_ERR_ARG = -4 };

typedef struct ls_model ls_model;
typedef struct ls_session ls_session;

/* ---- model ---------------------------------------------------------------------- */

/* A GGUF file or a Hugging Face / MLX checkpoint directory. LS_ERR_NOMEM when memory runs
 * out while loading (the loader's tables and weight copies, the tokenizer), LS_ERR for
 * anything it cannot use (err names it). */
int ls_model_open(const char *path, ls_model **out, char *err, size_t errlen);
void ls_model_close(ls_model *m);

typedef struct {
    const char *arch; /* "gemma3" */
    const char *name; /* general.name or "" */
    int32_t n_vocab, n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff;
    int32_t n_ctx_train, sliding_window;
    int32_t n_expert;      /* MoE experts a layer; 0 for a dense model */
    int64_t n_params;      /* elements over all weight tensors */
    uint64_t weight_bytes; /* bytes of all weight tensors */
} ls_model_info;
void ls_model_get_info(const ls_model *m, ls_model_info *info);

/* ---- tokenizer ------------------------------------------------------------------ */

/* Returns the number of ids (may exceed cap; call again with a bigger buffer), < 0 on error. */
int64_t ls_model_tokenize(const ls_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                          int32_t *out, int64_t cap);
/* Same, into a malloc'ed array sized to fit (*n set); NULL on error. Caller frees. */
int32_t *ls_model_tokenize_alloc(const ls_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                                 int32_t *n);
/* Render a chat (roles system/user/assistant) with the model's template + generation prompt;
 * malloc'ed string, caller frees; NULL + err on bad input. */
typedef struct {
    const char *role;
    const char *content;
} ls_message;
char *ls_chat_apply(const ls_model *m, const ls_message *msgs, int n, char *err, size_t errlen);
/* Tool use (docs/tool_calls.md). The model's chat template family: 3 (Gemma 3), 4 (Gemma 4), 0. */
int ls_model_chat_style(const ls_model *m);
/* Gemma 4 only: tool declarations / calls / responses pre-rendered in its native format (see
 * ls_chat_tool_text in src/tokenizer/tokenizer.h); calls and responses have n entries (NULL
 * entries allowed). */
typedef struct {
    const char *tools;
    const char *const *calls;
    const char *const *responses;
} ls_chat_tools;
/* Renders msgs with the template of `style` (3 or 4) and the generation prompt, like
 * ls_chat_apply; `tools` is used by style 4 only (NULL: none). */
char *ls_chat_render_style(int style, const ls_message *msgs, int n, const ls_chat_tools *tools, char *err,
                           size_t errlen);
bool ls_token_is_eog(const ls_model *m, int32_t id);
/* True if both models have the same token texts, in the same order. */
bool ls_model_same_vocab(const ls_model *a, const ls_model *b);
int32_t ls_token_bos(const ls_model *m);

/* Streaming detokenizer: appends only complete UTF-8 to out; returns bytes written or -1. */
typedef struct {
    char pending[8];
    int n_pending;
} ls_detok;
int ls_detok_token(const ls_model *m, ls_detok *st, int32_t id, char *out, int cap);
int ls_detok_finish(ls_detok *st, char *out, int cap);
/* The bytes token `id` adds to generated text (what ls_detok_token emits for it, before the
 * streaming detokenizer joins or replaces incomplete UTF-8; control tokens add nothing).
 * Returns the byte count (may exceed cap: call again with a bigger buffer), -1 for a bad id. */
int ls_token_text(const ls_model *m, int32_t id, char *buf, int cap);

/* ---- sessions and forward passes ------------------------------------------------ */

/* Devices (docs/cuda.md): "cpu", or "cuda" in builds with LOCKSTEP_CUDA on a machine with
 * an NVIDIA GPU. The model's device is what its sessions, batchers and drafters use unless
 * their parameters name another; it starts as the default ("cuda" when built with CUDA and
 * a GPU is present, else "cpu"). Setting it makes the weights readable there (the CUDA
 * device uploads them once). "auto" or NULL = the default. */
int ls_model_set_device(ls_model *m, const char *device, char *err, size_t errlen);
const char *ls_model_device(const ls_model *m);
/* Human-readable name of the device behind a kind ("NVIDIA H200", "cpu-avx2"). */
const char *ls_device_name_of(const char *kind);

typedef struct {
    int32_t n_ctx;     /* context length; 0 = the model's training context */
    int32_t n_threads; /* 0 = all cores */
    int32_t n_batch;   /* most rows in one forward (prefill chunk, verify block); 0 = 512 */
    /* KV cache element type: 0 = the model's default (f32 for checkpoint directories,
     * f16 for GGUF files), 1 = f16, 2 = f32. */
    int32_t kv_type;
    const char *device; /* "cpu", "cuda"; NULL = the model's device */
    /* Tensor parallelism (docs/design.md, "Tensor parallelism"): 0 = off (one backend, the
     * default); N >= 1 = N ranks, each a thread with its own backend and shard of the weights
     * and KV cache, meeting in an exact all-reduce (cpu: host threads; cuda: NCCL over devices
     * 0..N-1, so N = 1 is the NCCL path with a communicator of size 1, bit-identical to off).
     * Logits at a fixed N are batch-invariant; across different N they are close, not identical.
     * Dense Gemma only; not with a batcher or the assistant drafter yet. */
    int32_t tensor_parallel;
    /* 0 = the exact all-reduce (all-gather, then a rank-order sum); 1 = the library's plain
     * all-reduce (ncclAllReduce): only to measure the difference, its order depends on the
     * row count at N >= 3. */
    int32_t tp_reduce;
} ls_session_params;
ls_session_params ls_session_default_params(void);

/* Allocates the whole KV cache and every buffer up front; a clear LS_ERR_NOMEM message if it
 * does not fit. */
int ls_session_create(ls_model *m, const ls_session_params *p, ls_session **out, char *err, size_t errlen);
void ls_session_free(ls_session *s);
int32_t ls_session_n_ctx(const ls_session *s);
int32_t ls_session_pos(const ls_session *s); /* tokens in the cache */
int32_t ls_session_n_vocab(const ls_session *s);
int32_t ls_session_n_batch(const ls_session *s);
int32_t ls_session_n_threads(const ls_session *s);
const char *ls_session_device(const ls_session *s); /* "cpu" or "cuda" */
const ls_model *ls_session_model(const ls_session *s);

/* Run n tokens (n <= n_batch) at positions pos..pos+n-1, appending to the KV cache.
 * Logits (float32, n_vocab per row) are written for rows [logits_from, n) into `logits`
 * (row 0 of `logits` is row logits_from); logits may be NULL to compute none. Every row's
 * result is bit-identical whatever n, the chunking or the thread count. */
int ls_session_eval(ls_session *s, const int32_t *tokens, int32_t n, int32_t logits_from, float *logits, char *err,
                    size_t errlen);
/* Host memory for `rows` logits rows (rows x n_vocab floats, 64-byte aligned) to pass to
 * ls_session_eval, owned by s: page-locked when s runs on a GPU, so the rows come back at the
 * bus's rate (H200: one 262,144-entry row in 27 us against 142 us into malloc'd memory,
 * docs/cuda.md 3), plain memory otherwise. Valid until ls_session_free or a later call for
 * more rows (which may move it). Any host buffer works with ls_session_eval; this one is
 * faster there. NULL when out of memory or rows < 1. */
float *ls_session_logits_buffer(ls_session *s, int32_t rows);
/* Forget every position >= pos (rollback). */
int ls_session_truncate(ls_session *s, int32_t pos);
/* Wall time of the forward step that served the session's last eval (with a batcher: the
 * whole shared step, i.e. how long this session's request was held up by it). */
double ls_session_last_step_ms(const ls_session *s);

/* ---- batching: several sessions, one forward per step ----------------------------- */

/* A batcher runs the evals of every attached session in shared forward steps: one forward
 * over all queued rows (decode tokens, verify blocks, prefill chunks of n_batch rows), on
 * its own thread and thread pool. ls_session_eval keeps its meaning and its bits (the
 * kernels are batch-invariant); it just waits for the step that serves it. */
typedef struct ls_batcher ls_batcher;
typedef struct {
    int32_t n_threads;      /* 0 = all cores */
    int32_t max_rows;       /* most rows in one step; 0 = 256 */
    int32_t max_logit_rows; /* most logits rows in one step; 0 = min(64, max_rows) */
    int32_t n_ctx;          /* longest context of an attached session; 0 = the model's */
    const char *device;     /* NULL = the model's device; attached sessions must use the same */
} ls_batcher_params;
ls_batcher_params ls_batcher_default_params(void);
int ls_batcher_create(ls_model *m, const ls_batcher_params *p, ls_batcher **out, char *err, size_t errlen);
/* Attached sessions must be detached or freed first. */
void ls_batcher_free(ls_batcher *b);
/* Route the session's evals through b (NULL: detach; back to its own forwards). Call while
 * no eval of s is running. */
int ls_session_attach(ls_session *s, ls_batcher *b, char *err, size_t errlen);
/* Tell the batcher not to wait for this session's next eval (ls_generate calls it when it
 * returns); a no-op for a session without a batcher. */
void ls_session_idle(ls_session *s);
typedef struct {
    uint64_t steps, rows, segments; /* forward steps, rows and session segments they ran */
    double busy_ms;                 /* time spent in forwards */
    int32_t max_segments;           /* most sessions in one step so far */
} ls_batcher_stats;
void ls_batcher_get_stats(ls_batcher *b, ls_batcher_stats *st);

/* ---- sampling ------------------------------------------------------------------- */

typedef struct {
    float temperature;       /* <= 0: greedy */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off */
    int32_t repeat_last_n;   /* window of history the penalties look at; -1 = all */
    float frequency_penalty; /* 0: off */
    float presence_penalty;  /* 0: off */
    uint64_t seed;
} ls_sampling;
ls_sampling ls_sampling_default(void);

/* Choose the token for absolute position `pos` from one logits row. history = the tokens at
 * positions [0, pos) (prompt + generated). Pure function: same inputs, same token. Returns
 * the token id, or LS_ERR_NOMEM when its scratch (about 20 bytes per vocabulary entry) cannot
 * be allocated: sampling never falls back to something else. (ls_generate and the drafters
 * use scratch allocated with the session or drafter and do not allocate per token.) */
int32_t ls_sample(const ls_sampling *sp, const float *logits, int32_t n_vocab, const int32_t *history, int32_t pos);

/* ---- drafters (speculative decoding) ---------------------------------------------- */

typedef struct ls_drafter ls_drafter;
/* Prompt lookup: match the last n tokens (n from n_max down to n_min) in the prompt and the
 * text so far; propose what followed the most recent earlier match. */
int ls_drafter_ngram_create(int32_t n_min, int32_t n_max, ls_drafter **out, char *err, size_t errlen);
/* Default n-gram sizes: longer keys disambiguate copies of code and quotes (measured on the
 * edit benchmark: acceptance 0.66 -> 0.76 going from 1..3 to 1..6). */
enum { LS_NGRAM_DEFAULT_MIN = 1, LS_NGRAM_DEFAULT_MAX = 6 };
/* A separate model with the same vocabulary, its own session and KV cache rolled back in
 * step with the target's. Refuses a vocabulary mismatch. n_threads 0 = all cores. */
int ls_drafter_model_create(ls_model *draft, const ls_model *target, int32_t n_ctx, int32_t n_threads, ls_drafter **out,
                            char *err, size_t errlen);
/* The Gemma 4 assistant (MTP) drafter: a gemma4_assistant checkpoint directory that drafts
 * from the target's own state (its last final-normed hidden row and the K/V of its last
 * sliding and full layers), all K-1 drafts at the bonus token's position. Checked against the
 * target (a Gemma 4 model): backbone = hidden size, vocabulary, head dims and KV heads per
 * layer type, sliding window; a mismatch is a clear error. n_threads 0 = 1. */
int ls_drafter_assistant_create(const char *dir, const ls_model *target, int32_t n_ctx, int32_t n_threads,
                                ls_drafter **out, char *err, size_t errlen);
/* True when path is a checkpoint directory whose config.json says gemma4_assistant (how
 * --model-draft picks the drafter kind by itself). */
bool ls_is_assistant_checkpoint(const char *path);
void ls_drafter_free(ls_drafter *d);
const char *ls_drafter_name(const ls_drafter *d);

typedef enum {
    LS_SPEC_EXACT = 0,     /* accept while draft == the target's position-keyed choice: byte-identical */
    LS_SPEC_REJECTION = 1, /* standard rejection sampling: same distribution, NOT byte-identical */
} ls_spec_sampling;

/* ---- exactness probe --------------------------------------------------------------- */

typedef struct {
    int32_t block_size;      /* K, 2..16 */
    int32_t n_threads;       /* 0 = all cores */
    bool trace;              /* always localize and log per-layer results (also: LS_TESTCTL_PROBE_TRACE) */
    int32_t tensor_parallel; /* ls_session_params.tensor_parallel of the probed sessions (0 = off) */
} ls_probe_params;
/* Runs the probe (a fault set with LS_TESTCTL_FAULT_PROBE applies). Returns LS_OK when it
 * ran, with *passed = whether verify blocks are byte-identical to the single-token chain and
 * msg the verdict (where they first diverge, if not); a negative code if it could not run
 * (err says why). */
int ls_probe(ls_model *m, const ls_probe_params *p, bool *passed, char *msg, size_t msglen, char *err, size_t errlen);

/* ---- log-probabilities ------------------------------------------------------------ */

/* The model's own distribution at a position: the log-softmax of the raw logits row (before
 * temperature, penalties, top-k/top-p/min-p), computed in a fixed order (docs/logprobs.md),
 * so an identical row gives identical bits. */
enum { LS_MAX_TOP_LOGPROBS = 20 };
typedef struct {
    int32_t id;
    float logprob;
} ls_logprob;
typedef struct {
    int32_t pos;   /* absolute position of the token (set by ls_generate; 0 from ls_logprobs) */
    int32_t token; /* the token the logprob is for */
    float logprob;
    int32_t n_top;                       /* entries in top */
    ls_logprob top[LS_MAX_TOP_LOGPROBS]; /* the n_top most likely tokens, most likely first; equal
                                          * logits: lower id first */
} ls_token_logprobs;
/* Fills *out for `token` and the n_top (0..LS_MAX_TOP_LOGPROBS) most likely tokens of one
 * logits row of n_vocab floats. LS_OK, or LS_ERR_ARG. Pure; allocates nothing. */
int ls_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t n_top, ls_token_logprobs *out);

/* ---- structured output (docs/structured_output.md) ------------------------------- */

/* A compiled constraint: generation emits only text the grammar accepts, and ends (EOS) only
 * where the text is a complete value. Immutable once compiled: shareable by threads. */
typedef struct ls_grammar ls_grammar;
/* A JSON schema (its JSON text). NULL with err naming the unsupported keyword and its JSON
 * pointer ("unsupported keyword 'pattern' at #/properties/name"), or the problem. */
ls_grammar *ls_grammar_json_schema(const char *schema, size_t len, char *err, size_t errlen);
/* Any JSON object (OpenAI's response_format json_object). */
ls_grammar *ls_grammar_json_object(char *err, size_t errlen);
void ls_grammar_free(ls_grammar *g);

/* ---- generation ----------------------------------------------------------------- */

typedef struct {
    int32_t n_predict; /* max new tokens; < 0: until EOS or context end */
    bool ignore_eos;
    ls_sampling sampling;
    /* Speculative decoding (drafter NULL = classic). */
    ls_drafter *drafter;
    int32_t block_size; /* K: verify block rows (bonus + up to K-1 drafts), 2..16; capped to the
                         * session batch (logged once, in the stats) */
    bool adaptive;      /* adjust K below block_size, or turn speculation off, when it does not pay */
    ls_spec_sampling spec_sampling;
    bool allow_inexact; /* keep speculating when the exactness probe fails (loud warning) */
    bool skip_probe;    /* tests only: do not run the start-up probe */
    /* Optional: called with every emitted token id, in order (before the text callback). */
    void (*on_token)(int32_t id, void *ud);
    /* Optional: called with every emitted token's logprobs (ls_logprobs over the very logits
     * row that chose it: a one-token decode row, or with a drafter the verify block's row,
     * which is bitwise the same), right after on_token; with n_top_logprobs
     * (0..LS_MAX_TOP_LOGPROBS) alternatives. Never called for a rejected draft, nor for an
     * EOS that ends generation (it is not emitted). */
    void (*on_logprobs)(const ls_token_logprobs *lp, void *ud);
    int32_t n_top_logprobs;
    /* Optional: polled between prefill chunks and before every decode step or round; true
     * stops generation (stop_reason "cancelled"). */
    bool (*cancelled)(void *ud);
    /* Prefix reuse: the caller knows the session's cache holds the first n_reuse tokens of
     * this prompt (from an earlier generation: after ls_generate returns LS_OK the cache holds
     * positions [0, ls_session_pos) of that prompt followed by the emitted tokens). They are
     * kept instead of prefilled again when the cache can resume there (sliding windows may
     * have dropped needed keys: then everything is prefilled). The result is bit-identical
     * either way: a row's bits do not depend on how the prompt was chunked. */
    int32_t n_reuse;
    /* Optional: constrain the output to this grammar (token mask per position). */
    const ls_grammar *grammar;
} ls_gen_params;
ls_gen_params ls_gen_default_params(void);

enum { LS_SPEC_MAX_BLOCK = 16 };

typedef struct {
    int32_t n_prompt, n_generated;
    int32_t n_prompt_cached; /* prompt tokens reused from the cache (not prefilled) */
    double prefill_ms, decode_ms;
    const char *stop_reason; /* "eos", "length", "context", "stopped", "cancelled" */
    /* Speculative rounds (all zero for classic decoding). */
    bool speculative;          /* speculation was used */
    const char *spec_declined; /* NULL, or why speculation was declined */
    /* rounds: every decode forward after the first token = verify_rounds (a block with at
     * least one draft) + plain_steps (one row: the drafter had nothing, or the adaptive
     * width chose 1; the latter are also counted in adaptive_plain_steps). */
    int64_t rounds, verify_rounds, plain_steps, adaptive_plain_steps;
    /* proposed: drafts the drafter returned; checked: those accepted or rejected (a mismatch
     * rejects its draft and the rest of the block); drafts after the point where generation
     * ended inside a block (an EOS, a stop) are neither. accepted <= checked <= proposed. */
    int64_t proposed, checked, accepted, emitted;
    int64_t zero_accept_rounds, partial_accept_rounds, full_accept_rounds; /* of checked drafts */
    int64_t accepted_at[LS_SPEC_MAX_BLOCK];                                /* drafts accepted at block position i+1 */
    int64_t proposed_at[LS_SPEC_MAX_BLOCK];                                /* drafts checked at block position i+1 */
    double draft_ms, verify_ms, rollback_ms, probe_ms;
    int32_t final_block_size;
    /* K used (the verify block rows, at most the session batch) and, when the session batch
     * capped it, the K asked for (else 0). */
    int32_t block_size, block_size_requested;
    /* Longest forward step that served this generation (with a batcher, a shared step):
     * head-of-line stalls show here. */
    double max_step_ms;
    /* Structured output: token masks computed and the time spent on them. */
    int64_t grammar_masks;
    double grammar_ms;
} ls_gen_stats;
/* One line of key=value pairs (acceptance_rate, emitted_per_verify, ...) into buf. */
int ls_gen_stats_format(const ls_gen_stats *st, char *buf, size_t cap);

/* Called with each newly completed UTF-8 text chunk; return false to stop. */
typedef bool (*ls_text_cb)(const char *text, size_t len, void *ud);

int ls_generate(ls_session *s, const int32_t *prompt, int32_t n_prompt, const ls_gen_params *gp, ls_text_cb cb,
                void *ud, ls_gen_stats *stats, char *err, size_t errlen);

/* ---- settings, debug switches and fault injection ------------------------------------ */

/* The library reads no environment variable and writes no file on its own initiative: the
 * front ends (the CLI and the server) map their options and the documented LOCKSTEP_*
 * variables onto these process-wide switches (docs/settings.md). One entry in the spirit of
 * SQLite's sqlite3_test_control: an operation code, then that operation's arguments.
 * Returns LS_OK, or LS_ERR_ARG (unknown op, bad argument) / LS_ERR (too late, see the op).
 * Set them at start-up, before the models and sessions they concern exist; they are not
 * meant to be flipped while other threads generate. */
enum {
    /* (int on): CUDA backend instances created from now on capture each forward step as a
     * CUDA graph and replay it (1, the default), or launch every op directly (0). Same bytes
     * either way (a debugging switch). */
    LS_TESTCTL_CUDA_GRAPHS = 1,
    /* (const char *isa): CPU kernels: "auto" (the best this CPU runs, the default) or
     * "scalar" (the reference kernels everywhere: same bits, slower; rules out a SIMD bug).
     * The choice is made once per process, at the first use of a CPU kernel: changing it
     * afterwards fails with LS_ERR. */
    LS_TESTCTL_ISA = 2,
    /* (int on): every exactness probe localizes and logs per-layer results (as
     * ls_probe_params.trace does for one call). */
    LS_TESTCTL_PROBE_TRACE = 3,
    /* (const char *dir): folder where passing probe verdicts are remembered across processes
     * (one small file per model file, build, device, drafter, K and thread count; failures
     * are never remembered). NULL or "" (the default): nowhere, every process probes again.
     * The folder is created when the first verdict is written. */
    LS_TESTCTL_PROBE_MEMO_DIR = 4,
    /* (int layer, const char *stage): fault injection: every exactness probe from now on
     * perturbs sub-op `stage` ("attention", "mlp", "layer-output", "final-norm", "lm-head";
     * the last two ignore layer) of `layer` in its verify blocks, so it must fail and name
     * that layer and sub-op. stage NULL turns it off. Either way the verdicts memoized in
     * this process are forgotten. */
    LS_TESTCTL_FAULT_PROBE = 5,
    /* (const char *site, int count): fault injection: the next `count` allocations at `site`
     * fail as if memory ran out; count 0 disarms it. Sites: "sampler" (the sampling scratch of
     * a session, a drafter or one ls_sample call), "model" (the loader's tables and weight
     * copies in ls_model_open), "tokenizer" (the tokenizer's text table, built by
     * ls_model_open). */
    LS_TESTCTL_FAULT_ALLOC = 6,
    /* (char *buf, size_t cap): the effective settings as one line of key=value pairs, e.g.
     * "isa=avx2 cuda_graphs=1 probe_trace=0 probe_memo=off fault_probe=off fault_alloc=off"
     * (naming the ISA makes the choice: set LS_TESTCTL_ISA before). */
    LS_TESTCTL_DESCRIBE = 7,
    /* (unsigned off): CUDA backend instances created from now on leave off the decode-step
     * launch merging of docs/cuda.md 2b named by the bits set (for A/B measurements; the bytes
     * are the same either way): LS_CUDA_OFF_MERGE (fused quantization, grouped matmuls,
     * norm_rope pairs), LS_CUDA_OFF_PDL (programmatic dependent launch), LS_CUDA_OFF_ATTN_FINISH
     * (one-chunk attention finished without the combine kernel), LS_CUDA_OFF_ATTN_SPLIT (one
     * query vector a block for small attention calls), LS_CUDA_OFF_GEMV (one-row integer
     * matmuls take the general dp4a body instead of the streaming one-row kernel),
     * LS_CUDA_OFF_NARROW (MLX matmuls of 2..4 rows take the small-M / dp4a kernels instead of
     * the narrow-call kernels), LS_CUDA_OFF_SEGMENT (a recorded step submitted as one graph at
     * its end instead of two segments, the first while the host records the rest),
     * LS_CUDA_OFF_ROW1_WARP (one-row MLX 8-bit matmuls in blocks of 4 warps instead of 1). LS_CUDA_OFF_KQ
     * is the exception whose bits differ: Q4_K and Q6_K
     * weights take the 16-bit two-plane activations of the other types instead of the K-quant
     * format (docs/cuda.md 2a), for A/B runs of the two; set it before a model is opened.
     * 0, the default: all on. */
    LS_TESTCTL_CUDA_OFF = 8,
    /* (int on, ls_step_times *out): step timing of the backends that replay recorded steps
     * (CUDA graphs). out (may be NULL) receives the totals gathered since the last call, which
     * start again from zero; then timing is turned on (1) or off (0, the default). While on,
     * every replayed step costs two more event records on the GPU queue. A benchmark tool:
     * it splits a decode step's wall time into the host's part and the GPU's. */
    LS_TESTCTL_STEP_TIMES = 9,
};
/* LS_TESTCTL_STEP_TIMES totals over the replayed steps (steps captured into a new graph are
 * not counted: their host time is the capture's). */
typedef struct {
    int64_t steps;
    double host_ms;   /* host time from the step's first op call to its submission (the graph found) */
    double device_ms; /* from the submission of its parameter upload and graph to its last kernel */
} ls_step_times;
enum {
    LS_CUDA_OFF_MERGE = 1,
    LS_CUDA_OFF_PDL = 2,
    LS_CUDA_OFF_ATTN_FINISH = 4,
    LS_CUDA_OFF_ATTN_SPLIT = 8,
    LS_CUDA_OFF_GEMV = 16,
    LS_CUDA_OFF_NARROW = 32,
    LS_CUDA_OFF_KQ = 64,
    LS_CUDA_OFF_SEGMENT = 128,
    LS_CUDA_OFF_ROW1_WARP = 256
};
int ls_test_control(int op, ...);

/* ---- misc ----------------------------------------------------------------------- */
const char *ls_version(void);
const char *ls_backend_name(void); /* e.g. "cpu-avx2" */
void ls_set_log_level(int level);  /* 0 debug, 1 info, 2 warn, 3 error, 4 none */

#ifdef __cplusplus
}
#endif
#endif
