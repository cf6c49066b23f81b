/*
 * LoRA adapters (include/llmforge/model.h "LoRA"): the configuration's
 * checks, the adapters' parameter table, their initialisation, and the
 * low-rank path the runtime adds to every adapted matmul (lf__lora_forward /
 * lf__lora_backward, called from lf__mm_forward / lf__mm_backward, so no
 * architecture knows about adapters).
 *
 * Semantics are PEFT 0.21's (peft/tuners/lora/layer.py, Linear.forward and
 * update_layer): result = base(x) + lora_B(lora_A(dropout(x))) * scaling,
 * scaling = lora_alpha / r (use_rslora: / sqrt(r)), lora_A kaiming_uniform
 * with a = sqrt(5) (uniform(-1/sqrt(in), 1/sqrt(in))), lora_B zeros. A
 * target matches a module when it equals the module's path or is a dotted
 * suffix of it (PEFT's check for a list of names); "all-linear" is every
 * linear of the blocks (PEFT leaves out the output layer).
 *
 * Invariants:
 *  - Sites (adapted tensors) are in the base table's order, so their base
 *    offsets increase; each has A then B in the adapters' own flat buffer.
 *  - The runtime finds a matmul's sites by its weight pointer: a fused
 *    matmul (Llama's q|k|v, gate|up) reads a base range that starts at its
 *    first tensor and holds the others' rows after it, so a site inside
 *    [weight, weight + C*OC) adapts output columns (offset - weight) / C ..
 *    (out-in layout; a Conv1D weight (in, out) is one tensor, columns 0..).
 *  - The base is frozen: no gradient buffer, no base gradient computed.
 *  - Serving (lf_model_lora_bank_add): the bank holds adapters moved off the
 *    model, inference only (no gradients, no dropout); a ragged forward's
 *    run with adapter k gets bank[k - 1]'s path on its own rows, which are
 *    contiguous (m->kv->row0), so no rows are gathered or scattered.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/core.h"
#include "model_impl.h"

#define LORA_INIT_STREAM 0x4C6F5241ull /* "LoRA": A's draws apart from the base's init */

lf_lora_config lf_lora_config_default(void) {
    lf_lora_config c;
    memset(&c, 0, sizeof c);
    c.r = 8;
    c.alpha = 8.0f;
    snprintf(c.bias, sizeof c.bias, "none");
    return c;
}

int lf_lora_enabled(const lf_lora_config *lc) { return lc && lc->target_modules[0] != '\0'; }

/* The module path of a base tensor a LoRA can adapt (a 2-D ".weight" of a
 * block), without ".weight", into buf; 0 when it is no such tensor. */
static int module_path(const lf_param_info *p, int n_layer, char *buf, size_t cap) {
    size_t len = strlen(p->name);
    if (p->ndim != 2 || p->unit < 1 || p->unit > n_layer || len < 8 || strcmp(p->name + len - 7, ".weight") != 0)
        return 0;
    if (len - 7 >= cap) return 0;
    memcpy(buf, p->name, len - 7);
    buf[len - 7] = '\0';
    return 1;
}

/* The next target of a '\n'-separated list (also ',' or ' '): [*s, *s + len). */
static int next_target(const char **s, size_t *len) {
    const char *p = *s;
    while (*p == '\n' || *p == ',' || *p == ' ') p++;
    if (!*p) return 0;
    size_t n = strcspn(p, "\n, ");
    *s = p;
    *len = n;
    return 1;
}

static int target_matches(const char *path, const char *t, size_t tl) {
    size_t pl = strlen(path);
    if (pl == tl) return memcmp(path, t, tl) == 0;
    return pl > tl && path[pl - tl - 1] == '.' && memcmp(path + pl - tl, t, tl) == 0;
}

static int is_all_linear(const lf_lora_config *lc) {
    const char *s = lc->target_modules;
    size_t n;
    return next_target(&s, &n) && n == 10 && memcmp(s, "all-linear", 10) == 0;
}

/* Whether base tensor path is adapted under lc. */
static int path_targeted(const lf_lora_config *lc, const char *path) {
    if (is_all_linear(lc)) return 1;
    const char *s = lc->target_modules;
    size_t n;
    for (; next_target(&s, &n); s += n)
        if (target_matches(path, s, n)) return 1;
    return 0;
}

