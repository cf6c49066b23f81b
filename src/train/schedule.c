/*
 * Learning-rate schedules.
 *
 * cosine (nanoGPT train.py get_lr):
 *   it <  warmup_iters:  lr * (it + 1) / (warmup_iters + 1)
 *   it >  decay_iters:   min_lr
 *   otherwise:           ratio = (it - warmup) / (decay - warmup),
 *                        coeff = 0.5 * (1 + cos(pi * ratio)),
 *                        min_lr + coeff * (lr - min_lr)
 * constant: lr.
 *
 * Computed in double like the Python reference, returned as float. Edges the
 * reference does not handle: decay_iters == warmup_iters (0/0 in Python)
 * gives min_lr at that step; decay_iters < 0 or min_lr < 0 in a hand-built
 * config mean "train_iters" and "lr / 10", the configuration defaults; a
 * negative step counts as step 0.
 */
#include <math.h>
#include "llmforge/train.h"

float lf_lr_at(const lf_train_config *cfg, long it) {
    const double pi = 3.14159265358979323846;
    double lr = cfg->lr;
    if (cfg->sched_type == LF_SCHED_CONSTANT) return (float)lr;
    double min_lr = cfg->min_lr < 0 ? lr / 10.0 : (double)cfg->min_lr;
    long warmup = cfg->warmup_iters > 0 ? cfg->warmup_iters : 0;
    long decay = cfg->decay_iters < 0 ? cfg->train_iters : cfg->decay_iters;
    if (it < 0) it = 0;
    if (it < warmup) return (float)(lr * (double)(it + 1) / (double)(warmup + 1));
    if (it > decay || decay <= warmup) return (float)min_lr;
    double ratio = (double)(it - warmup) / (double)(decay - warmup);
    double coeff = 0.5 * (1.0 + cos(pi * ratio));
    return (float)(min_lr + coeff * (lr - min_lr));
}
