/* BPE tokenizer tests (Gemma 4 GGUF "gemma4", HF tokenizer.json of Gemma 3).
 *
 * 1. Synthetic vocabs through ls_tokenizer_create: merge order (lowest rank first, ties to
 *    the leftmost pair, not by score), byte fallback, llama.cpp's newline-run rule, merges
 *    that are not tokens.
 * 2. Gemma 4 (tests/data/tokenizer_bpe/ggml-vocab-gemma-4.gguf.xz, llama.cpp's vocab-only
 *    GGUF): every llama.cpp tokenizer test vector (.inp/.out, from llama.cpp's
 *    test-tokenizer-0: add_special and parse_special off) reproduced exactly; special tokens
 *    with parse_special; end of generation; round-trip decoding.
 * 3. Gemma 3 tokenizer.json (tests/data/tokenizer_bpe/gemma3-mini-tokenizer.json.xz, the real
 *    file cut down to what the golden strings touch; the full one from
 *    /work/shared/data/gemma-vocab when present): ids equal HF `tokenizers` on every string
 *    of tests/data/tokenizer_bpe/json_golden.tsv.xz (tools/gen_tokenizer_json_golden.py), with
 *    and without special-token parsing, and decode back to the input. The same strings also
 *    run through the Gemma 4 GGUF against llama.cpp's ids (llama-cpp-python) from that file.
 * 4. Malformed tokenizer.json inputs fail with a message naming the problem.
 * The .xz files are decompressed with `xz -dc` (xz-utils, installed by scripts/setup.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Whole file into memory (NUL-terminated); NULL if absent. */
static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    for (size_t k; b && (k = fread(b + n, 1, cap - n, fp)) > 0;) {
        n += k;
        if (n == cap) {
            cap *= 2;
            char *nb = realloc(b, cap + 1);
            if (!nb) free(b);
            b = nb;
        }
    }
    fclose(fp);
    if (b) b[n] = '\0';
    *len = n;
    return b;
}

/* Decompress an .xz file with the xz tool; NULL if the file or the tool is missing. */
static char *read_xz(const char *path, size_t *len) {
    if (access(path, R_OK) != 0) return NULL;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "xz -dc '%s'", path);
    FILE *fp = popen(cmd, "r");
    if (!fp) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap + 1);
    for (size_t k; b && (k = fread(b + n, 1, cap - n, fp)) > 0;) {
        n += k;
        if (n == cap) {
            cap *= 2;
            char *nb = realloc(b, cap + 1);
            if (!nb) free(b);
            b = nb;
        }
    }
    int rc = pclose(fp);
    if (!b || rc != 0) {
        free(b);
        return NULL;
    }
    b[n] = '\0';
    *len = n;
    return b;
}

static const char *data_dir(void) {
    const char *d = getenv("LOCKSTEP_TEST_DATA");
    return d ? d : "tests/data";
}

