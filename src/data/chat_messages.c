/*
 * Conversations as JSON for either kind of chat template (chat_template.h):
 * a list of {role, content} objects, as transformers, TRL's `messages`
 * datasets and the OpenAI API write them, rendered by the llmforge kind
 * (prefix/suffix per role) or by a Hugging Face Jinja template; the
 * assistant turns of a rendering for both (the rule in chat_jinja.c); the
 * Jinja kind of chat_template.json (what prepare writes beside the shards
 * and training copies into checkpoints, so a model fine-tuned with a
 * model's own template is served with it); and the public functions of
 * include/llmforge/data.h ("chat templates") that `llmforge chat-template`
 * calls.
 *
 * Invariant: a Jinja template's stop strings are its eos_token and the
 * end-of-turn markers its source writes, at most four.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "data_impl.h"
#include "llmforge/data.h"

static const char *const k_role_names[LF__ROLE_COUNT] = {"system", "user", "assistant"};

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p) memcpy(p, s, n + 1);
    return p;
}

static lf_status add_stop(lf__chat_template *t, const char *s) {
    if (!s || !*s || t->n_stop >= 4 || strlen(s) > 256) return LF_OK;
    for (int i = 0; i < t->n_stop; i++)
        if (!strcmp(t->stop[i], s)) return LF_OK;
    if (!(t->stop[t->n_stop] = dup_str(s))) return lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
    t->n_stop++;
    return LF_OK;
}

lf_status lf__chat_template_from_jinja(lf__chat_jinja *j, lf__chat_template *t) {
    memset(t, 0, sizeof *t);
    if (!(t->jinja = malloc(sizeof *t->jinja)) || !(t->source = dup_str(j->source))) {
        free(t->jinja);
        t->jinja = NULL;
        lf__chat_jinja_free(j);
        return lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
    }
    *t->jinja = *j;
    memset(j, 0, sizeof *j);
    static const char *const markers[] = {"<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "</s>", NULL};
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(t->jinja->vars, "eos_token");
    lf_status st = add_stop(t, cJSON_IsString(eos) ? eos->valuestring : NULL);
    for (int i = 0; markers[i] && st == LF_OK; i++)
        if (strstr(t->jinja->text, markers[i])) st = add_stop(t, markers[i]);
    if (st != LF_OK) lf__chat_template_free(t);
    return st;
}

lf_status lf__chat_template_parse_jinja(const cJSON *root, const char *what, lf__chat_template *t) {
    for (const cJSON *it = root->child; it; it = it->next)
        if (strcmp(it->string, "format") && strcmp(it->string, "jinja") && strcmp(it->string, "special_tokens") &&
            strcmp(it->string, "stop") && strcmp(it->string, "description"))
            return lf_fail(LF_ERR_CONFIG,
                           "chat template '%s': unknown key '%s' (a Jinja template has jinja, "
                           "special_tokens, stop, description)",
                           what, it->string);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(root, "jinja");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(root, "special_tokens");
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (!cJSON_IsString(src)) return lf_fail(LF_ERR_FORMAT, "chat template '%s': 'jinja' must be a string", what);
    if (sp && !cJSON_IsObject(sp))
        return lf_fail(LF_ERR_FORMAT, "chat template '%s': 'special_tokens' must be an object of strings", what);
    for (const cJSON *it = sp ? sp->child : NULL; it; it = it->next)
        if (!cJSON_IsString(it))
            return lf_fail(LF_ERR_FORMAT, "chat template '%s': 'special_tokens.%s' must be a string", what, it->string);
    if (stop && !cJSON_IsArray(stop))
        return lf_fail(LF_ERR_FORMAT, "chat template '%s': 'stop' must be a list of strings", what);
    lf__chat_jinja j;
    lf_status st = lf__chat_jinja_from_text(src->valuestring, strlen(src->valuestring), what, sp, &j);
    if (st != LF_OK) return st;
    if ((st = lf__chat_template_from_jinja(&j, t)) != LF_OK) return st;
    if (stop) { /* the file's own stop strings replace the derived ones */
        for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
        t->n_stop = 0;
        for (const cJSON *it = stop->child; it && st == LF_OK; it = it->next) {
            if (!cJSON_IsString(it) || !it->valuestring[0] || t->n_stop == 4)
                st = lf_fail(LF_ERR_FORMAT, "chat template '%s': 'stop' holds at most 4 non-empty strings", what);
            else st = add_stop(t, it->valuestring);
        }
    }
    if (st != LF_OK) lf__chat_template_free(t);
    return st;
}

