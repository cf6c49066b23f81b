/*
 * ZeRO (zero_optimization.stage 1-3) and ZeRO-Offload: this rank's shard of
 * every unit, the model's hooks that gather parameters and sum gradients
 * unit by unit, the norm, scaling and AdamW on the shard, and the sharded
 * checkpoint write and read (every rank its shard, rank 0 commits).
 *
 * Invariants:
 *  - Rank r's shard is, for every unit u of the model (lf_model_num_units),
 *    the part lf_comm_partition(n_u, W, r) of that unit: flat elements
 *    [pc_lo[u], pc_lo[u] + pc_n[u]), held at sh_off[u] of the shard buffers
 *    (the moments, gshard at stage >= 2, pshard at stage 3).
 *  - Stage 1 sums the whole gradient once per step (reduce-scatter in place);
 *    stages 2-3 sum each unit as its backward ends, into gshard, so
 *    micro-batches add up there.
 *  - Every failure that one rank meets in a collective protocol (a shard
 *    that cannot be written or read) is agreed over the ranks (zero_agree),
 *    so no rank waits in a collective the others never reach.
 *  - Offload (offload_optimizer.device cpu on a device backend): the
 *    moments live on the host and the CPU backend's AdamW updates there.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/train.h"
#include "trainer_impl.h"

/* ---------------------------------------------------------------- ZeRO */

lf_status lf__zero_layout(lf_trainer *t) {
    t->zstage = t->cfg.zero_stage;
    t->zbad = -1;
    if (!t->zstage) return LF_OK;
    int U = lf_model_num_units(t->model);
    t->n_units = U;
    t->unit_lo = calloc(5 * (size_t)U, sizeof(size_t));
    if (!t->unit_lo) return lf_fail(LF_ERR_NOMEM, "out of memory");
    t->unit_n = t->unit_lo + U;
    t->pc_lo = t->unit_lo + 2 * U;
    t->pc_n = t->unit_lo + 3 * U;
    t->sh_off = t->unit_lo + 4 * U;
    size_t at = 0;
    for (int u = 0; u < U; u++) {
        size_t po = 0, pc = 0;
        lf_model_unit_range(t->model, u, &t->unit_lo[u], &t->unit_n[u]);
        lf_comm_partition(t->unit_n[u], t->world, t->rank, &po, &pc);
        t->pc_lo[u] = t->unit_lo[u] + po;
        t->pc_n[u] = pc;
        t->sh_off[u] = at;
        at += pc;
    }
    t->shard_n = at;
    return LF_OK;
}

/* This rank's piece of unit u: parameters, gradients (NULL before the sum on
 * stage 1), moments. */
static float *zp_params(lf_trainer *t, int u) {
    return t->pshard ? t->pshard + t->sh_off[u] : lf_model_train_params(t->model) + t->pc_lo[u];
}
static float *zp_grads(lf_trainer *t, int u) {
    return t->gshard ? t->gshard + t->sh_off[u] : lf_model_train_grads(t->model) + t->pc_lo[u];
}

/* The model's hooks (src/model/model.c): gather unit u for use, and sum a
 * unit's gradient of one backward over the ranks into this rank's shard. */
