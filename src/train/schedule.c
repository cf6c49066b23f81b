/*
 * Learning-rate schedules (and OneCycle's momentum).
 *
 * cosine (nanoGPT train.py get_lr):
 *   it <  warmup_iters:  lr * (it + 1) / (warmup_iters + 1)
 *   it >  decay_iters:   min_lr
 *   otherwise:           ratio = (it - warmup) / (decay - warmup),
 *                        coeff = 0.5 * (1 + cos(pi * ratio)),
 *                        min_lr + coeff * (lr - min_lr)
 * constant: lr.
 *
 * DeepSpeed's schedulers (deepspeed/runtime/lr_schedules.py), transcribed
 * formula by formula. DeepSpeed builds the scheduler with
 * last_batch_iteration = -1 and calls step() after every applied optimizer
 * step, so optimizer step `it` runs at the lr of last_batch_iteration
 * b = it - 1 (step 0 at the scheduler's initial value: warmup_min_lr for
 * WarmupLR/WarmupDecayLR, 0 for WarmupCosineLR, cycle_min_lr for OneCycle,
 * lr_range_test_min_lr for LRRangeTest). W = max(2, warmup_num_steps).
 *   WarmupLR:       b < W: min + (max - min) * g, g = log(b + 1) / log(W) (log)
 *                   or b / W (linear); else max
 *   WarmupDecayLR:  as WarmupLR during warmup, then
 *                   min + (max - min) * max(0, (total - b) / max(1, total - W))
 *   WarmupCosineLR: lr x ratio; warmup ratio = wmr + (1 - wmr) * g; after it
 *                   p = min(1, (b - W + 1) / max(1, total - W)),
 *                   ratio = max(0, cmr + (1 - cmr) * (1 + cos(pi p)) / 2)
 *   OneCycle:       n = b + 1, size = first + second; b < size: the triangle
 *                   min + (max - min) * s (s from x = 1 + n/size - floor(1 + n/size),
 *                   staircased when a stair count > 0); after: min / (1 +
 *                   decay_lr_rate * (b - size + 1) / decay_step_size), or min
 *                   when decay_step_size or decay_lr_rate is 0. Momentum: beta1
 *                   = max_mom - (max_mom - min_mom) * s in the cycle, max_mom *
 *                   (1 + decay_mom_rate * k / decay_step_size) after; beta2
 *                   0.99; step 0 runs at cycle_min_mom (set at construction).
 *   LRRangeTest:    min_lr * (1 + rate * i), i = (b + 1) / step_size, floored
 *                   when staircase.
 *
 * Computed in double like the Python references, returned as float. Edges the
 * nanoGPT reference does not handle: decay_iters == warmup_iters (0/0 in
 * Python) gives min_lr at that step; decay_iters < 0 or min_lr < 0 in a
 * hand-built config mean "train_iters" and "lr / 10", the configuration
 * defaults; a negative step counts as step 0.
 */
#include <math.h>
#include "llmforge/train.h"

static const double k_pi = 3.14159265358979323846;

static float nanogpt_cosine(const lf_train_config *cfg, long it) {
    double lr = cfg->lr;
    double min_lr = cfg->min_lr < 0 ? lr / 10.0 : (double)cfg->min_lr;
    long warmup = cfg->warmup_iters > 0 ? cfg->warmup_iters : 0;
    long decay = cfg->decay_iters < 0 ? cfg->train_iters : cfg->decay_iters;
    if (it < warmup) return (float)(lr * (double)(it + 1) / (double)(warmup + 1));
    if (it > decay || decay <= warmup) return (float)min_lr;
    double ratio = (double)(it - warmup) / (double)(decay - warmup);
    double coeff = 0.5 * (1.0 + cos(k_pi * ratio));
    return (float)(min_lr + coeff * (lr - min_lr));
}

/* DeepSpeed's warmup fraction at b (0 <= b < W). */
static double warmup_gamma(const lf_ds_sched *d, long b, long W) {
    if (!d->warmup_linear) return log((double)b + 1.0) / log((double)W);
    return (double)b / (double)W;
}

