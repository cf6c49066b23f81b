/*
 * The seam between the architecture-neutral model runtime (model.c) and the
 * architectures (gpt2.c, llama.c; registered in LF__ARCHS below): private to
 * src/model/.
 *
 * The runtime owns what every decoder-only transformer shares: the
 * lifecycle, the flat parameter and gradient buffers laid out by the
 * parameter table, the binding of tensor names to table indices, ZeRO units
 * and their hooks, the model replicas (one per CPU thread), the two-pass
 * activation planner, the batch copy, attention with or without the KV
 * cache, the loss sum, and the order in which forward and backward visit
 * the units (model.c); the registry and configs (arch.c); sessions
 * (session.c); Hugging Face directories (hf.c). An architecture is one
 * const table (lf__model_arch) in its own file that owns everything that
 * differs by family: defaults, the rules on hand-set keys and validation,
 * presets, its parameter table (Hugging Face names, units) and the names
 * its compute addresses, its init rule, FLOPs per token, its activation
 * slots, its embedding / block / head forward and backward, and its Hugging
 * Face config.json, both ways (lf__hf_family).
 *
 * Invariants:
 *  - The parameter table is a pure function of the resolved config; each
 *    entry names its unit (0 embeddings, 1..L blocks, L+1 the final norm and
 *    an untied head), and the units are contiguous, increasing ranges of the
 *    flat vector. Forward uses units 0, 1..L, L+1 (and 0 again for a tied
 *    head, whose buffer unit 0 keeps); backward L+1 and 0, L..1, then 0.
 *  - An architecture's per-replica activations are its own struct (acts),
 *    laid out by lay_out_replica through the planner; the runtime adds the
 *    replica's gradient buffers after them. Sizing and allocation run the
 *    same code (planner.base NULL while sizing), so plan and allocation
 *    cannot disagree.
 *  - Architecture compute functions run inside a replica task: they call
 *    backend ops only (single-threaded when several replicas run).
 */
#ifndef LF_MODEL_IMPL_H
#define LF_MODEL_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "backend/backend_impl.h"
#include "llmforge/model.h"

/* ---------------------------------------------------------------- planner */

enum { LF__CAT_SAVED, LF__CAT_WORK, LF__CAT_LOGITS, LF__CAT_GRADS, LF__CAT_N };

typedef struct lf__planner {
    unsigned char *base; /* NULL while sizing */
    size_t used;
    size_t cat[LF__CAT_N]; /* bytes by lf_act_bytes category */
} lf__planner;

void *lf__slot_bytes(lf__planner *p, int cat, size_t bytes);
float *lf__slot(lf__planner *p, int cat, size_t floats);

/* The shape a plan is made for. */
typedef struct lf__plan_spec {
    const lf_model_config *cfg; /* resolved */
    size_t num_params;
    size_t unit0_n, max_other_n; /* replica gradient buffers: one per unit slot */
    lf_recompute rc;
    lf_act_dtype dt;     /* storage of the matmul inputs */
    int B, T, n_rep, rB; /* rB: rows of each replica */
    int infer;           /* forward only (a session): no activation or parameter gradients */
    /* floats of one layer's attention per replica, as the backend sizes
     * them (attention_saved; attention_scratch for backward; a session with
     * a cache also fits attention_cached's scratch in the saved slot) */
    size_t att_saved, att_scratch;
} lf__plan_spec;

struct lf__model_arch;
/* The plan's slots: logits, losses and the batch, then each replica's
 * (model.c); m NULL while sizing without a model. */
void lf__lay_out(const struct lf__model_arch *a, const lf__plan_spec *s, lf_model *m, lf__planner *p);
/* Rows per replica, and replicas left once none is empty. */
void lf__split_rows(int B, int n_rep, int *rB, int *n_out);

