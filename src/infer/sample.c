/*
 * Choosing the next token from one logits row: greedy, or temperature,
 * top-k and top-p (nucleus, Holtzman et al. 2019) sampling with one draw of
 * the counter-based RNG (purpose SAMPLE, index = the generated token's
 * position), so (seed, position) reproduces a choice on any machine.
 *
 * Semantics (HF's TopKLogitsWarper then TopPLogitsWarper): softmax of
 * logits / temperature over the top_k largest (0 = all, ties at the k-th
 * value all kept), then the tokens in decreasing probability while the mass
 * before each is below top_p (at least one), renormalised; the draw walks
 * the kept tokens in id order.
 */
#include <math.h>
#include <stdlib.h>
#include "llmforge/infer.h"

static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

int lf_sample_token(const float *logits, int V, float temperature, int top_k, float top_p, uint64_t seed,
                    uint64_t step, float *work, int *iwork) {
    (void)iwork;
    int best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (temperature <= 0.0f) return best;
    /* the logit threshold of top-k */
    float thresh = -INFINITY;
    if (top_k > 0 && top_k < V) {
        for (int v = 0; v < V; v++) work[v] = logits[v];
        qsort(work, (size_t)V, sizeof(float), cmp_desc);
        thresh = work[top_k - 1];
    }
    const float mx = logits[best];
    double sum = 0;
    for (int v = 0; v < V; v++) {
        work[v] = logits[v] >= thresh ? expf((logits[v] - mx) / temperature) : 0.0f;
        sum += work[v];
    }
    if (top_p > 0.0f && top_p < 1.0f) {
        /* keep the most probable tokens while the mass before them is < top_p: the
         * probability cut-off is the value at which the running mass first reaches top_p */
        float *sorted = malloc(sizeof(float) * (size_t)V);
        if (sorted) {
            for (int v = 0; v < V; v++) sorted[v] = work[v];
            qsort(sorted, (size_t)V, sizeof(float), cmp_desc);
            double acc = 0;
            float cut = sorted[0];
            for (int i = 0; i < V && sorted[i] > 0; i++) {
                cut = sorted[i];
                acc += sorted[i];
                if (acc >= top_p * sum) break;
            }
            free(sorted);
            sum = 0;
            for (int v = 0; v < V; v++) {
                if (work[v] < cut) work[v] = 0.0f;
                sum += work[v];
            }
        }
    }
    const double r = (double)lf_rng_uniform(seed, LF_RNG_SAMPLE, step) * sum;
    double acc = 0;
    int next = best;
    for (int v = 0; v < V; v++) {
        acc += work[v];
        if (work[v] > 0 && r < acc) {
            next = v;
            break;
        }
    }
    return next;
}