/* ---------------------------------------------------------------- rendering JSON conversations */
/* The llmforge kind: messages[0, k) as lf__chat_message (pointing into the JSON). */
static lf_status to_messages(const cJSON *messages, int k, lf__chat_message **out) {
    *out = calloc((size_t)(k > 0 ? k : 1), sizeof **out);
    if (!*out) return lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
    int i = 0;
    for (const cJSON *m = messages->child; m && i < k; m = m->next, i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role"),
                    *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        int role = -1;
        for (int q = 0; q < LF__ROLE_COUNT && cJSON_IsString(r); q++)
            if (!strcmp(r->valuestring, k_role_names[q])) role = q;
        if (role < 0 || !cJSON_IsString(c)) {
            free(*out);
            *out = NULL;
            return lf_fail(LF_ERR_INVALID_ARG,
                           "message %d: a chat_template.json template takes {\"role\": system|user|assistant, "
                           "\"content\": string}",
                           i);
        }
        (*out)[i] = (lf__chat_message){(lf__chat_role)role, c->valuestring, strlen(c->valuestring)};
    }
    return LF_OK;
}

lf_status lf__chat_template_render_json(const lf__chat_template *t, const cJSON *messages, int k,
                                        int add_generation_prompt, char **out, size_t *len, lf__chat_span **spans,
                                        int *n_spans) {
    if (!t || !cJSON_IsArray(messages)) return lf_fail(LF_ERR_INVALID_ARG, "chat template: 'messages' must be a list");
    int n = cJSON_GetArraySize(messages);
    if (k < 0 || k > n) k = n;
    if (t->jinja) {
        if (k == n) return lf__chat_jinja_render(t->jinja, messages, add_generation_prompt, out, len, spans, n_spans);
        cJSON *part = cJSON_CreateArray();
        int i = 0;
        lf_status st = part ? LF_OK : lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
        for (const cJSON *m = messages->child; m && i < k && st == LF_OK; m = m->next, i++)
            if (!cJSON_AddItemReferenceToArray(part, (cJSON *)m))
                st = lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
        if (st == LF_OK) st = lf__chat_jinja_render(t->jinja, part, add_generation_prompt, out, len, spans, n_spans);
        cJSON_Delete(part);
        return st;
    }
    lf__chat_message *m = NULL;
    lf_status st = to_messages(messages, k, &m);
    if (st == LF_OK) st = lf__chat_template_render(t, m, k, add_generation_prompt, out, len, spans, n_spans);
    free(m);
    return st;
}

static lf_status render_prefix(const void *ctx, const cJSON *messages, int k, int add_gen, char **out, size_t *len) {
    return lf__chat_template_render_json(ctx, messages, k, add_gen, out, len, NULL, NULL);
}

lf_status lf__chat_template_turns(const lf__chat_template *t, const cJSON *messages, const char *full, size_t full_len,
                                  size_t **turns, int *n_turns) {
    return lf__chat_turns_by_prefix(render_prefix, t, t->source ? t->source : "chat template", messages, full, full_len,
                                    turns, n_turns);
}

/* ---------------------------------------------------------------- public API (data.h) */
struct lf_chat_template {
    lf__chat_template t;
};

