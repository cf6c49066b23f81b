/*
 * Data parallel over the communicator (docs/distributed.md): opening the
 * communicator and checking the ranks agree, the gradient sums of stages
 * 0-1 (blocking buckets, or per unit overlapped with backward), and the
 * collectives on backend memory that every sum and ZeRO's gathers use
 * (lf__dp_*), with gradients on the wire in bf16 when asked.
 *
 * Invariants:
 *  - ZeRO stage 0: every rank holds the whole model and AdamW state; rank r
 *    reads rows ((s*A + a)*W + r)*B + b (src/data/loader.c), so a step's
 *    global batch is the same set of rows for any layout with the same
 *    A*W*B. Before the forward pass the ranks sum their target counts (every
 *    rank divides by the global count); after backward they sum the
 *    gradients in buckets of comm.bucket_elems (not overlapped with backward
 *    unless comm.overlap on an asynchronous kind: the collectives are
 *    blocking). The sums are in rank order and bitwise identical on every
 *    rank, so the norm, clipping, alerts, the fp16 overflow decision and
 *    AdamW give the same bits everywhere and the replicas never drift.
 *    Rank 0 alone writes out_dir and emits records; resume state is read by
 *    rank 0 and broadcast (trainer_resume.c).
 *  - No collective is handed backend memory directly: gradient buckets,
 *    ZeRO units and shards go through dev_all_reduce / dev_reduce_scatter /
 *    lf__dp_all_gather (in place on host memory and with a device
 *    communicator, staged through one host buffer otherwise), and
 *    checkpoints through the host copies (stage_out/in), broadcast as bytes
 *    (host memory).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/train.h"
#include "trainer_impl.h"

/* The communicator: the caller's, or comm.backend opened here. Its size must
 * be the world size the configuration's batch was resolved for, and every
 * rank must run the same configuration (the hash of the resolved JSON). */
lf_status lf__dp_open_comm(lf_trainer *t) {
    const lf_train_config *c = &t->cfg;
    lf_status st;
    if (t->opts.comm) {
        t->comm = t->opts.comm;
    } else {
        lf_comm_options co = lf_comm_options_default();
        co.timeout_s = c->comm_timeout_s;
        co.segment_elems = (size_t)c->comm_bucket_elems;    /* scratch of one bucket (the memory plan's figure) */
        co.device_tensors = !lf_backend_host_memory(t->be); /* "auto": nccl for a GPU backend, where registered */
        st = lf_comm_open(&t->comm, c->comm_backend, &co);
        if (st != LF_OK) {
            lf_error_prefix("key 'comm.backend' is '%s'", c->comm_backend);
            return st;
        }
        t->own_comm = 1;
    }
    t->rank = lf_comm_rank(t->comm);
    t->world = lf_comm_size(t->comm);
    if (lf_comm_device_buffers(t->comm)) { /* nccl: the backend's buffers as they are, ordered on its stream */
        void *stream = NULL;
        if (lf_backend_host_memory(t->be) || lf_backend_native_stream(t->be, &stream) != LF_OK)
            return lf_fail(LF_ERR_CONFIG,
                           "communicator '%s' moves device memory, but backend '%s' holds host memory: "
                           "use comm.backend 'mpi' (or 'auto'), or LLMFORGE_BACKEND=cuda",
                           lf_comm_name(t->comm), lf_backend_name(t->be));
        st = lf_comm_set_stream(t->comm, stream);
        if (st != LF_OK) return st;
    }
    if (c->world_size != t->world) {
        const lf_comm_env *env = lf_comm_launch_env(t->comm);
        return lf_fail(LF_ERR_CONFIG,
                       "the configuration's batch was resolved for world size %d (train_batch_size %ld = "
                       "train_micro_batch_size_per_gpu %d × gradient_accumulation_steps %d × %d) but communicator '%s' "
                       "has %d rank%s (launcher: %s, %d process%s)%s",
                       c->world_size, c->train_batch_size, c->micro_batch, c->grad_accum, c->world_size,
                       lf_comm_name(t->comm), t->world, t->world == 1 ? "" : "s", lf_comm_launcher_name(env->launcher),
                       env->size, env->size == 1 ? "" : "es",
                       t->world == 1 && env->size > 1 ? "; comm.backend 'single' under a launcher of several processes "
                                                        "would train the same rows in each: use 'auto' or 'mpi'"
                                                      : "");
    }
    long long G = (long long)c->micro_batch * c->grad_accum * t->world;
    if (c->train_batch_size != G)
        return lf_fail(LF_ERR_CONFIG,
                       "train_batch_size %ld != train_micro_batch_size_per_gpu %d × "
                       "gradient_accumulation_steps %d × world size %d = %lld",
                       c->train_batch_size, c->micro_batch, c->grad_accum, t->world, G);
    if (t->world == 1) return LF_OK;
    /* the same configuration everywhere: max of (h, -h) over ranks is (h, -h) only when all agree */
    char *json = lf_train_config_to_json(c);
    if (!json) return lf_fail(LF_ERR_NOMEM, "out of memory hashing the configuration");
    char hex[65];
    lf_sha256_hex(json, strlen(json), hex);
    lf_free(json);
    hex[15] = 0; /* 60 bits: positive, and so is its negation */
    int64_t h = (int64_t)strtoll(hex, NULL, 16), v[2] = {h, -h};
    lf_comm_set_context(t->comm, "startup");
    st = lf_comm_all_reduce_i64(t->comm, v, 2, LF_COMM_MAX);
    if (st != LF_OK) return st;
    if (v[0] != -v[1])
        return lf_fail(LF_ERR_CONFIG,
                       "the ranks run different configurations (the resolved configuration of rank %d "
                       "hashes to %015llx, another rank's differs): start every rank with the same file and overrides",
                       t->rank, (unsigned long long)h);
    return LF_OK;
}

