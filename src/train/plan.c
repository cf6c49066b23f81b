/*
 * The memory plan (include/llmforge/plan.h). Everything a step allocates is
 * a function of the configuration: parameters, gradients and AdamW moments
 * (4 bytes each per parameter), on a backend whose memory is not host
 * memory the trainer's host staging copies for checkpoints (parameters and
 * both moments) and, with several ranks, for the collectives on backend
 * memory (one gradient bucket, or with ZeRO the largest unit; the CPU
 * backends need none of these), the activation plan of the
 * model (lf_model_plan_bytes, per recompute policy; with bf16 the
 * matmul inputs are stored in bf16), the step's batch
 * and the loader's prefetch ring, and with several ranks the communicator's
 * scratch for one gradient bucket. So the plan is exact up to small
 * bookkeeping (tables, file buffers) and is checked before anything large is
 * allocated.
 *
 * On a device backend ("cuda": backend memory is not the host's) the items
 * split in two: parameters, gradients, moments, activations (and bf16
 * copies) in the device's memory, held against what cudaMemGetInfo says is
 * free once the backend's own context is open; staging copies, batches and
 * communication buffers in host memory, held against memory.limit_bytes or
 * MemAvailable. The advice for either part is computed on that part's
 * bytes, and lf_mem_plan_advice gives it to a run whose allocation failed
 * after all (fragmentation, another process on the GPU).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/backend.h"
#include "llmforge/comm.h"
#include "llmforge/plan.h"
#include "llmforge/backend_cpu.h"
#include "model/model_impl.h"
#include "train_impl.h"

const char *lf_fmt_bytes(size_t bytes, char *buf, size_t cap) {
    const double b = (double)bytes;
    if (b >= 1024.0 * 1024 * 1024) snprintf(buf, cap, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else if (b >= 1024.0 * 1024) snprintf(buf, cap, "%.1f MiB", b / (1024.0 * 1024));
    else if (b >= 1024.0) snprintf(buf, cap, "%.1f KiB", b / 1024.0);
    else snprintf(buf, cap, "%zu B", bytes);
    return buf;
}

/* MemAvailable from /proc/meminfo in bytes, 0 when unknown. */
static size_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

/* dev: the item lives in the device's memory (only ever 1 on a device plan) */
static void add(lf_mem_plan *p, const char *name, size_t bytes, int dev) {
    if (p->n_items >= LF_PLAN_MAX_ITEMS || bytes == 0) return;
    snprintf(p->items[p->n_items].name, sizeof p->items[0].name, "%s", name);
    p->items[p->n_items].device = dev;
    p->items[p->n_items++].bytes = bytes;
    p->total += bytes;
    if (dev) p->device_total += bytes;
    else p->host_total += bytes;
}