/* Fill spec->att_saved/att_scratch from a backend table (rB, T, cfg set). */
void lf__plan_attention(lf__plan_spec *s, const lf_backend_ops *ops, int with_cache);
/* lf_model_plan_bytes with the attention buffers of backend table ops (NULL:
 * the CPU's), so a plan for another backend (cuda: O(T) saved per head)
 * matches what lf_model_plan allocates there. */
lf_status lf__model_plan_bytes_ops(const lf_model_config *cfg, int B, int T, lf_recompute policy, lf_act_dtype dtype,
                                   int n_replicas, const lf_backend_ops *ops, lf_act_bytes *out);

/* Bytes per element of a matmul-input activation. */
static inline size_t lf__act_size(lf_act_dtype dt) { return dt == LF_ACT_BF16 ? sizeof(uint16_t) : sizeof(float); }

/* ---------------------------------------------------------------- replicas */

/* One model replica: the activations of a slice of the batch's rows. The
 * CPU backend runs one replica per thread, each calling the ops from inside
 * the model's parallel region (so the ops and BLAS run single-threaded);
 * with one replica the ops use every thread themselves. */
typedef struct lf__replica {
    int b0, B;                 /* rows [b0, b0+B) of the current batch */
    void *acts;                /* the architecture's activations (acts_size bytes) */
    float *logits, *losses;    /* views at row b0 of the model's buffers */
    int32_t *inputs, *targets; /* likewise */
    int32_t *pos;              /* packed rows' positions (lf_forward_opts.pos) at row b0, or NULL */
    int32_t *apos;             /* attention positions at row b0 (packed.c: pos, or the window's bound), or NULL */
    /* Parameter gradients: replica 0 adds into the model's whole buffer
     * (gfull); the others, and replica 0 under ZeRO-2/3, into unit buffers:
     * gemb for unit 0 (held through the whole backward, which starts and ends
     * with it), gblk for the unit being visited. */
    float *gfull, *gemb, *gblk;
    double loss_sum;
    long n_valid;
} lf__replica;

/* ---------------------------------------------------------------- architectures */

/* A named model shape (lf_model_preset), held by its architecture. */
typedef struct lf__preset {
    const char *name, *what;
    lf_model_config cfg; /* .arch is set from the architecture holding it */
} lf__preset;

/* How an architecture reads a Hugging Face config.json (hf.c is the
 * driver; lf__hf_* below are its readers). */
typedef struct lf__hf_config_reader lf__hf_cfg; /* one config.json being read */
typedef enum { LF__HF_INT, LF__HF_NUM, LF__HF_BOOL } lf__hf_type;
/* One config.json key into one lf_model_config field, read in table order:
 * LF__HF_INT an integer in [1, 2^30] (int field), LF__HF_NUM a finite number
 * in (0, 1] (float field), LF__HF_BOOL true/false (int field). Absent or
 * null: an error when required, else dflt, or the value of the field at
 * dflt_field when that is not LF__HF_NO_FIELD (read earlier in the table). */
#define LF__HF_NO_FIELD ((size_t)-1)
typedef struct lf__hf_key {
    const char *key;
    size_t field; /* offsetof(lf_model_config, ...) */
    lf__hf_type type;
    int required;
    double dflt;
    size_t dflt_field;
} lf__hf_key;
typedef struct lf__hf_family {
    /* config.json model_type values read as this architecture (NULL-ended);
     * the index of the one found is passed to check as `variant` */
    const char *const *model_types;
    const lf__hf_key *keys;
    int n_keys;
    /* After the keys: fixed fields, keys that need more than a range, and
     * what the architecture refuses (LF_ERR_UNSUPPORTED naming the key). */
    lf_status (*check)(const lf__hf_cfg *c, int variant, lf_model_config *m);
    /* Tensor names: a prefix a checkpoint may put before the model's names
     * (NULL: none), and buffers that are read as nothing (ended by a NULL
     * pattern; "*x": a name ending in x, "x": containing x; ndim 0: any
     * number of dimensions, else only that many). */
    const char *tensor_prefix;
    const struct lf__hf_ignore {
        const char *pattern;
        int ndim;
    } * ignored;
    /* model_type values of kin this architecture does not implement, each
     * with what it lacks for them, for the refusal (NULL, or ended by a
     * NULL model_type). */
    const struct lf__hf_refused { const char *model_type, *why; } * refused;
} lf__hf_family;

