/*
 * Generation tasks: generation (BLEU, ROUGE) and exact_match (SQuAD EM and
 * token F1). Each prompt is completed with lf_generate (greedy unless the
 * task sets a temperature), which stops at max_new_tokens, at the end-of-text
 * token (lf_tokenizer_eot: <|endoftext|>, or "\n" for a character
 * vocabulary; it is not part of the text), or as soon
 * as the text decoded so far contains one of the stop strings; the
 * prediction is the decoded text cut before the earliest stop string. Bytes
 * that are not valid UTF-8 (a byte-level token sequence cut inside a
 * character) and NUL bytes become U+FFFD, as Python's
 * bytes.decode(errors="replace") does, before scoring.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/infer.h"
#include "eval/tasks_impl.h"

typedef struct gen_state {
    const ev_ctx *c;
    const ev_task *t;
    uint32_t *ids;
    size_t n, cap;
    lf_status st;
} gen_state;

/* Start of the earliest occurrence of any stop string in s[0..len), or len. */
static size_t find_stop(const char *s, size_t len, char *const *stop, int n_stop) {
    size_t best = len;
    for (int k = 0; k < n_stop; k++) {
        size_t sl = strlen(stop[k]);
        if (!sl || sl > len) continue;
        for (size_t i = 0; i + sl <= len && i < best; i++)
            if (s[i] == stop[k][0] && !memcmp(s + i, stop[k], sl)) {
                best = i;
                break;
            }
    }
    return best;
}

static int on_token(uint32_t token, void *user) {
    gen_state *g = user;
    if (g->c->have_eot && token == g->c->eot) return 1;
    if (g->n == g->cap) {
        size_t nc = g->cap ? 2 * g->cap : 64;
        uint32_t *ni = realloc(g->ids, nc * sizeof *ni);
        if (!ni) {
            g->st = lf_fail(LF_ERR_NOMEM, "eval: out of memory");
            return 1;
        }
        g->ids = ni;
        g->cap = nc;
    }
    g->ids[g->n++] = token;
    if (!g->t->n_stop) return 0;
    char *s = NULL;
    size_t len = 0;
    lf_status st = lf_tokenizer_decode(g->c->tok, g->ids, g->n, &s, &len);
    int hit = st == LF_OK && find_stop(s, len, g->t->stop, g->t->n_stop) < len;
    lf_free(s);
    if (st != LF_OK) {
        g->st = st;
        return 1;
    }
    return hit;
}

/* s[0..len) as valid UTF-8 without NULs (malloc'd): invalid bytes and NUL -> U+FFFD. */
static char *sanitize(const char *s, size_t len) {
    char *o = malloc(3 * len + 1);
    if (!o) {
        lf_fail(LF_ERR_NOMEM, "eval: out of memory");
        return NULL;
    }
    size_t k = 0, i = 0;
    while (i < len) {
        size_t seg = i;
        while (seg < len && s[seg]) seg++; /* [i, seg) holds no NUL */
        while (i < seg) {
            size_t bad;
            if (lf_utf8_validate(s + i, seg - i, "text", &bad) == LF_OK) bad = seg - i;
            memcpy(o + k, s + i, bad);
            k += bad;
            i += bad;
            if (i < seg) {
                memcpy(o + k, "\xEF\xBF\xBD", 3);
                k += 3;
                i++;
            }
        }
        if (i < len) { /* the NUL */
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        }
    }
    o[k] = 0;
    return o;
}

