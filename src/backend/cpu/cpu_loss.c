/*
 * Fused softmax + cross-entropy over the vocabulary, with its gradient.
 *
 * Invariants:
 *  - Rows are independent (OpenMP over N); the row's exp-sum is accumulated
 *    in double by one thread, so results do not depend on thread count.
 *    exp is lf__cpu_expf_nonpos (cpu_math.h): vectorizable, at least as
 *    accurate as expf.
 *  - losses[i] = logsumexp(logits[i,0:V]) - logits[i,target].
 *  - dlogits is OVERWRITTEN (not accumulated) with (softmax - onehot) * dloss
 *    on columns 0..V-1 and 0 on the padding columns V..Vp-1. It may alias
 *    logits: each row's max and target logit are read before the row is
 *    written, and every later write at column j depends only on column j.
 *  - targets[i] < 0 means ignored: loss 0 and a zero dlogits row.
 *    targets[i] >= V is malformed input (ops return no status): its loss is
 *    NaN, so the caller's non-finite check catches it, and its dlogits row 0.
 *
 * Reference: PyTorch F.cross_entropy(ignore_index=-1); llm.c
 * crossentropy_softmax_backward.
 */
#include <math.h>
#include <string.h>
#include "cpu_internal.h"
#include "cpu_math.h"

void lf__cpu_crossentropy_forward_backward(float *losses, float *dlogits, const float *logits, const int32_t *targets,
                                           int N, int V, int Vp, float dloss) {
#pragma omp parallel for schedule(static) if ((long)N * V >= LF_CPU_PAR_MIN)
    for (int i = 0; i < N; i++) {
        const float *l = logits + (size_t)i * Vp;
        float *dl = dlogits ? dlogits + (size_t)i * Vp : NULL;
        const int32_t tgt = targets[i];
        if (tgt < 0 || tgt >= V) {
            losses[i] = tgt < 0 ? 0.0f : NAN;
            if (dl) memset(dl, 0, (size_t)Vp * sizeof(float));
            continue;
        }
        const float mx = lf__cpu_max_f32(l, V);
        const float lt = l[tgt];
        double sum = 0.0;
        if (dl) {
            /* keep the exponentials in dlogits: the gradient pass only scales them */
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < V; j++) {
                float e = lf__cpu_expf_nonpos(l[j] - mx);
                dl[j] = e;
                sum += (double)e;
            }
        } else {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < V; j++) sum += (double)lf__cpu_expf_nonpos(l[j] - mx);
        }
        losses[i] = (float)(log(sum) + (double)mx - (double)lt);
        if (dl) {
            const float s = (float)(1.0 / sum);
            const float p_t = dl[tgt] * s;
#pragma omp simd
            for (int j = 0; j < V; j++) dl[j] = dl[j] * s * dloss;
            dl[tgt] = (p_t - 1.0f) * dloss;
            for (int j = V; j < Vp; j++) dl[j] = 0.0f;
        }
    }
}

/* Row order, in double: the same sum for any thread count. */
double lf__cpu_loss_sum(const float *losses, const int32_t *targets, int N, long *n_valid) {
    double sum = 0;
    long cnt = 0;
    for (int i = 0; i < N; i++) {
        if (targets[i] >= 0) {
            sum += losses[i];
            cnt++;
        }
    }
    *n_valid = cnt;
    return sum;
}