/* ---------------------------------------------------------------- collectives on backend memory
 *
 * Every collective whose buffers are backend memory (gradient buckets, ZeRO
 * units, shards) goes through dev_all_reduce / dev_reduce_scatter /
 * lf__dp_all_gather, never straight to lf_comm_*. Why: the communicator reads
 * and writes its buffers as host memory. That is true of backend memory on
 * the CPU backends (host_memory 1), and there the helpers make the very call
 * the trainer made before, in place: no copy, the same speed and bits. It is
 * not true of a device (or of cpu-fenced, whose memory faults outside a
 * backend call): MPI needs host buffers unless it is CUDA-aware, so there the
 * floats go to_host into t->xfer, the collective runs on host memory, and the
 * part it wrote comes back with to_device. The nccl communicator takes
 * device buffers directly (lf_comm_device_buffers): with it the helpers take
 * the in-place branch, ordered on the backend's stream (lf_comm_set_stream,
 * set by lf__dp_open_comm), and no staging is allocated.
 *
 * One rank (the "single" communicator, ZeRO on one process) needs no host:
 * its collectives are identities, made as a backend copy where the buffers
 * differ.
 *
 * Invariants: t->xfer is allocated once at setup (lf__dp_xfer_alloc), xfer_n floats:
 * the largest buffer any of these moves (a gradient bucket at stage 0, the
 * largest unit with ZeRO), counted by the memory plan with the checkpoint
 * staging (lf_mem_plan_make_rank's host_staging). Partitions are
 * lf_comm_partition's, as the communicator's, so this rank's part of n sits
 * at the same offset in xfer as in the device buffer. The copies are timed
 * with the collective (comm_ms): they are the price of the transport. */

/* Floats of the host staging buffer: 0 in place (host memory, a device
 * communicator, or one rank). */
/* Elements of the largest collective on backend memory: a gradient bucket
 * at stage 0 (lf__dp_all_reduce_grads), the largest unit with ZeRO (reduce-scatters
 * and all-gathers of whole units). Sizes the host staging and the bf16
 * gradient staging. */
static size_t largest_collective(const lf_trainer *t) {
    if (!t->zstage) {
        const size_t n = lf_model_train_num_params(t->model), bucket = (size_t)t->cfg.comm_bucket_elems;
        return bucket < n ? bucket : n;
    }
    size_t most = 0;
    for (int u = 0; u < t->n_units; u++)
        if (t->unit_n[u] > most) most = t->unit_n[u];
    return most;
}

static size_t xfer_floats(const lf_trainer *t) {
    if (lf_backend_host_memory(t->be) || lf_comm_device_buffers(t->comm) || t->world < 2) return 0;
    return largest_collective(t);
}