/* Generate the prediction for example i (*pred malloc'd). */
static lf_status predict(const ev_ctx *c, const ev_task *t, size_t i, gen_state *g, char **pred) {
    const ev_example *ex = &t->ex[i];
    uint32_t *ids = NULL, *out = NULL;
    size_t n_ids = 0, n_out = 0;
    *pred = NULL;
    lf_status st = lf_tokenizer_encode(c->tok, ex->text, strlen(ex->text), &ids, &n_ids);
    if (st != LF_OK) {
        lf_error_prefix("%s:%ld: prompt", t->file, ex->line);
        return st;
    }
    if (n_ids == 0) {
        lf_free(ids);
        if (!c->have_eot)
            return lf_fail(LF_ERR_FORMAT,
                           "%s:%ld: the prompt is empty and the tokenizer has no end-of-text token to start from",
                           t->file, ex->line);
        ids = lf_alloc(sizeof(uint32_t));
        if (!ids) return LF_ERR_NOMEM;
        ids[0] = c->eot;
        n_ids = 1;
    }
    for (size_t k = 0; k < n_ids; k++)
        if (ids[k] >= (uint32_t)c->V) {
            lf_free(ids);
            return lf_fail(LF_ERR_RANGE, "%s:%ld: prompt token %u is outside the model's vocabulary [0, %d)", t->file,
                           ex->line, ids[k], c->V);
        }
    lf_sample_opts so = {.max_new_tokens = c->opts->max_new_tokens > 0 ? c->opts->max_new_tokens : t->max_new_tokens,
                         .temperature = t->temperature,
                         .top_k = t->top_k,
                         .seed = lf_rng_mix(t->seed, (uint64_t)i)};
    g->n = 0;
    g->st = LF_OK;
    st = lf_generate(c->m, ids, n_ids, &so, on_token, g, &out, &n_out);
    lf_free(ids);
    lf_free(out);
    if (st == LF_OK) st = g->st;
    if (st != LF_OK) {
        lf_error_prefix("%s:%ld: generation", t->file, ex->line);
        return st;
    }
    char *text = NULL;
    size_t len = 0;
    if (g->n) {
        if ((st = lf_tokenizer_decode(c->tok, g->ids, g->n, &text, &len)) != LF_OK) {
            lf_error_prefix("%s:%ld: generation", t->file, ex->line);
            return st;
        }
        len = find_stop(text, len, t->stop, t->n_stop);
    }
    *pred = sanitize(text ? text : "", len);
    lf_free(text);
    return *pred ? LF_OK : LF_ERR_NOMEM;
}