/* Readers of the config.json being read (messages name the file and key). */
const char *lf__hf_where(const lf__hf_cfg *c);
lf_status lf__hf_int(const lf__hf_cfg *c, const char *key, int required, int dflt, int *out);
lf_status lf__hf_num(const lf__hf_cfg *c, const char *key, double dflt, double *out); /* in (0, 1] */
lf_status lf__hf_bool(const lf__hf_cfg *c, const char *key, int dflt, int *out);
lf_status lf__hf_str(const lf__hf_cfg *c, const char *key, const char *dflt, const char **out);
/* A key that must be absent, null or 0 (a dropout llmforge does not
 * have), else LF_ERR_UNSUPPORTED naming it, its value and why; and a list
 * whose every entry must be the string value (absent or null: fine). */
lf_status lf__hf_zero(const lf__hf_cfg *c, const char *key, const char *why);
lf_status lf__hf_all_str(const lf__hf_cfg *c, const char *key, const char *value, const char *why);
/* RoPE from either spelling (4.x rope_theta + rope_scaling, 5.x
 * rope_parameters): m->rope_theta (default 10000) and m->rope; keys
 * llmforge does not implement refused by their config.json names. */
lf_status lf__hf_rope(const lf__hf_cfg *c, lf_model_config *m);

/* rope.c: RoPE's table for sequence length S (only the dynamic type reads
 * it): inv[0 .. HS/2) and the cos/sin factor; whether the table depends on
 * S; the type's config.json name and its parse; the config's check; the
 * rope_scaling object for config.json (like snprintf). */
void lf__rope_freqs(const lf_model_config *c, int HS, int S, float *inv, float *scale);
int lf__rope_depends_on_length(const lf_model_config *c);
const char *lf__rope_type_name(lf_rope_type t);
int lf__rope_type_parse(const char *s, lf_rope_type *out);
lf_status lf__rope_validate(const lf_model_config *c);
int lf__rope_hf_json(const lf_model_config *c, char *buf, size_t cap);
/* RoPE tables are at most this many pairs (head size 2 * LF__ROPE_MAX_HALF). */
#define LF__ROPE_MAX_HALF 512

