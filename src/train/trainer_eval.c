/*
 * Evaluation during training: eval.tasks loaded at create, the periodic
 * estimate of train and validation loss (and the tasks' metrics), the best
 * metric so far, and checkpoint.load_best_model_at_end's export.
 *
 * Invariants:
 *  - Evaluation rows are keyed by (step, batch): evaluating never disturbs
 *    the training streams, and a resumed run evaluates the same rows.
 *  - With W ranks the figures are those of one process with micro-batch
 *    W*B (the ranks sum each batch's loss sum and target count).
 *  - best_score changes only on a strictly better value: a tie keeps the
 *    earlier checkpoint.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "llmforge/train.h"
#include "trainer_impl.h"

/* eval.tasks: one path per line, optionally "PATH#KIND" for files that do
 * not name their kind (e.g. `llmforge data arithmetic` output, #exact_match). */
lf_status lf__trainer_load_tasks(lf_trainer *t) {
    if (!t->cfg.eval_tasks[0]) {
        if (strcmp(t->cfg.best_metric, "val_loss") != 0)
            return lf_fail(LF_ERR_CONFIG,
                           "key 'checkpoint.best_metric' is '%s' but eval.tasks is empty (only val_loss "
                           "is available)",
                           t->cfg.best_metric);
        return LF_OK;
    }
    char buf[sizeof t->cfg.eval_tasks];
    memcpy(buf, t->cfg.eval_tasks, sizeof buf);
    const char *paths[64];
    lf_eval_kind kinds[64];
    int n = 0;
    const char *bad = NULL;
    if (lf_eval_tasks_split(buf, 64, paths, kinds, &n, &bad) != LF_OK)
        return lf_fail(LF_ERR_CONFIG, "key 'eval.tasks': '%s' after '#' in '%s' is not a task kind", bad, paths[n]);
    lf_eval_load_opts lo = lf_eval_load_opts_default();
    lo.kinds = kinds;
    lf_status st = lf_eval_tasks_load(&t->tasks, paths, n, &lo);
    if (st != LF_OK) {
        lf_error_prefix("eval.tasks");
        return st;
    }
    st = lf_eval_results_create(&t->task_res);
    if (st != LF_OK) return st;
    st = lf_tokenizer_open(&t->tok, lf_dataset_tokenizer_spec(t->ds), NULL);
    if (st != LF_OK) return st;
    if (strcmp(t->cfg.best_metric, "val_loss") != 0) {
        /* the metric must be one the tasks produce: check its task name now */
        int found = 0;
        for (int i = 0; i < lf_eval_tasks_count(t->tasks); i++) {
            const char *nm = lf_eval_task_name(t->tasks, i);
            size_t ln = strlen(nm);
            found |= strncmp(t->cfg.best_metric, nm, ln) == 0 && t->cfg.best_metric[ln] == '/';
        }
        if (!found)
            return lf_fail(LF_ERR_CONFIG,
                           "key 'checkpoint.best_metric': '%s' names no task of eval.tasks (metrics are "
                           "<task>/<metric>)",
                           t->cfg.best_metric);
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- evaluation */

/* Mean over eval_iters random batches of the batch-mean loss (nanoGPT's
 * estimate_loss). Rows are keyed by (step, batch) so evaluation never
 * disturbs the training streams. With W ranks batch k is the global
 * micro-batch of W*B rows, rank r evaluating rows r*B .. r*B+B-1 of it; the
 * ranks sum each batch's (loss sum, target count) and every rank divides, so
 * the figures are those of one process with micro-batch W*B. */
#define EVAL_CHUNK 2048 /* batches per reduction: 2 values each, within LF_COMM_SCALARS_MAX */
static lf_status estimate_loss(lf_trainer *t, lf_split split, double *out) {
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size, iters = t->cfg.eval_iters;
    double total = 0, part[EVAL_CHUNK][2];
    lf_forward_opts fo = {0};
    for (int k0 = 0; k0 < iters; k0 += EVAL_CHUNK) {
        int nk = iters - k0 < EVAL_CHUNK ? iters - k0 : EVAL_CHUNK;
        for (int j = 0; j < nk; j++) {
            uint64_t batch = (uint64_t)t->step * (uint64_t)iters + (uint64_t)(k0 + j);
            uint64_t first = (batch * (uint64_t)t->world + (uint64_t)t->rank) * (uint64_t)B;
            /* random windows, or record-aligned ones when training samples records */
            lf_sampling smp = t->cfg.sampling == LF_SAMPLING_RECORDS ? LF_SAMPLING_RECORDS : LF_SAMPLING_RANDOM;
            const uint32_t purpose = split == LF_SPLIT_TRAIN ? LF_RNG_EVAL : LF_RNG_EVAL + 16;
            lf_status st = t->pack[split] ? lf_sft_pack_get_batch(t->pack[split], t->cfg.seed, purpose, first, B,
                                                                  t->inputs, t->targets, t->pos)
                                          : lf_dataset_get_batch(t->ds, split, smp, t->cfg.seed, purpose, first, B, T,
                                                                 t->inputs, t->targets);
            fo.pos = t->pack[split] ? t->pos : NULL;
            if (st != LF_OK) return st;
            double sum;
            long cnt;
            st = lf_model_forward(t->model, t->inputs, t->targets, B, T, &fo, &sum, &cnt);
            if (st != LF_OK) return st;
            part[j][0] = sum;
            part[j][1] = (double)cnt;
        }
        if (t->world > 1) {
            lf_status st = lf_comm_all_reduce_f64(t->comm, &part[0][0], 2 * (size_t)nk, LF_COMM_SUM);
            if (st != LF_OK) return st;
        }
        for (int j = 0; j < nk; j++) total += part[j][1] > 0 ? part[j][0] / part[j][1] : 0.0;
    }
    *out = total / iters;
    return LF_OK;
}

lf_status lf__trainer_eval(lf_trainer *t) {
    double t0 = lf_time_now();
    lf_comm_set_context(t->comm, "evaluation at step %ld", t->step);
    double tl = NAN, vl = NAN;
    lf_dpo_stats dtr = {0}, dval = {0}; /* train.objective dpo: the losses are mean pair losses */
    lf_status st = t->dpo ? lf__dpo_estimate(t, LF_SPLIT_TRAIN, &tl, &dtr) : estimate_loss(t, LF_SPLIT_TRAIN, &tl);
    if (st != LF_OK) return st;
    if (lf_dataset_num_tokens(t->ds, LF_SPLIT_VAL) > 0) {
        st = t->dpo ? lf__dpo_estimate(t, LF_SPLIT_VAL, &vl, &dval) : estimate_loss(t, LF_SPLIT_VAL, &vl);
        if (st != LF_OK) return st;
        if (vl < t->best_val) t->best_val = vl;
    }
    t->last_val = vl;
    t->last_train_eval = tl;
    t->last_eval_step = t->step;
    lf_obs_scalar sc[64];
    char names[64][160];
    int n = 0;
    sc[n++] = (lf_obs_scalar){"eval/train_loss", tl};
    sc[n++] = (lf_obs_scalar){"eval/val_loss", vl};
    if (t->dpo) { /* TRL's eval metrics: of the val split, else of train */
        n += lf__dpo_metrics(dval.pairs > 0 ? &dval : &dtr, "eval", sc + n, names + n, 6);
    }
    double score = vl;
    if (t->tasks) {
        /* the tasks run on sessions of their own shapes: training keeps its plan */
        st = lf_eval_tasks_run(t->tasks, t->model, t->tok, NULL, t->task_res);
        if (st != LF_OK) return st;
        size_t nm = 0;
        const lf_eval_metric *m = lf_eval_results_metrics(t->task_res, &nm);
        for (size_t i = 0; i < nm && n < 63; i++) {
            snprintf(names[n], sizeof names[n], "eval/%s", m[i].name);
            sc[n] = (lf_obs_scalar){names[n], m[i].value};
            n++;
        }
        if (strcmp(t->cfg.best_metric, "val_loss") != 0 &&
            lf_eval_results_get(t->task_res, t->cfg.best_metric, &score) != LF_OK)
            score = NAN;
    }
    t->last_score = score;
    if (isfinite(score) && (t->cfg.greater_is_better ? score > t->best_score : score < t->best_score)) {
        t->best_score = score; /* strictly better: a tie keeps the earlier checkpoint */
        t->best_eval_step = t->step;
    }
    sc[n++] = (lf_obs_scalar){"time/eval_ms", (lf_time_now() - t0) * 1e3};
    lf_obs_record r = {.kind = LF_OBS_EVAL, .step = t->step, .scalars = sc, .n_scalars = n};
    lf__trainer_emit(t, &r);
    return LF_OK;
}

/* checkpoint.load_best_model_at_end: the best checkpoint's model files are
 * copied to out_dir/final_model (what transformers' from_pretrained and
 * llmforge sample read). */
lf_status lf__trainer_export_best(lf_trainer *t) {
    if (!t->best_ckpt[0]) return LF_OK;
    char dst[LF_PATH_MAX + 32];
    snprintf(dst, sizeof dst, "%s/final_model", t->cfg.out_dir);
    lf_status st = lf_mkdirs(dst);
    if (st != LF_OK) return st;
    static const char *files[] = {"model.safetensors", "config.json",        "vocab.json",
                                  "tokenizer.json",    "chat_template.json", "trainer_state.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char src[LF_PATH_MAX + 200], out[LF_PATH_MAX + 64];
        snprintf(src, sizeof src, "%s/%s/%s", t->ckpt_root, t->best_ckpt, files[i]);
        snprintf(out, sizeof out, "%s/%s", dst, files[i]);
        if (access(src, F_OK) != 0) continue;
        char *data = NULL;
        size_t len = 0;
        st = lf_file_read_all(src, 0, &data, &len);
        if (st == LF_OK) st = lf_file_write_all(out, data, len);
        lf_free(data);
        if (st != LF_OK) return st;
    }
    char esc[LF_PATH_MAX * 2], json[LF_PATH_MAX * 2 + 128], score[LF_JSON_NUMBER_MAX];
    lf__trainer_json_escape(esc, sizeof esc, dst);
    lf_json_number(score, sizeof score, t->best_score);
    snprintf(json, sizeof json, "{\"path\":\"%s\",\"from\":\"%s\",\"%s\":%s}", esc, t->best_ckpt, t->cfg.best_metric,
             score);
    lf__trainer_event(t, "final_model", NULL, json);
    return LF_OK;
}
