/*
 * Choosing the next token from one row of logits: greedy, or temperature,
 * top-k and top-p (nucleus) sampling with one counter-based draw.
 *
 * A pure function of (logits, options, seed, step), so generation is
 * reproducible token by token and any step can be re-drawn alone (a resumed
 * or batched generation draws what a single one would).
 *
 * Method, and why each piece:
 *  - top-k threshold: the k-th largest logit by a radix select on the
 *    floats' order-preserving bit patterns (8 bits a level, counting):
 *    exact, O(V) whatever the values (many equal logits included), no sort.
 *    Every logit >= it is kept, as Hugging Face's TopKLogitsWarper and the
 *    qsort lf_generate used before.
 *  - probabilities: expf((l - max) / temperature) in float, summed in double
 *    in id order: the arithmetic lf_generate has always used, so top_p = 1
 *    draws the same token from the same (seed, position).
 *  - nucleus: HF's TopPLogitsWarper keeps the tokens, in decreasing
 *    probability, whose preceding mass is < top_p. Positive floats order as
 *    their bits, so the same radix select, walking buckets by their mass
 *    instead of their count, finds the probability at the nucleus's edge in
 *    O(V) (a GPT-2 row is 50257 tokens, and a heap sort of the ones that
 *    can be in the nucleus cost 1-8 ms a token). Equal probabilities are
 *    ordered by increasing id. The masses before a token are sums of
 *    bucket masses (double), not a running sum in sorted order: the two
 *    differ only in rounding (~1e-16 of the mass), so only a top_p within
 *    that of a token's cumulative mass could be decided differently.
 *  - the draw: u = lf_rng_uniform(seed, LF_RNG_SAMPLE, step) scaled by the
 *    kept mass, then the first kept token in increasing id whose cumulative
 *    mass exceeds it (inverse-CDF sampling over the renormalised kept set).
 *
 * Invariants: never reads past logits[V-1]; work (V floats) holds the
 * unnormalised probabilities, iwork (V ints) the ids a radix select still
 * considers; no allocation, no global state, no recorded error; the result
 * depends on nothing but the arguments.
 *
 * References: Holtzman et al. 2019, "The Curious Case of Neural Text
 * Degeneration" (nucleus sampling); Hugging Face transformers
 * generation/logits_process.py (TopKLogitsWarper, TopPLogitsWarper);
 * nanoGPT model.py generate (temperature, top-k).
 */
#include <math.h>
#include <string.h>
#include "llmforge/infer.h"

lf_status lf_sample_check(int V, float temperature, int top_k, float top_p) {
    if (V < 1) return lf_fail(LF_ERR_RANGE, "sampling: vocab_size %d must be >= 1", V);
    if (!(temperature >= 0.0f) || !isfinite(temperature))
        return lf_fail(LF_ERR_RANGE, "sampling option temperature %g must be a finite number >= 0",
                       (double)temperature);
    if (top_k < 0) return lf_fail(LF_ERR_RANGE, "sampling option top_k %d must be >= 0 (0 = no top-k filter)", top_k);
    if (!(top_p > 0.0f && top_p <= 1.0f))
        return lf_fail(LF_ERR_RANGE, "sampling option top_p %g must be in (0, 1] (1 = no nucleus filter)",
                       (double)top_p);
    return LF_OK;
}

/* ---------------------------------------------------------------- helpers */

/* A key whose unsigned order is the float order (-inf < ... < -0 < +0 < ...
 * < +inf); NaN maps to 0, below every number, so it is never selected. */