typedef struct lf__model_arch {
    const char *name; /* model.arch */
    /* Fill the fields left 0 with this architecture's defaults (in place). */
    void (*resolve)(lf_model_config *c);
    /* The configuration's rules on the keys set by hand (given: the
     * LF_MODEL_GIVEN_* bits): defaults that hold only for keys left out,
     * then values the family refuses: NULL, or why, with *key the key
     * (lf_model_config_given). NULL hook: no such rules. */
    const char *(*given)(lf_model_config *c, unsigned given, const char **key);
    /* The family's own checks of a resolved config (messages name the key),
     * run after the runtime's of n_layer, n_head, n_embd and n_embd %
     * n_head, and before its of block_size, the vocabulary and dropout. */
    lf_status (*validate)(const lf_model_config *c);
    /* Parameter table (lf_calloc'd), in flat-buffer order, units set. */
    lf_status (*param_table)(const lf_model_config *c, lf_param_info **out, int *count, size_t *total);
    /* Parameters that do not count in 6N, the lookup-only tables (e.g.
     * GPT-2's wpe): no product reads them. */
    size_t (*embedding_only)(const lf_model_config *c);
    /* Attention FLOPs per token on top of 6N (forward + backward). */
    double (*attn_flops_per_token)(const lf_model_config *c, int T);
    /* Initial weights into host (num_params floats), deterministic in seed. */
    void (*init_weights)(const lf_model_config *c, const lf_param_info *t, int n, float *host, uint64_t seed);
    /* Hugging Face config.json of this model (like snprintf; 0 when the
     * architecture has no HF equivalent for this config). */
    int (*hf_config_json)(const lf_model_config *c, char *buf, size_t cap);
    /* Hugging Face config.json and tensor names into a model (hf.c). */
    const lf__hf_family *hf;
    /* 1 when block_size is fixed by a position table (an imported model's
     * context is its own); 0 when any block_size works (RoPE). */
    int fixed_context;
    /* Named shapes (lf_model_preset). */
    const lf__preset *presets;
    int n_presets;
    /* Storage of matmul inputs this architecture can keep in bf16 on a
     * backend with the bf16 slots (0: fp32 only). */
    int bf16_acts;
    /* 1 when the blocks' linear weights are stored (in, out), Hugging
     * Face's Conv1D (GPT-2; PEFT's fan_in_fan_out); 0 for (out, in). */
    int linear_in_out;

    /* The tensors the compute functions address, by table index, bound by
     * the runtime when the model is created (lf__model_ix, lf__layer_ix;
     * -1 for a tensor the config leaves out, such as an absent bias):
     * model_params by full name, and per layer layer_fmt (printf with the
     * layer) followed by each of layer_params. */
    const char *const *model_params;
    int n_model_params;
    const char *layer_fmt;
    const char *const *layer_params;
    int n_layer_params;
    /* Activations of one replica: allocated zeroed with acts_size bytes
     * plus n_layer * layer_size for the per-layer entries; the struct
     * begins with the pointer to those (the runtime sets it), then
     * lay_out_replica lays them out. */
    size_t acts_size, layer_size;
    void (*lay_out_replica)(const lf__plan_spec *s, void *acts, lf__planner *p);

    /* Compute of one replica (m->task_l, m->cur_T, m->opts as the runtime set them). */
    void (*embed_forward)(lf_model *m, lf__replica *rp, int T);
    void (*block_forward)(lf_model *m, lf__replica *rp, int l, int T);
    /* ln_f (or norm), lm_head, and with targets the fused classifier into
     * rp->losses (dlogits over the logits when opts.dloss > 0). */
    void (*head_forward)(lf_model *m, lf__replica *rp, int T, int with_targets);
    void (*head_backward)(lf_model *m, lf__replica *rp, int T);
    void (*block_backward)(lf_model *m, lf__replica *rp, int l, int T);
    void (*embed_backward)(lf_model *m, lf__replica *rp, int T);
} lf__model_arch;

/* The architectures, registered here and nowhere else: one X(name) per
 * family, its table lf__arch_<name> defined in src/model/<name>.c. The
 * position is the lf_arch value (LF_ARCH_GPT2 0, LF_ARCH_LLAMA 1); the
 * first is model.arch's default. */
#define LF__ARCHS(X) X(gpt2) X(llama)

#define LF__ARCH_DECLARE(n) extern const lf__model_arch lf__arch_##n;
LF__ARCHS(LF__ARCH_DECLARE)
#undef LF__ARCH_DECLARE

/* The table of an architecture, or NULL. */
const lf__model_arch *lf__arch_of(lf_arch arch);
/* A resolved copy of cfg, validated, and its architecture (arch.c). */
lf_status lf__model_resolved(const lf_model_config *cfg, lf_model_config *out, const lf__model_arch **arch);

/* ---------------------------------------------------------------- KV cache */

/* A session's per-layer key/value caches, (B, NKV, Tmax, HS) each, in
 * backend memory; while a cached forward runs, the model (a session's view)
 * points at it and the architectures' attention goes through lf__attention. */
typedef struct lf__kv {
    float **k, **v; /* n_layer each */
    int B, Tmax;
    int active; /* the current forward appends to and attends over the cache */
    /* a ragged forward (lf_session_forward_ragged): the rows are n_seg runs of
     * tokens, run i continuing cache slot seg[i].slot at position seg[i].pos;
     * NULL otherwise (every batch row b is slot b at cur_pos0) */
    const lf_segment *seg;
    const int *row0; /* first row of each run */
    int n_seg;
} lf__kv;

