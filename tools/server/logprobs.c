/* lockstep serve: logprobs in OpenAI's shapes (docs/logprobs.md). The engine reports each
 * emitted token's logprobs (ls_gen_params.on_logprobs, computed from the very logits row that
 * chose the token); here they are kept per job with the byte offset of the token's text, and
 * turned into JSON for the chunks that carry that text (streaming) or for the response.
 *
 * Numbers are printed with %.9g (enough digits to give back the exact float), so two servers
 * that computed the same floats send the same bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server.h"

int srv_lp_add(srv_job *j, const ls_model *m, const ls_token_logprobs *lp) {
    if (j->n_lp == j->cap_lp) {
        int cap = j->cap_lp ? 2 * j->cap_lp : 64;
        srv_lp *n = realloc(j->lp, sizeof *n * (size_t)cap);
        if (!n) return -1;
        j->lp = n;
        j->cap_lp = cap;
    }
    srv_lp *e = &j->lp[j->n_lp++];
    e->lp = *lp;
    e->off = j->lp_off;
    int n = ls_token_text(m, lp->token, NULL, 0);
    if (n > 0) j->lp_off += (size_t)n;
    return 0;
}

int srv_lp_upto(const srv_job *j, size_t upto, bool final) {
    if (final && !j->text.hit) return j->n_lp;
    int n = j->lp_sent;
    while (n < j->n_lp && j->lp[n].off < upto) n++;
    return n;
}

/* A logprob as JSON: %.9g round-trips a float; a non-finite value (a logit of -inf) is
 * -9999, OpenAI's value for tokens that cannot be chosen. */
static cJSON *num(float v) {
    char b[32];
    if (!isfinite(v))
        snprintf(b, sizeof b, "-9999");
    else
        snprintf(b, sizeof b, "%.9g", (double)v);
    return cJSON_CreateRaw(b);
}

typedef struct {
    char small[256];
    char *p; /* small or malloc'ed */
    int n;   /* bytes; -1 when the id is bad */
} tok_bytes;

static void get_bytes(const ls_model *m, int32_t id, tok_bytes *t) {
    t->p = t->small;
    t->n = ls_token_text(m, id, t->small, (int)sizeof t->small);
    if (t->n > (int)sizeof t->small) {
        char *b = malloc((size_t)t->n);
        t->n = b ? ls_token_text(m, id, b, t->n) : -1;
        if (b) t->p = b;
    }
    if (t->n < 0) t->n = 0;
}

static void free_bytes(tok_bytes *t) {
    if (t->p != t->small) free(t->p);
}

/* The token's text as a JSON string: itself when it is valid UTF-8, else OpenAI's form
 * "bytes:\xNN..." (the exact bytes are in the "bytes" array anyway). */
static cJSON *tok_string(const tok_bytes *t) {
    if (ls_req_utf8_valid(t->p, (size_t)t->n)) {
        char *s = malloc((size_t)t->n + 1);
        if (!s) return cJSON_CreateString("");
        memcpy(s, t->p, (size_t)t->n);
        s[t->n] = 0;
        cJSON *o = cJSON_CreateString(s);
        free(s);
        return o;
    }
    char *s = malloc(6 + 4 * (size_t)t->n + 1);
    if (!s) return cJSON_CreateString("");
    size_t k = (size_t)snprintf(s, 7, "bytes:");
    for (int i = 0; i < t->n; i++) k += (size_t)snprintf(s + k, 5, "\\x%02x", (unsigned char)t->p[i]);
    cJSON *o = cJSON_CreateString(s);
    free(s);
    return o;
}

static cJSON *bytes_array(const tok_bytes *t) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < t->n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)t->p[i]));
    return a;
}

/* Chat: {"token", "logprob", "bytes"} (+ "top_logprobs" for the chosen token). */
static cJSON *chat_item(const ls_model *m, int32_t id, float lp) {
    tok_bytes t;
    get_bytes(m, id, &t);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "token", tok_string(&t));
    cJSON_AddItemToObject(o, "logprob", num(lp));
    cJSON_AddItemToObject(o, "bytes", bytes_array(&t));
    free_bytes(&t);
    return o;
}

cJSON *srv_lp_json(const srv_server *s, const srv_job *j, int from, int to) {
    if (!j->req.logprobs) return cJSON_CreateNull();
    const ls_model *m = s->model;
    cJSON *o = cJSON_CreateObject();
    if (j->req.kind == LSR_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (int i = from; i < to; i++) {
            const ls_token_logprobs *e = &j->lp[i].lp;
            cJSON *it = chat_item(m, e->token, e->logprob);
            cJSON *top = cJSON_AddArrayToObject(it, "top_logprobs");
            for (int k = 0; k < e->n_top; k++) cJSON_AddItemToArray(top, chat_item(m, e->top[k].id, e->top[k].logprob));
            cJSON_AddItemToArray(content, it);
        }
        return o;
    }
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (int i = from; i < to; i++) {
        const ls_token_logprobs *e = &j->lp[i].lp;
        tok_bytes t;
        get_bytes(m, e->token, &t);
        cJSON_AddItemToArray(tokens, tok_string(&t));
        free_bytes(&t);
        cJSON_AddItemToArray(lps, num(e->logprob));
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < e->n_top; k++) {
            get_bytes(m, e->top[k].id, &t);
            cJSON *key = tok_string(&t);
            free_bytes(&t);
            cJSON_AddItemToObject(top, key && key->valuestring ? key->valuestring : "", num(e->top[k].logprob));
            cJSON_Delete(key);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)j->lp[i].off));
    }
    return o;
}

void srv_lp_set(cJSON *obj, cJSON *lp) {
    cJSON *choices = cJSON_GetObjectItemCaseSensitive(obj, "choices");
    cJSON *c = cJSON_GetArrayItem(choices, 0);
    if (!c || !lp || !cJSON_ReplaceItemInObjectCaseSensitive(c, "logprobs", lp)) cJSON_Delete(lp);
}
