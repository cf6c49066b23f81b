/*
 * Search methods: the grid, random points, and the Tree-structured Parzen
 * Estimator (TPE).
 *
 * Why TPE written here rather than Optuna driven through files: the whole
 * method is a page of arithmetic (two kernel densities per dimension and an
 * argmax), while Optuna would put a Python interpreter and its package
 * under every sweep at run time, which llmforge has none of. Written
 * ourselves it is also a pure function of (space, observations, seed,
 * index), which is what makes "the same seed proposes the same trials"
 * testable and a resumed sweep propose what the uninterrupted one would
 * have.
 *
 * TPE as in Bergstra et al., "Algorithms for Hyper-Parameter Optimization"
 * (NeurIPS 2011), and hyperopt's adaptive Parzen estimator, in the
 * independent (per-dimension) form Optuna uses by default:
 *  - observations sorted by objective (lower is better; NaN as +inf, ties in
 *    the given order); the first n_good = min(ceil(gamma * n), 25) (at
 *    least 1) are good, the rest bad;
 *  - continuous dimensions (uniform; loguniform in log space; int on
 *    [low - 0.5, high + 0.5], scored as the mass of its unit bin) get for
 *    each set a mixture, with equal weights, of a Gaussian at each
 *    observation and the prior's Gaussian (the range's middle, sigma the
 *    range), each truncated to the range; an observation's sigma is the
 *    larger gap to its sorted neighbours (the prior's mean among them, the
 *    range's ends beyond the extremes), clipped to [range / min(100, m + 1),
 *    range];
 *  - grid/choice dimensions: p(k) = (count_k + 1) / (m + K);
 *  - `candidates` points are drawn from the good densities (component,
 *    then a truncated Gaussian by rejection, 64 tries, else uniform); the
 *    one with the largest sum over dimensions of log l(x) - log g(x) wins,
 *    the first on ties.
 * Every draw comes from the counter-based generator keyed by (seed, trial
 * index, candidate, dimension), never from a global state.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "sweep/sweep_impl.h"

#define TPE_MAX_GOOD 25
#define TPE_TRIES 64

double lf__sweep_unit(uint64_t seed, uint32_t purpose, uint64_t index, uint32_t sub) {
    uint32_t w[4];
    lf_philox4x32(seed, purpose, index, sub, w);
    uint64_t bits = ((uint64_t)w[0] << 32 | w[1]) >> 11;
    return (double)bits * (1.0 / 9007199254740992.0);
}

/* ---------------------------------------------------------------- grid */

static long dim_size(const lf_sweep_dim *d) {
    switch (d->type) {
    case LF_SWEEP_DIM_GRID:
    case LF_SWEEP_DIM_CHOICE: return d->n_values;
    case LF_SWEEP_DIM_INT: return (long)(d->high - d->low + 1);
    default: return 0;
    }
}

long lf_sweep_grid_size(const lf_sweep_spec *s) {
    if (!s || s->n_dims == 0) return 0;
    double size = 1;
    for (int i = 0; i < s->n_dims; i++) size *= (double)dim_size(&s->dims[i].pub);
    return size > LF_SWEEP_MAX_TRIALS ? LF_SWEEP_MAX_TRIALS + 1 : (long)size;
}