/* ---------------------------------------------------------------- LoRA (lora.c) */

/* One adapted base tensor: its table index and offset, in/out features,
 * and where its A (r, in) and B (out, r) are in the adapters' buffers. */
typedef struct lf__lora_site {
    int base;
    size_t w_off;
    int in, out;
    size_t a_off, b_off;
} lf__lora_site;

typedef struct lf__lora {
    lf_lora_config cfg;
    float scale;
    lf__lora_site *site; /* in base-offset order */
    int n_site;
    lf_param_info *table; /* the adapters' parameter table (2 per site) */
    int n;
    size_t total;
    float *params, *grads; /* backend memory, total floats each */
} lf__lora;

/* The low-rank paths of the sites inside a matmul's weight (none when it
 * adapts nothing), after its base product / base input gradient. */
void lf__lora_forward(const lf_model *m, float *out, const void *inp, const float *weight, int N, int C, int OC,
                      lf_weight_layout layout);
void lf__lora_backward(const lf_model *m, float *dinp, const float *dout, const void *inp, const float *weight, int N,
                       int C, int OC, lf_weight_layout layout);
void lf__lora_free(lf_model *m);
/* The largest r of the attached adapters and the bank's (0: none). */
int lf__lora_max_r(const lf_model *m);
/* Frees the serving bank (lf_model_lora_bank_add) with the model. */
void lf__lora_bank_free(lf_model *m);
/* Floats of LoRA's scratch for a plan of `rows` rows (B*T): u and du (rows,
 * r), and with lora.dropout the dropped input and its gradient (rows, the
 * widest adapted input); 0 without LoRA. The model's plan allocates it; the
 * memory plan (src/train/plan.c) counts it. */
size_t lf__lora_scratch_floats(const lf_lora_config *lc, const lf_model_config *cfg, size_t rows);

/* ---------------------------------------------------------------- the model */

struct lf_model {
    lf_model_config cfg; /* resolved */
    const lf__model_arch *arch;
    int *ix; /* table indices of the arch's model_params, then of each layer's layer_params */
    lf_backend *be;
    lf_param_info *table;
    int n_tensors;
    size_t num_params;
    float *params, *grads;
    int n_units;              /* L + 2 (lf_model_num_units) */
    size_t *unit_lo, *unit_n; /* flat range of each unit */
    size_t unit0_n, max_other_n;

    /* ZeRO (lf_model_set_zero) */
    lf_model_zero zero;
    float *pemb, *pblk;      /* ZeRO-3: gathered parameters of unit 0 / of blk_unit */
    int emb_valid, blk_unit; /* what they hold (blk_unit -1: nothing) */
    float *gemb0, *gblk0;    /* ZeRO-2/3: replica 0's unit gradients */
    float *gblk1;            /* lf_model_zero.double_buffer_grads: the second block-unit buffer */
    float *pblk_a, *pblk1;   /* prefetch_params: the two block-unit parameter buffers (pblk is one) */
    int pf_unit, pf_dir;     /* the unit being prefetched (-1: none) and the direction of the pass */
    float *pf_buf;           /* its buffer */
    int64_t pf_ticket;
    long pf_hits; /* block units used from a prefetch (lf_model_prefetch_hits) */
    int task_l;   /* the layer the replicas' tasks work on */

