/*
 * The architecture registry and what a model config is before a model
 * exists: the table of families (LF__ARCHS in model_impl.h), their names,
 * resolving and validating a config, its parameter table, FLOPs, Hugging
 * Face config.json, the named shapes (presets, held by each family) and the
 * binding of a model's tensor indices. Everything here asks the family's
 * table (lf__model_arch); no family is named in this file.
 *
 * Invariants:
 *  - lf_arch values are positions in LF__ARCHS; a value outside it has no
 *    table (lf__arch_of returns NULL and every caller reports it).
 *  - The lists built from the tables (lf_arch_names, lf_arch_list,
 *    lf_model_preset_names) are built once (pthread_once) and never change.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model/model_impl.h"

/* ---------------------------------------------------------------- the registry */

#define LF__ARCH_ENTRY(n) &lf__arch_##n,
static const lf__model_arch *const k_archs[] = {LF__ARCHS(LF__ARCH_ENTRY)};
#undef LF__ARCH_ENTRY
#define N_ARCHS ((int)(sizeof k_archs / sizeof k_archs[0]))

const lf__model_arch *lf__arch_of(lf_arch arch) { return (int)arch >= 0 && (int)arch < N_ARCHS ? k_archs[arch] : NULL; }

int lf_arch_count(void) { return N_ARCHS; }

const char *lf_arch_name(lf_arch arch) {
    const lf__model_arch *a = lf__arch_of(arch);
    return a ? a->name : "?";
}

int lf_arch_bf16_acts(lf_arch arch) {
    const lf__model_arch *a = lf__arch_of(arch);
    return a && a->bf16_acts;
}

int lf_arch_fixed_context(lf_arch arch) {
    const lf__model_arch *a = lf__arch_of(arch);
    return a && a->fixed_context;
}

/* Lists built from the tables, once. */
static const char *g_names[N_ARCHS + 1];
static char g_list[256];
static char g_presets[1024];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void build_lists(void) {
    size_t at = 0, pat = 0;
    for (int i = 0; i < N_ARCHS; i++) {
        g_names[i] = k_archs[i]->name;
        if (at < sizeof g_list)
            at += (size_t)snprintf(g_list + at, sizeof g_list - at, "%s%s", i ? ", " : "", k_archs[i]->name);
        for (int p = 0; p < k_archs[i]->n_presets; p++)
            if (pat < sizeof g_presets)
                pat += (size_t)snprintf(g_presets + pat, sizeof g_presets - pat, "%s%s", pat ? ", " : "",
                                        k_archs[i]->presets[p].name);
    }
    g_names[N_ARCHS] = NULL;
}

const char *const *lf_arch_names(void) {
    pthread_once(&g_once, build_lists);
    return g_names;
}

const char *lf_arch_list(void) {
    pthread_once(&g_once, build_lists);
    return g_list;
}

lf_status lf_arch_parse(const char *name, lf_arch *out) {
    for (int i = 0; name && i < N_ARCHS; i++)
        if (!strcmp(name, k_archs[i]->name)) {
            *out = (lf_arch)i;
            return LF_OK;
        }
    return lf_fail(LF_ERR_CONFIG, "model.arch '%s' is not one of %s", name ? name : "(null)", lf_arch_list());
}

/* ---------------------------------------------------------------- configs */

lf_status lf_model_config_resolve(lf_model_config *c) {
    const lf__model_arch *a = lf__arch_of(c->arch);
    if (!a) return lf_fail(LF_ERR_CONFIG, "model.arch %d is not one of %s", (int)c->arch, lf_arch_list());
    a->resolve(c);
    return LF_OK;
}

const char *lf_model_config_given(lf_model_config *c, unsigned given, const char **key) {
    *key = NULL;
    const lf__model_arch *a = lf__arch_of(c->arch);
    return a && a->given ? a->given(c, given, key) : NULL;
}

