/*
 * Creating and freeing a trainer, and its small accessors: the backend, the
 * communicator, the dataset and the model as the configuration resolves
 * them (--init-from a Hugging Face directory included), the memory plan
 * checked before any large allocation, the optimizer state and staging
 * buffers, the sinks, tasks and registry, then resume or the broadcast of
 * rank 0's weights.
 *
 * Invariants:
 *  - Every byte of the step is planned (lf_mem_plan) before anything large
 *    is allocated; a device allocation that fails although the plan fit is
 *    reported with the plan's advice (device_oom).
 *  - On a host-memory backend the host staging buffers are the parameters
 *    and moments themselves (no copy); elsewhere they are copies.
 *  - *out is set as soon as the trainer exists, so a caller reads errmsg even
 *    after a failed create; lf_trainer_free releases whatever was built.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "llmforge/train.h"
#include "trainer_impl.h"

lf_status lf__trainer_fail(lf_trainer *t, lf_status st) {
    snprintf(t->errmsg, sizeof t->errmsg, "%s", lf_last_error());
    return st;
}

/* The fp32 backend the run selects: the config key `backend` (lf_backend_select:
 * "auto" is LLMFORGE_BACKEND, else cuda when a GPU answers, else cpu);
 * bf16.enabled then takes its bf16 variant (lf_backend_precision_name). */
static lf_status select_backend(const lf_trainer *t, const char **base) {
    lf_status st = lf_backend_select(t->cfg.backend, base);
    if (st != LF_OK) lf_error_prefix("key 'backend' (\"%s\")", t->cfg.backend);
    return st;
}

/* An allocation on a device backend that failed although the plan fit
 * (fragmentation, another process on the GPU since the plan was made):
 * LF_ERR_NOMEM with the plan's advice, whatever the device said. Other
 * statuses, and host-memory backends, pass through. */
static lf_status device_oom(const lf_trainer *t, lf_status st, const lf_mem_plan *plan) {
    if (st != LF_ERR_NOMEM || !plan->on_device) return st;
    char what[768], advice[1536], b1[32], b2[32];
    snprintf(what, sizeof what, "%s", lf_last_error());
    lf_mem_plan_advice(plan, &t->cfg, &t->mcfg, advice, sizeof advice);
    return lf_fail(LF_ERR_NOMEM,
                   "device memory ran out on %s: %s; the plan's %s of device memory fit the %s free "
                   "when it was made, so fragmentation or another process took the rest. %s",
                   plan->device, what, lf_fmt_bytes(plan->device_total, b1, sizeof b1),
                   lf_fmt_bytes(plan->device_free, b2, sizeof b2), advice);
}

const char *lf_trainer_errmsg(const lf_trainer *t) { return t ? t->errmsg : lf_last_error(); }

void lf_trainer_request_stop(lf_trainer *t, int reason) {
    if (t) t->stop_req = reason ? reason : 1;
}
long lf_trainer_step(const lf_trainer *t) { return t ? t->step : 0; }
int lf_trainer_stop_reason(const lf_trainer *t) { return t ? t->stop_reason : 0; }
lf_model *lf_trainer_model(lf_trainer *t) { return t->model; }
const char *lf_trainer_block_size_origin(const lf_trainer *t) { return t ? t->block_origin : ""; }

lf_status lf_trainer_copy_params(lf_trainer *t, float *dst) {
    if (!t || !dst) return lf_fail(LF_ERR_INVALID_ARG, "lf_trainer_copy_params: NULL argument");
    const float *p = lf_model_params(t->model);
    if (!p)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "lf_trainer_copy_params: under ZeRO-3 rank %d holds only its shard of the "
                       "parameters (the checkpoints hold them all)",
                       t->rank);
    lf_backend_to_host(t->be, dst, p, lf_model_num_params(t->model) * sizeof(float));
    return lf_backend_sync(t->be);
}

lf_comm *lf_trainer_comm(lf_trainer *t) { return t ? t->comm : NULL; }
lf_backend *lf_trainer_backend(lf_trainer *t) { return t ? t->be : NULL; }

/* ZeRO-Offload's host buffers: pinned (the backend's host_alloc) or pageable. */
static void *off_alloc(lf_trainer *t, size_t bytes) {
    if (!t->pinned) return lf_alloc(bytes);
    void *p = lf_backend_host_alloc(t->be, bytes);
    if (p) t->pinned_bytes += bytes;
    return p;
}
static void off_free(lf_trainer *t, void *p) {
    if (!p) return;
    if (t->pinned) lf_backend_host_free(t->be, p);
    else lf_free(p);
}

size_t lf_trainer_pinned_bytes(const lf_trainer *t) { return t ? t->pinned_bytes : 0; }