static void print_ids(const char *what, const int32_t *ids, int64_t n) {
    fprintf(stderr, "  %s", what);
    for (int64_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Decode ids (render_special) into buf; returns length or -1. */
static int64_t decode_all(const ls_tokenizer *t, const int32_t *ids, int64_t n, bool special, char *buf, int64_t cap) {
    int64_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        int k = ls_token_to_bytes(t, ids[i], special, buf + o, (int)(cap - o));
        if (k < 0 || o + k > cap) return -1;
        o += k;
    }
    return o;
}

/* ------------------------------------------------------------------------------------- */
/* 1. synthetic BPE vocabs                                                               */
/* ------------------------------------------------------------------------------------- */

typedef struct {
    const char *a, *b;
} mpair;

static ls_tokenizer *make_bpe(const char *const *texts, const int32_t *types, int n, const mpair *m, int nm, char *err,
                              size_t errlen) {
    uint64_t lens[64];
    const char *ma[64], *mb[64];
    uint64_t la[64], lb[64];
    for (int i = 0; i < n; i++) lens[i] = strlen(texts[i]);
    for (int i = 0; i < nm; i++) {
        ma[i] = m[i].a;
        mb[i] = m[i].b;
        la[i] = strlen(m[i].a);
        lb[i] = strlen(m[i].b);
    }
    ls_tokenizer_desc d = {.n_vocab = n,
                           .texts = texts,
                           .lens = lens,
                           .types = types,
                           .bos = 2,
                           .eos = 1,
                           .unk = -1,
                           .pad = 0,
                           .eot = -1,
                           .eom = -1,
                           .add_bos = true,
                           .model = LS_TOKENIZER_MODEL_BPE,
                           .n_merges = nm,
                           .merge_a = ma,
                           .merge_b = mb,
                           .merge_la = la,
                           .merge_lb = lb};
    ls_tokenizer *t = NULL;
    return ls_tokenizer_create(&d, &t, err, errlen) == 0 ? t : NULL;
}

static int tok(const ls_tokenizer *t, const char *s, bool bos, bool special, int32_t *ids, int cap) {
    int64_t n = ls_tokenize(t, s, strlen(s), bos, special, ids, cap);
    assert_true(n >= 0 && n <= cap);
    return (int)n;
}

static void assert_ids(const int32_t *got, int n, const int32_t *want, int nw) {
    if (n != nw || memcmp(got, want, (size_t)n * sizeof *got) != 0) {
        print_ids("got ", got, n);
        print_ids("want", want, nw);
        fail();
    }
}
#define ASSERT_IDS(got, n, ...)                                                                                        \
    do {                                                                                                               \
        const int32_t want_[] = {__VA_ARGS__};                                                                         \
        assert_ids(got, n, want_, (int)(sizeof want_ / sizeof *want_));                                                \
    } while (0)

/*                                 0        1        2        3     4    5    6     7     8     9 */
static const char *const syn_texts[] = {"<pad>", "<eos>", "<bos>", "a", "b", "c", "ab", "bc", "abc", "\n",
                                        /* 10 */ "\n\n",
                                        /* 11 */ "\xE2\x96\x81",
                                        /* 12 */
                                        "\xE2\x96\x81"
                                        "a",
                                        /* 13 */ "<0xC3>",
                                        /* 14 */ "<0xA9>",
                                        /* 15 */ "<t>",
                                        /* 16 */ "aa"};
static const int32_t syn_types[] = {3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 6, 3, 1};
#define N_SYN ((int)(sizeof syn_texts / sizeof *syn_texts))

static void test_bpe_synthetic(void **st) {
    (void)st;
    char err[256];
    /* Rank order: "b c" (0) before "a b" (1): "abc" -> a + bc -> (no merge a+bc) = [a, bc]. */
    const mpair m1[] = {{"b", "c"}, {"a", "b"}, {"a", "a"}, {"\xE2\x96\x81", "a"}, {"\n", "\n"}};
    ls_tokenizer *t = make_bpe(syn_texts, syn_types, N_SYN, m1, 5, err, sizeof err);
    assert_non_null(t);
    int32_t ids[64];
    int n = tok(t, "abc", false, false, ids, 64);
    ASSERT_IDS(ids, n, 3, 7);
    /* Equal rank (the same pair twice): the leftmost merges first -> [aa, a]. */
    n = tok(t, "aaa", false, false, ids, 64);
    ASSERT_IDS(ids, n, 16, 3);
    /* Space -> U+2581, merged with the following a; BOS first. */
    n = tok(t, " a", true, false, ids, 64);
    ASSERT_IDS(ids, n, 2, 12);
    /* Byte fallback: é is not a token. */
    n = tok(t, "a\xC3\xA9", false, false, ids, 64);
    ASSERT_IDS(ids, n, 3, 13, 14);
    /* Newline runs are their own words: "a\n\nb" -> a, "\n\n" (a token, kept whole), b. */
    n = tok(t, "a\n\nb", false, false, ids, 64);
    ASSERT_IDS(ids, n, 3, 10, 4);
    /* A newline run that is not a token is merged: 3 newlines -> "\n\n" + "\n". */
    n = tok(t, "\n\n\n", false, false, ids, 64);
    ASSERT_IDS(ids, n, 10, 9);
    /* Merges never cross a newline-run boundary, and control tokens need parse_special. */
    n = tok(t, "a<t>b", false, true, ids, 64);
    ASSERT_IDS(ids, n, 3, 15, 4);
    assert_true(ls_tokenizer_is_eog(t, 1));
    ls_tokenizer_free(t);

    /* Rank beats "score": with "a b" ranked first, "abc" -> ab + c, although bc exists. */
    const mpair m2[] = {{"a", "b"}, {"b", "c"}, {"ab", "c"}};
    t = make_bpe(syn_texts, syn_types, N_SYN, m2, 3, err, sizeof err);
    assert_non_null(t);
    n = tok(t, "abc", false, false, ids, 64);
    ASSERT_IDS(ids, n, 8);
    n = tok(t, "bcab", false, false, ids, 64);
    ASSERT_IDS(ids, n, 7, 6);
    ls_tokenizer_free(t);

    /* A merge whose result is not a token (llama.cpp allows it): the symbol falls back to
     * its pieces' bytes; here 'c' has no byte token and is dropped, as llama.cpp drops it. */
    const mpair m3[] = {{"c", "a"}};
    t = make_bpe(syn_texts, syn_types, N_SYN, m3, 1, err, sizeof err);
    assert_non_null(t);
    n = tok(t, "bca", false, false, ids, 64);
    ASSERT_IDS(ids, n, 4);
    ls_tokenizer_free(t);
}

/* ------------------------------------------------------------------------------------- */
/* 2. Gemma 4 GGUF against llama.cpp's test vectors                                      */
/* ------------------------------------------------------------------------------------- */

static char *g4_bytes;
static gguf_file *g4_file;
static ls_tokenizer *g4;

static int g4_setup(void **st) {
    (void)st;
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/tokenizer_bpe/ggml-vocab-gemma-4.gguf.xz", data_dir());
    size_t len = 0;
    g4_bytes = read_xz(path, &len);
    if (!g4_bytes) {
        fprintf(stderr, "cannot read %s (xz installed?)\n", path);
        return -1;
    }
    if (ls_gguf_open_memory(g4_bytes, len, &g4_file, err, sizeof err) != 0) {
        fprintf(stderr, "gguf: %s\n", err);
        return -1;
    }
    double t0 = now_ms();
    if (ls_tokenizer_from_gguf(g4_file, &g4, err, sizeof err) != 0) {
        fprintf(stderr, "ls_tokenizer_from_gguf: %s\n", err);
        return -1;
    }
    fprintf(stderr, "gemma4 GGUF vocab: %d tokens, loaded in %.1f ms\n", ls_tokenizer_n_vocab(g4), now_ms() - t0);
    return 0;
}

static int g4_teardown(void **st) {
    (void)st;
    ls_tokenizer_free(g4);
    ls_gguf_close(g4_file);
    free(g4_bytes);
    return 0;
}

static void test_gemma4_vectors(void **st) {
    (void)st;
    char path[4096];
    size_t li, lo;
    snprintf(path, sizeof path, "%s/tokenizer_bpe/ggml-vocab-gemma-4.gguf.inp", data_dir());
    char *inp = read_file(path, &li);
    snprintf(path, sizeof path, "%s/tokenizer_bpe/ggml-vocab-gemma-4.gguf.out", data_dir());
    char *outp = read_file(path, &lo);
    assert_non_null(inp);
    assert_non_null(outp);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int n_cases = 0, n_ok = 0, n_rt = 0;
    char *p = inp, *o = outp;
    int32_t *ids = malloc(65536 * sizeof *ids), *want = malloc(65536 * sizeof *want);
    char *dec = malloc(1 << 20);
    for (;;) {
        char *end = strstr(p, sep);
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char *eol = strchr(o, '\n');
        assert_non_null(eol);
        *eol = '\0';
        int nw = 0;
        for (char *q = o; *q;) {
            char *e;
            long v = strtol(q, &e, 10);
            if (e == q) break;
            want[nw++] = (int32_t)v;
            q = e;
        }
        o = eol + 1;
        int64_t n = ls_tokenize(g4, p, len, false, false, ids, 65536);
        n_cases++;
        if (n == nw && memcmp(ids, want, (size_t)nw * sizeof *ids) == 0) {
            n_ok++;
        } else {
            fprintf(stderr, "gemma4 vector %d differs: '%.*s'\n", n_cases, (int)len, p);
            print_ids("got ", ids, n);
            print_ids("want", want, nw);
        }
        /* Decoding gives the input back (the vectors are valid UTF-8 without U+2581). */
        int64_t k = decode_all(g4, ids, n, false, dec, 1 << 20);
        if (k == (int64_t)len && memcmp(dec, p, len) == 0) n_rt++;
        if (!end) break;
        p = end + sizeof sep - 1;
    }
    fprintf(stderr, "gemma4 llama.cpp vectors: %d/%d equal, %d/%d round-trip\n", n_ok, n_cases, n_rt, n_cases);
    assert_int_equal(n_ok, n_cases);
    assert_int_equal(n_rt, n_cases);
    assert_true(n_cases >= 40);
    free(ids);
    free(want);
    free(dec);
    free(inp);
    free(outp);
}

static void test_gemma4_specials(void **st) {
    (void)st;
    int32_t ids[64];
    /* Spec ids (docs: docs/gemma.md section 7). */
    assert_int_equal(ls_tokenizer_bos(g4), 2);
    assert_int_equal(ls_tokenizer_eos(g4), 1);
    assert_true(ls_tokenizer_add_bos(g4));
    assert_int_equal(ls_tokenizer_find(g4, "<|turn>"), 105);
    assert_int_equal(ls_tokenizer_find(g4, "<turn|>"), 106);
    assert_int_equal(ls_tokenizer_find(g4, "<|channel>"), 100);
    /* EOG = generation_config stop ids [1, 106, 50]; not <|turn>, not "</s>". */
    assert_true(ls_tokenizer_is_eog(g4, 1));
    assert_true(ls_tokenizer_is_eog(g4, 106));
    assert_true(ls_tokenizer_is_eog(g4, 50));
    assert_false(ls_tokenizer_is_eog(g4, 105));
    assert_false(ls_tokenizer_is_eog(g4, 2));
    assert_false(ls_tokenizer_is_eog(g4, ls_tokenizer_find(g4, "</s>")));
    /* A chat prompt: control tokens matched with parse_special, spelled out without. */
    const char *chat = "<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>";
    int n = tok(g4, chat, false, true, ids, 64);
    ASSERT_IDS(ids, n, 2, 105, 2364, 107, 10979, 106, 107, 105, 4368, 107, 100, 45518, 107, 101);
    n = tok(g4, "<|turn>", false, false, ids, 64);
    assert_true(n > 1);
    for (int i = 0; i < n; i++) assert_int_not_equal(ids[i], 105);
    /* User-defined tokens (<|channel>, <|"|>) are matched even without parse_special. */
    n = tok(g4, "<|channel>", false, false, ids, 64);
    ASSERT_IDS(ids, n, 100);
    char buf[64];
    assert_int_equal(ls_token_to_bytes(g4, 105, false, buf, sizeof buf), 0);
    assert_int_equal(ls_token_to_bytes(g4, 105, true, buf, sizeof buf), 7);
    assert_int_equal(ls_token_to_bytes(g4, 138, false, buf, sizeof buf), 2); /* "▁▁" -> two spaces */
    assert_memory_equal(buf, "  ", 2);
}

/* Long inputs stay near-linear: one 200 KB word without spaces or newlines (a single merge
 * run over 200k symbols), 200 KB of prose, 100 KB of one space run. */
static void test_gemma4_long(void **st) {
    (void)st;
    size_t n = 200000;
    char *text = malloc(n + 1);
    int32_t *ids = malloc(n * sizeof *ids + 16);
    const char *kinds[] = {"one 200 KB word", "200 KB prose", "100 KB of spaces"};
    for (int k = 0; k < 3; k++) {
        size_t len = k == 2 ? n / 2 : n;
        for (size_t i = 0; i < len; i++) {
            if (k == 0) text[i] = "abcdefghij"[(i * 7 + i / 13) % 10];
            if (k == 1) text[i] = "The quick brown fox jumps over the lazy dog. \n"[i % 46];
            if (k == 2) text[i] = ' ';
        }
        double t0 = now_ms();
        int64_t m = ls_tokenize(g4, text, len, true, true, ids, (int64_t)n + 4);
        double ms = now_ms() - t0;
        fprintf(stderr, "gemma4 %s -> %lld tokens in %.1f ms\n", kinds[k], (long long)m, ms);
        assert_true(m > 0);
        assert_true(ms < 5000); /* generous (sanitizers); O(n^2) would take minutes */
        char *dec = malloc(4 * len + 16);
        assert_int_equal(decode_all(g4, ids + 1, m - 1, false, dec, 4 * (int64_t)len + 16), (int64_t)len);
        assert_memory_equal(dec, text, len);
        free(dec);
    }
    free(text);
    free(ids);
}

/* ------------------------------------------------------------------------------------- */
/* 3. golden strings: Gemma 3 tokenizer.json vs HF, Gemma 4 GGUF vs llama.cpp            */
/* ------------------------------------------------------------------------------------- */

typedef struct {
    char *text;
    size_t len;
    int32_t *ids[4]; /* hf nosplit, hf default, llama gemma4 ps=0, ps=1 */
    int n[4];
} gcase;

static gcase *g_cases;
static int g_ncases;
static ls_tokenizer *g3;      /* from the cut-down json */
static ls_tokenizer *g3_full; /* from /work/shared, if present */

static int parse_ids(char *s, int32_t **out) {
    int cap = 16, n = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    for (char *q = s; *q;) {
        char *e;
        long x = strtol(q, &e, 10);
        if (e == q) break;
        if (n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[n++] = (int32_t)x;
        q = e;
    }
    *out = v;
    return n;
}

static int golden_setup(void **st) {
    (void)st;
    char path[4096], err[256];
    size_t len;
    snprintf(path, sizeof path, "%s/tokenizer_bpe/json_golden.tsv.xz", data_dir());
    char *tsv = read_xz(path, &len);
    if (!tsv) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    int cap = 1024;
    g_cases = calloc((size_t)cap, sizeof *g_cases);
    for (char *line = strtok(tsv, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char *f[5];
        int nf = 0;
        for (char *p = line; nf < 5; nf++) {
            f[nf] = p;
            char *tab = strchr(p, '\t');
            if (!tab) {
                nf++;
                break;
            }
            *tab = '\0';
            p = tab + 1;
        }
        if (nf != 5 || g_ncases == cap) return -1;
        gcase *c = &g_cases[g_ncases++];
        c->len = strlen(f[0]) / 2;
        c->text = malloc(c->len + 1);
        for (size_t i = 0; i < c->len; i++) {
            unsigned v;
            sscanf(f[0] + 2 * i, "%2x", &v);
            c->text[i] = (char)v;
        }
        c->text[c->len] = '\0';
        for (int k = 0; k < 4; k++) c->n[k] = parse_ids(f[k + 1], &c->ids[k]);
    }
    free(tsv);
    snprintf(path, sizeof path, "%s/tokenizer_bpe/gemma3-mini-tokenizer.json.xz", data_dir());
    char *json = read_xz(path, &len);
    if (!json) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    double t0 = now_ms();
    int rc = ls_tokenizer_from_json_mem(json, len, NULL, 0, &g3, err, sizeof err);
    free(json);
    if (rc != 0) {
        fprintf(stderr, "ls_tokenizer_from_json_mem: %s\n", err);
        return -1;
    }
    fprintf(stderr, "gemma3 cut-down tokenizer.json: loaded in %.1f ms; %d golden strings\n", now_ms() - t0, g_ncases);
    /* The full 33 MB file, when the shared data is there (decompressed next to a config). */
    const char *shared = "/work/shared/data/gemma-vocab";
    char tmpl[] = "/tmp/ls_tokjson_XXXXXX";
    snprintf(path, sizeof path, "%s/gemma3-tokenizer.json.xz", shared);
    if (access(path, R_OK) == 0 && mkdtemp(tmpl)) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd,
                 "xz -dc '%s/gemma3-tokenizer.json.xz' > '%s/gemma3-tokenizer.json' && "
                 "xz -dc '%s/gemma3-tokenizer_config.json.xz' > '%s/gemma3-tokenizer_config.json'",
                 shared, tmpl, shared, tmpl);
        if (system(cmd) == 0) {
            snprintf(path, sizeof path, "%s/gemma3-tokenizer.json", tmpl);
            t0 = now_ms();
            if (ls_tokenizer_from_json(path, &g3_full, err, sizeof err) != 0) {
                fprintf(stderr, "ls_tokenizer_from_json(full): %s\n", err);
                return -1;
            }
            fprintf(stderr, "gemma3 full tokenizer.json (+config): loaded in %.0f ms\n", now_ms() - t0);
        }
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
        if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", tmpl);
    } else {
        fprintf(stderr, "note: %s absent; the full Gemma 3 tokenizer.json is not tested\n", path);
    }
    return 0;
}

static int golden_teardown(void **st) {
    (void)st;
    for (int i = 0; i < g_ncases; i++) {
        free(g_cases[i].text);
        for (int k = 0; k < 4; k++) free(g_cases[i].ids[k]);
    }
    free(g_cases);
    ls_tokenizer_free(g3);
    ls_tokenizer_free(g3_full);
    return 0;
}

/* Runs every golden string through t for columns col (parse_special off) and col + 1 (on);
 * also checks decoding. Returns the number of mismatches. */
static int run_golden(const ls_tokenizer *t, int col, const char *name) {
    int32_t *ids = malloc(65536 * sizeof *ids);
    char *dec = malloc(1 << 20), *want = malloc(1 << 20);
    int bad = 0, rt_bad = 0;
    for (int i = 0; i < g_ncases; i++) {
        const gcase *c = &g_cases[i];
        for (int ps = 0; ps < 2; ps++) {
            int64_t n = ls_tokenize(t, c->text, c->len, true, ps == 1, ids, 65536);
            const int32_t *w = c->ids[col + ps];
            int nw = c->n[col + ps];
            if (n != nw || memcmp(ids, w, (size_t)nw * sizeof *ids) != 0) {
                if (bad++ < 5) {
                    fprintf(stderr, "%s: parse_special=%d differs on '%s'\n", name, ps, c->text);
                    print_ids("got ", ids, n);
                    print_ids("want", w, nw);
                }
                continue;
            }
            /* Round trip: everything after BOS, specials rendered; a literal U+2581 comes
             * back as a space (SentencePiece-style vocabularies cannot tell them apart). */
            int64_t k = decode_all(t, ids + 1, n - 1, true, dec, 1 << 20);
            size_t wl = 0;
            for (size_t j = 0; j < c->len; j++) {
                if (j + 3 <= c->len && memcmp(c->text + j, "\xE2\x96\x81", 3) == 0) {
                    want[wl++] = ' ';
                    j += 2;
                } else {
                    want[wl++] = c->text[j];
                }
            }
            if (k != (int64_t)wl || memcmp(dec, want, wl) != 0) {
                if (rt_bad++ < 5)
                    fprintf(stderr, "%s: round trip differs on '%s' -> '%.*s'\n", name, c->text, (int)k, dec);
            }
        }
    }
    fprintf(stderr, "%s: %d/%d golden strings x 2 modes equal, %d round-trip failures\n", name, 2 * g_ncases - bad,
            2 * g_ncases, rt_bad);
    free(ids);
    free(dec);
    free(want);
    return bad + rt_bad;
}

static void test_json_golden(void **st) {
    (void)st;
    assert_true(g_ncases >= 700);
    assert_int_equal(run_golden(g3, 0, "gemma3 tokenizer.json (cut down) vs HF"), 0);
    if (g3_full) {
        assert_int_equal(run_golden(g3_full, 0, "gemma3 tokenizer.json (full) vs HF"), 0);
        /* tokenizer_config.json: eos_token is <end_of_turn>; <eos> still ends generation. */
        assert_int_equal(ls_tokenizer_eos(g3_full), 106);
        assert_int_equal(ls_tokenizer_bos(g3_full), 2);
        assert_true(ls_tokenizer_add_bos(g3_full));
        assert_int_equal(ls_tokenizer_n_vocab(g3_full), 262145);
    }
    assert_true(ls_tokenizer_is_eog(g3, 1));
    assert_true(ls_tokenizer_is_eog(g3, 106));
    assert_false(ls_tokenizer_is_eog(g3, 105));
    assert_false(ls_tokenizer_is_eog(g3, 212)); /* "</s>" is an HTML tag here */
    assert_int_equal(ls_tokenizer_token_type(g3, 105), LS_TOKEN_CONTROL);
    assert_int_equal(ls_tokenizer_token_type(g3, 138), LS_TOKEN_USER_DEFINED);
}

static void test_gemma4_golden(void **st) {
    (void)st;
    assert_int_equal(run_golden(g4, 2, "gemma4 GGUF vs llama.cpp"), 0);
}

/* ------------------------------------------------------------------------------------- */
/* 4. malformed tokenizer.json                                                           */
/* ------------------------------------------------------------------------------------- */

#define MINI_HEAD                                                                                                      \
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<bos>\",\"special\":true}],"                                           \
    "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"},"