lf_status lf_chat_template_open(const char *spec, lf_chat_template **out) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "chat template: NULL output");
    *out = calloc(1, sizeof **out);
    if (!*out) return lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
    lf_status st = lf__chat_template_load(spec, &(*out)->t);
    if (st != LF_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

void lf_chat_template_free(lf_chat_template *t) {
    if (!t) return;
    lf__chat_template_free(&t->t);
    free(t);
}

const char *lf_chat_template_source(const lf_chat_template *t) { return t && t->t.source ? t->t.source : ""; }

int lf_chat_template_is_jinja(const lf_chat_template *t) { return t && t->t.jinja != NULL; }

lf_status lf_chat_template_set_date(lf_chat_template *t, const char *date) {
    int y, mo, d, h, mi, s;
    char extra;
    if (!t || !date || sscanf(date, "%4d-%2d-%2d %2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &s, &extra) != 6 || mo < 1 ||
        mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60 || y < 1900)
        return lf_fail(LF_ERR_INVALID_ARG, "chat template: date '%s' is not YYYY-MM-DD HH:MM:SS", date ? date : "");
    if (t->t.jinja) snprintf(t->t.jinja->today, sizeof t->t.jinja->today, "%s", date);
    return LF_OK;
}

lf_status lf_chat_template_render(const lf_chat_template *t, const char *messages_json, size_t len,
                                  int add_generation_prompt, char **out, size_t *out_len, size_t **turns,
                                  int *n_turns) {
    if (out) *out = NULL;
    if (turns) *turns = NULL;
    if (n_turns) *n_turns = 0;
    if (!t || !messages_json || !out || !out_len) return lf_fail(LF_ERR_INVALID_ARG, "chat template: NULL argument");
    cJSON *root = cJSON_ParseWithLength(messages_json, len);
    if (!root) return lf_fail(LF_ERR_FORMAT, "messages: not valid JSON");
    const cJSON *msgs = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "messages") : root;
    lf_status st = LF_OK;
    if (!cJSON_IsArray(msgs))
        st = lf_fail(LF_ERR_FORMAT, "messages: expected a JSON list of messages (or an object "
                                    "with \"messages\")");
    if (st == LF_OK)
        st = lf__chat_template_render_json(&t->t, msgs, -1, add_generation_prompt, out, out_len, NULL, NULL);
    if (st == LF_OK && turns) {
        char *full = NULL;
        size_t fl = 0;
        st = lf__chat_template_render_json(&t->t, msgs, -1, 0, &full, &fl, NULL, NULL);
        if (st == LF_OK) st = lf__chat_template_turns(&t->t, msgs, full, fl, turns, n_turns);
        free(full);
        if (st != LF_OK) {
            free(*out);
            *out = NULL;
        }
    }
    cJSON_Delete(root);
    return st;
}

lf_status lf_chat_template_encode(const lf_chat_template *t, const lf_tokenizer *tok, const char *messages_json,
                                  size_t len, uint32_t **ids, size_t *n, char **text) {
    if (!t || !tok || !messages_json || !ids || !n) return lf_fail(LF_ERR_INVALID_ARG, "chat template: NULL argument");
    *ids = NULL;
    *n = 0;
    if (text) *text = NULL;
    cJSON *root = cJSON_ParseWithLength(messages_json, len);
    if (!root) return lf_fail(LF_ERR_FORMAT, "messages: not valid JSON");
    const cJSON *msgs = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "messages") : root;
    char *out = NULL;
    size_t out_len = 0;
    lf__chat_span *sp = NULL;
    int n_sp = 0;
    uint32_t *acc = NULL;
    size_t na = 0;
    lf_status st = cJSON_IsArray(msgs) ? LF_OK : lf_fail(LF_ERR_FORMAT, "messages: expected a JSON list of messages");
    if (st == LF_OK) st = lf__chat_template_render_json(&t->t, msgs, -1, 1, &out, &out_len, &sp, &n_sp);
    for (int i = 0; i < n_sp && st == LF_OK; i++) {
        lf_encode_opts o = lf_encode_opts_default();
        o.allow_special = sp[i].from_template;
        uint32_t *piece = NULL;
        size_t m = 0;
        st = lf_tokenizer_encode_opts(tok, out + sp[i].off, sp[i].len, &o, &piece, &m);
        if (st == LF_OK && m) {
            uint32_t *q = lf_alloc((na + m) * sizeof *q);
            if (!q) st = lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
            else {
                if (na) memcpy(q, acc, na * sizeof *q);
                memcpy(q + na, piece, m * sizeof *q);
                lf_free(acc);
                acc = q;
                na += m;
            }
        }
        lf_free(piece);
    }
    cJSON_Delete(root);
    free(sp);
    if (st != LF_OK) {
        lf_free(acc);
        free(out);
        return st;
    }
    *ids = acc;
    *n = na;
    if (text) *text = out;
    else free(out);
    return LF_OK;
}