    /* activation plan */
    lf_recompute recompute;           /* policy of the next plan */
    lf_recompute plan_rc;             /* policy of the plan in place */
    lf_act_dtype act_dt;              /* matmul-input storage of the next plan */
    lf_act_dtype plan_dt;             /* ... of the plan in place */
    int plan_B, plan_T, n_rep, rep_B; /* rep_B: rows each replica is planned for */
    lf_act_bytes act;                 /* what the plan in place allocated */
    void *act_block;
    lf__replica *rep;
    float *logits;             /* (B,T,Vp), becomes dlogits in training */
    float *losses;             /* (B,T) */
    int32_t *inputs, *targets; /* copies of the last forward's batch */
    int32_t *pos;              /* packed rows' positions (backend memory, pos_cap ints; allocated at the first
                                  packed forward, outside the plan: 4 bytes a token) */
    size_t pos_cap;
    int32_t *apos;    /* the attention positions (packed.c): NULL, pos, or a window's after pos in that buffer */
    int win_B, win_T; /* the buffer holds an unpacked B x T window's positions (packed.c), else 0 */

    /* a session's view of another model's weights (lf_session): shares its
     * table, units and parameters, owns only its plan */
    int borrowed;
    int kv_planned; /* a session with a cache: its plan fits attention_cached's scratch */
    lf__kv *kv;     /* the session's cache (NULL: none) */

    /* last forward */
    int cur_B, cur_T, cur_rep, cur_with_targets;
    int cur_pos0; /* position of the forward's first row (0 but for cached decoding) */
    int have_dlogits;
    int no_grads;    /* lf_model_release_grads: a model to run only (no gradient memory) */
    lf__lora *lora;  /* LoRA adapters (NULL: none; a session's view shares them) */
    lf__lora **bank; /* serving: adapters 1..n_bank, chosen per ragged run (lf_segment.adapter) */
    int n_bank;
    float *lora_u, *lora_du; /* the plan's LoRA scratch, (B*T, r) each (the view's own) */
    float *lora_x, *lora_dx; /* ... with lora.dropout: (B*T, the widest adapted input) each */
    lf_forward_opts opts;
    char errmsg[1024];
};

/* Weights of tensor idx (NULL for idx < 0): in the whole buffer, or under
 * ZeRO-3 in the working buffer its unit was gathered into. */
float *lf__param_at(const lf_model *m, int idx);
/* Where replica rp adds the gradient of tensor idx (NULL for idx < 0). */
float *lf__grad_at(const lf_model *m, const lf__replica *rp, int idx);
/* Index of a tensor in the table, or -1. */
int lf__param_index(const lf_model *m, const char *name);
/* m->ix from the table and the architecture's tensor lists (arch.c). */
lf_status lf__model_bind(lf_model *m);
/* Table index of the architecture's model_params[k], and the indices of
 * layer l's layer_params (-1: a tensor the config leaves out). */
static inline int lf__model_ix(const lf_model *m, int k) { return m->ix[k]; }
static inline const int *lf__layer_ix(const lf_model *m, int l) {
    return m->ix + m->arch->n_model_params + (size_t)l * (size_t)m->arch->n_layer_params;
}
/* Dropout of one site for a replica; `row_elems` is the tensor's elements
 * per batch row, so the replica's slice draws the unsplit batch's masks.
 * Sites are numbered per layer (0..7); layer L is the embeddings'. */
lf_dropout lf__drop_at(const lf_model *m, const lf__replica *rp, int layer, int site, uint64_t row_elems);
/* Channels per attention head: head_dim, else n_embd / n_head. */
static inline int lf__head_size(const lf_model_config *c) {
    return c->head_dim > 0 ? c->head_dim : c->n_embd / c->n_head;
}
/* Padded vocabulary (embedding rows). */
static inline int lf__vp(const lf_model_config *c) {
    return c->padded_vocab_size > 0 ? c->padded_vocab_size : c->vocab_size;
}

/* The ops that write or read matmul-input activations, in the plan's
 * storage (plan_dt as the ops' lf_dtype). */
void lf__ln_forward(const lf_model *m, void *out, float *mean, float *rstd, const float *inp, const float *weight,
                    const float *bias, int N, int C);
void lf__rms_forward(const lf_model *m, void *out, float *rstd, const float *inp, const float *weight, int N, int C,
                     float eps);