/* The distinct last segments of the adaptable modules ("q_proj k_proj ..."). */
static void module_names(const lf_param_info *t, int count, int n_layer, char *buf, size_t cap) {
    buf[0] = '\0';
    char path[LF_PARAM_NAME_MAX];
    for (int i = 0; i < count; i++) {
        if (!module_path(&t[i], n_layer, path, sizeof path)) continue;
        const char *last = strrchr(path, '.');
        last = last ? last + 1 : path;
        char word[LF_PARAM_NAME_MAX + 2];
        snprintf(word, sizeof word, " %s ", last);
        char padded[1024];
        snprintf(padded, sizeof padded, " %s ", buf);
        if (strstr(padded, word)) continue;
        size_t used = strlen(buf);
        snprintf(buf + used, cap - used, "%s%s", used ? " " : "", last);
    }
}

static lf_status check_values(const lf_lora_config *lc) {
    if (lc->r <= 0) return lf_fail(LF_ERR_CONFIG, "key 'lora.r': %d must be > 0", lc->r);
    if (!isfinite(lc->alpha)) return lf_fail(LF_ERR_CONFIG, "key 'lora.alpha': %g is not finite", (double)lc->alpha);
    if (!(lc->dropout >= 0.0f && lc->dropout < 1.0f))
        return lf_fail(LF_ERR_CONFIG, "key 'lora.dropout': %g is out of range [0, 1)", (double)lc->dropout);
    if (strcmp(lc->bias, "none") != 0)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "key 'lora.bias': \"%s\" is not implemented (only \"none\": the base biases stay frozen)",
                       lc->bias);
    return LF_OK;
}

lf_status lf_lora_config_check(const lf_lora_config *lc, const lf_model_config *cfg) {
    if (!lf_lora_enabled(lc)) return LF_OK;
    lf_status st = check_values(lc);
    if (st != LF_OK || !cfg) return st;
    lf_model_config c;
    const lf__model_arch *a;
    if ((st = lf__model_resolved(cfg, &c, &a)) != LF_OK) return st;
    lf_param_info *t = NULL;
    int count = 0;
    size_t total = 0;
    if ((st = a->param_table(&c, &t, &count, &total)) != LF_OK) return st;
    char path[LF_PARAM_NAME_MAX];
    if (!is_all_linear(lc)) {
        const char *s = lc->target_modules;
        size_t n;
        for (; st == LF_OK && next_target(&s, &n); s += n) {
            int hit = 0;
            for (int i = 0; i < count && !hit; i++)
                hit = module_path(&t[i], c.n_layer, path, sizeof path) && target_matches(path, s, n);
            if (hit) continue;
            char names[512];
            module_names(t, count, c.n_layer, names, sizeof names);
            if (n == 10 && memcmp(s, "all-linear", 10) == 0)
                st = lf_fail(LF_ERR_CONFIG, "key 'lora.target_modules': \"all-linear\" must be the only target");
            else
                st = lf_fail(LF_ERR_CONFIG,
                             "key 'lora.target_modules': \"%.*s\" matches no module of this %s model (its modules: "
                             "%s; or \"all-linear\")",
                             (int)n, s, a->name, names);
        }
    }
    lf_free(t);
    return st;
}

/* Sites of cfg under lc into s (NULL: count only); returns the count and the
 * adapters' floats in *total. */
static int plan_sites(const lf_lora_config *lc, const lf_model_config *c, const lf_param_info *t, int count, int in_out,
                      lf__lora_site *s, size_t *total) {
    int n = 0;
    size_t off = 0;
    char path[LF_PARAM_NAME_MAX];
    for (int i = 0; i < count; i++) {
        if (!module_path(&t[i], c->n_layer, path, sizeof path) || !path_targeted(lc, path)) continue;
        int in = (int)(in_out ? t[i].shape[0] : t[i].shape[1]), out = (int)(in_out ? t[i].shape[1] : t[i].shape[0]);
        if (s) {
            s[n].base = i;
            s[n].w_off = t[i].offset;
            s[n].in = in;
            s[n].out = out;
            s[n].a_off = off;
            s[n].b_off = off + (size_t)lc->r * in;
        }
        off += (size_t)lc->r * ((size_t)in + (size_t)out);
        n++;
    }
    *total = off;
    return n;
}