static void expect_json_error(const char *json, const char *needle) {
    char err[256] = "";
    ls_tokenizer *t = (ls_tokenizer *)&err;
    int rc = ls_tokenizer_from_json_mem(json, strlen(json), NULL, 0, &t, err, sizeof err);
    if (rc == 0 || t != NULL || !strstr(err, needle)) {
        fprintf(stderr, "json %s\n  rc %d, error '%s' (want '%s')\n", json, rc, err, needle);
        ls_tokenizer_free(rc == 0 ? t : NULL);
        fail();
    }
}

static void test_json_errors(void **st) {
    (void)st;
    /* A minimal valid file first. */
    const char *ok = MINI_HEAD "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"<bos>\":0,\"a\":1,"
                               "\"b\":2,\"ab\":3,\"\\u2581\":4},\"merges\":[\"a b\",[\"\\u2581\",\"a\"]]}}";
    char err[256];
    ls_tokenizer *t = NULL;
    /* The second merge's result "▁a" is not a token: rejected like HF does. */
    assert_int_not_equal(ls_tokenizer_from_json_mem(ok, strlen(ok), NULL, 0, &t, err, sizeof err), 0);
    assert_non_null(strstr(err, "merge 1"));
    const char *ok2 = MINI_HEAD "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"<bos>\":0,\"a\":1,"
                                "\"b\":2,\"ab\":3,\"\\u2581\":4},\"merges\":[\"a b\"]}}";
    assert_int_equal(ls_tokenizer_from_json_mem(ok2, strlen(ok2), NULL, 0, &t, err, sizeof err), 0);
    int32_t ids[16];
    int n = tok(t, "ab a<bos>", true, true, ids, 16);
    ASSERT_IDS(ids, n, 0, 3, 4, 1, 0);
    /* Without parse_special "<bos>" is plain text: only "b" is in this vocab, and with neither
     * byte tokens nor <unk> HF drops the other characters. */
    n = tok(t, "<bos>", false, false, ids, 16);
    ASSERT_IDS(ids, n, 2);
    ls_tokenizer_free(t);

    /* Truncated at many points: always a clean error. */
    for (size_t cut = 0; cut < strlen(ok2); cut += 7) {
        char buf[1024];
        memcpy(buf, ok2, cut);
        buf[cut] = '\0';
        t = NULL;
        assert_int_not_equal(ls_tokenizer_from_json_mem(buf, cut, NULL, 0, &t, err, sizeof err), 0);
        assert_null(t);
        assert_non_null(strstr(err, "tokenizer.json: "));
    }
    expect_json_error("{\"model\":", "malformed JSON");
    expect_json_error("[1,2]", "model");
    expect_json_error("{\"model\":{\"type\":\"Unigram\",\"vocab\":{},\"merges\":[]}}", "model.type must be \"BPE\"");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}}", "model.vocab must be an object");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":{}}}", "merges must be an array");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"0\"},\"merges\":[]}}", "id must be an integer");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1.5},\"merges\":[]}}", "id must be an integer");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}}", "id must be an integer");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":4294967296},\"merges\":[]}}",
                      "id must be an integer");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":99999999999999999999},\"merges\":[]}}",
                      "id must be an integer");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":2},\"merges\":[]}}", "no token has id 1");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", "id 0 is used by");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a c\"]}}",
                      "not in model.vocab");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"ab\"]}}",
                      "not of the form");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[[\"a\"]]}}",
                      "must be a string");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[[\"a\",1]]}}",
                      "must be a string");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{\"a\":0},\"merges\":[]}}", "dropout");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"byte_fallback\":1,\"vocab\":{\"a\":0},\"merges\":[]}}",
                      "must be booleans");
    expect_json_error("{\"added_tokens\":{},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                      "added_tokens must be an array");
    expect_json_error("{\"added_tokens\":[{\"id\":16777216,\"content\":\"x\"}],\"model\":{\"type\":\"BPE\","
                      "\"vocab\":{\"a\":0},\"merges\":[]}}",
                      "integer \"id\"");
    expect_json_error("{\"added_tokens\":[{\"id\":0,\"content\":\"x\"}],\"model\":{\"type\":\"BPE\","
                      "\"vocab\":{\"a\":0},\"merges\":[]}}",
                      "conflicts with");
    expect_json_error("{\"added_tokens\":[{\"id\":1,\"content\":\"x\",\"rstrip\":true}],\"model\":{\"type\":\"BPE\","
                      "\"vocab\":{\"a\":0},\"merges\":[]}}",
                      "not supported");
    expect_json_error("{\"normalizer\":{\"type\":\"NFKC\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},"
                      "\"merges\":[]}}",
                      "unsupported normalizer type 'NFKC'");
    expect_json_error("{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},"
                      "\"behavior\":\"Isolated\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                      "pre_tokenizer Split");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"vocab\":{\"a\":0},\"merges\":[]}}",
                      "unk_token");
    expect_json_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}", "empty vocab");
    /* Missing files and NULL arguments. */
    assert_int_not_equal(ls_tokenizer_from_json("/nonexistent/tokenizer.json", &t, err, sizeof err), 0);
    assert_non_null(strstr(err, "cannot open"));
    assert_int_not_equal(ls_tokenizer_from_json_mem(NULL, 0, NULL, 0, &t, err, sizeof err), 0);
    /* A bad tokenizer_config.json is an error, not silently ignored. */
    assert_int_not_equal(ls_tokenizer_from_json_mem(ok2, strlen(ok2), "{", 1, &t, err, sizeof err), 0);
    assert_non_null(strstr(err, "tokenizer_config.json"));
}