lf_status lf__dp_xfer_alloc(lf_trainer *t) {
    t->xfer_n = xfer_floats(t);
    if (!t->xfer_n) return LF_OK;
    t->xfer = lf_alloc(t->xfer_n * sizeof(float));
    if (!t->xfer)
        return lf_fail(LF_ERR_NOMEM, "out of memory allocating the host staging of collectives (%zu floats)",
                       t->xfer_n);
    return LF_OK;
}

static lf_status xfer_fits(const lf_trainer *t, const char *what, size_t n) {
    if (n <= t->xfer_n) return LF_OK;
    return lf_fail(LF_ERR_INTERNAL, "%s of %zu floats on backend memory: the host staging holds %zu", what, n,
                   t->xfer_n);
}

/* The communicator reads backend memory as it is: host memory, or a device
 * communicator (nccl) on a device backend. */
static int in_place(const lf_trainer *t) { return lf_backend_host_memory(t->be) || lf_comm_device_buffers(t->comm); }

/* buf (n, backend memory) := the sum over ranks, in place. */
static lf_status dev_all_reduce(lf_trainer *t, float *buf, size_t n) {
    if (in_place(t)) return lf_comm_all_reduce(t->comm, buf, n, LF_COMM_SUM);
    if (t->world == 1) return LF_OK; /* the sum over one rank */
    lf_status st = xfer_fits(t, "all_reduce", n);
    if (st != LF_OK) return st;
    lf_backend_to_host(t->be, t->xfer, buf, n * sizeof(float));
    st = lf_comm_all_reduce(t->comm, t->xfer, n, LF_COMM_SUM);
    if (st == LF_OK) lf_backend_to_device(t->be, buf, t->xfer, n * sizeof(float));
    return st;
}

/* recv (this rank's part of n) := that part of the sum over ranks of send
 * (n); both backend memory, recv == send + offset(rank) allowed (in place). */
static lf_status dev_reduce_scatter(lf_trainer *t, const float *send, float *recv, size_t n) {
    if (in_place(t)) return lf_comm_reduce_scatter(t->comm, send, recv, n, LF_COMM_SUM);
    if (t->world == 1) { /* one rank's part is the whole: a copy on the backend */
        if (recv != send && n) lf_backend_copy(t->be, recv, send, n * sizeof(float));
        return LF_OK;
    }
    lf_status st = xfer_fits(t, "reduce_scatter", n);
    if (st != LF_OK) return st;
    size_t po = 0, pc = 0;
    lf_comm_partition(n, t->world, t->rank, &po, &pc);
    lf_backend_to_host(t->be, t->xfer, send, n * sizeof(float));
    st = lf_comm_reduce_scatter(t->comm, t->xfer, t->xfer + po, n, LF_COMM_SUM);
    if (st == LF_OK && pc) lf_backend_to_device(t->be, recv, t->xfer + po, pc * sizeof(float));
    return st;
}

/* recv (n) := every rank's part, part p from rank p's send; both backend
 * memory, send == recv + offset(rank) allowed (in place). */
lf_status lf__dp_all_gather(lf_trainer *t, const float *send, float *recv, size_t n) {
    if (in_place(t)) return lf_comm_all_gather(t->comm, send, recv, n);
    if (t->world == 1) {
        if (recv != send && n) lf_backend_copy(t->be, recv, send, n * sizeof(float));
        return LF_OK;
    }
    lf_status st = xfer_fits(t, "all_gather", n);
    if (st != LF_OK) return st;
    size_t po = 0, pc = 0;
    lf_comm_partition(n, t->world, t->rank, &po, &pc);
    if (pc) lf_backend_to_host(t->be, t->xfer + po, send, pc * sizeof(float));
    st = lf_comm_all_gather(t->comm, t->xfer + po, t->xfer, n);
    if (st == LF_OK) lf_backend_to_device(t->be, recv, t->xfer, n * sizeof(float));
    return st;
}

/* ---------------------------------------------------------------- gradients on the wire in bf16
 * communication_data_type: bf16 (DeepSpeed's key), several ranks: each
 * gradient sum (stage 0's buckets, ZeRO's unit reduce-scatters) rounds this
 * rank's fp32 gradient to bf16 into t->gbf on the backend (grad_to_bf16),
 * runs the bf16 collective (comm.h "bf16": on mpi, tcp and the NCCL shim the
 * bf16 of the fp32 rank-order fold, on NCCL ncclBfloat16) and widens the
 * result back into the fp32 buffer (grad_from_bf16, exact); master weights,
 * moments and AdamW stay fp32. One rank communicates nothing, so nothing is
 * rounded. Stage 0, 1 and 2 give the same bits on the kinds that fold in
 * rank order (every element is bf16(fold of the ranks' bf16 gradients)),
 * with grad_accum_steps 1: ZeRO-2 sums each micro-batch's gradient. The
 * staging is counted by the memory plan. */