void lf_trainer_state_bytes(const lf_trainer *t, size_t *params, size_t *grads, size_t *optim) {
    lf_model_state_bytes(t->model, params, grads);
    lf_backend *be = t->be;
    *params += lf_backend_allocated(be, t->pshard);
    *grads += lf_backend_allocated(be, t->gshard);
    *optim = t->offload ? 0 : lf_backend_allocated(be, t->m) + lf_backend_allocated(be, t->v); /* device bytes */
}

static lf_status write_resolved_config(lf_trainer *t) {
    char *json = lf_train_config_to_json(&t->cfg);
    if (!json) return lf_fail(LF_ERR_NOMEM, "out of memory writing the resolved config");
    char path[LF_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/config.resolved.json", t->cfg.out_dir);
    lf_status st = lf_file_write_all(path, json, strlen(json));
    lf_free(json);
    return st;
}

/* ---------------------------------------------------------------- --init-from a Hugging Face directory */

/* A directory holding config.json: a Hugging Face model (save_pretrained). */
static int is_hf_dir(const char *path) {
    char cfg[LF_PATH_MAX + 16];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    struct stat sd, sc;
    return stat(path, &sd) == 0 && S_ISDIR(sd.st_mode) && stat(cfg, &sc) == 0 && S_ISREG(sc.st_mode);
}

/* The model section from the HF config.json: keys the configuration leaves
 * out are taken from it; keys it sets must agree (all disagreements listed
 * by name). block_size may be anything for a family without a position
 * table (lf_arch_fixed_context 0: RoPE); with one it must be the table's.
 * Left out for a RoPE family it is min(max_position_embeddings,
 * LF__HF_DEFAULT_BLOCK): max_position_embeddings
 * is what the model can reach (131072 for Llama 3.2), not what a fine-tune
 * needs or memory holds; open_data cuts it further to fit the data. A
 * block_size beyond the model's sliding_window runs the windowed attention
 * (model/packed.c). model.vocab_size (embedding
 * rows) becomes the HF vocab_size. */
enum { LF__HF_DEFAULT_BLOCK = 2048 };
static lf_status hf_merge_config(lf_trainer *t, const lf_hf_model *hf) {
    lf_model_config h;
    lf_status st = lf_hf_model_config(hf, &h);
    if (st != LF_OK) return st;
    lf_model_config *m = &t->cfg.model;
    const unsigned g = t->cfg.model_given;
    char bad[2048] = "";
    size_t len = 0;
#define HF_KEY(bit, field, key, fmt, cast) \
    do { \
        if (!(g & (bit))) m->field = h.field; \
        else if (m->field != h.field && len < sizeof bad) \
            len += (size_t)snprintf(bad + len, sizeof bad - len, "%s%s " fmt " (config.json " fmt ")", \
                                    len ? "; " : "", key, (cast)m->field, (cast)h.field); \
    } while (0)
    if (!(g & LF_MODEL_GIVEN_ARCH)) {
        m->arch = h.arch;
        snprintf(t->cfg.arch, sizeof t->cfg.arch, "%s", lf_arch_name(h.arch));
    } else if (m->arch != h.arch) {
        len += (size_t)snprintf(bad + len, sizeof bad - len, "model.arch %s (config.json %s)", lf_arch_name(m->arch),
                                lf_arch_name(h.arch));
    }
    HF_KEY(LF_MODEL_GIVEN_N_LAYER, n_layer, "model.n_layer", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_N_HEAD, n_head, "model.n_head", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_N_KV_HEAD, n_kv_head, "model.n_kv_head", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_N_EMBD, n_embd, "model.n_embd", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_FFN_HIDDEN, ffn_hidden, "model.ffn_hidden", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_NORM_EPS, norm_eps, "model.norm_eps", "%g", double);
    HF_KEY(LF_MODEL_GIVEN_ROPE_THETA, rope_theta, "model.rope_theta", "%g", double);
    HF_KEY(LF_MODEL_GIVEN_TIE, tie_embeddings, "model.tie_embeddings", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_BIAS, bias, "model.bias", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_VOCAB_SIZE, vocab_size, "model.vocab_size", "%d", int);
    HF_KEY(LF_MODEL_GIVEN_SLIDING_WINDOW, sliding_window, "model.sliding_window", "%d", int);
    if (!lf_arch_fixed_context(h.arch)) { /* no position table (RoPE): any block_size */
        if (!(g & LF_MODEL_GIVEN_BLOCK_SIZE)) {
            int T = h.block_size < LF__HF_DEFAULT_BLOCK ? h.block_size : LF__HF_DEFAULT_BLOCK;
            m->block_size = T;
            t->block_defaulted = 1;
            snprintf(t->block_origin, sizeof t->block_origin, "min(max_position_embeddings %d, %d)", h.block_size,
                     LF__HF_DEFAULT_BLOCK);
        }
    } else {
        HF_KEY(LF_MODEL_GIVEN_BLOCK_SIZE, block_size, "model.block_size", "%d", int);
    }
#undef HF_KEY
    /* no model.* key sets these: they are config.json's */
    m->head_dim = h.head_dim;
    m->out_bias = h.out_bias;
    m->mlp_bias = h.mlp_bias;
    m->qk_norm = h.qk_norm;
    m->fused_proj = h.fused_proj;
    m->rope = h.rope;
    if (len)
        return lf_fail(LF_ERR_MISMATCH, "--init-from '%s': the configuration disagrees with its config.json: %s",
                       lf_hf_dir(hf), bad);
    m->padded_vocab_size = 0;
    return LF_OK;
}

/* The record bus (it owns the caller's sinks from here on, whatever fails),
 * the backend and the communicator. */
static lf_status open_services(lf_trainer *t) {
    lf_status st;
    /* the bus first: it owns the caller's sinks from here on, whatever fails */
    st = lf_obs_create(&t->obs);
    for (int i = 0; i < t->opts.n_sinks && i < 4; i++) {
        if (st == LF_OK) st = lf_obs_add_sink(t->obs, t->opts.sinks[i]);
        else if (t->opts.sinks[i] && t->opts.sinks[i]->close) t->opts.sinks[i]->close(t->opts.sinks[i]);
    }
    if (st != LF_OK) return lf__trainer_fail(t, st);
    /* the trainer's own backend instance (its context and sticky status;
     * LLMFORGE_BACKEND: cpu-fenced, cuda), before the communicator: a device
     * communicator works on the instance's device and stream */
    /* the backend: the config key `backend` ("auto": LLMFORGE_BACKEND, else cuda with a GPU, else cpu) */
    const char *base = NULL;
    st = select_backend(t, &base);
    if (st != LF_OK) return lf__trainer_fail(t, st);
    st = lf_backend_open(lf_backend_precision_name(base, t->cfg.bf16), &t->be);
    if (st != LF_OK) return lf__trainer_fail(t, st);
    /* then the communicator: from here on a failure on one rank is reported
     * by that rank, which ends the job (lf_comm_abort, the caller's part) */
    st = lf__dp_open_comm(t);
    if (st != LF_OK) return lf__trainer_fail(t, st);
    return LF_OK;
}

/* The dataset and its tokenizer, --init-from a Hugging Face directory's
 * config, and the model configuration resolved against the data. */
static lf_status open_data(lf_trainer *t) {
    lf_status st;
    st = lf__train_config_check_ckpt(&t->cfg); /* a struct filled by hand is checked as a parsed one is */
    if (st != LF_OK) return lf__trainer_fail(t, st);
    if (t->opts.skip_batches < 0)
        return lf__trainer_fail(t, lf_fail(LF_ERR_INVALID_ARG,
                                           "lf_trainer_opts.skip_batches is %ld (batches to skip: >= 0)",
                                           t->opts.skip_batches));
    if (!t->cfg.dataset[0])
        return lf__trainer_fail(t,
                                lf_fail(LF_ERR_CONFIG,
                                        "key 'data.dataset' is required (a directory written by `llmforge prepare`)"));
    st = lf_dataset_open(&t->ds, t->cfg.dataset);
    if (st != LF_OK) return lf__trainer_fail(t, st);
    if (t->cfg.data_tokenizer[0]) {
        st = lf_dataset_set_tokenizer(t->ds, t->cfg.data_tokenizer);
        if (st != LF_OK) {
            lf_error_prefix("key 'data.tokenizer'");
            return lf__trainer_fail(t, st);
        }
    }
    if (!lf_dataset_tokenizer_spec(t->ds))
        return lf__trainer_fail(t, lf_fail(LF_ERR_CONFIG,
                                           "dataset '%s' holds llm.c token files, which name no tokenizer: set key "
                                           "'data.tokenizer' (e.g. gpt2:DIR with encoder.json and vocab.bpe)",
                                           t->cfg.dataset));
    int V = lf_dataset_vocab_size(t->ds);
    if (t->opts.init_from && t->opts.init_from[0] && is_hf_dir(t->opts.init_from)) {
        st = lf_hf_open(&t->hf, t->opts.init_from);
        if (st == LF_OK) st = hf_merge_config(t, t->hf);
        if (st != LF_OK) return lf__trainer_fail(t, st);
        if (t->cfg.model.vocab_size < V)
            return lf__trainer_fail(
                t, lf_fail(LF_ERR_CONFIG,
                           "--init-from '%s' has %d embedding rows but dataset '%s' has %d "
                           "tokens: prepare the data with the model's tokenizer (hf:%s/tokenizer.json)",
                           t->opts.init_from, t->cfg.model.vocab_size, t->cfg.dataset, V, t->opts.init_from));
    }
    size_t ntrain = lf_dataset_num_tokens(t->ds, LF_SPLIT_TRAIN), nval = lf_dataset_num_tokens(t->ds, LF_SPLIT_VAL);
    if (t->block_defaulted) { /* a default, not a choice: no larger than the data (a window of T + 1 tokens + 1) */
        size_t fit = ntrain >= 2 ? ntrain - 2 : 0;
        if (nval > 0 && (nval >= 2 ? nval - 2 : 0) < fit) fit = nval >= 2 ? nval - 2 : 0; /* the last step evaluates */
        if (fit >= 1 && fit < (size_t)t->cfg.model.block_size) {
            t->cfg.model.block_size = (int)fit;
            const size_t used = strlen(t->block_origin);
            snprintf(t->block_origin + used, sizeof t->block_origin - used, ", cut to fit dataset '%.40s'",
                     t->cfg.dataset);
        }
        lf_log(LF_LOG_INFO, "model.block_size %d: not set, so %s (set model.block_size to choose)",
               t->cfg.model.block_size, t->block_origin);
    }
    t->mcfg = t->cfg.model;
    if (t->cfg.model.vocab_size == 0 || t->cfg.model.vocab_size == V) {
        t->mcfg.vocab_size = V;
        t->mcfg.padded_vocab_size = 0;
        t->cfg.model.vocab_size = V; /* resolved: every default filled in */
    } else if (t->cfg.model.vocab_size > V) {
        t->mcfg.padded_vocab_size = t->cfg.model.vocab_size; /* padded rows, never targets */
        t->mcfg.vocab_size = V;
    } else {
        return lf__trainer_fail(t, lf_fail(LF_ERR_CONFIG, "key 'model.vocab_size' is %d but dataset '%s' has %d tokens",
                                           t->cfg.model.vocab_size, t->cfg.dataset, V));
    }
    if ((st = lf_model_config_resolve(&t->mcfg)) != LF_OK) return lf__trainer_fail(t, st);
    int T = t->cfg.model.block_size;
    if (t->cfg.objective == LF_OBJECTIVE_DPO) ntrain = nval = SIZE_MAX; /* pairs are padded rows: any T fits */
    if (ntrain < (size_t)T + 2)
        return lf__trainer_fail(
            t,
            lf_fail(
                LF_ERR_CONFIG,
                "model.block_size %d is larger than the data: dataset '%s' split 'train' has %zu tokens (needs at least %d)",
                T, t->cfg.dataset, ntrain, T + 2));
    if (nval > 0 && nval < (size_t)T + 2) /* the last step evaluates, whatever eval.interval */
        return lf__trainer_fail(
            t,
            lf_fail(
                LF_ERR_CONFIG,
                "model.block_size %d is larger than the data: dataset '%s' split 'val' has %zu tokens (needs at least %d)",
                T, t->cfg.dataset, nval, T + 2));

    if (t->cfg.packing) {
        if (t->cfg.sampling != LF_SAMPLING_RANDOM && t->cfg.sampling != LF_SAMPLING_PACKED)
            return lf__trainer_fail(t, lf_fail(LF_ERR_CONFIG,
                                               "key 'data.packing': rows of whole examples come in shuffled epochs; "
                                               "data.sampling '%s' does not apply to them (leave it out)",
                                               t->cfg.sampling == LF_SAMPLING_RECORDS ? "records" : "sequential"));
        for (int s = 0; s < 2 && st == LF_OK; s++)
            if (s == LF_SPLIT_TRAIN || nval > 0)
                st = lf_sft_pack_create(&t->pack[s], t->ds, (lf_split)s, T, (lf_sft_pack_mode)t->cfg.packing);
        if (st != LF_OK) {
            lf_error_prefix("data.packing");
            return lf__trainer_fail(t, st);
        }
    }
    if (t->cfg.sampling == LF_SAMPLING_RECORDS) {
        st = lf_dataset_index_records(t->ds, LF_SPLIT_TRAIN, T);
        if (st == LF_OK && nval >= (size_t)T + 2) st = lf_dataset_index_records(t->ds, LF_SPLIT_VAL, T);
        if (st != LF_OK) {
            lf_error_prefix("data.sampling records");
            return lf__trainer_fail(t, st);
        }
    }
    return LF_OK;
}

/* out_dir (rank 0's): created, --resume auto decided (and shared with every
 * rank), a fresh run refused over an earlier one, config.resolved.json. */
static lf_status prepare_out_dir(lf_trainer *t, const lf_trainer_opts *opts) {
    lf_status st;
    snprintf(t->ckpt_root, sizeof t->ckpt_root, "%s/ckpt", t->cfg.out_dir);
    if (t->rank == 0) { /* out_dir is rank 0's: the other ranks may not even see it (another host) */
        st = lf_mkdirs(t->cfg.out_dir);
        if (st != LF_OK) {
            lf_error_prefix("out_dir '%s' is not usable", t->cfg.out_dir);
            return lf__trainer_fail(t, st);
        }
        if (t->opts.resume == LF_RESUME_AUTO) {
            /* continue what out_dir holds; start fresh only when it holds no checkpoint at all
             * (a broken one is an error: starting over would bury it) */
            char *old = NULL;
            st = lf_checkpoint_resolve(t->ckpt_root, &old);
            if (st != LF_OK && st != LF_ERR_NOT_FOUND) {
                lf_error_prefix("--resume auto");
                return lf__trainer_fail(t, st);
            }
            t->opts.resume = st == LF_OK ? LF_RESUME_YES : LF_RESUME_NO;
            lf_log(LF_LOG_INFO, "--resume auto: %s%s%s", old ? "resuming from " : "no checkpoint in ",
                   old ? old : t->ckpt_root, old ? "" : "; starting a fresh run");
            lf_free(old);
        } else if (!t->opts.resume) {
            /* a fresh run must not mix its checkpoints with an earlier run's */
            char *old = NULL;
            if (lf_checkpoint_resolve(t->ckpt_root, &old) == LF_OK) {
                st = lf_fail(LF_ERR_CONFIG,
                             "out_dir '%s' already holds a run (checkpoint '%s'); continue it with "
                             "--resume, or choose another out_dir",
                             t->cfg.out_dir, old);
                lf_free(old);
                return lf__trainer_fail(t, st);
            }
        }
        st = write_resolved_config(t);
        if (st != LF_OK) return lf__trainer_fail(t, st);
    }
    if (opts && opts->resume == LF_RESUME_AUTO && t->world > 1) {
        /* rank 0 decided (it alone sees out_dir): every rank does the same */
        int64_t v = t->rank == 0 ? t->opts.resume : 0;
        lf_comm_set_context(t->comm, "startup");
        st = lf_comm_broadcast_bytes(t->comm, &v, sizeof v, 0);
        if (st != LF_OK) return lf__trainer_fail(t, st);
        t->opts.resume = (int)v;
    }
    return LF_OK;
}

/* The memory plan, then the model on the backend, its initial weights and
 * activation plan (checked against the memory plan), and the ZeRO layout. */
static lf_status build_model(lf_trainer *t, lf_mem_plan *plan) {
    lf_status st;
    int T = t->cfg.model.block_size, B = t->cfg.micro_batch;
    /* every byte of the step, known before any large allocation: refuse now what cannot fit */
    st = lf_mem_plan_make_backend(plan, &t->cfg, &t->mcfg, t->be, t->rank);
    if (st == LF_OK) st = lf_mem_plan_check(plan, &t->cfg, &t->mcfg);
    if (st != LF_OK) return lf__trainer_fail(t, st);
    if (plan->on_device && t->rank == 0) {
        char b1[32], b2[32];
        lf_log(LF_LOG_INFO, "backend %s: the plan needs %s of device memory, %s free", plan->device,
               lf_fmt_bytes(plan->device_total, b1, sizeof b1), lf_fmt_bytes(plan->device_free, b2, sizeof b2));
    }
    st = lf_model_create(&t->model, &t->mcfg, t->be);
    if (st != LF_OK) return lf__trainer_fail(t, device_oom(t, st, plan));
    st = lf__ckpt_extras(t);
    if (st != LF_OK) return lf__trainer_fail(t, st);
    /* LoRA first: the base's gradient buffer goes before the initialisation's host copy comes
     * (the peak stays at weights + one copy); --init-from fills the base below */
    st = lf_lora_enabled(&t->cfg.lora) ? lf_model_lora_attach(t->model, &t->cfg.lora, t->cfg.seed) : LF_OK;
    if (st == LF_OK) st = lf_model_init_weights(t->model, t->cfg.seed);
    if (st != LF_OK) return lf__trainer_fail(t, st);
    size_t act_bytes = 0;
    st = lf_model_set_recompute(t->model, (lf_recompute)t->cfg.recompute);
    if (st == LF_OK) st = lf_model_plan(t->model, B, T, &act_bytes);
    if (st != LF_OK) return lf__trainer_fail(t, device_oom(t, st, plan));

    /* weights, gradients, two moments, three host staging copies, batches, activations */
    t->planned_bytes = plan->total;
    t->plan_json = lf__trep_plan_json(plan);
    t->planned_act_bytes = plan->act.total;
    if (act_bytes != plan->act.total) /* the model's own count must be the plan's */
        return lf__trainer_fail(t, lf_fail(LF_ERR_INTERNAL,
                                           "activation plan mismatch: the model allocated %zu bytes, the memory "
                                           "plan says %zu",
                                           act_bytes, plan->act.total));
    t->flops_per_token = lf_model_flops_per_token(&t->mcfg, T);
    t->spike_win = calloc((size_t)t->cfg.alert_spike_window, sizeof(double));
    if (!t->spike_win) return lf__trainer_fail(t, lf_fail(LF_ERR_NOMEM, "out of memory"));
    st = lf__zero_layout(t); /* ZeRO: this rank's shard of every unit */
    if (st != LF_OK) return lf__trainer_fail(t, device_oom(t, st, plan));
    return LF_OK;
}

/* AdamW's moments (on the backend, or offloaded to the host), the host
 * staging buffers, the step's batches and the collectives' staging. */
static lf_status alloc_state(lf_trainer *t, const lf_mem_plan *plan) {
    lf_status st;
    int T = t->cfg.model.block_size, B = t->cfg.micro_batch, A = t->cfg.grad_accum;
    size_t n = lf_model_train_num_params(t->model);
    size_t nm = moments_n(t); /* AdamW moments: the whole model, or this rank's shard */
    /* ZeRO-Offload (offload_optimizer.device cpu on a device backend): the
     * moments in host memory, updated there (offload_adamw); on a CPU
     * backend the moments are host memory anyway */
    t->offload = t->cfg.offload_optimizer == 1 && !lf_backend_host_memory(t->be);
    if (t->offload) {
        /* pinned where the backend offers it (cuda): every step moves the
         * gradients down and the parameters up through these */
        t->pinned = lf_backend_can_pin(t->be);
        t->m = off_alloc(t, nm * sizeof(float));
        t->v = off_alloc(t, nm * sizeof(float));
        t->off_g = off_alloc(t, nm * sizeof(float));
        if (!t->m || !t->v || !t->off_g)
            return lf__trainer_fail(t, lf_fail(LF_ERR_NOMEM,
                                               "out of host memory allocating the offloaded AdamW moments (%zu "
                                               "floats each)",
                                               nm));
        memset(t->m, 0, nm * sizeof(float));
        memset(t->v, 0, nm * sizeof(float));
    } else {
        t->m = lf_backend_alloc(t->be, nm * sizeof(float));
        t->v = lf_backend_alloc(t->be, nm * sizeof(float));
        if (!t->m || !t->v)
            return lf__trainer_fail(t, device_oom(t,
                                                  lf_fail(LF_ERR_NOMEM,
                                                          "out of memory allocating the AdamW moments (%zu "
                                                          "floats each)",
                                                          nm),
                                                  plan));
        lf_backend_zero(t->be, t->m, nm);
        lf_backend_zero(t->be, t->v, nm);
    }
    if (lf_backend_host_memory(t->be)) { /* checkpoints read and write the tensors in place */
        t->host_params = lf_model_train_params(t->model);
        t->host_m = t->m;
        t->host_v = t->v;
    } else {
        t->host_params = t->offload ? off_alloc(t, n * sizeof(float)) : lf_alloc(n * sizeof(float));
        t->host_m = t->offload ? t->m : lf_alloc(nm * sizeof(float));
        t->host_v = t->offload ? t->v : lf_alloc(nm * sizeof(float));
    }
    t->inputs = lf_alloc(sizeof(int32_t) * (size_t)A * B * T);
    t->targets = lf_alloc(sizeof(int32_t) * (size_t)A * B * T);
    t->pos = t->pack[0] ? lf_alloc(sizeof(int32_t) * (size_t)A * B * T) : NULL;
    if (!t->m || !t->v || !t->host_params || !t->host_m || !t->host_v || !t->inputs || !t->targets ||
        (t->pack[0] && !t->pos))
        return lf__trainer_fail(t, lf_fail(LF_ERR_NOMEM, "out of memory allocating optimizer state for %zu parameters",
                                           n));
    st = lf__dp_xfer_alloc(t); /* collectives on backend memory that is not the host's: staged through it */
    if (st != LF_OK) return lf__trainer_fail(t, st);
    return LF_OK;
}

/* --init-from: rank 0 reads the weights (a Hugging Face directory or a
 * checkpoint/safetensors file); the broadcast is start_state's. */
static lf_status init_from_weights(lf_trainer *t) {
    lf_status st;
    size_t n = lf_model_num_params(t->model);                        /* the base's: with LoRA not what trains */
    if (t->opts.init_from && t->opts.init_from[0] && t->rank == 0) { /* broadcast below */
        int count;
        const lf_param_info *table = lf_model_params_table(t->model, &count);
        lf_ckpt_tensors tt = {table, count, n};
        float *host = t->host_params;
        if (lf_model_lora(t->model)) { /* host_params holds the adapters */
            host = lf_backend_host_memory(t->be) ? lf_model_params(t->model) : lf_alloc(n * sizeof(float));
            if (!host) return lf__trainer_fail(t, lf_fail(LF_ERR_NOMEM, "out of memory loading the base"));
        }
        st = t->hf ? lf_hf_load_params(t->hf, table, count, t->mcfg.tie_embeddings, host)
                   : lf_weights_load(t->opts.init_from, &tt, host);
        if (host != t->host_params) {
            if (st == LF_OK && host != lf_model_params(t->model))
                stage_in(t, lf_model_params(t->model), host, n * sizeof(float));
            if (host != lf_model_params(t->model)) lf_free(host);
            if (st == LF_OK) lf_model_params_changed(t->model);
        }
        if (st != LF_OK) return lf__trainer_fail(t, st);
        if (t->hf)
            lf_log(LF_LOG_INFO, "initialised from Hugging Face model %s (%s)", t->opts.init_from,
                   lf_hf_model_type(t->hf));
        lf_hf_close(t->hf);
        t->hf = NULL;
        if (!lf_model_lora(t->model)) stage_in(t, lf_model_params(t->model), t->host_params, n * sizeof(float));
    }
    return LF_OK;
}

/* The sinks (rank 0), eval.tasks and the registry. */
static lf_status open_observers(lf_trainer *t) {
    lf_status st;
    if (t->rank == 0) {
        st = lf__trainer_open_sinks(t);
        if (st != LF_OK) return lf__trainer_fail(t, st);
    }
    st = lf__trainer_load_tasks(t);
    if (st != LF_OK) return lf__trainer_fail(t, st);
    st = lf__treg_open(&t->treg, &t->cfg, t->rank, lf_dataset_tokenizer_spec(t->ds));
    if (st != LF_OK) return lf__trainer_fail(t, st);
    return LF_OK;
}

/* LoRA on several ranks: rank 0's frozen base (its --init-from) on every rank. */
static lf_status broadcast_base(lf_trainer *t) {
    const size_t n = lf_model_num_params(t->model);
    float *dev = lf_model_params(t->model);
    float *host = lf_backend_host_memory(t->be) ? dev : lf_alloc(n * sizeof(float));
    if (!host) return lf_fail(LF_ERR_NOMEM, "out of memory broadcasting the LoRA base");
    lf_comm_set_context(t->comm, "startup");
    if (t->rank == 0 && host != dev) stage_out(t, host, dev, n * sizeof(float));
    lf_status st = lf_comm_broadcast_bytes(t->comm, host, n * sizeof(float), 0);
    if (st == LF_OK && host != dev) stage_in(t, dev, host, n * sizeof(float));
    if (host != dev) lf_free(host);
    lf_model_params_changed(t->model);
    return st;
}

/* The state the first step starts from: the checkpoint's (--resume), else
 * rank 0's weights on every rank; then opts.skip_batches. */
static lf_status start_state(lf_trainer *t) {
    lf_status st;
    size_t n = lf_model_train_num_params(t->model);
    if (t->world > 1 && lf_model_lora(t->model) && (st = broadcast_base(t)) != LF_OK) return lf__trainer_fail(t, st);
    if (t->opts.resume) {
        st = lf__trainer_resume(t, t->ckpt_root, 0); /* rank 0 reads, every rank gets the same state */
        if (st != LF_OK) return lf__trainer_fail(t, st);
    } else if (t->world > 1) {
        /* one set of weights everywhere: rank 0's (its --init-from file, or
         * the seeded initialisation every rank made alike anyway) */
        lf_comm_set_context(t->comm, "startup");
        if (t->rank == 0) stage_out(t, t->host_params, lf_model_train_params(t->model), n * sizeof(float));
        st = lf_comm_broadcast_bytes(t->comm, t->host_params, n * sizeof(float), 0); /* host memory */
        if (st != LF_OK) return lf__trainer_fail(t, st);
        stage_in(t, lf_model_train_params(t->model), t->host_params, n * sizeof(float));
    }
    if (t->opts.skip_batches > 0) { /* after the resume: on top of the checkpoint's own offset */
        t->data_off += t->opts.skip_batches;
        if (t->rank == 0)
            lf_log(LF_LOG_INFO, "skipping %ld steps' batches: step %ld reads the rows of data step %ld",
                   t->opts.skip_batches, t->step + 1, t->step + t->data_off + 1);
    }
    return LF_OK;
}

lf_status lf_trainer_create(lf_trainer **out, const lf_train_config *cfg, const lf_trainer_opts *opts) {
    *out = NULL;
    lf_status st;
    lf_trainer *t = calloc(1, sizeof *t);
    if (!t) return lf_fail(LF_ERR_NOMEM, "out of memory creating the trainer");
    t->cfg = *cfg;
    if (opts) t->opts = *opts;
    t->best_val = INFINITY;
    lf_loss_scaler_init(&t->scaler, t->cfg.fp16_loss_scale, t->cfg.fp16_scale_power, t->cfg.fp16_window,
                        t->cfg.fp16_hysteresis, t->cfg.fp16_consecutive, t->cfg.fp16_min_scale);
    t->last_val = t->last_train_eval = NAN;
    t->best_score = t->cfg.greater_is_better ? -INFINITY : INFINITY;
    t->last_score = NAN;
    t->best_eval_step = -1;
    t->saved_step = -1;
    pthread_mutex_init(&t->obs_mu, NULL);
    pthread_mutex_init(&t->wd_mu, NULL);
    pthread_cond_init(&t->wd_cv, NULL);
    *out = t; /* so the caller can read errmsg even on failure */
    lf_mem_plan plan;
    size_t n;
    if ((st = lf__lora_init_from_adapter(t)) != LF_OK || (st = open_services(t)) != LF_OK ||
        (st = open_data(t)) != LF_OK || (st = prepare_out_dir(t, opts)) != LF_OK ||
        (st = build_model(t, &plan)) != LF_OK || (st = alloc_state(t, &plan)) != LF_OK ||
        (st = init_from_weights(t)) != LF_OK || (st = lf__lora_load_adapter(t)) != LF_OK ||
        (st = lf__lora_setup(t)) != LF_OK || (st = open_observers(t)) != LF_OK || (st = start_state(t)) != LF_OK)
        return st;
    n = lf_model_train_num_params(t->model);
    if (t->cfg.ckpt_async && t->rank == 0) { /* the snapshot the writer owns (ZeRO is refused with async) */
        st = lf__ckpt_async_alloc(t, n);
        if (st != LF_OK) return lf__trainer_fail(t, st);
    }
    st = lf__zero_partition(t); /* ZeRO-2/3: the model gives up its whole gradient (and parameter) buffers */
    if (st != LF_OK) return lf__trainer_fail(t, st);
    st = lf__dp_gbf_alloc(
        t); /* communication_data_type bf16: the gradients' staging (after lf__zero_partition: overlap) */
    if (st != LF_OK) return lf__trainer_fail(t, device_oom(t, st, &plan));
    st = lf__dpo_open(t); /* train.objective dpo: pairs and reference log-probs, from the initial weights */
    if (st != LF_OK) return lf__trainer_fail(t, st);
    if (t->dpo) return LF_OK;        /* pairs come from lf__dpo_step_load, not the loader */
    st = lf__trainer_open_loader(t); /* its ring is step memory too: allocated before the first step */
    if (st != LF_OK) return lf__trainer_fail(t, st);
    return LF_OK;
}

void lf_trainer_free(lf_trainer *t) {
    if (!t) return;
    lf__trainer_watchdog_stop(t);
    lf__ckpt_async_free(t); /* a writer still running is joined */
    lf_hf_close(t->hf);
    lf_obs_free(t->obs);
    lf_eval_tasks_free(t->tasks);
    lf_eval_results_free(t->task_res);
    lf__treg_close(t->treg);
    lf_tokenizer_free(t->tok);
    free(t->spike_win);
    free(t->plan_json);
    pthread_mutex_destroy(&t->obs_mu);
    pthread_mutex_destroy(&t->wd_mu);
    pthread_cond_destroy(&t->wd_cv);
    if (t->offload) {
        off_free(t, t->m);
        off_free(t, t->v);
        off_free(t, t->off_g);
        off_free(t, t->host_params);
        t->host_params = NULL;
    } else if (t->be) {
        if (t->m) lf_backend_free(t->be, t->m);
        if (t->v) lf_backend_free(t->be, t->v);
    }
    lf_free(t->tok_data);
    lf_free(t->tpl_data);
    lf_free(t->hf_config);
    cJSON_free(t->lora_config);
    for (int i = 0; i < 4; i++) lf_free(t->hf_kept[i]);
    if (t->be && !lf_backend_host_memory(t->be)) {
        if (!t->offload) {
            lf_free(t->host_params);
            lf_free(t->host_m);
            lf_free(t->host_v);
        }
    }
    lf_free(t->xfer);
    lf_free(t->inputs);
    lf_free(t->targets);
    lf_free(t->pos);
    if (t->be && t->gshard) lf_backend_free(t->be, t->gshard);
    for (int i = 0; i < 2; i++)
        if (t->be && t->gbf[i]) lf_backend_free(t->be, t->gbf[i]);
    if (t->be && t->pshard) lf_backend_free(t->be, t->pshard);
    free(t->unit_lo);
    lf_model_free(t->model);
    lf_backend_close(t->be); /* after everything allocated on it */
    lf_loader_close(t->loader);
    lf__dpo_free(t->dpo);
    for (int i = 0; i < 2; i++) lf_sft_pack_free(t->pack[i]);
    lf_dataset_close(t->ds);
    if (t->own_comm) lf_comm_close(t->comm); /* last: it may finalise MPI */
    free(t);
}