/* HF pipeline pieces the Gemma files do not use: Split behaviours, Prepend, fuse_unk. */
static void test_json_pipeline(void **st) {
    (void)st;
    char err[256];
    ls_tokenizer *t = NULL;
    const char *j =
        "{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"_\"}]},"
        "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"Isolated\"},"
        "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"vocab\":{\"<unk>\":0,"
        "\"_\":1,\"a\":2,\"-\":3,\"_a\":4,\"a-\":5},\"merges\":[\"_ a\",\"a -\"]}}";
    assert_int_equal(ls_tokenizer_from_json_mem(j, strlen(j), NULL, 0, &t, err, sizeof err), 0);
    int32_t ids[16];
    /* "_a-a": the split isolates "-", so "a -" can never merge; "zz" is unknown -> one fused <unk>. */
    int n = tok(t, "a-azz", false, false, ids, 16);
    ASSERT_IDS(ids, n, 4, 3, 2, 0);
    ls_tokenizer_free(t);
}

int main(void) {
    const struct CMUnitTest synthetic[] = {
        cmocka_unit_test(test_bpe_synthetic),
    };
    const struct CMUnitTest gemma4[] = {
        cmocka_unit_test(test_gemma4_vectors),
        cmocka_unit_test(test_gemma4_specials),
        cmocka_unit_test(test_gemma4_long),
    };
    const struct CMUnitTest json[] = {
        cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_json_pipeline),
    };
    const struct CMUnitTest golden[] = {
        cmocka_unit_test(test_json_golden),
        cmocka_unit_test(test_gemma4_golden),
    };
    int rc = cmocka_run_group_tests_name("bpe_synthetic", synthetic, NULL, NULL);
    rc |= cmocka_run_group_tests_name("tokenizer_json", json, NULL, NULL);
    rc |= cmocka_run_group_tests_name("gemma4_gguf", gemma4, g4_setup, NULL);
    rc |= cmocka_run_group_tests_name("golden", golden, golden_setup, golden_teardown);
    g4_teardown(NULL);
    return rc;
}