/* Total of the plan with micro-batch B, accumulation A and policy rc (the rest as cfg). */
static lf_status plan_with(lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg, int replicas, int B,
                           int A, lf_recompute rc, int staging, int rank, const lf_backend_ops *ops) {
    memset(p, 0, sizeof *p);
    p->ops = ops;
    lf_param_info *table = NULL;
    int count = 0;
    size_t P = 0;
    lf_status st = lf_model_param_table(mcfg, &table, &count, &P);
    if (st != LF_OK) return st;
    /* each ZeRO unit's size from the table (0 embeddings, 1..L blocks, L+1 the
     * final norm and an untied head), so every architecture is sized alike */
    const int L = mcfg->n_layer;
    size_t *unit = calloc((size_t)L + 2, sizeof *unit);
    if (!unit) {
        lf_free(table);
        return lf_fail(LF_ERR_NOMEM, "out of memory planning");
    }
    size_t mm_weights = 0; /* elements of the matmul weights (2-D tensors but the lookup-only tables) */
    for (int i = 0; i < count; i++) {
        if (table[i].unit >= 0 && table[i].unit <= L + 1) unit[table[i].unit] += table[i].numel;
        if (table[i].ndim == 2) mm_weights += table[i].numel;
    }
    mm_weights -= lf_model_lookup_params(mcfg); /* tables only looked up (a position table, an untied embedding) */
    size_t biggest_unit = 0;
    for (int u = 0; u <= L + 1; u++)
        if (unit[u] > biggest_unit) biggest_unit = unit[u];
    lf_free(table);
    const int T = mcfg->block_size;
    p->params = P;
    p->B = B;
    p->T = T;
    p->A = A;
    /* LoRA: one replica, and only the adapters train (gradients, moments, staging) */
    const int lora = lf_lora_enabled(&cfg->lora);
    const size_t PT = lora ? lf_lora_num_params(&cfg->lora, mcfg) : P;
    if (lora) replicas = 1;
    p->replicas = replicas < 1 ? 1 : replicas > B ? B : replicas;
    p->policy = rc;
    p->staging = staging;
    p->on_device = staging == 2;
    const int dev = p->on_device; /* the items in a device's memory (staging 2: a backend with mem_info) */
    /* bf16 runs on cpu-bf16, whose model stores the matmul inputs in bf16 */
    const int bf16_acts = lf_arch_bf16_acts(mcfg->arch); /* else its matmul inputs stay fp32 under bf16 too */
    p->act_dtype = cfg->bf16 && bf16_acts ? LF_ACT_BF16 : LF_ACT_FP32;
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++) {
            lf_act_bytes ab;
            const lf_act_dtype dd = d == LF_ACT_BF16 && !bf16_acts ? LF_ACT_FP32 : (lf_act_dtype)d;
            st = lf__model_plan_bytes_ops(mcfg, B, T, (lf_recompute)k, dd, p->replicas, ops, &ab);
            if (st != LF_OK) {
                free(unit);
                return st;
            }
            p->act_by_dtype[d][k] = ab.total;
            if (d == (int)p->act_dtype) p->act_policy[k] = ab.total;
            if (d == (int)p->act_dtype && k == (int)rc) p->act = ab;
        }
    const size_t f = sizeof(float), batch = 2 * sizeof(int32_t) * (size_t)A * (size_t)B * (size_t)T;
    /* ZeRO: the rank's shard is its part of every unit (embeddings, L blocks
     * of one size, ln_f), lf_comm_partition's split; two unit-sized working
     * buffers each for gathered parameters (stage 3) and unit gradients
     * (stages 2-3), as lf_model_set_zero allocates them */
    const int W = cfg->world_size > 0 ? cfg->world_size : 1, Z = cfg->zero_stage;
    p->world = W;
    p->rank = rank;
    p->zero_stage = Z;
    size_t part = 0, off = 0;
    p->shard = 0;
    for (int u = 0; u <= L + 1; u++) {
        lf_comm_partition(unit[u], W, rank, &off, &part);
        p->shard += part;
    }
    free(unit);
    const size_t units = lf_model_zero_work_bytes(mcfg, 1, 0); /* one unit-0 buffer and one of the largest other */
    p->params_bytes = Z == 3 ? p->shard * f + units : (P + (lora ? PT : 0)) * f;
    p->grads_bytes = Z >= 2 ? p->shard * f + units : PT * f;
    /* comm.overlap on nccl (ZeRO-2/3, several ranks): a second block-unit
     * gradient buffer (lf_model_zero.double_buffer_grads) */
    const int nccl_dev = staging && (!strcmp(cfg->comm_backend, "nccl") ||
                                     ((!cfg->comm_backend[0] || !strcmp(cfg->comm_backend, "auto")) &&
                                      lf_comm_kind_available("nccl")));
    if (Z >= 2 && W > 1 && nccl_dev && cfg->comm_overlap) p->grads_bytes += lf_model_zero_block_bytes(mcfg);
    /* and ZeRO-3's prefetch: a second block-unit parameter buffer (prefetch_params) */
    if (Z == 3 && W > 1 && nccl_dev && cfg->comm_overlap) p->params_bytes += lf_model_zero_block_bytes(mcfg);
    p->optim_bytes = 2 * (Z >= 1 ? p->shard : PT) * f;
    add(p,
        Z == 3 ? "parameters (ZeRO-3 shard + unit buffers)"
        : lora ? "parameters (fp32, frozen base + LoRA)"
               : "parameters (fp32 master weights)",
        p->params_bytes, dev);
    add(p,
        Z >= 2 ? "gradients (ZeRO shard + unit buffers)"
        : lora ? "gradients (fp32, LoRA adapters only)"
               : "gradients (fp32)",
        p->grads_bytes, dev);
    /* zero_optimization.offload_optimizer.device cpu on a device backend
     * (ZeRO-Offload): the moments live in host memory, AdamW runs there on a
     * host copy of the (shard's) gradients into the staging copy of the
     * parameters, so the moments need no staging copy of their own */
    const int offload = staging && cfg->offload_optimizer == 1;
    const size_t moments_n = Z >= 1 ? p->shard : PT;
    if (offload) {
        add(p, Z >= 1 ? "AdamW moments (ZeRO shard, fp32 x 2, offloaded)" : "AdamW moments (fp32 x 2, offloaded)",
            p->optim_bytes, 0);
        add(p, "offload gradient copy (host)", moments_n * f, 0);
        add(p, "checkpoint staging (host copies)", PT * f, 0);
    } else {
        add(p,
            Z >= 1 ? "AdamW moments (ZeRO shard, fp32 x 2)"
            : lora ? "AdamW moments (fp32, LoRA adapters)"
                   : "AdamW moments (fp32, 2 per parameter)",
            p->optim_bytes, dev);
        if (staging) add(p, "checkpoint staging (host copies)", (PT + 2 * moments_n) * f, 0);
    }
    /* checkpoint.async: the snapshot the background writer owns, on the rank
     * that writes (trainer_ckpt.c; ZeRO is refused with async, so the whole model) */
    if (cfg->ckpt_async && rank == 0) add(p, "checkpoint.async snapshot (host copies)", 3 * PT * f, 0);
    /* LoRA's scratch (model.c lf_model_plan): u and du, (B*T, r) each, with dropout x and dx */
    if (lora) add(p, "LoRA scratch", lf__lora_scratch_floats(&cfg->lora, mcfg, (size_t)B * (size_t)T) * f, dev);
    char name[64];
    snprintf(name, sizeof name, "activations (recompute %s%s)", lf_recompute_name(rc),
             p->act_dtype == LF_ACT_BF16 ? ", bf16" : "");
    add(p, name, p->act.total, dev);
    if (cfg->bf16) {
        const size_t rows = (size_t)((B + p->replicas - 1) / p->replicas) * (size_t)T;
        if (dev || lf_backend_cpu_bf16_native()) {
            /* bf16 instructions (cpu-bf16 on oneDNN, cuda-bf16): a bf16 copy of every matmul
             * weight (the lm_head and every projection), and the operands not stored in bf16
             * (the output gradients) converted into per-replica scratch whose largest is the
             * logits gradient (rows x Vp) */
            const size_t Vp = (size_t)(mcfg->padded_vocab_size > 0 ? mcfg->padded_vocab_size : mcfg->vocab_size);
            add(p, "bf16 weight copies", 2 * mm_weights, dev);
            add(p, "bf16 operand scratch (estimate)", (size_t)p->replicas * rows * Vp * 2, dev);
        } else {
            /* cpu-bf16 without them: fp32 products, no weight copies; the bf16-stored layer
             * input widened into per-replica fp32 scratch, the widest being the MLP's
             * down projection input (rows x ffn_hidden) */
            lf_model_config full = *mcfg;
            (void)lf_model_config_resolve(&full);
            const size_t width = (size_t)(full.ffn_hidden > full.n_embd ? full.ffn_hidden : full.n_embd);
            add(p, "bf16 input widening scratch (estimate)", (size_t)p->replicas * rows * width * 4, dev);
        }
    }
    add(p, "step batch (inputs, targets)", batch, 0);
    add(p, "loader prefetch ring", (size_t)cfg->prefetch * batch, 0);
    /* on a device, the nccl kind ("nccl", or "auto" where it is registered)
     * reduces the device buffers in place, with NCCL's own device buffers
     * (not counted: docs/troubleshooting.md, "Out of memory"): no host
     * scratch and no host staging of the collectives */
    if (W > 1 && !nccl_dev) {
        /* the mpi communicator's receive buffer: a part of ceil(bucket / W)
         * floats from each of W ranks for one bucket of the gradient
         * all-reduce (stage 0), or of the largest unit's reduce-scatter (ZeRO:
         * collectives go unit by unit, in rounds of at most a bucket) */
        size_t bucket = (size_t)cfg->comm_bucket_elems, biggest = Z ? biggest_unit : P;
        if (bucket == 0 || bucket > biggest) bucket = biggest;
        add(p, Z ? "communication scratch (reduce-scatter)" : "communication scratch (all-reduce bucket)",
            (size_t)W * ((bucket + (size_t)W - 1) / (size_t)W) * f, 0);
        if (staging) {
            /* the trainer's host staging of those collectives (trainer_dp.c, dev_*):
             * a whole gradient bucket at stage 0, a whole unit with ZeRO (the
             * units' partitions are the collectives', not cut into buckets) */
            size_t b = (size_t)cfg->comm_bucket_elems, most = Z ? biggest_unit : (b && b < P ? b : P);
            add(p, "collective staging (host copy of backend memory)", most * f, 0);
        }
    }
    if (W > 1 && cfg->comm_bf16) {
        /* communication_data_type bf16 (trainer_dp.c, grad_*): the gradient
         * bucket or largest unit in bf16 on the backend, twice with
         * overlap (the unit in flight and the next); the host kinds widen
         * it to fp32 scratch for their fold (comm.c) */
        size_t b = (size_t)cfg->comm_bucket_elems, most = Z ? biggest_unit : (b && b < P ? b : P);
        const int two = Z >= 2 && nccl_dev && cfg->comm_overlap;
        add(p, "bf16 gradient staging (communication_data_type)", (two ? 2 : 1) * most * sizeof(uint16_t), dev);
        if (!nccl_dev) add(p, "communication scratch (bf16 widened to fp32)", most * f, 0);
    }
    return LF_OK;
}

