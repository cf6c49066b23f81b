/*
 * The optimizer step shared by the trainer and the benchmark: global gradient
 * norm, clipping as torch.nn.utils.clip_grad_norm_ (coef = min(1, max_norm /
 * (norm + 1e-6)), folded into the update as a gradient scale), then
 * torch.optim.AdamW on every tensor, weight decay only where the parameter
 * table says so (nanoGPT: tensors with >= 2 dims), with the betas of
 * lf_betas_at at step t - 1 (OneCycle's momentum). The step ends at a
 * backend sync point, so a failed op surfaces as the step's status.
 */
#include <math.h>
#include "llmforge/backend.h"
#include "llmforge/train.h"

double lf_grad_norm(lf_model *m, lf_backend *be) {
    double ss = 0;
    (void)lf_backend_sum_squares(be, lf_model_train_grads(m), lf_model_train_num_params(m),
                                 &ss); /* every backend has it */
    return sqrt(ss);
}

lf_status lf_adamw_apply(lf_model *m, lf_backend *be, float *mom1, float *mom2, long t, float lr,
                         const lf_train_config *cfg, double norm) {
    float *p = lf_model_train_params(m), *g = lf_model_train_grads(m);
    lf_status st = lf_backend_sync(be); /* the norm came from the backend: was it computed? */
    if (st != LF_OK) return st;
    if (!isfinite(norm))
        return lf_fail(LF_ERR_NUMERIC, "step %ld: gradient norm is %g; lower optimizer.params.lr or check the data", t,
                       norm);
    float scale = 1.0f;
    if (cfg->grad_clip > 0) {
        double coef = (double)cfg->grad_clip / (norm + 1e-6);
        if (coef < 1.0) scale = (float)coef;
    }
    float b1, b2;
    lf_betas_at(cfg, t - 1, &b1, &b2);
    int count;
    const lf_param_info *table = lf_model_train_table(m, &count);
    for (int i = 0; i < count; i++) {
        const lf_param_info *pi = &table[i];
        lf_backend_adamw(be, p + pi->offset, g + pi->offset, mom1 + pi->offset, mom2 + pi->offset, pi->numel, lr, b1,
                         b2, cfg->eps, pi->decay ? cfg->weight_decay : 0.0f, scale, (int)t);
    }
    return lf_backend_sync(be);
}

lf_status lf_adamw_step(lf_model *m, lf_backend *be, float *mom1, float *mom2, long t, float lr,
                        const lf_train_config *cfg, double *norm_out) {
    double norm = lf_grad_norm(m, be);
    if (norm_out) *norm_out = norm;
    return lf_adamw_apply(m, be, mom1, mom2, t, lr, cfg, norm);
}