lf_status lf__ev_run_generate(const ev_ctx *c, const ev_task *t) {
    gen_state g = {.c = c, .t = t};
    lf_status st = LF_OK;
    char **preds = calloc(t->n_ex, sizeof *preds);
    lf_rouge_score *rs = NULL;
    const char **texts = NULL;
    lf_bleu *bleu = NULL;
    cJSON *samples = NULL;
    double em_sum = 0, f1_sum = 0;
    if (!preds) return lf_fail(LF_ERR_NOMEM, "eval: out of memory");
    lf_bleu_config bc = lf_bleu_config_default();
    if (t->kind == LF_EVAL_GENERATION && (st = lf_bleu_create(&bleu, &bc)) != LF_OK) goto done;
    if (c->opts->samples) {
        cJSON *d = lf__ev_detail(c->res);
        samples = d ? cJSON_AddArrayToObject(d, "samples") : NULL;
        if (!samples) {
            st = lf_fail(LF_ERR_NOMEM, "eval: out of memory");
            goto done;
        }
    }
    for (size_t i = 0; i < t->n_ex && st == LF_OK; i++) {
        const ev_example *ex = &t->ex[i];
        if ((st = predict(c, t, i, &g, &preds[i])) != LF_OK) break;
        cJSON *smp = samples ? cJSON_CreateObject() : NULL;
        if (smp) {
            cJSON_AddItemToArray(samples, smp);
            cJSON_AddNumberToObject(smp, "line", (double)ex->line);
            cJSON_AddStringToObject(smp, "prediction", preds[i]);
        }
        if (t->kind == LF_EVAL_EXACT_MATCH) {
            double em, f1;
            st = lf_squad_score(preds[i], (const char *const *)ex->items, (size_t)ex->n_items, &em, &f1);
            em_sum += em;
            f1_sum += f1;
            if (smp) {
                cJSON_AddNumberToObject(smp, "exact_match", em);
                cJSON_AddNumberToObject(smp, "f1", f1);
            }
        } else {
            st = lf_bleu_add(bleu, preds[i], (const char *const *)ex->items, (size_t)ex->n_items, NULL);
        }
        if (st != LF_OK) lf_error_prefix("%s:%ld", t->file, ex->line);
    }
    if (st != LF_OK) goto done;
    double n = (double)t->n_ex;
    if (t->kind == LF_EVAL_EXACT_MATCH) {
        if ((st = lf__ev_metric(c->res, "exact_match", em_sum / n, 1)) == LF_OK)
            st = lf__ev_metric(c->res, "f1", f1_sum / n, 1);
    } else {
        lf_bleu_score bs;
        if ((st = lf_bleu_corpus(bleu, &bs)) != LF_OK) goto done;
        /* ROUGE's tokenizer is decided once over the whole task (predictions and references) */
        size_t nt = t->n_ex;
        for (size_t i = 0; i < t->n_ex; i++) nt += (size_t)t->ex[i].n_items;
        texts = malloc(nt * sizeof *texts);
        rs = malloc(t->n_ex * sizeof *rs);
        if (!texts || !rs) {
            st = lf_fail(LF_ERR_NOMEM, "eval: out of memory");
            goto done;
        }
        size_t k = 0;
        for (size_t i = 0; i < t->n_ex; i++) {
            texts[k++] = preds[i];
            for (int j = 0; j < t->ex[i].n_items; j++) texts[k++] = t->ex[i].items[j];
        }
        lf_rouge_config rc = lf_rouge_config_default();
        if ((st = lf_rouge_detect_tokenizer(texts, nt, &rc.tokenizer)) != LF_OK) goto done;
        for (size_t i = 0; i < t->n_ex && st == LF_OK; i++) {
            st = lf_rouge_score_text(&rc, (const char *const *)t->ex[i].items, (size_t)t->ex[i].n_items, preds[i],
                                     &rs[i]);
            if (st != LF_OK) lf_error_prefix("%s:%ld", t->file, t->ex[i].line);
        }
        lf_rouge_score mean;
        if (st != LF_OK || (st = lf_rouge_mean(rs, t->n_ex, &mean)) != LF_OK) goto done;
        if ((st = lf__ev_metric(c->res, "bleu", bs.score, 1)) != LF_OK ||
            (st = lf__ev_metric(c->res, "rouge1", mean.type[LF_ROUGE_1].fmeasure, 1)) != LF_OK ||
            (st = lf__ev_metric(c->res, "rouge2", mean.type[LF_ROUGE_2].fmeasure, 1)) != LF_OK ||
            (st = lf__ev_metric(c->res, "rougeL", mean.type[LF_ROUGE_L].fmeasure, 1)) != LF_OK ||
            (st = lf__ev_metric(c->res, "rougeLsum", mean.type[LF_ROUGE_LSUM].fmeasure, 1)) != LF_OK)
            goto done;
        cJSON *d = lf__ev_detail(c->res);
        if (d) {
            cJSON_AddStringToObject(d, "bleu_signature", bs.signature);
            cJSON_AddStringToObject(d, "rouge_tokenizer", lf_rouge_tokenizer_name(rc.tokenizer));
        }
    }
    cJSON *d = lf__ev_detail(c->res);
    if (d) {
        cJSON_AddNumberToObject(d, "max_new_tokens",
                                c->opts->max_new_tokens > 0 ? c->opts->max_new_tokens : t->max_new_tokens);
        cJSON_AddNumberToObject(d, "temperature", t->temperature);
        cJSON *sa = cJSON_AddArrayToObject(d, "stop");
        for (int i = 0; sa && i < t->n_stop; i++) cJSON_AddItemToArray(sa, cJSON_CreateString(t->stop[i]));
    }
done:
    for (size_t i = 0; i < t->n_ex; i++) free(preds[i]);
    free(preds);
    free(rs);
    free(texts);
    free(g.ids);
    lf_bleu_free(bleu);
    return st;
}