lf_status lf_mem_plan_make(lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg, int replicas,
                           int host_staging) {
    return lf_mem_plan_make_rank(p, cfg, mcfg, replicas, host_staging, 0);
}


lf_status lf_mem_plan_make_rank(lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg, int replicas,
                                int host_staging, int rank) {
    return lf__mem_plan_make_ops(p, cfg, mcfg, replicas, host_staging, rank, NULL);
}

lf_status lf__mem_plan_make_ops(lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg, int replicas,
                                int host_staging, int rank, const lf_backend_ops *ops) {
    if (!p || !cfg || !mcfg) return lf_fail(LF_ERR_INVALID_ARG, "lf_mem_plan_make: NULL argument");
    if (rank < 0 || rank >= (cfg->world_size > 0 ? cfg->world_size : 1))
        return lf_fail(LF_ERR_INVALID_ARG, "lf_mem_plan_make: rank %d outside world size %d", rank, cfg->world_size);
    lf_status st = plan_with(p, cfg, mcfg, replicas, cfg->micro_batch, cfg->grad_accum, (lf_recompute)cfg->recompute,
                             host_staging, rank, ops);
    if (st != LF_OK) return st;
    if (cfg->memory_limit > 0) {
        p->limit = (size_t)cfg->memory_limit;
        p->limit_from_config = 1;
    } else {
        p->limit = mem_available();
    }
    return LF_OK;
}