/* What every family checks, before its own checks (the shape) and after
 * them (the sizes), so the first fault named is the same for all. */
static lf_status check_shape(const lf_model_config *c) {
    if (c->n_layer < 1 || c->n_layer > 1024)
        return lf_fail(LF_ERR_RANGE, "model.n_layer %d is out of range [1, 1024]", c->n_layer);
    if (c->n_head < 1 || c->n_head > 1024)
        return lf_fail(LF_ERR_RANGE, "model.n_head %d is out of range [1, 1024]", c->n_head);
    if (c->n_embd < 1 || c->n_embd > 65536)
        return lf_fail(LF_ERR_RANGE, "model.n_embd %d is out of range [1, 65536]", c->n_embd);
    if (c->head_dim == 0 && c->n_embd % c->n_head != 0)
        return lf_fail(LF_ERR_CONFIG, "model.n_embd %d is not divisible by model.n_head %d", c->n_embd, c->n_head);
    return LF_OK;
}

static lf_status check_sizes(const lf_model_config *c) {
    if (c->block_size < 1 || c->block_size > (1 << 20))
        return lf_fail(LF_ERR_RANGE, "model.block_size %d is out of range [1, 1048576]", c->block_size);
    if (c->vocab_size < 1 || c->vocab_size > (1 << 24))
        return lf_fail(LF_ERR_RANGE, "model.vocab_size %d is out of range [1, 16777216]", c->vocab_size);
    if (c->padded_vocab_size != 0 && c->padded_vocab_size < c->vocab_size)
        return lf_fail(LF_ERR_RANGE, "padded vocab size %d is smaller than vocab_size %d", c->padded_vocab_size,
                       c->vocab_size);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return lf_fail(LF_ERR_RANGE, "model.dropout %g is out of range [0, 1)", (double)c->dropout);
    if (c->sliding_window < 0 || c->sliding_window > (1 << 20))
        return lf_fail(LF_ERR_RANGE, "model.sliding_window %d is out of range [0, 1048576]", c->sliding_window);
    return LF_OK;
}

lf_status lf__model_resolved(const lf_model_config *cfg, lf_model_config *out, const lf__model_arch **arch) {
    *out = *cfg;
    lf_status st = lf_model_config_resolve(out);
    if (st != LF_OK) return st;
    *arch = lf__arch_of(out->arch);
    if ((st = check_shape(out)) != LF_OK || (st = (*arch)->validate(out)) != LF_OK) return st;
    return check_sizes(out);
}

lf_status lf_model_config_validate(const lf_model_config *cfg) {
    lf_model_config c;
    const lf__model_arch *a;
    return lf__model_resolved(cfg, &c, &a);
}

lf_status lf_model_param_table(const lf_model_config *cfg, lf_param_info **out, int *count, size_t *total) {
    *out = NULL;
    lf_model_config c;
    const lf__model_arch *a;
    lf_status st = lf__model_resolved(cfg, &c, &a);
    if (st != LF_OK) return st;
    return a->param_table(&c, out, count, total);
}

void lf__add_param(lf_param_info *t, int *n, size_t *off, const char *name, int ndim, int64_t d0, int64_t d1,
                   int unit) {
    lf_param_info *p = &t[*n];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim > 1 ? d1 : 0;
    p->numel = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1);
    p->offset = *off;
    p->decay = ndim >= 2;
    p->unit = unit;
    *off += p->numel;
    (*n)++;
}

size_t lf_model_num_params_nonembedding(const lf_model_config *cfg) {
    lf_model_config c;
    const lf__model_arch *a;
    lf_param_info *t;
    int n;
    size_t total;
    if (lf__model_resolved(cfg, &c, &a) != LF_OK || a->param_table(&c, &t, &n, &total) != LF_OK) return 0;
    lf_free(t);
    return total - a->embedding_only(&c);
}