static uint32_t order_key(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (x != x) return 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static float key_float(uint32_t k) {
    const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The bits of a probability (>= 0, finite): already in the float order. */
static uint32_t prob_key(float p) {
    uint32_t u;
    memcpy(&u, &p, sizeof u);
    return u;
}

/* The k-th largest of x[0..V) (1 <= k <= V), NaN counted as smallest: a
 * most-significant-digit radix select, 8 bits a level. Level one counts all
 * V keys; the ids whose key shares the chosen digits are then gathered into
 * ids (V ints) in increasing id, so later levels visit only those. */
static float kth_largest(const float *x, int V, int k, int *ids) {
    uint32_t prefix = 0;
    int n = -1; /* < 0: not gathered yet, every id is in play */
    for (int shift = 24; shift >= 0; shift -= 8) {
        int hist[256] = {0};
        if (n < 0)
            for (int v = 0; v < V; v++) hist[order_key(x[v]) >> 24]++;
        else
            for (int i = 0; i < n; i++) hist[(order_key(x[ids[i]]) >> shift) & 255u]++;
        int b = 255;
        for (; b > 0 && hist[b] < k; b--) k -= hist[b];
        prefix |= (uint32_t)b << shift;
        if (shift == 0) break;
        const uint32_t m = ~0u << shift;
        int w = 0;
        if (n < 0) {
            for (int v = 0; v < V; v++)
                if ((order_key(x[v]) & m) == prefix) ids[w++] = v;
        } else {
            for (int i = 0; i < n; i++)
                if ((order_key(x[ids[i]]) & m) == prefix) ids[w++] = ids[i];
        }
        n = w;
    }
    return key_float(prefix);
}

/* The nucleus's edge: the key kc of its last token in decreasing
 * probability, and *above = the mass of the tokens with a larger key (all
 * kept). A radix select like kth_largest that walks buckets by mass: from
 * the top, the first bucket whose mass takes the running sum to >= limit
 * holds the edge (the lowest non-empty one if rounding never gets there).
 * Tokens of probability 0 never take part. */
static uint32_t nucleus_edge(const float *p, int V, double limit, int *ids, double *above) {
    uint32_t prefix = 0;
    double acc = 0;
    int n = -1;
    for (int shift = 24; shift >= 0; shift -= 8) {
        int cnt[256] = {0};
        double mass[256] = {0};
        if (n < 0) {
            for (int v = 0; v < V; v++)
                if (p[v] > 0.0f) {
                    const uint32_t b = prob_key(p[v]) >> 24;
                    cnt[b]++;
                    mass[b] += p[v];
                }
        } else {
            for (int i = 0; i < n; i++) {
                const uint32_t b = (prob_key(p[ids[i]]) >> shift) & 255u;
                cnt[b]++;
                mass[b] += p[ids[i]];
            }
        }
        int bmin = 0;
        while (bmin < 255 && cnt[bmin] == 0) bmin++;
        int b = 255;
        for (; b > bmin; b--) {
            if (!cnt[b]) continue;
            if (acc + mass[b] >= limit) break;
            acc += mass[b];
        }
        prefix |= (uint32_t)b << shift;
        if (shift == 0) break;
        const uint32_t m = ~0u << shift;
        int w = 0;
        if (n < 0) {
            for (int v = 0; v < V; v++)
                if (p[v] > 0.0f && (prob_key(p[v]) & m) == prefix) ids[w++] = v;
        } else {
            for (int i = 0; i < n; i++)
                if ((prob_key(p[ids[i]]) & m) == prefix) ids[w++] = ids[i];
        }
        n = w;
    }
    *above = acc;
    return prefix;
}

/* ---------------------------------------------------------------- the sampler */

int lf_sample_token(const float *logits, int V, float temperature, int top_k, float top_p, uint64_t seed, uint64_t step,
                    float *work, int *iwork) {
    if (!logits || V < 1 || !isfinite(temperature) || top_k < 0 || !(top_p > 0.0f && top_p <= 1.0f)) return -1;
    if (temperature <= 0.0f) {
        int best = 0;
        for (int v = 0; v < V; v++)
            if (logits[v] > logits[best] || (logits[best] != logits[best] && logits[v] == logits[v])) best = v;
        return best;
    }
    if (!work || !iwork) return -1;

    float thresh = -INFINITY;
    if (top_k > 0 && top_k < V) {
        thresh = kth_largest(logits, V, top_k, iwork);
        if (thresh != thresh) thresh = -INFINITY; /* fewer than k numbers: keep them all */
    }
    float mx = -INFINITY;
    int first = -1;
    for (int v = 0; v < V; v++)
        if (logits[v] >= thresh) {
            if (first < 0) first = v;
            if (logits[v] > mx) mx = logits[v];
        }
    if (first < 0) return 0;           /* every logit NaN */
    if (mx == -INFINITY) return first; /* every kept logit -inf: no mass anywhere */
    if (mx == INFINITY) {
        for (int v = 0; v < V; v++)
            if (logits[v] == INFINITY) return v;
    }

    float *p = work;
    double sum = 0;
    for (int v = 0; v < V; v++) {
        p[v] = logits[v] >= thresh ? expf((logits[v] - mx) / temperature) : 0.0f;
        sum += p[v];
    }

    if (top_p < 1.0f) {
        /* keep every token above the edge, and of the tokens at it (equal
         * probabilities) those, in increasing id, whose preceding mass is
         * still below the limit: at least the first */
        const double limit = (double)top_p * sum;
        double above;
        const uint32_t kc = nucleus_edge(p, V, limit, iwork, &above);
        sum = 0;
        int j = 0;
        for (int v = 0; v < V; v++) {
            const uint32_t key = prob_key(p[v]);
            if (p[v] > 0.0f && key == kc) {
                if (!(j == 0 || above + (double)j * (double)p[v] < limit)) p[v] = 0.0f;
                j++;
            } else if (!(p[v] > 0.0f && key > kc)) {
                p[v] = 0.0f;
            }
            sum += p[v];
        }
    }

    /* inverse CDF over the kept tokens in id order (lf_generate's draw) */
    const double r = (double)lf_rng_uniform(seed, LF_RNG_SAMPLE, step) * sum;
    double acc = 0;
    int next = V - 1;
    for (int v = 0; v < V; v++) {
        acc += p[v];
        if (p[v] > 0 && r < acc) {
            next = v;
            break;
        }
    }
    while (p[next] == 0.0f && next > 0) next--; /* rounding at the very end */
    return next;
}