static int by_size_desc(const void *a, const void *b) {
    const lf_mem_item *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

/* appends to a message buffer */
typedef struct sbuf {
    char *p;
    size_t cap, len;
} sbuf;

static void sb(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + (b->len < b->cap ? b->len : b->cap) : NULL, b->len < b->cap ? b->cap - b->len : 0,
                      fmt, ap);
    va_end(ap);
    if (n > 0) b->len += (size_t)n;
}

/* What a check compares: the device part (dev) or the host part of a plan */
static size_t need(const lf_mem_plan *p, int dev) { return dev ? p->device_total : p->host_total; }

/* The advice for the device part (dev) or the host part of plan p, against
 * that part's limit. */
static void advise(sbuf *s, const lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg, int dev) {
    char b1[32], b2[32], b3[32];
    const size_t lim = dev ? p->device_free : p->limit;
    sb(s, "To fit:");
    int n_adv = 0;
    /* a smaller micro-batch with more accumulation (same train_batch_size) */
    for (int B = p->B / 2; B >= 1; B /= 2) {
        if (p->B % B) continue;
        lf_mem_plan q;
        int A = p->A * (p->B / B);
        if (plan_with(&q, cfg, mcfg, p->replicas, B, A, p->policy, p->staging, p->rank, p->ops) != LF_OK) break;
        if (need(&q, dev) <= lim || B == 1) {
            sb(s, " train_micro_batch_size_per_gpu %d with gradient_accumulation_steps %d saves %s%s;", B, A,
               lf_fmt_bytes(need(p, dev) - need(&q, dev), b1, sizeof b1),
               need(&q, dev) <= lim ? "" : " (not enough alone)");
            n_adv++;
            break;
        }
    }
    /* activations live where the device part is: they save nothing of a device plan's host part */
    const int acts_here = !p->on_device || dev;
    /* a recompute policy */
    for (int k = (int)p->policy + 1; acts_here && k < 3; k++) {
        size_t save = p->act_policy[p->policy] - p->act_policy[k];
        sb(s, " activation_checkpointing.policy %s saves %s%s;", lf_recompute_name((lf_recompute)k),
           lf_fmt_bytes(save, b1, sizeof b1), need(p, dev) - save <= lim ? "" : " (not enough alone)");
        n_adv++;
    }
    /* everything at once */
    lf_mem_plan q;
    if (plan_with(&q, cfg, mcfg, p->replicas, 1, p->A * p->B, LF_RECOMPUTE_FULL, p->staging, p->rank, p->ops) ==
        LF_OK) {
        if (need(&q, dev) > lim)
            sb(s,
               " even micro-batch 1 with full recompute needs %s: a smaller model (model.n_layer, model.n_embd, "
               "model.block_size)%s or more memory;",
               lf_fmt_bytes(need(&q, dev), b3, sizeof b3),
               p->world > 1 && p->zero_stage < 3 ? ", a higher ZeRO stage (below)," : "");
        else if (n_adv > 1)
            sb(s, " micro-batch 1 with full recompute needs %s;", lf_fmt_bytes(need(&q, dev), b3, sizeof b3));
    }
    /* a ZeRO stage (with several ranks: one rank's shard shrinks with the world size) */
    if (p->world > 1) {
        for (int z = p->zero_stage + 1; z <= 3; z++) {
            lf_train_config zc = *cfg;
            zc.zero_stage = z;
            if (plan_with(&q, &zc, mcfg, p->replicas, p->B, p->A, p->policy, p->staging, p->rank, p->ops) != LF_OK)
                break;
            if (need(&q, dev) < need(p, dev))
                sb(s, " zero_optimization.stage %d saves %s%s;", z,
                   lf_fmt_bytes(need(p, dev) - need(&q, dev), b1, sizeof b1),
                   need(&q, dev) <= lim ? "" : " (not enough alone)");
        }
    }
    /* bf16, when the run is fp32: its matmul inputs stored in bf16, less its weight copies and scratch */
    if (!cfg->bf16 && acts_here) {
        lf_train_config cb = *cfg;
        cb.bf16 = 1;
        cb.fp16 = 0;
        if (plan_with(&q, &cb, mcfg, p->replicas, p->B, p->A, p->policy, p->staging, p->rank, p->ops) == LF_OK) {
            const size_t act_save = p->act.total - q.act.total;
            const size_t cost = (q.total - q.act.total) - (p->total - p->act.total); /* weight copies, scratch */
            const char *instead = cfg->fp16 ? " (instead of fp16)" : "";
            const char *what = dev || lf_backend_cpu_bf16_native() ? "bf16 weight copies and scratch"
                                                                   : "input widening scratch";
            if (need(&q, dev) < need(p, dev)) {
                sb(s, " bf16.enabled true%s saves %s (%s of activations stored in bf16, less %s of %s)%s;", instead,
                   lf_fmt_bytes(need(p, dev) - need(&q, dev), b1, sizeof b1), lf_fmt_bytes(act_save, b2, sizeof b2),
                   lf_fmt_bytes(cost, b3, sizeof b3), what, need(&q, dev) <= lim ? "" : " (not enough alone)");
                n_adv++;
            } else {
                sb(s,
                   " bf16.enabled true%s stores activations in bf16 (%s less) but adds %s of %s, so it saves "
                   "nothing here;",
                   instead, lf_fmt_bytes(act_save, b2, sizeof b2), lf_fmt_bytes(cost, b3, sizeof b3), what);
            }
        }
    }
    /* ZeRO-Offload, on a device: the moments move to the host */
    if (dev && p->staging && cfg->offload_optimizer != 1) {
        lf_train_config co = *cfg;
        co.offload_optimizer = 1;
        if (plan_with(&q, &co, mcfg, p->replicas, p->B, p->A, p->policy, p->staging, p->rank, p->ops) == LF_OK &&
            need(&q, dev) < need(p, dev))
            sb(s,
               " zero_optimization.offload_optimizer.device cpu saves %s of device memory (the AdamW moments, "
               "updated on the CPU)%s;",
               lf_fmt_bytes(need(p, dev) - need(&q, dev), b1, sizeof b1),
               need(&q, dev) <= lim ? "" : " (not enough alone)");
    }
    if (p->world == 1)
        sb(s, " ZeRO stages shard optimizer state, gradients and parameters over several processes (llmforge "
              "launch / mpirun) and save nothing in one");
}