static lf_status zero_gather(void *user, int u, float *dst) {
    lf_trainer *t = user;
    double t0 = lf_time_now();
    lf_status st = lf__dp_all_gather(t, t->pshard + t->sh_off[u], dst, t->unit_n[u]);
    t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

/* ZeRO-3 prefetch (comm.overlap): the next unit's all-gather, started on
 * the communicator's stream, and the wait that orders the compute stream
 * after it when the unit is used. */
static lf_status zero_gather_start(void *user, int u, float *dst, int64_t *ticket) {
    lf_trainer *t = user;
    double t0 = lf_time_now();
    lf_status st = lf_comm_all_gather_start(t->comm, t->pshard + t->sh_off[u], dst, t->unit_n[u], ticket);
    t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}
static lf_status zero_gather_wait(void *user, int64_t ticket) {
    lf_trainer *t = user;
    return lf_comm_wait(t->comm, ticket);
}

/* Overlap: the unit in flight is summed; its part is added into the shard
 * (on the compute stream, after the reduce-scatter), and its buffer is free
 * for the unit after next. */
static lf_status zero_retire(lf_trainer *t) {
    if (t->pend_u < 0) return LF_OK;
    const int u = t->pend_u;
    t->pend_u = -1;
    double t0 = lf_time_now();
    lf_status st = lf_comm_wait(t->comm, t->pend_ticket);
    t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
    if (st != LF_OK) return st;
    const size_t po = t->pc_lo[u] - t->unit_lo[u];
    if (t->pend_bf) /* bf16: the summed part back to fp32, into its place in the unit's gradient */
        lf_backend_grad_from_bf16(t->be, t->pend_grad + po, t->pend_bf + po, t->pc_n[u]);
    lf_backend_add(t->be, t->gshard + t->sh_off[u], t->pend_grad + po, t->pc_n[u]);
    return LF_OK;
}

static lf_status zero_reduce(void *user, int u, float *grad) {
    lf_trainer *t = user;
    size_t n = t->unit_n[u], po = t->pc_lo[u] - t->unit_lo[u], pc = t->pc_n[u];
    if (t->cfg.fp16) { /* this rank's fp16 gradient, before the sum */
        int k = lf__fp16_round_range(t, grad, t->unit_lo[u], n);
        if (k >= 0 && t->zbad < 0) t->zbad = k;
    }
    double t0 = lf_time_now();
    lf_status st;
    if (t->overlap) {
        /* start this unit's sum, then retire the previous one: the compute
         * stream waits for that one only now, so this unit's reduce-scatter
         * runs beside the next unit's backward; unit 0 is a backward's last */
        int64_t ticket = 0;
        uint16_t *b = NULL; /* bf16: this unit's staging, the other one than the unit in flight */
        if (t->grad_bf16) {
            if ((st = lf__dp_gbf_fits(t, "reduce_scatter", n)) != LF_OK) return st;
            b = t->gbf[t->gbf_cur];
            t->gbf_cur ^= 1;
            lf_backend_grad_to_bf16(t->be, b, grad, n);
            st = lf_comm_reduce_scatter_start_bf16(t->comm, b, b + po, n, LF_COMM_SUM, &ticket);
        } else {
            st = lf_comm_reduce_scatter_start(t->comm, grad, grad + po, n, LF_COMM_SUM, &ticket);
        }
        t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
        if (st == LF_OK) st = zero_retire(t);
        if (st != LF_OK) return st;
        t->pend_u = u;
        t->pend_grad = grad;
        t->pend_bf = b;
        t->pend_ticket = ticket;
        return u == 0 ? zero_retire(t) : LF_OK;
    }
    st = lf__dp_grad_reduce_scatter(t, grad, grad + po, n);
    t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
    if (st != LF_OK) return st;
    lf_backend_add(t->be, t->gshard + t->sh_off[u], grad + po, pc); /* micro-batches add up */
    return LF_OK;
}

/* Stage 2: the model keeps no whole gradient buffer; stage 3 no whole
 * parameter buffer either (the shard takes this rank's pieces first). */

lf_status lf__zero_partition(lf_trainer *t) {
    if (t->zstage < 2) return lf__dp_overlap_setup(t);
    int B = t->cfg.micro_batch, T = t->cfg.model.block_size;
    t->gshard = lf_backend_alloc(t->be, (t->shard_n ? t->shard_n : 1) * sizeof(float));
    if (!t->gshard) return lf_fail(LF_ERR_NOMEM, "out of memory allocating the ZeRO gradient shard");
    lf_backend_zero(t->be, t->gshard, t->shard_n);
    if (t->zstage == 3) {
        t->pshard = lf_backend_alloc(t->be, (t->shard_n ? t->shard_n : 1) * sizeof(float));
        if (!t->pshard) return lf_fail(LF_ERR_NOMEM, "out of memory allocating the ZeRO parameter shard");
        const float *p = lf_model_train_params(t->model);
        for (int u = 0; u < t->n_units; u++)
            lf_backend_copy(t->be, t->pshard + t->sh_off[u], p + t->pc_lo[u], t->pc_n[u] * sizeof(float));
    }
    /* overlap: a started reduce-scatter keeps its unit's buffer until the
     * next unit's hook, so the block units alternate between two */
    t->overlap = t->cfg.comm_overlap && t->world > 1 && lf_comm_async(t->comm);
    t->pend_u = -1;
    lf_model_zero z = {.partition_grads = 1,
                       .partition_params = t->zstage == 3,
                       .gather_params = zero_gather,
                       .reduce_grads = zero_reduce,
                       .user = t,
                       .double_buffer_grads = t->overlap,
                       .prefetch_params = t->overlap && t->zstage == 3,
                       .gather_start = zero_gather_start,
                       .gather_wait = zero_gather_wait};
    lf_status st = lf_model_set_zero(t->model, &z);
    if (st != LF_OK) return st;
    /* host memory: host_params was the model's whole buffer, now freed; a
     * separate host copy stays (checkpoint staging of the shard, counted by the plan) */
    if (t->zstage == 3 && lf_backend_host_memory(t->be)) t->host_params = NULL;
    size_t act = 0; /* set_zero dropped the activation plan: the same plan again */
    st = lf_model_plan(t->model, B, T, &act);
    if (st == LF_OK && act != t->planned_act_bytes) st = lf_fail(LF_ERR_INTERNAL, "activation plan changed");
    return st;
}

/* Stage 1: this rank's gradient summed over the ranks, unit by unit (in
 * place: the piece lands where it lies in the whole buffer). */
lf_status lf__zero_reduce_scatter_all(lf_trainer *t, step_result *o) {
    double t0 = lf_time_now();
    float *g = lf_model_train_grads(t->model);
    lf_status st = LF_OK;
    for (int u = 0; u < t->n_units && st == LF_OK; u++)
        st = lf__dp_grad_reduce_scatter(t, g + t->unit_lo[u], g + t->pc_lo[u], t->unit_n[u]);
    o->comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

/* Squared norm of the whole gradient: this rank's shard, summed over ranks
 * (folded in rank order: the same bits everywhere). */
lf_status lf__zero_grad_norm(lf_trainer *t, step_result *o, double *norm) {
    double ss = 0;
    for (int u = 0; u < t->n_units; u++) {
        double part = 0;
        (void)lf_backend_sum_squares(t->be, zp_grads(t, u), t->pc_n[u], &part);
        ss += part;
    }
    if (t->world > 1) {
        lf_status st = lf__step_sum_f64(t, o, &ss, 1);
        if (st != LF_OK) return st;
    }
    *norm = sqrt(ss);
    return LF_OK;
}

void lf__zero_scale_grads(lf_trainer *t, float f) {
    for (int u = 0; u < t->n_units; u++)
        if (t->pc_n[u]) lf_backend_scale(t->be, zp_grads(t, u), t->pc_n[u], f); /* backend memory */
}

/* fp16, after the sum: the shard rounded to fp16 again; the first
 * overflowing tensor of any rank (the same answer everywhere), -1 if none. */
lf_status lf__zero_fp16_sum_check(lf_trainer *t, step_result *o, int *bad) {
    int k = -1;
    for (int u = 0; u < t->n_units && k < 0; u++) k = lf__fp16_round_range(t, zp_grads(t, u), t->pc_lo[u], t->pc_n[u]);
    int64_t code = k >= 0 ? (int64_t)1 << 32 | (int64_t)k : 0;
    if (t->world > 1) {
        double t0 = lf_time_now();
        lf_status st = lf_comm_all_reduce_i64(t->comm, &code, 1, LF_COMM_MAX);
        o->comm_ms += (lf_time_now() - t0) * 1e3;
        if (st != LF_OK) return st;
    }
    *bad = code ? (int)(code & 0xffffffff) : -1;
    return LF_OK;
}

/* ZeRO-Offload's update of the parameters [lo, lo + cnt) of the flat
 * vector, at p (device) with gradients g (device) and moments m, v + sh
 * (host): the gradients and the parameters come to the host (the
 * parameters into their checkpoint staging copy, host_params + lo), the CPU
 * backend's AdamW (the same expression as the CUDA kernel's, which differs
 * by FMA contractions only) updates them with the host moments, tensor by
 * tensor for the weight decay, and the parameters go back. The host
 * buffers are pinned where the backend offers it (cuda: DMA copies); the
 * transfers are waited for: the update is not overlapped with the next
 * step's compute. */
static lf_status offload_adamw(lf_trainer *t, float *p, const float *g, size_t lo, size_t cnt, size_t sh, float lr,
                               float scale) {
    if (cnt == 0) return LF_OK;
    lf_backend *cpu = lf_backend_get("cpu");
    if (!cpu) return lf_fail(LF_ERR_NOT_FOUND, "offload_optimizer: the cpu backend is not available");
    const lf_train_config *c = &t->cfg;
    float *hp = t->host_params + lo, *hg = t->off_g + sh;
    lf_backend_to_host(t->be, hp, p, cnt * sizeof(float));
    lf_backend_to_host(t->be, hg, g, cnt * sizeof(float));
    lf_status st = lf_backend_sync(t->be);
    if (st != LF_OK) return st;
    int count = 0;
    const lf_param_info *table = lf_model_train_table(t->model, &count);
    const size_t hi = lo + cnt;
    float b1, b2; /* OneCycle's momentum moves beta1 (schedule.c) */
    lf_betas_at(c, t->opt_t - 1, &b1, &b2);
    for (int k = 0; k < count; k++) {
        size_t a = table[k].offset, b = a + table[k].numel;
        if (a < lo) a = lo;
        if (b > hi) b = hi;
        if (a >= b) continue;
        const size_t at = a - lo;
        lf_backend_adamw(cpu, hp + at, hg + at, t->m + sh + at, t->v + sh + at, b - a, lr, b1, b2, c->eps,
                         table[k].decay ? c->weight_decay : 0.0f, scale, (int)t->opt_t);
    }
    lf_backend_to_device(t->be, p, hp, cnt * sizeof(float));
    return lf_backend_sync(t->be);
}

/* Stage 0 with offload: the whole model is one range; the device's derived
 * weight copies (cuda-bf16's bf16 weights) are renewed after. */
lf_status lf__offload_adamw_all(lf_trainer *t, float lr, double norm) {
    lf_status st = lf_backend_sync(t->be);
    if (st != LF_OK) return st;
    if (!isfinite(norm))
        return lf_fail(LF_ERR_NUMERIC, "step %ld: gradient norm is %g; lower optimizer.params.lr or check the data",
                       t->opt_t, norm);
    float scale = 1.0f;
    if (t->cfg.grad_clip > 0) {
        double coef = (double)t->cfg.grad_clip / (norm + 1e-6);
        if (coef < 1.0) scale = (float)coef;
    }
    st = offload_adamw(t, lf_model_train_params(t->model), lf_model_train_grads(t->model), 0,
                       lf_model_train_num_params(t->model), 0, lr, scale);
    if (st == LF_OK) lf_backend_params_changed(t->be);
    return st;
}

/* AdamW on this rank's shard (weight decay by tensor, as lf_adamw_apply),
 * then the new parameters everywhere: stages 1-2 all-gather every unit into
 * the whole buffer; stage 3 keeps the shard and the model gathers on use. */
lf_status lf__zero_adamw(lf_trainer *t, step_result *o, float lr, double norm) {
    if (!isfinite(norm))
        return lf_fail(LF_ERR_NUMERIC, "step %ld: gradient norm is %g; lower optimizer.params.lr or check the data",
                       t->opt_t, norm);
    const lf_train_config *c = &t->cfg;
    float scale = 1.0f;
    if (c->grad_clip > 0) {
        double coef = (double)c->grad_clip / (norm + 1e-6);
        if (coef < 1.0) scale = (float)coef;
    }
    int count = 0;
    const lf_param_info *table = lf_model_train_table(t->model, &count);
    float b1, b2; /* OneCycle's momentum moves beta1 (schedule.c) */
    lf_betas_at(c, t->opt_t - 1, &b1, &b2);
    for (int u = 0; u < t->n_units; u++) {
        size_t lo = t->pc_lo[u], hi = lo + t->pc_n[u], sh = t->sh_off[u];
        float *p = zp_params(t, u), *g = zp_grads(t, u);
        if (t->offload) {
            lf_status ost = offload_adamw(t, p, g, lo, t->pc_n[u], sh, lr, scale);
            if (ost != LF_OK) return ost;
            continue;
        }
        for (int k = 0; k < count; k++) {
            size_t a = table[k].offset, b = a + table[k].numel;
            if (a < lo) a = lo;
            if (b > hi) b = hi;
            if (a >= b) continue;
            size_t at = a - lo;
            lf_backend_adamw(t->be, p + at, g + at, t->m + sh + at, t->v + sh + at, b - a, lr, b1, b2, c->eps,
                             table[k].decay ? c->weight_decay : 0.0f, scale, (int)t->opt_t);
        }
    }
    if (t->zstage == 3) {
        lf_model_params_changed(t->model);
        return LF_OK;
    }
    double t0 = lf_time_now();
    float *all = lf_model_train_params(t->model);
    lf_status st = LF_OK;
    for (int u = 0; u < t->n_units && st == LF_OK; u++)
        st = lf__dp_all_gather(t, all + t->pc_lo[u], all + t->unit_lo[u], t->unit_n[u]);
    o->comm_ms += (lf_time_now() - t0) * 1e3;
    lf_backend_params_changed(t->be);
    return st;
}

/* The status every rank agrees on: each rank's own (0 or a negative
 * lf_status), the lowest rank's failure wins; a rank that did not fail
 * reports that rank's failure. */
static lf_status zero_agree(lf_trainer *t, lf_status mine, const char *what) {
    if (t->world == 1) return mine;
    int64_t code = mine != LF_OK ? (int64_t)(t->world - t->rank) << 32 | (int64_t)(uint32_t)(-(int)mine) : 0;
    lf_status st = lf_comm_all_reduce_i64(t->comm, &code, 1, LF_COMM_MAX);
    if (st != LF_OK) return st;
    if (!code) return LF_OK;
    int who = t->world - (int)(code >> 32);
    lf_status s = (lf_status)(-(int)(code & 0xffffffff));
    char msg[1024]; /* that rank's message, for every rank to report */
    snprintf(msg, sizeof msg, "%s", t->rank == who ? lf_last_error() : "");
    st = lf_comm_broadcast_bytes(t->comm, msg, sizeof msg, who);
    if (st != LF_OK) return st;
    msg[sizeof msg - 1] = 0;
    if (mine != LF_OK) return mine;
    return lf_fail(s, "%s failed on rank %d: %s", what, who, msg);
}

/* Every rank writes its shard into the files rank 0 created; rank 0
 * commits only when all have written. */
lf_status lf__zero_save(lf_trainer *t, const char *state, char **saved) {
    *saved = NULL;
    int count;
    const lf_param_info *table = lf_model_train_table(t->model, &count);
    lf_ckpt_tensors tt = {table, count, lf_model_train_num_params(t->model)};
    lf_comm_set_context(t->comm, "checkpoint at step %ld", t->step);
    char *tmp = NULL;
    char path[LF_PATH_MAX + 64] = "";
    lf_status st = LF_OK;
    if (t->rank == 0) {
        st = lf_checkpoint_begin(t->ckpt_root, t->step, &tt, 1, &tmp);
        if (st == LF_OK) snprintf(path, sizeof path, "%s", tmp);
    }
    st = zero_agree(t, st, "starting the checkpoint");
    if (st == LF_OK && t->world > 1) st = lf_comm_broadcast_bytes(t->comm, path, sizeof path, 0);
    if (st != LF_OK) {
        lf_free(tmp);
        return st;
    }
    /* the shard as host floats: in place on host memory, else staged (the
     * moments are one shard buffer each; the parameters land at their flat
     * offset of host_params) */
    const int host = lf_backend_host_memory(t->be);
    stage_out(t, t->host_m, t->m, t->shard_n * sizeof(float));
    stage_out(t, t->host_v, t->v, t->shard_n * sizeof(float));
    lf_status mine = LF_OK;
    for (int u = 0; u < t->n_units && mine == LF_OK; u++) {
        const float *p = zp_params(t, u);
        if (!host) {
            lf_backend_to_host(t->be, t->host_params + t->pc_lo[u], p, t->pc_n[u] * sizeof(float));
            p = t->host_params + t->pc_lo[u];
        }
        mine = lf_checkpoint_write_slice(path, &tt, t->pc_lo[u], t->pc_n[u], p, t->host_m + t->sh_off[u],
                                         t->host_v + t->sh_off[u]);
    }
    if (mine != LF_OK)
        lf_error_prefix("rank %d writing its shard (ZeRO checkpoints are written by every rank: out_dir must be on a "
                        "filesystem all ranks share)",
                        t->rank);
    st = zero_agree(t, mine, "writing the checkpoint's shards");
    if (t->rank == 0) {
        if (st == LF_OK)
            st = lf_checkpoint_commit(t->ckpt_root, t->step, tmp, state, t->extra, t->n_extra, 0,
                                      t->best_ckpt[0] ? t->best_ckpt : NULL, saved); /* rotation: ckpt_write */
        else lf_checkpoint_discard(tmp);                                             /* nothing half-written stays */
    }
    lf_free(tmp);
    lf_status was = st;
    st = zero_agree(t, t->rank == 0 ? st : LF_OK, "committing the checkpoint");
    return was != LF_OK ? was : st;
}

/* Rank 0 resolves and verifies the checkpoint and reads its state; every
 * rank then reads the parameters (all of them: the model starts whole) and
 * its shard of the moments from the shared files. */
lf_status lf__zero_resume_read(lf_trainer *t, const char *path, char **dir, char **state) {
    int count;
    const lf_param_info *table = lf_model_train_table(t->model, &count);
    size_t n = lf_model_train_num_params(t->model);
    lf_ckpt_tensors tt = {table, count, n};
    lf_comm_set_context(t->comm, "resume");
    /* into the host buffers (the backend's own on the CPU backends);
     * lf__trainer_resume stages them in. Resume runs before lf__zero_partition: the
     * model is still whole. */
    float *params = t->host_params;
    lf_status st = LF_OK;
    if (t->rank == 0) {
        st = lf_checkpoint_resolve(path, dir);
        if (st == LF_OK) st = lf_checkpoint_load_slice(*dir, &tt, 1, 0, n, params, NULL, NULL, state);
        if (st != LF_OK) lf_error_prefix("resuming from '%s'", *dir ? *dir : path);
    }
    st = zero_agree(t, st, "reading the checkpoint");
    int64_t len = t->rank == 0 && st == LF_OK ? (int64_t)strlen(*state) + 1 : 0;
    char where[LF_PATH_MAX + 64] = "";
    if (t->rank == 0 && *dir) snprintf(where, sizeof where, "%s", *dir);
    if (st == LF_OK && t->world > 1) {
        st = lf_comm_broadcast_bytes(t->comm, &len, sizeof len, 0);
        if (st == LF_OK) st = lf_comm_broadcast_bytes(t->comm, where, sizeof where, 0);
        if (st == LF_OK && t->rank != 0 && !(*state = lf_alloc((size_t)len)))
            st = lf_fail(LF_ERR_NOMEM, "out of memory receiving trainer_state.json");
        if (st == LF_OK) st = lf_comm_broadcast_bytes(t->comm, *state, (size_t)len, 0);
        if (st == LF_OK) (*state)[len - 1] = 0;
    }
    if (st != LF_OK) return st;
    lf_status mine = LF_OK;
    if (t->rank != 0) mine = lf_checkpoint_load_slice(where, &tt, 0, 0, n, params, NULL, NULL, NULL);
    for (int u = 0; u < t->n_units && mine == LF_OK; u++)
        if (t->pc_n[u])
            mine = lf_checkpoint_load_slice(where, &tt, 0, t->pc_lo[u], t->pc_n[u], NULL, t->host_m + t->sh_off[u],
                                            t->host_v + t->sh_off[u], NULL);
    if (mine != LF_OK)
        lf_error_prefix("rank %d reading its shard of '%s' (ZeRO checkpoints are read by every rank: out_dir must be "
                        "on a filesystem all ranks share)",
                        t->rank, where);
    return zero_agree(t, mine, "reading the checkpoint's shards");
}