lf_status lf_sweep_grid_point(const lf_sweep_spec *s, long index, double *x) {
    if (!s || !x) return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_grid_point: NULL argument");
    long size = lf_sweep_grid_size(s);
    if (index < 0 || index >= size)
        return lf_fail(LF_ERR_INVALID_ARG, "grid point %ld is outside the grid (%ld points)", index, size);
    /* mixed radix, the last dimension varying fastest */
    long rest = index;
    for (int d = s->n_dims - 1; d >= 0; d--) {
        const lf_sweep_dim *dim = &s->dims[d].pub;
        long k = dim_size(dim), i = rest % k;
        rest /= k;
        x[d] = dim->type == LF_SWEEP_DIM_INT ? dim->low + (double)i : (double)i;
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- random */

/* The dimension's value at unit u in [0, 1). */
static double from_unit(const lf_sweep_dim *d, double u) {
    switch (d->type) {
    case LF_SWEEP_DIM_UNIFORM: {
        double v = d->low + u * (d->high - d->low);
        return v > d->high ? d->high : v;
    }
    case LF_SWEEP_DIM_LOGUNIFORM: {
        double v = exp(log(d->low) + u * (log(d->high) - log(d->low)));
        return v < d->low ? d->low : v > d->high ? d->high : v;
    }
    case LF_SWEEP_DIM_INT: {
        double v = d->low + floor(u * (d->high - d->low + 1));
        return v > d->high ? d->high : v;
    }
    default: {
        double v = floor(u * d->n_values);
        return v > d->n_values - 1 ? d->n_values - 1 : v;
    }
    }
}

void lf_sweep_random_point(const lf_sweep_spec *s, uint64_t seed, long index, double *x) {
    for (int d = 0; d < s->n_dims; d++)
        x[d] = from_unit(&s->dims[d].pub, lf__sweep_unit(seed, LF_SWEEP_RNG_RANDOM, (uint64_t)index, (uint32_t)d));
}

/* ---------------------------------------------------------------- TPE */

typedef struct parzen {
    int m;                  /* components (observations + the prior) */
    double *mu, *sigma, *z; /* z: the mass of each component inside [lo, hi] */
    double lo, hi;
} parzen;

static double ncdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The adaptive Parzen estimator over pts[0..n) on [lo, hi] (in the
 * transformed space), the prior included; arrays from work (3 * (n + 1)). */
static void parzen_build(parzen *p, const double *pts, int n, double lo, double hi, double *work) {
    p->m = n + 1;
    p->mu = work;
    p->sigma = work + p->m;
    p->z = work + 2 * p->m;
    p->lo = lo;
    p->hi = hi;
    const double prior_mu = 0.5 * (lo + hi), range = hi - lo;
    /* the observations and the prior's mean, sorted; the prior is marked by its position */
    for (int i = 0; i < n; i++) p->mu[i] = pts[i];
    p->mu[n] = prior_mu;
    qsort(p->mu, (size_t)p->m, sizeof *p->mu, cmp_double);
    int prior_at = -1;
    for (int i = 0; i < p->m; i++)
        if (p->mu[i] == prior_mu && prior_at < 0) prior_at = i;
    const double min_sigma = range / (double)(p->m < 100 ? p->m : 100);
    for (int i = 0; i < p->m; i++) {
        double left = i > 0 ? p->mu[i] - p->mu[i - 1] : p->mu[i] - lo;
        double right = i + 1 < p->m ? p->mu[i + 1] - p->mu[i] : hi - p->mu[i];
        double sg = left > right ? left : right;
        if (sg < min_sigma) sg = min_sigma;
        if (sg > range) sg = range;
        p->sigma[i] = i == prior_at ? range : sg;
    }
    for (int i = 0; i < p->m; i++) {
        double z = ncdf((hi - p->mu[i]) / p->sigma[i]) - ncdf((lo - p->mu[i]) / p->sigma[i]);
        p->z[i] = z > 1e-300 ? z : 1e-300;
    }
}

/* log density at t (continuous), or log mass of [a, b] (a < b: an int's bin). */
static double parzen_logp(const parzen *p, double t, double a, double b) {
    double sum = 0;
    for (int i = 0; i < p->m; i++) {
        double v;
        if (a < b) {
            v = ncdf((b - p->mu[i]) / p->sigma[i]) - ncdf((a - p->mu[i]) / p->sigma[i]);
        } else {
            double u = (t - p->mu[i]) / p->sigma[i];
            v = exp(-0.5 * u * u) / (p->sigma[i] * sqrt(2.0 * M_PI));
        }
        sum += v / p->z[i];
    }
    sum /= p->m;
    return log(sum > 1e-300 ? sum : 1e-300);
}

/* A draw from p with the uniforms of stream (seed, index, sub0 ...). */
static double parzen_sample(const parzen *p, uint64_t seed, uint64_t index, uint32_t sub0) {
    int j = (int)floor(lf__sweep_unit(seed, LF_SWEEP_RNG_TPE, index, sub0) * p->m);
    if (j >= p->m) j = p->m - 1;
    for (uint32_t k = 1; k <= TPE_TRIES; k++) {
        double u1 = lf__sweep_unit(seed, LF_SWEEP_RNG_TPE, index, sub0 + 2 * k);
        double u2 = lf__sweep_unit(seed, LF_SWEEP_RNG_TPE, index, sub0 + 2 * k + 1);
        double z = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
        double t = p->mu[j] + p->sigma[j] * z;
        if (t >= p->lo && t <= p->hi) return t;
    }
    return p->lo + lf__sweep_unit(seed, LF_SWEEP_RNG_TPE, index, sub0 + 1) * (p->hi - p->lo);
}

typedef struct obs_ref {
    const lf_sweep_obs *o;
    int at;
} obs_ref;

static int cmp_obs(const void *a, const void *b) {
    const obs_ref *x = a, *y = b;
    double u = isnan(x->o->y) ? INFINITY : x->o->y, v = isnan(y->o->y) ? INFINITY : y->o->y;
    if (u < v) return -1;
    if (u > v) return 1;
    return (x->at > y->at) - (x->at < y->at); /* ties: the given order */
}

/* The transformed range of a continuous dimension. */
static void cont_range(const lf_sweep_dim *d, double *lo, double *hi) {
    if (d->type == LF_SWEEP_DIM_LOGUNIFORM) {
        *lo = log(d->low);
        *hi = log(d->high);
    } else if (d->type == LF_SWEEP_DIM_INT) {
        *lo = d->low - 0.5;
        *hi = d->high + 0.5;
    } else {
        *lo = d->low;
        *hi = d->high;
    }
}

static double to_t(const lf_sweep_dim *d, double x) { return d->type == LF_SWEEP_DIM_LOGUNIFORM ? log(x) : x; }

static double from_t(const lf_sweep_dim *d, double t) {
    double x = t;
    if (d->type == LF_SWEEP_DIM_LOGUNIFORM) x = exp(t);
    if (d->type == LF_SWEEP_DIM_INT) x = floor(t + 0.5);
    return x < d->low ? d->low : x > d->high ? d->high : x;
}

static int is_taken(const lf_sweep_spec *s, const double *x, const double *const *taken, int n_taken) {
    for (int i = 0; i < n_taken; i++)
        if (taken[i] && !memcmp(taken[i], x, sizeof *x * (size_t)s->n_dims)) return 1;
    return 0;
}

lf_status lf_sweep_tpe_suggest(const lf_sweep_spec *s, const lf_sweep_tpe_opts *opts, const lf_sweep_obs *obs,
                               int n_obs, const double *const *taken, int n_taken, uint64_t seed, long index,
                               double *x) {
    if (!s || !x || (n_obs > 0 && !obs) || n_obs < 0)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_sweep_tpe_suggest: bad argument");
    lf_sweep_tpe_opts o = opts ? *opts : lf_sweep_tpe_opts_default();
    if (o.candidates < 1 || !(o.gamma > 0 && o.gamma < 1) || o.startup < 0)
        return lf_fail(LF_ERR_INVALID_ARG,
                       "lf_sweep_tpe_suggest: options out of range (candidates %d, gamma %g, "
                       "startup %d)",
                       o.candidates, o.gamma, o.startup);
    if (n_obs < o.startup || n_obs < 2) { /* start-up: the random point, or an untried one near it in the stream */
        lf_sweep_random_point(s, seed, index, x);
        for (int k = 0; k < 64 && is_taken(s, x, taken, n_taken); k++)
            lf_sweep_random_point(s, seed, (long)lf_rng_mix((uint64_t)index, 0x7C0000u + (uint64_t)k), x);
        if (is_taken(s, x, taken, n_taken)) lf_sweep_random_point(s, seed, index, x); /* exhausted */
        return LF_OK;
    }
    obs_ref *ord = malloc(sizeof *ord * (size_t)n_obs);
    double *cand = malloc(sizeof *cand * (size_t)o.candidates * (size_t)s->n_dims);
    double *score = calloc((size_t)o.candidates, sizeof *score);
    double *pts = malloc(sizeof *pts * (size_t)n_obs);
    double *work = malloc(sizeof *work * 6 * ((size_t)n_obs + 1));
    lf_status st = LF_OK;
    if (!ord || !cand || !score || !pts || !work) {
        st = lf_fail(LF_ERR_NOMEM, "TPE: out of memory (%d observations)", n_obs);
        goto done;
    }
    for (int i = 0; i < n_obs; i++) ord[i] = (obs_ref){&obs[i], i};
    qsort(ord, (size_t)n_obs, sizeof *ord, cmp_obs);
    int n_good = (int)ceil(o.gamma * n_obs);
    if (n_good > TPE_MAX_GOOD) n_good = TPE_MAX_GOOD;
    if (n_good < 1) n_good = 1;
    if (n_good > n_obs - 1) n_good = n_obs - 1; /* n_obs >= 2: a bad set too */
    const int n_bad = n_obs - n_good;
    for (int d = 0; d < s->n_dims; d++) {
        const lf_sweep_dim *dim = &s->dims[d].pub;
        const uint32_t sub0 = (uint32_t)d * 1024u;
        if (dim->type == LF_SWEEP_DIM_GRID || dim->type == LF_SWEEP_DIM_CHOICE) {
            const int K = dim->n_values;
            double *lw = work, *gw = work + K; /* K <= LF_SWEEP_MAX_VALUES: work may be too small */
            double *own = NULL;
            if ((size_t)2 * (size_t)K > 6 * ((size_t)n_obs + 1)) {
                own = calloc(2 * (size_t)K, sizeof *own);
                if (!own) {
                    st = lf_fail(LF_ERR_NOMEM, "TPE: out of memory");
                    goto done;
                }
                lw = own;
                gw = own + K;
            }
            for (int k = 0; k < K; k++) lw[k] = gw[k] = 1.0; /* one pseudo-count each: the prior */
            for (int i = 0; i < n_obs; i++) {
                int k = (int)ord[i].o->x[d];
                if (k < 0 || k >= K) continue;
                if (i < n_good) lw[k] += 1.0;
                else gw[k] += 1.0;
            }
            for (int k = 0; k < K; k++) {
                lw[k] /= (double)(n_good + K);
                gw[k] /= (double)(n_bad + K);
            }
            for (int c = 0; c < o.candidates; c++) {
                uint64_t idx = lf_rng_mix((uint64_t)index, (uint64_t)c);
                double u = lf__sweep_unit(seed, LF_SWEEP_RNG_TPE, idx, sub0), acc = 0;
                int k = K - 1;
                for (int j = 0; j < K; j++) {
                    acc += lw[j];
                    if (u < acc) {
                        k = j;
                        break;
                    }
                }
                cand[(size_t)c * s->n_dims + d] = k;
                score[c] += log(lw[k]) - log(gw[k]);
            }
            free(own);
            continue;
        }
        double lo, hi;
        cont_range(dim, &lo, &hi);
        parzen l, g;
        for (int i = 0; i < n_good; i++) pts[i] = to_t(dim, ord[i].o->x[d]);
        parzen_build(&l, pts, n_good, lo, hi, work);
        for (int i = 0; i < n_bad; i++) pts[i] = to_t(dim, ord[n_good + i].o->x[d]);
        parzen_build(&g, pts, n_bad, lo, hi, work + 3 * ((size_t)n_obs + 1));
        for (int c = 0; c < o.candidates; c++) {
            uint64_t idx = lf_rng_mix((uint64_t)index, (uint64_t)c);
            double t = parzen_sample(&l, seed, idx, sub0);
            double v = from_t(dim, t);
            double a = 0, b = 0, tv = to_t(dim, v);
            if (dim->type == LF_SWEEP_DIM_INT) {
                a = v - 0.5;
                b = v + 0.5;
            }
            cand[(size_t)c * s->n_dims + d] = v;
            score[c] += parzen_logp(&l, tv, a, b) - parzen_logp(&g, tv, a, b);
        }
    }
    int best = -1;
    for (int c = 0; c < o.candidates; c++)
        if ((best < 0 || score[c] > score[best]) && !is_taken(s, cand + (size_t)c * s->n_dims, taken, n_taken))
            best = c;
    if (best >= 0) {
        memcpy(x, cand + (size_t)best * s->n_dims, sizeof *x * (size_t)s->n_dims);
    } else { /* every candidate was tried already: an untried random point, if one turns up */
        for (int k = 0; k < 64; k++) {
            lf_sweep_random_point(s, seed, (long)lf_rng_mix((uint64_t)index, 0x7C0000u + (uint64_t)k), x);
            if (!is_taken(s, x, taken, n_taken)) break;
        }
    }
done:
    free(ord);
    free(cand);
    free(score);
    free(pts);
    free(work);
    return st;
}