/* res = a + b, then the norm of res: the backend's residual-fused op when
 * it has one (one pass over the rows), else residual_forward and the norm;
 * the same bits either way. */
void lf__res_ln_forward(const lf_model *m, float *res, void *out, float *mean, float *rstd, const float *a,
                        const float *b, const float *weight, const float *bias, int N, int C);
void lf__res_rms_forward(const lf_model *m, float *res, void *out, float *rstd, const float *a, const float *b,
                         const float *weight, int N, int C, float eps);
/* fp32 inp (n) into the plan's storage (a copy-with-rounding, or a copy). */
void lf__act_convert(const lf_model *m, void *out, const float *inp, size_t n);
void lf__mm_forward(const lf_model *m, float *out, const void *inp, const float *weight, const float *bias, int N,
                    int C, int OC, lf_weight_layout layout);
void lf__mm_backward(const lf_model *m, float *dinp, float *dweight, float *dbias, const float *dout, const void *inp,
                     const float *weight, int N, int C, int OC, lf_weight_layout layout);

/* The token (+ position) embedding of replica rp's T rows into out: wpe
 * (NULL: none) read from each row's position (cur_pos0.., or per run of a
 * ragged forward). */
void lf__embed(const lf_model *m, const lf__replica *rp, float *out, const float *wte, const float *wpe, int T);
/* The rows the head computes: N, or in a ragged forward one per run (its
 * last), moved to the front of the final block output x (rows of C floats;
 * its other rows are not read again in a forward-only session). */
int lf__head_rows(const lf_model *m, float *x, int N, int C);
/* RoPE on qkv rows at their positions (cur_pos0.., or per run). */
void lf__rope(const lf_model *m, const lf__replica *rp, float *qkv, int T);
/* rope_backward on dqkv (B,T,W) with lf__rope's table (positions from cur_pos0). */
void lf__rope_backward(const lf_model *m, const lf__replica *rp, float *dqkv, int T);
/* packed.c: check the forward's packed-row positions (lf_forward_opts.pos;
 * NULL: none) and copy them to backend memory (m->pos), or clear every
 * replica's pos. Replicas' views are set by lf_model_forward. */
lf_status lf__packed_set(lf_model *m, const int32_t *pos, int B, int T);
void lf__packed_free(lf_model *m);
/* attention_backward of lf__attention's forward (the packed op on packed rows). */
void lf__attention_backward(const lf_model *m, const lf__replica *rp, float *dqkv, float *scratch, const float *dout,
                            const float *qkv, const float *att, int T, int C, int NH, int NKV, lf_dropout drop);
/* encoder_backward of lf__embed's forward (dwpe from each row's position). */
void lf__embed_backward(const lf_model *m, const lf__replica *rp, float *dwte, float *dwpe, const float *dout, int T);

/* Causal attention of layer l for replica rp's T rows (positions cur_pos0..):
 * attention_forward over the rows, or with the session's cache active,
 * kv_append then attention_cached, att serving as the scratch. */
void lf__attention(const lf_model *m, const lf__replica *rp, int l, float *out, float *att, const float *qkv, int T,
                   lf_dropout drop);

/* Attention of layer l into a matmul-input activation `out` (the plan's
 * storage): with bf16 storage by way of fp32 in `tmp` (N,C), which must be
 * free until its next writer. */
void lf__attention_act(const lf_model *m, const lf__replica *rp, int l, void *out, float *tmp, float *att,
                       const float *qkv, int T, lf_dropout drop);

/* The fused classifier over rp's rows and the replica's loss sum (head_forward's tail). */
void lf__classifier(lf_model *m, lf__replica *rp, int N, int with_targets);

/* One parameter-table entry (name, 1-2 dims, unit); advances *n and *off. */
void lf__add_param(lf_param_info *t, int *n, size_t *off, const char *name, int ndim, int64_t d0, int64_t d1, int unit);

#endif
