/*
 * The DPO objective (TRL's DPOTrainer, loss_type "sigmoid"): the pair loss
 * and its derivatives, the sequence log-probs of a batch of pairs, and one
 * micro-batch's forward and backward. Contract in include/llmforge/train.h
 * ("DPO"); the trainer's use of it (reference log-probs, batches, metrics)
 * is trainer_dpo.c's.
 *
 * The gradient reuses the fused classifier: a training forward leaves, per
 * target token, dlogits = (softmax - onehot) * dloss = d(-log p) / dlogits
 * * dloss. A row's log-prob is -(sum of its token losses), so the DPO
 * gradient of that row is the same dlogits times w = -d loss / d logp; the
 * weights are known only after the forward (they depend on the log-probs),
 * so they scale the dlogits between forward and backward
 * (lf_model_scale_dlogits). No new kernel, one forward, one backward.
 *
 * Invariants:
 *  - Rows 2i and 2i+1 of a micro-batch are pair i's chosen and rejected.
 *  - -logsigmoid(z) is computed as softplus(-z) without overflow for any z;
 *    sigmoid(-z) likewise.
 *  - Accuracy is chosen reward > rejected reward (strict, as TRL's).
 */
#include <math.h>
#include <stdlib.h>
#include "llmforge/train.h"

/* log(1 + exp(x)) without overflow. */
static double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
/* 1 / (1 + exp(-x)) without overflow. */
static double sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    const double e = exp(x);
    return e / (1.0 + e);
}

void lf_dpo_pair(double beta, double pc, double pr, double rc, double rr, lf_dpo_pair_result *out) {
    const double lc = pc - rc, lr = pr - rr; /* log-ratios against the reference */
    const double z = beta * (lc - lr);
    out->loss = softplus(-z);
    out->dlogp_chosen = -beta * sigmoid(-z);
    out->dlogp_rejected = beta * sigmoid(-z);
    out->reward_chosen = beta * lc;
    out->reward_rejected = beta * lr;
}

lf_status lf_dpo_logps(lf_model *m, const int32_t *inputs, const int32_t *targets, int P, int T, double *logps) {
    if (!m || !inputs || !targets || !logps || P < 1 || T < 1)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_dpo_logps: bad argument");
    lf_forward_opts fo = {0};
    lf_status st = lf_model_forward(m, inputs, targets, 2 * P, T, &fo, NULL, NULL);
    if (st == LF_OK) st = lf_model_row_losses(m, logps);
    for (int r = 0; st == LF_OK && r < 2 * P; r++) logps[r] = -logps[r];
    return st;
}

lf_status lf_dpo_forward_backward(lf_model *m, const int32_t *inputs, const int32_t *targets, int P, int T,
                                  const double *ref, double beta, const lf_forward_opts *fo, lf_dpo_stats *acc) {
    if (!m || !inputs || !targets || !ref || !fo || !acc || P < 1 || T < 1)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_dpo_forward_backward: bad argument");
    double *lp = malloc(sizeof(double) * 2 * (size_t)P);
    float *w = malloc(sizeof(float) * 2 * (size_t)P);
    lf_status st = lp && w ? LF_OK : lf_fail(LF_ERR_NOMEM, "dpo: out of memory for %d pairs", P);
    if (st == LF_OK) st = lf_model_forward(m, inputs, targets, 2 * P, T, fo, NULL, NULL);
    if (st == LF_OK) st = lf_model_row_losses(m, lp);
    for (int i = 0; st == LF_OK && i < P; i++) {
        const double pc = -lp[2 * i], pr = -lp[2 * i + 1];
        lf_dpo_pair_result r;
        lf_dpo_pair(beta, pc, pr, ref[2 * i], ref[2 * i + 1], &r);
        /* dlogits hold d(token loss) * dloss; logp = -(sum of token losses) */
        w[2 * i] = (float)-r.dlogp_chosen;
        w[2 * i + 1] = (float)-r.dlogp_rejected;
        acc->pairs += 1;
        acc->loss += r.loss;
        acc->reward_chosen += r.reward_chosen;
        acc->reward_rejected += r.reward_rejected;
        acc->accuracy += r.reward_chosen > r.reward_rejected ? 1.0 : 0.0;
        acc->margin += r.reward_chosen - r.reward_rejected;
        acc->logp_chosen += pc;
        acc->logp_rejected += pr;
    }
    if (st == LF_OK && fo->dloss > 0.0f) {
        st = lf_model_scale_dlogits(m, w);
        if (st == LF_OK) st = lf_model_backward(m);
    }
    free(lp);
    free(w);
    return st;
}
