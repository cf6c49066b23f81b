/*
 * Memory plan of a training run: every byte the step needs, known before the
 * first allocation (src/train/plan.c). The trainer refuses to start a run
 * whose plan exceeds memory.limit_bytes, or the machine's available memory
 * (MemAvailable), with the largest consumers and what would make it fit;
 * `llmforge plan` prints the same plan without training.
 */
#ifndef LLMFORGE_PLAN_H
#define LLMFORGE_PLAN_H

#include "llmforge/backend.h"
#include "llmforge/model.h"
#include "llmforge/train.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LF_PLAN_MAX_ITEMS 16 /* a plan has at most 13 (a device, async, bf16, offload, W > 1); add() drops past this */

typedef struct lf_mem_item {
    char name[64];
    size_t bytes;
    int device; /* 1: in the device's memory (a backend whose memory is not the host's) */
} lf_mem_item;

typedef struct lf_mem_plan {
    lf_mem_item items[LF_PLAN_MAX_ITEMS]; /* in allocation order */
    int n_items;
    size_t total;
    size_t params; /* parameters in the model */
    int B, T, A, replicas;
    lf_recompute policy;
    lf_act_dtype act_dtype;    /* storage of the matmul inputs: bf16 with bf16.enabled */
    lf_act_bytes act;          /* the activation plan of this policy and act_dtype */
    size_t act_policy[3];      /* activation bytes under none, selective, full (same B, T, act_dtype) */
    size_t act_by_dtype[2][3]; /* [lf_act_dtype][policy]: both storages, for comparison */
    size_t limit;              /* what the plan must fit: memory.limit_bytes, else MemAvailable; 0 = unknown */
    int limit_from_config;     /* 1: memory.limit_bytes */
    int staging;               /* host staging copies counted (a backend whose memory is not the host's);
                                2: that memory is a device's (on_device) */
    int on_device;             /* the items split into device and host memory, each checked against its own */
    /* data parallel: the plan is one rank's (rank `rank` of `world`) */
    int world, rank, zero_stage;
    size_t shard;        /* ZeRO >= 1: floats of this rank's shard (its part of every unit) */
    size_t params_bytes; /* parameters held: the whole model, or (ZeRO-3) the shard and two gathered units */
    size_t grads_bytes;  /* gradients: the whole model, or (ZeRO-2/3) the shard and two unit buffers */
    size_t optim_bytes;  /* AdamW moments: of the whole model, or (ZeRO >= 1) of the shard */
    /* a device backend (staging): the items split into device and host memory */
    size_t device_total;       /* the items in device memory (0 on a host-memory backend) */
    size_t host_total;         /* the rest: what limit holds (total on a host-memory backend) */
    size_t device_free;        /* lf_backend_mem_info when the plan was made: what device_total must fit; 0 = unknown */
    size_t device_capacity;    /* the device's total memory; 0 = unknown */
    char device[96];           /* "cuda: NVIDIA H200 (device 0)"; "" = no device asked */
    const lf_backend_ops *ops; /* the table whose attention sizes the activations (NULL: the CPU's) */
} lf_mem_plan;

/* The plan of cfg for model mcfg (vocab resolved) with the micro-batch split
 * over `replicas` model replicas (the CPU backend: min(threads, B)).
 * host_staging: count the trainer's host copies of parameters and moments
 * for checkpoints (0 for the CPU backends, whose memory is the host's; 2:
 * and the backend's memory is a device's, the plan split into device and
 * host parts with the device's free memory unknown, 0).
 * Reads MemAvailable from /proc/meminfo when memory.limit_bytes is 0. */
lf_status lf_mem_plan_make(lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg, int replicas,
                           int host_staging);
/* The same for rank `rank` of cfg->world_size (ZeRO shards differ by one
 * element per unit between ranks; rank 0's is the largest). */
lf_status lf_mem_plan_make_rank(lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg, int replicas,
                                int host_staging, int rank);

/* The plan of cfg on backend instance be (rank `rank`): its replicas, host
 * staging when its memory is not the host's, and then the device's free
 * and total memory (lf_backend_mem_info; the instance's own context is
 * already allocated, so free is what the run can have). LF_OK, or the
 * device's error. */
lf_status lf_mem_plan_make_backend(lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg,
                                   lf_backend *be, int rank);

/* LF_OK when the plan fits its limit (or no limit is known). Otherwise
 * LF_ERR_NOMEM with a message: the total against the limit, the largest
 * consumers, and the changes that would make it fit, each with the bytes it
 * saves (a smaller micro-batch with more accumulation, a recompute policy,
 * bf16 when the run is fp32: its bf16 activations less its weight copies),
 * and a note on what does not help here (ZeRO needs several processes). */
lf_status lf_mem_plan_check(const lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg);
/* On a device plan the device part is checked first, against device_free
 * ("the run needs X of device memory, more than the Y free on cuda: ..."),
 * with the same advice computed on device bytes; then the host part against
 * the limit. */

/* The advice part of lf_mem_plan_check's message ("To fit: ...") for the
 * plan's scarce memory (the device's on a device plan), written whether or
 * not the plan fits: what an allocation failure during the run reports
 * (like snprintf: returns the length it needed). */
size_t lf_mem_plan_advice(const lf_mem_plan *p, const lf_train_config *cfg, const lf_model_config *mcfg, char *buf,
                          size_t cap);

/* The plan as a table, for `llmforge plan` (like snprintf: returns the length it needed). */
size_t lf_mem_plan_format(const lf_mem_plan *p, char *buf, size_t cap);

/* "1.23 GiB" style; buf of at least 32 bytes. */
const char *lf_fmt_bytes(size_t bytes, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