/* "the run needs ...: largest ... . To fit: ..." for one part of the plan */
static lf_status refuse(const lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg, int dev) {
    char msg[2048], b1[32], b2[32], b3[32];
    sbuf s = {msg, sizeof msg, 0};
    if (dev)
        sb(&s, "the run needs %s of device memory, more than the %s free on %s (of %s): ",
           lf_fmt_bytes(p->device_total, b1, sizeof b1), lf_fmt_bytes(p->device_free, b2, sizeof b2), p->device,
           lf_fmt_bytes(p->device_capacity, b3, sizeof b3));
    else
        sb(&s, "the run needs %s%s, more than %s (%s): ", lf_fmt_bytes(need(p, 0), b1, sizeof b1),
           p->on_device ? " of host memory" : "",
           p->limit_from_config ? "key 'memory.limit_bytes'" : "the memory available",
           lf_fmt_bytes(p->limit, b2, sizeof b2));
    lf_mem_item top[LF_PLAN_MAX_ITEMS];
    int n = 0;
    for (int i = 0; i < p->n_items; i++)
        if (!p->on_device || p->items[i].device == dev) top[n++] = p->items[i];
    qsort(top, (size_t)n, sizeof top[0], by_size_desc);
    sb(&s, "largest");
    for (int i = 0; i < n && i < 3; i++)
        sb(&s, "%s %s %s", i ? "," : "", top[i].name, lf_fmt_bytes(top[i].bytes, b1, sizeof b1));
    sb(&s, ". ");
    advise(&s, p, cfg, mcfg, dev);
    return lf_fail(LF_ERR_NOMEM, "%s", msg);
}