lf_status lf__dp_gbf_alloc(lf_trainer *t) {
    t->grad_bf16 = t->cfg.comm_bf16 && t->world > 1;
    if (!t->grad_bf16) return LF_OK;
    if (lf_backend_grad_to_bf16(t->be, NULL, NULL, 0) != LF_OK ||
        lf_backend_grad_from_bf16(t->be, NULL, NULL, 0) != LF_OK)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "communication_data_type: bf16: the '%s' backend cannot convert gradients "
                       "to bf16 (use fp32)",
                       lf_backend_name(t->be));
    t->gbf_n = largest_collective(t);
    for (int i = 0; i < (t->overlap ? 2 : 1); i++) {
        t->gbf[i] = lf_backend_alloc(t->be, (t->gbf_n ? t->gbf_n : 1) * sizeof(uint16_t));
        if (!t->gbf[i])
            return lf_fail(LF_ERR_NOMEM,
                           "out of memory allocating the bf16 gradient staging "
                           "(communication_data_type: bf16, %zu values)",
                           t->gbf_n);
    }
    return LF_OK;
}

/* bf16 collectives on backend memory: in place where the communicator reads
 * it, else through the host staging (t->xfer, bytes), as dev_* do. */
static lf_status dev_all_reduce_bf16(lf_trainer *t, uint16_t *buf, size_t n) {
    if (in_place(t)) return lf_comm_all_reduce_bf16(t->comm, buf, n, LF_COMM_SUM);
    lf_status st = xfer_fits(t, "bf16 all_reduce", (n + 1) / 2);
    if (st != LF_OK) return st;
    uint16_t *x = (uint16_t *)t->xfer;
    lf_backend_to_host(t->be, x, buf, n * sizeof(uint16_t));
    st = lf_comm_all_reduce_bf16(t->comm, x, n, LF_COMM_SUM);
    if (st == LF_OK) lf_backend_to_device(t->be, buf, x, n * sizeof(uint16_t));
    return st;
}

static lf_status dev_reduce_scatter_bf16(lf_trainer *t, const uint16_t *send, uint16_t *recv, size_t n) {
    if (in_place(t)) return lf_comm_reduce_scatter_bf16(t->comm, send, recv, n, LF_COMM_SUM);
    lf_status st = xfer_fits(t, "bf16 reduce_scatter", (n + 1) / 2);
    if (st != LF_OK) return st;
    size_t po = 0, pc = 0;
    lf_comm_partition(n, t->world, t->rank, &po, &pc);
    uint16_t *x = (uint16_t *)t->xfer;
    lf_backend_to_host(t->be, x, send, n * sizeof(uint16_t));
    st = lf_comm_reduce_scatter_bf16(t->comm, x, x + po, n, LF_COMM_SUM);
    if (st == LF_OK && pc) lf_backend_to_device(t->be, recv, x + po, pc * sizeof(uint16_t));
    return st;
}

lf_status lf__dp_gbf_fits(const lf_trainer *t, const char *what, size_t n) {
    if (n <= t->gbf_n) return LF_OK;
    return lf_fail(LF_ERR_INTERNAL, "%s of %zu gradients: the bf16 staging holds %zu", what, n, t->gbf_n);
}

/* A gradient bucket (n, backend memory) := its sum over ranks, in place. */
static lf_status grad_all_reduce(lf_trainer *t, float *buf, size_t n) {
    if (!t->grad_bf16) return dev_all_reduce(t, buf, n);
    lf_status st = lf__dp_gbf_fits(t, "all_reduce", n);
    if (st != LF_OK) return st;
    uint16_t *b = t->gbf[0];
    lf_backend_grad_to_bf16(t->be, b, buf, n);
    st = dev_all_reduce_bf16(t, b, n);
    if (st == LF_OK) lf_backend_grad_from_bf16(t->be, buf, b, n);
    return st;
}