/* OneCycle's _get_scale_factor at b (b < total size). */
static double one_cycle_scale(const lf_ds_sched *d, long b) {
    double first = (double)d->cycle_first_step_size;
    double second = (double)d->cycle_second_step_size;
    double total = first + second, ratio = first / total;
    double n = (double)b + 1.0;
    double cycle = floor(1.0 + n / total);
    double x = 1.0 + n / total - cycle, s;
    int stairs;
    if (x <= ratio) {
        s = x / ratio;
        stairs = d->cycle_first_stair_count;
    } else {
        s = (x - 1.0) / (ratio - 1.0);
        stairs = d->cycle_second_stair_count;
    }
    if (stairs > 0) {
        double ci = fmod(n, total), pos;
        if (ci <= first) pos = ci * stairs / first;
        else pos = (total - ci) * stairs / second;
        s = floor(pos) / stairs;
    }
    return s;
}

static double deepspeed_lr(const lf_train_config *cfg, long it) {
    const lf_ds_sched *d = &cfg->ds;
    long b = it - 1;
    long W = d->warmup_num_steps > 2 ? d->warmup_num_steps : 2;
    switch (cfg->sched_type) {
    case LF_SCHED_WARMUP_LR:
    case LF_SCHED_WARMUP_DECAY_LR: {
        double lo = d->warmup_min_lr, delta = (double)d->warmup_max_lr - lo, g;
        if (b < 0) return lo;
        if (b < W) g = warmup_gamma(d, b, W);
        else if (cfg->sched_type == LF_SCHED_WARMUP_LR) g = 1.0;
        else {
            double den = (double)(d->total_num_steps - W);
            g = (double)(d->total_num_steps - b) / (den > 1.0 ? den : 1.0);
            if (g < 0) g = 0;
        }
        return lo + delta * g;
    }
    case LF_SCHED_WARMUP_COSINE_LR: {
        double r;
        if (b < 0) return 0.0;
        if (b < W) {
            r = d->warmup_min_ratio + warmup_gamma(d, b, W) * (1.0 - d->warmup_min_ratio);
        } else {
            long den = d->total_num_steps - W > 1 ? d->total_num_steps - W : 1;
            double p = (double)(b - W + 1) / (double)den;
            if (p > 1.0) p = 1.0;
            r = d->cos_min_ratio + (1.0 - d->cos_min_ratio) * (1.0 + cos(k_pi * p)) / 2.0;
            if (r < 0) r = 0;
        }
        return (double)cfg->lr * r;
    }
    case LF_SCHED_ONE_CYCLE: {
        long total = d->cycle_first_step_size + d->cycle_second_step_size;
        if (b < total) return d->cycle_min_lr + ((double)d->cycle_max_lr - d->cycle_min_lr) * one_cycle_scale(d, b);
        if (d->decay_step_size == 0 || d->decay_lr_rate == 0) return d->cycle_min_lr;
        double k = (double)(b - total + 1) / (double)d->decay_step_size;
        return d->cycle_min_lr / (1.0 + d->decay_lr_rate * k);
    }
    case LF_SCHED_LR_RANGE_TEST: {
        double i = (double)(b + 1) / (double)d->lr_range_test_step_size;
        if (d->lr_range_test_staircase) i = floor(i);
        return d->lr_range_test_min_lr * (1.0 + d->lr_range_test_step_rate * i);
    }
    default: return cfg->lr;
    }
}

float lf_lr_at(const lf_train_config *cfg, long it) {
    if (it < 0) it = 0;
    switch (cfg->sched_type) {
    case LF_SCHED_CONSTANT: return cfg->lr;
    case LF_SCHED_COSINE: return nanogpt_cosine(cfg, it);
    default: return (float)deepspeed_lr(cfg, it);
    }
}

void lf_betas_at(const lf_train_config *cfg, long it, float *beta1, float *beta2) {
    const lf_ds_sched *d = &cfg->ds;
    *beta1 = cfg->beta1;
    *beta2 = cfg->beta2;
    if (cfg->sched_type != LF_SCHED_ONE_CYCLE || !d->cycle_momentum) return;
    long b = (it < 0 ? 0 : it) - 1, total = d->cycle_first_step_size + d->cycle_second_step_size;
    double m;
    *beta2 = 0.99f;
    if (b < 0) m = d->cycle_min_mom;
    else if (b < total) m = d->cycle_max_mom - ((double)d->cycle_max_mom - d->cycle_min_mom) * one_cycle_scale(d, b);
    else if (d->decay_step_size == 0 || d->decay_mom_rate == 0) m = d->cycle_max_mom;
    else m = d->cycle_max_mom * (1.0 + d->decay_mom_rate * (double)(b - total + 1) / (double)d->decay_step_size);
    *beta1 = (float)m;
}