lf_status lf_mem_plan_check(const lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg) {
    if (p->on_device && p->device_free && p->device_total > p->device_free) return refuse(p, cfg, mcfg, 1);
    if (p->limit == 0 || need(p, 0) <= p->limit) return LF_OK;
    return refuse(p, cfg, mcfg, 0);
}

size_t lf_mem_plan_advice(const lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg, char *buf,
                          size_t cap) {
    sbuf s = {buf, cap, 0};
    if (buf && cap) buf[0] = 0;
    advise(&s, p, cfg, mcfg, p->on_device);
    return s.len;
}

lf_status lf_mem_plan_make_backend(lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg,
                                   lf_backend *be, int rank) {
    if (!be) return lf_fail(LF_ERR_INVALID_ARG, "lf_mem_plan_make_backend: no backend instance");
    /* staging 0: host memory; 1: memory the host may not touch but no device to ask (cpu-fenced), all of it
     * held against the host's limit; 2: a device's (mem_info), the device part against its free memory */
    const int host = lf_backend_host_memory(be), staging = host ? 0 : lf_backend_is_device(be) ? 2 : 1;
    const int replicas = lf_backend_replicas(be, cfg->micro_batch);
    lf_status st = lf__mem_plan_make_ops(p, cfg, mcfg, replicas, staging, rank, lf_backend_table(be));
    if (st != LF_OK || staging != 2) return st;
    st = lf_backend_mem_info(be, &p->device_free, &p->device_capacity);
    if (st != LF_OK) return st;
    const char *dn = lf_backend_device_name(be);
    snprintf(p->device, sizeof p->device, "%s%s%s", lf_backend_name(be), *dn ? ": " : "", dn);
    return LF_OK;
}