/* recv (this rank's part of n) := that part of the sum over ranks of the
 * gradient send (n), recv == send + offset allowed (dev_reduce_scatter). */
lf_status lf__dp_grad_reduce_scatter(lf_trainer *t, const float *send, float *recv, size_t n) {
    if (!t->grad_bf16) return dev_reduce_scatter(t, send, recv, n);
    lf_status st = lf__dp_gbf_fits(t, "reduce_scatter", n);
    if (st != LF_OK) return st;
    size_t po = 0, pc = 0;
    lf_comm_partition(n, t->world, t->rank, &po, &pc);
    uint16_t *b = t->gbf[0];
    lf_backend_grad_to_bf16(t->be, b, send, n);
    st = dev_reduce_scatter_bf16(t, b, b + po, n);
    if (st == LF_OK && pc) lf_backend_grad_from_bf16(t->be, recv, b + po, pc);
    return st;
}

/* The gradients summed over ranks, in place, comm.bucket_elems floats per
 * call (DeepSpeed's reduce buckets; each call bounds the communicator's
 * scratch, and the host staging where backend memory is not the host's).
 * SUM, not AVG: every rank's dloss already divides by the global count of
 * targets. */
lf_status lf__dp_all_reduce_grads(lf_trainer *t, step_result *o) {
    double t0 = lf_time_now();
    float *g = lf_model_train_grads(t->model);
    const size_t n = lf_model_train_num_params(t->model), bucket = (size_t)t->cfg.comm_bucket_elems;
    lf_status st = LF_OK;
    for (size_t a = 0; a < n && st == LF_OK; a += bucket)
        st = grad_all_reduce(t, g + a, n - a < bucket ? n - a : bucket);
    o->comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

static lf_status dp_grads_ready(void *user, int u, float *grad) {
    lf_trainer *t = user;
    if (!t->dp_armed) return LF_OK; /* an earlier micro-batch: the sum waits for the last one */
    size_t lo = 0, n = 0, po = 0, pc = 0;
    lf_model_unit_range(t->model, u, &lo, &n);
    double t0 = lf_time_now();
    int64_t ticket = 0;
    lf_status st;
    if (t->zstage == 0) {
        st = lf_comm_all_reduce_start(t->comm, grad, n, LF_COMM_SUM, &ticket);
    } else { /* stage 1: this rank's part lands where it lies, as lf__zero_reduce_scatter_all puts it */
        lf_comm_partition(n, t->world, t->rank, &po, &pc);
        st = lf_comm_reduce_scatter_start(t->comm, grad, grad + po, n, LF_COMM_SUM, &ticket);
    }
    t->hook_comm_ms += (lf_time_now() - t0) * 1e3;
    return st;
}

/* Stages 0-1 with comm.overlap on an asynchronous kind (nccl): the model
 * hands each unit's gradient range when its backward ends (grads_ready);
 * on the step's last micro-batch the unit's sum starts there, on the
 * communicator's stream, while the backward of the units before it runs,
 * and the step waits for them all (lf_comm_wait_all) where it made the
 * blocking sums before. The same collectives per element (one per unit
 * instead of per bucket), so the same sums. Not with fp16 (its gradients
 * are rounded before the sum), bf16 communication (its staging holds one
 * bucket), or the test hooks that poison a gradient before the sum. */
lf_status lf__dp_overlap_setup(lf_trainer *t) {
    t->overlap01 = t->cfg.comm_overlap && t->world > 1 && lf_comm_async(t->comm) && !t->cfg.fp16 && !t->cfg.comm_bf16 &&
                   !lf_model_lora(t->model) && /* LoRA: the adapters' sum after backward */
                   t->opts.inject_nan_step <= 0 && t->opts.n_inject_overflow <= 0;
    if (!t->overlap01) return LF_OK;
    lf_model_zero z = {.grads_ready = dp_grads_ready, .user = t};
    lf_status st = lf_model_set_zero(t->model, &z);
    if (st != LF_OK) return st;
    size_t act = 0; /* set_zero dropped the activation plan: the same plan again */
    st = lf_model_plan(t->model, t->cfg.micro_batch, t->cfg.model.block_size, &act);
    if (st == LF_OK && act != t->planned_act_bytes) st = lf_fail(LF_ERR_INTERNAL, "activation plan changed");
    return st;
}
