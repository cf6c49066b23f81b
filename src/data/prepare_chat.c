/*
 * Conversations for `llmforge prepare --mode sft` (prepare.c): a record's
 * "messages" (or a prompt/response pair, for a Hugging Face template)
 * rendered by the chat template, tokenized and masked.
 *
 * Tokenization keeps the chat endpoint's property: each span of the
 * rendering is tokenized on its own, special tokens read in template text
 * only, so a user who types "<|im_end|>" gets its characters, not the
 * token. Spans are also cut at the edges of the assistant turns
 * (lf__chat_template_turns), so the mask is exact: 1 on every token of an
 * assistant turn (its content and end-of-turn marker), 0 elsewhere; the
 * end-of-text follows with mask 0, a separator between conversations that
 * is not trained (the template writes the model's own end of turn).
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "data_impl.h"

char *lf__prepare_pair_messages(const char *prompt, const char *response) {
    cJSON *arr = cJSON_CreateArray(), *u = cJSON_CreateObject(), *a = cJSON_CreateObject();
    char *out = NULL;
    if (arr && u && a && cJSON_AddItemToArray(arr, u) && (u = NULL, cJSON_AddItemToArray(arr, a))) {
        a = NULL;
        cJSON *m0 = cJSON_GetArrayItem(arr, 0), *m1 = cJSON_GetArrayItem(arr, 1);
        if (cJSON_AddStringToObject(m0, "role", "user") &&
            cJSON_AddStringToObject(m0, "content", prompt ? prompt : "") &&
            cJSON_AddStringToObject(m1, "role", "assistant") &&
            cJSON_AddStringToObject(m1, "content", response ? response : ""))
            out = cJSON_PrintUnformatted(arr);
    }
    cJSON_Delete(arr);
    cJSON_Delete(u);
    cJSON_Delete(a);
    return out;
}

typedef struct seq {
    uint32_t *ids;
    uint8_t *mask;
    size_t n, cap, targets;
} seq;

static lf_status append(seq *s, const uint32_t *ids, size_t n, uint8_t m) {
    if (s->n + n + 1 > s->cap) {
        size_t nc = s->cap ? s->cap : 256;
        while (nc < s->n + n + 1) nc *= 2;
        uint32_t *q = lf_alloc(nc * sizeof *q);
        uint8_t *mq = realloc(s->mask, nc);
        if (mq) s->mask = mq;
        if (!q || !mq) {
            lf_free(q);
            return lf_fail(LF_ERR_NOMEM, "out of memory tokenizing a conversation");
        }
        if (s->n) memcpy(q, s->ids, s->n * sizeof *q);
        lf_free(s->ids);
        s->ids = q;
        s->cap = nc;
    }
    if (n) memcpy(s->ids + s->n, ids, n * sizeof *ids);
    memset(s->mask + s->n, m, n);
    s->n += n;
    if (m) s->targets += n;
    return LF_OK;
}

lf_status lf__prepare_conversation(const lf__chat_template *t, const lf_tokenizer *tok, const char *json, size_t len,
                                   uint32_t eot, int n_threads, uint32_t **ids, uint8_t **mask, size_t *n,
                                   size_t *targets) {
    cJSON *msgs = cJSON_ParseWithLength(json, len);
    char *out = NULL;
    size_t out_len = 0, *turns = NULL;
    lf__chat_span *sp = NULL;
    int n_sp = 0, n_turns = 0, k = 0;
    seq s = {0};
    lf_status st = msgs ? LF_OK : lf_fail(LF_ERR_FORMAT, "the messages are not JSON");
    if (st == LF_OK) st = lf__chat_template_render_json(t, msgs, -1, 0, &out, &out_len, &sp, &n_sp);
    if (st == LF_OK) st = lf__chat_template_turns(t, msgs, out, out_len, &turns, &n_turns);
    for (int i = 0; i < n_sp && st == LF_OK; i++) {
        size_t off = sp[i].off, end = sp[i].off + sp[i].len;
        while (off < end && st == LF_OK) {
            while (k < n_turns && turns[2 * k] + turns[2 * k + 1] <= off) k++;
            int in_turn = k < n_turns && turns[2 * k] <= off;
            size_t nb = in_turn ? turns[2 * k] + turns[2 * k + 1] : (k < n_turns ? turns[2 * k] : end);
            if (nb > end) nb = end;
            lf_encode_opts o = lf_encode_opts_default();
            o.allow_special = sp[i].from_template;
            uint32_t *piece = NULL;
            size_t m = 0;
            st = lf_tokenizer_encode_parallel(tok, out + off, nb - off, &o, n_threads, &piece, &m);
            if (st == LF_OK) st = append(&s, piece, m, (uint8_t)in_turn);
            lf_free(piece);
            off = nb;
        }
    }
    if (st == LF_OK) st = append(&s, &eot, 1, 0);
    if (st == LF_OK && s.targets == 0)
        st = lf_fail(LF_ERR_FORMAT, "the rendering has no assistant turn to learn (the template dropped it)");
    cJSON_Delete(msgs);
    free(out);
    free(sp);
    free(turns);
    if (st != LF_OK) {
        lf_free(s.ids);
        free(s.mask);
        return st;
    }
    *ids = s.ids;
    *mask = s.mask;
    *n = s.n;
    *targets = s.targets;
    return LF_OK;
}