size_t lf_mem_plan_format(const lf_mem_plan *p, char *buf, size_t cap) {
    char b1[32], b2[32];
    sbuf s = {buf, cap, 0};
    if (buf && cap) buf[0] = 0;
    sb(&s, "memory plan: %zu parameters (%.2fM); micro-batch %d x %d tokens, accumulation %d, %d replica%s\n",
       p->params, p->params / 1e6, p->B, p->T, p->A, p->replicas, p->replicas == 1 ? "" : "s");
    if (p->zero_stage)
        sb(&s, "per rank: rank %d of %d, ZeRO stage %d: a shard of %zu elements (this rank's part of every unit)\n",
           p->rank, p->world, p->zero_stage, p->shard);
    else if (p->world > 1)
        sb(&s, "per rank: rank %d of %d, ZeRO stage 0 (every rank holds the whole state)\n", p->rank, p->world);
    for (int i = 0; i < p->n_items; i++)
        sb(&s, "  %-40s %12s  %5.1f%%%s\n", p->items[i].name, lf_fmt_bytes(p->items[i].bytes, b1, sizeof b1),
           100.0 * (double)p->items[i].bytes / (double)p->total,
           !p->on_device        ? ""
           : p->items[i].device ? "  device"
                                : "  host");
    sb(&s, "  %-40s %12s\n", "total", lf_fmt_bytes(p->total, b1, sizeof b1));
    char b3[32], b4[32];
    if (p->on_device) {
        /* a device backend: the device part against the device's free memory, the rest against the host's */
        sb(&s, "  %-40s %12s\n", "device memory (the items marked device)",
           lf_fmt_bytes(p->device_total, b1, sizeof b1));
        if (p->device_free)
            sb(&s, "  %-40s %12s  (%s; %s total on %s)\n", "device free (cudaMemGetInfo)",
               lf_fmt_bytes(p->device_free, b2, sizeof b2), p->device_total <= p->device_free ? "fits" : "DOES NOT FIT",
               lf_fmt_bytes(p->device_capacity, b3, sizeof b3), p->device);
        else sb(&s, "  %-40s %12s  (no device asked: not checked)\n", "device free", "unknown");
        sb(&s, "  %-40s %12s\n", "host memory (the items marked host)", lf_fmt_bytes(p->host_total, b1, sizeof b1));
    }
    if (p->limit)
        sb(&s, "  %-40s %12s  (%s)\n", p->limit_from_config ? "limit (memory.limit_bytes)" : "available (MemAvailable)",
           lf_fmt_bytes(p->limit, b2, sizeof b2), p->host_total <= p->limit ? "fits" : "DOES NOT FIT");
    sb(&s, "activations: kept for backward %s, working set %s, logits %s, replica gradients %s\n",
       lf_fmt_bytes(p->act.saved, b1, sizeof b1), lf_fmt_bytes(p->act.work, b2, sizeof b2),
       lf_fmt_bytes(p->act.logits, b3, sizeof b3), lf_fmt_bytes(p->act.replica_grads, b4, sizeof b4));
    sb(&s, "activations by recompute policy, matmul inputs stored in fp32 / in bf16 (bf16.enabled):\n");
    for (int k = 0; k < 3; k++)
        sb(&s, "  %-10s %12s %12s%s%s\n", lf_recompute_name((lf_recompute)k),
           lf_fmt_bytes(p->act_by_dtype[LF_ACT_FP32][k], b1, sizeof b1),
           lf_fmt_bytes(p->act_by_dtype[LF_ACT_BF16][k], b2, sizeof b2), k == (int)p->policy ? "  <- configured, " : "",
           k == (int)p->policy ? lf_act_dtype_name(p->act_dtype) : "");
    return s.len;
}