size_t lf_lora_num_params(const lf_lora_config *lc, const lf_model_config *cfg) {
    if (!lf_lora_enabled(lc)) return 0;
    lf_model_config c;
    const lf__model_arch *a;
    if (lf__model_resolved(cfg, &c, &a) != LF_OK) return 0;
    lf_param_info *t = NULL;
    int count = 0;
    size_t total = 0, n = 0;
    if (a->param_table(&c, &t, &count, &total) != LF_OK) return 0;
    (void)plan_sites(lc, &c, t, count, a->linear_in_out, NULL, &n);
    lf_free(t);
    return n;
}

void lf__lora_free(lf_model *m) {
    lf__lora *L = m->lora;
    if (!L) return;
    if (L->params) m->be->ops->free(m->be, L->params);
    if (L->grads) m->be->ops->free(m->be, L->grads);
    free(L->site);
    free(L->table);
    free(L);
    m->lora = NULL;
}

/* The adapters' table: per site "<path>.lora_A.weight" (r, in), then
 * "<path>.lora_B.weight" (out, r), in the base's unit. */
static lf_status build_table(lf_model *m, lf__lora *L) {
    L->table = calloc((size_t)2 * (size_t)L->n_site, sizeof *L->table);
    if (!L->table) return lf_fail(LF_ERR_NOMEM, "out of memory for the LoRA table");
    int n = 0;
    size_t off = 0;
    char path[LF_PARAM_NAME_MAX], name[LF_PARAM_NAME_MAX + 16];
    for (int k = 0; k < L->n_site; k++) {
        const lf__lora_site *s = &L->site[k];
        const lf_param_info *b = &m->table[s->base];
        (void)module_path(b, m->cfg.n_layer, path, sizeof path);
        for (int ab = 0; ab < 2; ab++) {
            int len = snprintf(name, sizeof name, "%s.lora_%c.weight", path, ab ? 'B' : 'A');
            if (len >= LF_PARAM_NAME_MAX)
                return lf_fail(LF_ERR_UNSUPPORTED, "LoRA tensor name '%s' is longer than %d characters", name,
                               LF_PARAM_NAME_MAX - 1);
            lf__add_param(L->table, &n, &off, name, 2, ab ? s->out : L->cfg.r, ab ? L->cfg.r : s->in, b->unit);
        }
    }
    L->n = n;
    return LF_OK;
}

lf_status lf_model_lora_attach(lf_model *m, const lf_lora_config *lc, uint64_t seed) {
    lf_status st = lf_lora_config_check(lc, &m->cfg);
    if (st != LF_OK) return st;
    if (!lf_lora_enabled(lc)) return lf_fail(LF_ERR_INVALID_ARG, "lora.target_modules is empty: nothing to adapt");
    if (m->lora) return lf_fail(LF_ERR_INVALID_ARG, "the model already has LoRA adapters");
    if (m->borrowed || !m->params)
        return lf_fail(LF_ERR_UNSUPPORTED, "LoRA needs the model's whole parameters (not a session, not ZeRO-3)");
    if (m->zero.partition_grads || m->zero.partition_params || m->zero.grads_ready)
        return lf_fail(LF_ERR_UNSUPPORTED, "LoRA with ZeRO is not implemented (set zero_optimization.stage 0)");
    if (!m->be->ops->lora_forward || !m->be->ops->lora_backward)
        return lf_fail(LF_ERR_UNSUPPORTED, "backend '%s' has no LoRA ops (use backend cpu)", m->be->ops->name);
    lf__lora *L = calloc(1, sizeof *L);
    if (!L) return lf_fail(LF_ERR_NOMEM, "out of memory for LoRA");
    m->lora = L;
    L->cfg = *lc;
    L->scale = lc->use_rslora ? lc->alpha / sqrtf((float)lc->r) : lc->alpha / (float)lc->r;
    const int in_out = m->arch->linear_in_out;
    L->n_site = plan_sites(lc, &m->cfg, m->table, m->n_tensors, in_out, NULL, &L->total);
    L->site = calloc((size_t)L->n_site, sizeof *L->site);
    if (!L->site) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory for LoRA");
        goto fail;
    }
    (void)plan_sites(lc, &m->cfg, m->table, m->n_tensors, in_out, L->site, &L->total);
    if ((st = build_table(m, L)) != LF_OK) goto fail;
    L->params = m->be->ops->alloc(m->be, L->total * sizeof(float));
    L->grads = m->be->ops->alloc(m->be, L->total * sizeof(float));
    float *host = lf_alloc(L->total * sizeof(float));
    if (!L->params || !L->grads || !host) {
        lf_free(host);
        st = lf_fail(LF_ERR_NOMEM, "out of memory for %zu LoRA parameters", L->total);
        goto fail;
    }
    memset(host, 0, L->total * sizeof(float));
    for (int k = 0; k < L->n_site; k++) { /* A uniform(-1/sqrt(in), 1/sqrt(in)); B zero */
        const lf__lora_site *s = &L->site[k];
        const float bound = 1.0f / sqrtf((float)s->in);
        const size_t nA = (size_t)lc->r * s->in;
        for (size_t j = 0; j < nA; j++)
            host[s->a_off + j] = bound *
                                 (2.0f * lf_rng_uniform(lf_rng_mix(seed, LORA_INIT_STREAM), LF_RNG_INIT, s->a_off + j) -
                                  1.0f);
    }
    m->be->ops->to_device(m->be, L->params, host, L->total * sizeof(float));
    lf_free(host);
    m->be->ops->zero(m->be, L->grads, L->total);
    /* the base is frozen from here: no gradient memory, none computed */
    if (m->grads) m->be->ops->free(m->be, m->grads);
    m->grads = NULL;
    if (m->act_block) /* a plan made before: again, with one replica and the LoRA scratch */
        return lf_model_plan(m, m->plan_B, m->plan_T, NULL);
    return LF_OK;