size_t lf_model_lookup_params(const lf_model_config *cfg) {
    lf_model_config c;
    const lf__model_arch *a;
    if (lf__model_resolved(cfg, &c, &a) != LF_OK) return 0;
    return a->embedding_only(&c);
}

double lf_model_flops_per_token(const lf_model_config *cfg, int T) {
    lf_model_config c;
    const lf__model_arch *a;
    if (lf__model_resolved(cfg, &c, &a) != LF_OK) return 0.0;
    return 6.0 * (double)lf_model_num_params_nonembedding(&c) + a->attn_flops_per_token(&c, T);
}

int lf_model_hf_config_json(const lf_model_config *cfg, char *buf, size_t cap) {
    lf_model_config c;
    const lf__model_arch *a;
    if (lf__model_resolved(cfg, &c, &a) != LF_OK) return 0;
    return a->hf_config_json(&c, buf, cap);
}

/* ---------------------------------------------------------------- presets */

lf_status lf_model_preset(const char *name, lf_model_config *out) {
    for (int i = 0; name && i < N_ARCHS; i++)
        for (int p = 0; p < k_archs[i]->n_presets; p++)
            if (!strcmp(name, k_archs[i]->presets[p].name)) {
                *out = k_archs[i]->presets[p].cfg;
                out->arch = (lf_arch)i;
                return LF_OK;
            }
    return lf_fail(LF_ERR_NOT_FOUND, "unknown model preset '%s' (%s)", name ? name : "(null)", lf_model_preset_names());
}

const char *lf_model_preset_names(void) {
    pthread_once(&g_once, build_lists);
    return g_presets;
}

int lf_model_config_overrides(const lf_model_config *c, char *buf, size_t cap) {
    return snprintf(buf, cap,
                    "model.arch=%s\nmodel.n_layer=%d\nmodel.n_head=%d\nmodel.n_kv_head=%d\nmodel.n_embd=%d\n"
                    "model.ffn_hidden=%d\nmodel.block_size=%d\nmodel.vocab_size=%d\nmodel.norm_eps=%.9g\n"
                    "model.rope_theta=%.9g\nmodel.tie_embeddings=%s\nmodel.bias=%s\nmodel.dropout=%.9g\n"
                    "model.sliding_window=%d",
                    lf_arch_name(c->arch), c->n_layer, c->n_head, c->n_kv_head, c->n_embd, c->ffn_hidden, c->block_size,
                    c->padded_vocab_size > c->vocab_size ? c->padded_vocab_size : c->vocab_size, (double)c->norm_eps,
                    (double)c->rope_theta, c->tie_embeddings ? "true" : "false", c->bias ? "true" : "false",
                    (double)c->dropout, c->sliding_window);
}

/* ---------------------------------------------------------------- a model's tensor indices */

int lf__param_index(const lf_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->table[i].name, name) == 0) return i;
    return -1;
}

lf_status lf__model_bind(lf_model *m) {
    const lf__model_arch *a = m->arch;
    const int L = m->cfg.n_layer;
    m->ix = malloc(((size_t)a->n_model_params + (size_t)L * (size_t)a->n_layer_params + 1) * sizeof *m->ix);
    if (!m->ix) return lf_fail(LF_ERR_NOMEM, "out of memory");
    for (int k = 0; k < a->n_model_params; k++) m->ix[k] = lf__param_index(m, a->model_params[k]);
    for (int l = 0; l < L; l++) {
        char prefix[LF_PARAM_NAME_MAX], name[LF_PARAM_NAME_MAX];
        snprintf(prefix, sizeof prefix, a->layer_fmt, l);
        int *ix = m->ix + a->n_model_params + (size_t)l * (size_t)a->n_layer_params;
        for (int k = 0; k < a->n_layer_params; k++) {
            snprintf(name, sizeof name, "%s%s", prefix, a->layer_params[k]);
            ix[k] = lf__param_index(m, name);
        }
    }
    return LF_OK;
}