fail:
    lf__lora_free(m);
    return st;
}

const lf_lora_config *lf_model_lora(const lf_model *m) { return m->lora ? &m->lora->cfg : NULL; }
float lf_model_lora_scale(const lf_model *m) { return m->lora ? m->lora->scale : 0.0f; }

int lf_model_lora_peft_name(const lf_model *m, int i, char *buf, size_t cap) {
    if (!m->lora || i < 0 || i >= m->lora->n) return snprintf(buf, cap, "%s", "");
    const char *pre = m->arch->hf && m->arch->hf->tensor_prefix ? m->arch->hf->tensor_prefix : "";
    return snprintf(buf, cap, "base_model.model.%s%s", pre, m->lora->table[i].name);
}

const lf_param_info *lf_model_train_table(const lf_model *m, int *count) {
    if (!m->lora) return lf_model_params_table(m, count);
    *count = m->lora->n;
    return m->lora->table;
}
size_t lf_model_train_num_params(const lf_model *m) { return m->lora ? m->lora->total : m->num_params; }
float *lf_model_train_params(lf_model *m) { return m->lora ? m->lora->params : m->params; }
float *lf_model_train_grads(lf_model *m) { return m->lora ? m->lora->grads : m->grads; }

/* The first site at or after base offset w0 (sites are in offset order). */
static int first_site(const lf__lora *L, size_t w0) {
    int lo = 0, hi = L->n_site;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (L->site[mid].w_off < w0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Output column of site s in a matmul of weight offset w0. */
static int site_col(const lf__lora_site *s, size_t w0, int C, lf_weight_layout layout) {
    return layout == LF_W_OUT_IN ? (int)((s->w_off - w0) / (size_t)C) : 0;
}

/* lora_dropout of site k in this forward (p 0: none): a key of its own per
 * micro-batch and site, so a recomputed forward and the backward draw the
 * same mask (counter-based, backend_impl.h). */
static lf_dropout site_drop(const lf_model *m, int k) {
    lf_dropout d = {0};
    if (!m->opts.train || m->lora->cfg.dropout <= 0.0f) return d;
    d.p = m->lora->cfg.dropout;
    d.seed = m->opts.seed;
    d.key = lf_rng_mix(lf_rng_mix(m->opts.key, LORA_INIT_STREAM), (uint64_t)k);
    return d;
}

/* Serving: adapter a's path on rows [r0, r0 + n) only (inference: no dropout). */
static void bank_rows(const lf_model *m, const lf__lora *L, float *out, const float *inp, size_t w0, int r0, int n,
                      int C, int OC, lf_weight_layout layout) {
    const size_t w1 = w0 + (size_t)C * OC;
    for (int k = first_site(L, w0); k < L->n_site && L->site[k].w_off < w1; k++) {
        const lf__lora_site *s = &L->site[k];
        m->be->ops->lora_forward(m->be, out + (size_t)r0 * OC + site_col(s, w0, C, layout), OC, m->lora_u,
                                 inp + (size_t)r0 * C, L->params + s->a_off, L->params + s->b_off, n, C, s->out,
                                 L->cfg.r, L->scale);
    }
}

/* The bank's adapters on the runs of a ragged forward that name one: each
 * run's rows are contiguous (m->kv->row0), so each gets its own adapter's
 * low-rank product on its row range; the base product ran once for all. */
static void bank_forward(const lf_model *m, float *out, const float *inp, size_t w0, int N, int C, int OC,
                         lf_weight_layout layout) {
    const lf__kv *kv = m->kv;
    if (!kv || !kv->seg || !kv->active) return;
    for (int i = 0; i < kv->n_seg; i++) {
        const int a = kv->seg[i].adapter;
        if (a < 1 || a > m->n_bank || kv->row0[i] + kv->seg[i].len > N) continue;
        bank_rows(m, m->bank[a - 1], out, inp, w0, kv->row0[i], kv->seg[i].len, C, OC, layout);
    }
}

void lf__lora_forward(const lf_model *m, float *out, const void *inp, const float *weight, int N, int C, int OC,
                      lf_weight_layout layout) {
    const lf__lora *L = m->lora;
    if (!m->params || weight < m->params || weight >= m->params + m->num_params) return;
    if (m->n_bank) bank_forward(m, out, inp, (size_t)(weight - m->params), N, C, OC, layout);
    if (!L) return;
    const size_t w0 = (size_t)(weight - m->params), w1 = w0 + (size_t)C * OC;
    for (int k = first_site(L, w0); k < L->n_site && L->site[k].w_off < w1; k++) {
        const lf__lora_site *s = &L->site[k];
        const lf_dropout d = site_drop(m, k);
        const float *x = inp;
        if (d.p > 0.0f) { /* PEFT: lora_B(lora_A(dropout(x))) */
            m->be->ops->dropout_forward(m->be, m->lora_x, inp, (size_t)N * C, d);
            x = m->lora_x;
        }
        m->be->ops->lora_forward(m->be, out + site_col(s, w0, C, layout), OC, m->lora_u, x, L->params + s->a_off,
                                 L->params + s->b_off, N, C, s->out, L->cfg.r, L->scale);
    }
}

void lf__lora_backward(const lf_model *m, float *dinp, const float *dout, const void *inp, const float *weight, int N,
                       int C, int OC, lf_weight_layout layout) {
    const lf__lora *L = m->lora;
    if (!m->params || weight < m->params || weight >= m->params + m->num_params) return;
    const size_t w0 = (size_t)(weight - m->params), w1 = w0 + (size_t)C * OC;
    for (int k = first_site(L, w0); k < L->n_site && L->site[k].w_off < w1; k++) {
        const lf__lora_site *s = &L->site[k];
        const lf_dropout d = site_drop(m, k);
        if (d.p <= 0.0f) {
            m->be->ops->lora_backward(m->be, dinp, L->grads + s->a_off, L->grads + s->b_off, m->lora_u, m->lora_du,
                                      dout + site_col(s, w0, C, layout), OC, inp, L->params + s->a_off,
                                      L->params + s->b_off, N, C, s->out, L->cfg.r, L->scale);
            continue;
        }
        /* the dropped input again (the same mask), its gradient through the mask into dinp */
        const size_t n = (size_t)N * C;
        m->be->ops->dropout_forward(m->be, m->lora_x, inp, n, d);
        if (dinp) m->be->ops->zero(m->be, m->lora_dx, n);
        m->be->ops->lora_backward(m->be, dinp ? m->lora_dx : NULL, L->grads + s->a_off, L->grads + s->b_off, m->lora_u,
                                  m->lora_du, dout + site_col(s, w0, C, layout), OC, m->lora_x, L->params + s->a_off,
                                  L->params + s->b_off, N, C, s->out, L->cfg.r, L->scale);
        if (dinp) {
            m->be->ops->dropout_backward(m->be, m->lora_dx, m->lora_dx, n, d);
            m->be->ops->add_inplace(m->be, dinp, m->lora_dx, n);
        }
    }
}

lf_status lf_model_lora_merge(lf_model *m) {
    lf__lora *L = m->lora;
    if (!L) return lf_fail(LF_ERR_INVALID_ARG, "merge: the model has no LoRA adapters");
    if (!m->be->ops->host_memory || !m->params)
        return lf_fail(LF_ERR_UNSUPPORTED, "merge: backend '%s' does not keep the weights in host memory",
                       m->be->ops->name);
    const int in_out = m->arch->linear_in_out, r = L->cfg.r;
    for (int k = 0; k < L->n_site; k++) { /* W += scale * B A, in the weight's own layout */
        const lf__lora_site *s = &L->site[k];
        const float *A = L->params + s->a_off, *B = L->params + s->b_off;
        float *W = m->params + s->w_off;
        for (int o = 0; o < s->out; o++)
            for (int i = 0; i < s->in; i++) {
                double acc = 0;
                for (int j = 0; j < r; j++) acc += (double)B[(size_t)o * r + j] * (double)A[(size_t)j * s->in + i];
                W[in_out ? (size_t)i * s->out + o : (size_t)o * s->in + i] += (float)(L->scale * acc);
            }
    }
    lf_model_params_changed(m);
    if (m->be->ops->params_changed) m->be->ops->params_changed(m->be);
    return LF_OK;
}

size_t lf__lora_scratch_floats(const lf_lora_config *lc, const lf_model_config *cfg, size_t rows) {
    if (!lf_lora_enabled(lc)) return 0;
    size_t floats = 2 * rows * (size_t)lc->r; /* u, du */
    if (lc->dropout <= 0.0f) return floats;
    lf_model_config c;
    const lf__model_arch *a;
    if (lf__model_resolved(cfg, &c, &a) != LF_OK) return floats;
    lf_param_info *t = NULL;
    int count = 0;
    size_t total = 0, max_in = 0;
    if (a->param_table(&c, &t, &count, &total) != LF_OK) return floats;
    char path[LF_PARAM_NAME_MAX];
    for (int i = 0; i < count; i++) {
        if (!module_path(&t[i], c.n_layer, path, sizeof path) || !path_targeted(lc, path)) continue;
        const size_t in = (size_t)(a->linear_in_out ? t[i].shape[0] : t[i].shape[1]);
        if (in > max_in) max_in = in;
    }
    lf_free(t);
    return floats + 2 * rows * max_in; /* the dropped input and its gradient */
}

int lf__lora_max_r(const lf_model *m) {
    int r = m->lora ? m->lora->cfg.r : 0;
    for (int i = 0; i < m->n_bank; i++)
        if (m->bank[i]->cfg.r > r) r = m->bank[i]->cfg.r;
    return r;
}

void lf__lora_bank_free(lf_model *m) {
    lf__lora *keep = m->lora;
    for (int i = 0; i < m->n_bank; i++) {
        m->lora = m->bank[i];
        lf__lora_free(m);
    }
    free(m->bank);
    m->bank = NULL;
    m->n_bank = 0;
    m->lora = keep;
}

lf_status lf_model_lora_bank_add(lf_model *m, int *index) {
    if (!m->lora) return lf_fail(LF_ERR_INVALID_ARG, "adapter bank: the model has no attached adapters to add");
    if (m->borrowed) return lf_fail(LF_ERR_INVALID_ARG, "adapter bank: add adapters to the model, not a session");
    if (m->act_dt != LF_ACT_FP32 || (m->act_block && m->plan_dt != LF_ACT_FP32))
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "adapter bank: serving adapters needs fp32 matmul inputs (the model's are bf16)");
    if (m->lora->cfg.dropout > 0.0f) m->lora->cfg.dropout = 0.0f; /* inference only: PEFT drops nothing in eval */
    lf__lora **b = realloc(m->bank, (size_t)(m->n_bank + 1) * sizeof *b);
    if (!b) return lf_fail(LF_ERR_NOMEM, "adapter bank: out of memory");
    m->bank = b;
    lf__lora *L = m->lora;
    if (L->grads) m->be->ops->free(m->be, L->grads); /* served, never trained */
    L->grads = NULL;
    m->bank[m->n_bank++] = L;
    m->lora = NULL;
    *index = m->n_bank;
    if (m->act_block) return lf_model_plan(m, m->plan_B, m->plan_T, NULL); /* the scratch for the widest r */
    return LF_OK;
}

int lf_model_lora_bank_count(const lf_model *m) { return m->n_bank; }
