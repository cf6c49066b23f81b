/*
 * DeepSpeed's configuration keys that have no row in the configuration table
 * (config.c): each is accepted and ignored with a one-line notice saying why,
 * refused with the reason, or accepted only with the value llmforge does.
 * Keys llmforge honours are rows of config.c's table; together the two cover
 * every key of DeepSpeed's configuration reference
 * (tests/fixtures/deepspeed/documented_keys.txt, checked by
 * tests/train/test_ds_config.c; docs/deepspeed.md lists them).
 *
 * Also here: which keys take "auto" and how HF Trainer resolves each
 * (transformers integrations/deepspeed.py, trainer_config_process and
 * trainer_config_finalize), how a DeepSpeed file is recognised, and which
 * scheduler.params belong to which of DeepSpeed's schedulers
 * (deepspeed/runtime/lr_schedules.py).
 *
 * Invariant: a path has at most one row with a state; rows with state 0 only
 * name refused values of a table key (several may share a path).
 */
#include <string.h>
#include "config_deepspeed.h"

#define NVME_WHY \
    "NVMe offload (ZeRO-Infinity) is not implemented in llmforge; use \"cpu\" (optimizer state in host memory) or " \
    "\"none\""
#define ONEBIT_WHY "a parameter of DeepSpeed's 1-bit/0-1 Adam or LAMB optimizers, which llmforge does not have"
#define MUON_WHY "a parameter of DeepSpeed's Muon optimizer, which llmforge does not have"
#define TUNING_WHY \
    "tunes DeepSpeed's own ZeRO communication and memory machinery; llmforge's ZeRO changes no result by it"

// clang-format off
static const lf__ds_key k_ds[] = {
    /* values of honoured keys that are refused with a reason */
    {.path = "optimizer.type", .bad = "Lamb", .bad_why = "LAMB is not implemented in llmforge; use AdamW"},
    {.path = "optimizer.type", .bad = "OneBitAdam", .bad_why = "1-bit Adam compresses DeepSpeed's communication and is not implemented in llmforge; use Adam or AdamW"},
    {.path = "optimizer.type", .bad = "ZeroOneAdam", .bad_why = "0/1 Adam is not implemented in llmforge; use Adam or AdamW"},
    {.path = "optimizer.type", .bad = "OneBitLamb", .bad_why = "1-bit LAMB is not implemented in llmforge; use AdamW"},
    {.path = "optimizer.type", .bad = "Muon", .bad_why = "Muon is not implemented in llmforge; use AdamW"},
    {.path = "optimizer.type", .bad = "Adagrad", .bad_why = "Adagrad is not implemented in llmforge; use AdamW"},
    {.path = "optimizer.type", .bad = "SGD", .bad_why = "SGD is not implemented in llmforge; use AdamW"},
    {.path = "optimizer.type", .bad = "Lion", .bad_why = "Lion is not implemented in llmforge; use AdamW"},
    {.path = "zero_optimization.offload_optimizer.device", .bad = "nvme", .bad_why = NVME_WHY},
    /* optimizer */
    {.path = "optimizer.params.adam_w_mode", .state = LF__DS_ONLY, .ok = "true",
     .why = "adam_w_mode false (Adam with L2-coupled weight decay) is not implemented: llmforge's Adam is AdamW "
            "(decoupled weight decay, DeepSpeed's default)"},
    {.path = "optimizer.params.bias_correction", .state = LF__DS_ONLY, .ok = "true",
     .why = "llmforge's AdamW always corrects the moments' bias (torch's); bias_correction false is not implemented"},
    {.path = "optimizer.params.amsgrad", .state = LF__DS_ONLY, .ok = "false", .why = "AMSGrad is not implemented"},
    {.path = "optimizer.params.torch_adam", .state = LF__DS_IGNORED,
     .why = "chooses between DeepSpeed's fused and torch's Adam; llmforge has one AdamW, the same update"},
    /* torch.optim.AdamW's implementation switches (DeepSpeed passes params to torch) */
    {.path = "optimizer.params.fused", .state = LF__DS_IGNORED, .why = "torch's choice of kernel; the same update"},
    {.path = "optimizer.params.foreach", .state = LF__DS_IGNORED, .why = "torch's choice of kernel; the same update"},
    {.path = "optimizer.params.capturable", .state = LF__DS_IGNORED, .why = "for CUDA graphs in torch; the same update"},
    {.path = "optimizer.params.differentiable", .state = LF__DS_IGNORED, .why = "autograd through the step in torch; the same update"},
    {.path = "optimizer.params.maximize", .state = LF__DS_ONLY, .ok = "false", .why = "llmforge minimises the loss"},
    {.path = "optimizer.legacy_fusion", .state = LF__DS_IGNORED, .why = "DeepSpeed's fp16 optimizer fusion; no result changes"},
    {.path = "optimizer.params.momentum", .state = LF__DS_REFUSED, .why = MUON_WHY},
    {.path = "optimizer.params.muon_lr", .state = LF__DS_REFUSED, .why = MUON_WHY},
    {.path = "optimizer.params.adam_lr", .state = LF__DS_REFUSED, .why = MUON_WHY},
    {.path = "optimizer.params.ns_method", .state = LF__DS_REFUSED, .why = MUON_WHY},
    {.path = "optimizer.params.freeze_step", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.cuda_aware", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.comm_backend_name", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.var_freeze_step", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.var_update_scaler", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.local_step_scaler", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.local_step_clipper", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.max_coeff", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.min_coeff", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.coeff_beta", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.factor_max", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.factor_min", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "optimizer.params.factor_threshold", .state = LF__DS_REFUSED, .why = ONEBIT_WHY},
    {.path = "scheduler.params.last_batch_iteration", .state = LF__DS_ONLY, .ok = "-1",
     .why = "a schedule starts at step 0 (-1 here); to continue a run use --resume, which restores the step"},
    /* batch and communication */
    {.path = "managed_gradient_accumulation", .state = LF__DS_IGNORED,
     .why = "llmforge accumulates gradient_accumulation_steps micro-batches itself, the same sum"},
    {.path = "gradient_allreduce_op", .state = LF__DS_ONLY, .ok = "\"mean\"",
     .why = "llmforge's gradient is the mean over the global batch (DeepSpeed's \"mean\"); the unscaled \"sum\" is "
            "not implemented"},
    {.path = "prescale_gradients", .state = LF__DS_ONLY, .ok = "false",
     .why = "llmforge divides the summed gradient once, by the global token count; prescaling is not implemented"},
    {.path = "gradient_predivide_factor", .state = LF__DS_ONLY, .ok = "1.0",
     .why = "llmforge divides the summed gradient once, by the global token count; a predivide factor is not "
            "implemented"},
    {.path = "sparse_gradients", .state = LF__DS_ONLY, .ok = "false", .why = "sparse embedding gradients are not implemented"},
    {.path = "zero_allow_untested_optimizer", .state = LF__DS_IGNORED,
     .why = "llmforge's ZeRO runs its own AdamW; there is no untested optimizer to allow"},
    {.path = "zero_force_ds_cpu_optimizer", .state = LF__DS_IGNORED,
     .why = "llmforge's offloaded AdamW is its own CPU AdamW, always"},
    {.path = "memory_breakdown", .state = LF__DS_IGNORED,
     .why = "llmforge prints its memory plan at start (`llmforge plan` shows it without training)"},
    {.path = "dump_state", .state = LF__DS_IGNORED, .why = "llmforge saves the resolved configuration in out_dir/config.resolved.json"},
    {.path = "disable_allgather", .state = LF__DS_IGNORED, .why = "a legacy DeepSpeed switch; no result changes"},
    {.path = "dataloader_drop_last", .state = LF__DS_IGNORED, .why = "llmforge's loader forms only whole batches"},
    /* precision */
    {.path = "fp16.auto_cast", .state = LF__DS_IGNORED,
     .why = "casts module inputs in DeepSpeed's fp16 wrapper; llmforge's fp16 casts inside its own ops"},
    {.path = "fp16.fp16_master_weights_and_grads", .state = LF__DS_ONLY, .ok = "false",
     .why = "llmforge keeps fp32 master weights; fp16 master weights are not implemented"},
    {.path = "bf16.bf16_master_weights_and_grads", .state = LF__DS_ONLY, .ok = "false",
     .why = "llmforge keeps fp32 master weights and gradients under bf16; bf16 ones are not implemented"},
    {.path = "bf16.bf16_optimizer_states", .state = LF__DS_ONLY, .ok = "false",
     .why = "llmforge keeps AdamW's moments in fp32; bf16 moments are not implemented"},
    {.path = "bf16.immediate_grad_update", .state = LF__DS_IGNORED, .why = "a DeepSpeed bf16-optimizer timing switch; the same update"},
    {.path = "bf16.check_grad_overflow", .state = LF__DS_IGNORED, .why = "llmforge checks every gradient norm for non-finite values (monitor.alerts.nan)"},
    {.path = "amp.*", .state = LF__DS_REFUSED, .why = "NVIDIA Apex AMP is not implemented; use fp16 or bf16"},
    {.path = "torch_autocast.*", .state = LF__DS_REFUSED, .why = "torch.autocast is not implemented; use fp16 or bf16"},
    {.path = "data_types.grad_accum_dtype", .state = LF__DS_ONLY, .ok = "\"fp32\"",
     .why = "llmforge accumulates gradients in fp32; only \"fp32\" is accepted"},
    {.path = "communication_data_type", .bad = "fp16", .bad_why = "fp16 gradient communication is not implemented; use \"fp32\" or \"bf16\""},
    /* ZeRO */
    {.path = "zero_optimization.allgather_partitions", .state = LF__DS_IGNORED, .why = TUNING_WHY},
    {.path = "zero_optimization.allgather_bucket_size", .state = LF__DS_IGNORED, .why = TUNING_WHY},
    {.path = "zero_optimization.overlap_comm", .state = LF__DS_IGNORED, .why = "llmforge's comm.overlap says whether sums overlap backward (on by default)"},
    {.path = "zero_optimization.reduce_scatter", .state = LF__DS_IGNORED, .why = TUNING_WHY},
    {.path = "zero_optimization.reduce_bucket_size", .state = LF__DS_IGNORED,
     .why = "llmforge's bucket is comm.bucket_elems (floats per all-reduce); DeepSpeed's bytes are not mapped"},
    {.path = "zero_optimization.contiguous_gradients", .state = LF__DS_IGNORED, .why = "llmforge's gradients are one contiguous buffer always"},
    {.path = "zero_optimization.load_from_fp32_weights", .state = LF__DS_IGNORED, .why = "llmforge's checkpoints hold fp32 weights and resume from them always"},
    {.path = "zero_optimization.grad_hooks", .state = LF__DS_IGNORED, .why = "llmforge's ZeRO hooks are its model's units, always on"},
    {.path = "zero_optimization.round_robin_gradients", .state = LF__DS_IGNORED, .why = TUNING_WHY},
    {.path = "zero_optimization.sub_group_size", .state = LF__DS_IGNORED, .why = "llmforge's AdamW steps unit by unit; no sub-groups to size"},
    {.path = "zero_optimization.elastic_checkpoint", .state = LF__DS_IGNORED, .why = "llmforge's checkpoints are layout-free: any world size resumes any other"},
    {.path = "zero_optimization.stage3_max_live_parameters", .state = LF__DS_IGNORED, .why = "llmforge's ZeRO-3 gathers one unit at a time"},
    {.path = "zero_optimization.stage3_max_reuse_distance", .state = LF__DS_IGNORED, .why = "llmforge's ZeRO-3 gathers one unit at a time"},
    {.path = "zero_optimization.stage3_prefetch_bucket_size", .state = LF__DS_IGNORED, .why = "llmforge's ZeRO-3 gathers unit by unit and prefetches on its own"},
    {.path = "zero_optimization.stage3_param_persistence_threshold", .state = LF__DS_IGNORED, .why = "llmforge's ZeRO-3 partitions every unit whatever its size"},
    {.path = "zero_optimization.stage3_gather_16bit_weights_on_model_save", .state = LF__DS_IGNORED,
     .why = "llmforge's checkpoints always hold the whole model (model.safetensors)"},
    {.path = "zero_optimization.stage3_gather_fp16_weights_on_model_save", .state = LF__DS_IGNORED,
     .why = "llmforge's checkpoints always hold the whole model (model.safetensors)"},
    {.path = "zero_optimization.stage3_module_granularity_threshold", .state = LF__DS_IGNORED, .why = "llmforge's ZeRO-3 units are its blocks"},
    {.path = "zero_optimization.zero_hpz_partition_size", .state = LF__DS_ONLY, .ok = "1",
     .why = "hierarchical partitioning (ZeRO++ hpZ) is not implemented"},
    {.path = "zero_optimization.zero_quantized_weights", .state = LF__DS_ONLY, .ok = "false",
     .why = "quantized weight communication (ZeRO++ qwZ) is not implemented"},
    {.path = "zero_optimization.zero_quantized_gradients", .state = LF__DS_ONLY, .ok = "false",
     .why = "quantized gradient communication (ZeRO++ qgZ) is not implemented"},
    {.path = "zero_optimization.mics_shard_size", .state = LF__DS_ONLY, .ok = "-1", .why = "MiCS sharding is not implemented"},
    {.path = "zero_optimization.log_trace_cache_warnings", .state = LF__DS_IGNORED, .why = "DeepSpeed's ZeRO-3 trace cache does not exist in llmforge"},
    {.path = "zero_optimization.ignore_unused_parameters", .state = LF__DS_IGNORED, .why = "every llmforge parameter is used in each step"},
    {.path = "zero_optimization.save_muon_momentum_buffer_in_memory", .state = LF__DS_IGNORED, .why = "for DeepSpeed's Muon, which llmforge refuses"},
    {.path = "zero_optimization.cpu_offload", .state = LF__DS_REFUSED,
     .why = "DeepSpeed's deprecated spelling: write zero_optimization.offload_optimizer.device \"cpu\" instead"},
    {.path = "zero_optimization.offload_param.device", .state = LF__DS_IGNORED, .bad = "nvme", .bad_why = NVME_WHY,
     .why = "llmforge does not offload parameters: they stay on the backend (host memory on the CPU backend)"},
    {.path = "zero_optimization.offload_param.nvme_path", .state = LF__DS_REFUSED, .why = NVME_WHY},
    {.path = "zero_optimization.offload_param.pin_memory", .state = LF__DS_IGNORED, .why = "llmforge does not offload parameters"},
    {.path = "zero_optimization.offload_param.buffer_count", .state = LF__DS_IGNORED, .why = "sizes NVMe buffers; llmforge does not offload parameters"},
    {.path = "zero_optimization.offload_param.buffer_size", .state = LF__DS_IGNORED, .why = "sizes NVMe buffers; llmforge does not offload parameters"},
    {.path = "zero_optimization.offload_param.max_in_cpu", .state = LF__DS_IGNORED, .why = "sizes NVMe buffers; llmforge does not offload parameters"},
    {.path = "zero_optimization.offload_optimizer.nvme_path", .state = LF__DS_REFUSED, .why = NVME_WHY},
    {.path = "zero_optimization.offload_optimizer.pin_memory", .state = LF__DS_IGNORED,
     .why = "llmforge's host copies are plain memory; pinning changes no result"},
    {.path = "zero_optimization.offload_optimizer.ratio", .state = LF__DS_ONLY, .ok = "1.0",
     .why = "partial optimizer offload (ZeRO-Offload++) is not implemented: the whole optimizer state is offloaded"},
    {.path = "zero_optimization.offload_optimizer.buffer_count", .state = LF__DS_IGNORED, .why = "sizes NVMe buffers; llmforge has no NVMe offload"},
    {.path = "zero_optimization.offload_optimizer.fast_init", .state = LF__DS_IGNORED, .why = "sizes NVMe buffers; llmforge has no NVMe offload"},
    {.path = "aio.*", .state = LF__DS_IGNORED, .why = "asynchronous I/O for NVMe offload, which llmforge refuses"},
    /* parallelism and engines llmforge does not have */
    {.path = "tensor_parallel.*", .state = LF__DS_REFUSED, .why = "DeepSpeed's AutoTP is not implemented in llmforge's trainer"},
    {.path = "hybrid_engine.*", .state = LF__DS_REFUSED, .why = "DeepSpeed's RLHF hybrid engine is not implemented"},
    {.path = "expert_parallel.*", .state = LF__DS_REFUSED, .why = "DeepSpeed's AutoEP is not implemented"},
    {.path = "sparse_attention.*", .state = LF__DS_REFUSED, .why = "sparse attention is not implemented"},
    {.path = "data_efficiency.*", .state = LF__DS_REFUSED, .why = "DeepSpeed's data efficiency library (curriculum, random-LTD) is not implemented"},
    {.path = "curriculum_learning.*", .state = LF__DS_REFUSED, .why = "curriculum learning is not implemented"},
    {.path = "compression_training.*", .state = LF__DS_REFUSED, .why = "DeepSpeed's compression library is not implemented"},
    {.path = "elasticity.*", .state = LF__DS_REFUSED, .why = "elastic batch sizes are not implemented; llmforge resumes on any world size instead"},
    {.path = "compile.*", .state = LF__DS_REFUSED, .why = "DeepCompile is a torch.compile pass; llmforge has no graph compiler"},
    {.path = "pipeline.*", .state = LF__DS_REFUSED, .why = "DeepSpeed's pipeline engine is not reachable from a configuration file in llmforge"},
    {.path = "progressive_layer_drop.*", .state = LF__DS_REFUSED, .why = "progressive layer dropping is not implemented"},
    /* tooling: accepted, llmforge has its own */
    {.path = "autotuning.*", .state = LF__DS_IGNORED, .why = "DeepSpeed's autotuner; llmforge's sweeps are `llmforge sweep`"},
    {.path = "flops_profiler.*", .state = LF__DS_IGNORED, .why = "llmforge reports model FLOPs utilization (MFU) in every progress line"},
    {.path = "comms_logger.*", .state = LF__DS_IGNORED, .why = "llmforge's wall_clock_breakdown times the collectives of each step"},
    {.path = "wandb.*", .state = LF__DS_IGNORED, .why = "Weights & Biases is not linked; llmforge writes out_dir/log.jsonl and, with tensorboard.enabled, event files"},
    {.path = "comet.*", .state = LF__DS_IGNORED, .why = "Comet is not linked; llmforge writes out_dir/log.jsonl and, with tensorboard.enabled, event files"},
    {.path = "csv_monitor.*", .state = LF__DS_IGNORED, .why = "llmforge writes every metric to out_dir/log.jsonl (JSON lines) instead of CSV files"},
    {.path = "activation_checkpointing.partition_activations", .state = LF__DS_IGNORED, .why = "for Megatron's model-parallel checkpointing; llmforge's recomputation is activation_checkpointing.policy"},
    {.path = "activation_checkpointing.cpu_checkpointing", .state = LF__DS_IGNORED, .why = "llmforge keeps recomputation inputs on the backend; activation_checkpointing.policy sets recomputation"},
    {.path = "activation_checkpointing.contiguous_memory_optimization", .state = LF__DS_IGNORED, .why = "llmforge's activations live in one planned arena always"},
    {.path = "activation_checkpointing.number_checkpoints", .state = LF__DS_IGNORED, .why = "llmforge checkpoints every block under policy full"},
    {.path = "activation_checkpointing.synchronize_checkpoint_boundary", .state = LF__DS_IGNORED, .why = "a CUDA synchronisation for DeepSpeed's profiling; no result changes"},
    {.path = "activation_checkpointing.profile", .state = LF__DS_IGNORED, .why = "llmforge's wall_clock_breakdown times forward and backward"},
    {.path = "checkpoint.tag_validation", .state = LF__DS_IGNORED, .why = "llmforge's checkpoints carry SHA-256 of every file, verified on resume"},
    {.path = "checkpoint.load_universal", .state = LF__DS_IGNORED, .why = "llmforge's checkpoints are universal (layout-free) always"},
    {.path = "checkpoint.use_node_local_storage", .state = LF__DS_IGNORED, .why = "rank 0 writes llmforge's (layout-free) checkpoint to out_dir"},
    {.path = "checkpoint.parallel_write.*", .state = LF__DS_IGNORED, .why = "rank 0 writes llmforge's (layout-free) checkpoint"},
};
// clang-format on
#define NDS ((int)(sizeof k_ds / sizeof k_ds[0]))

/* "auto": the keys HF Trainer fills and how (its trainer_config_process and
 * trainer_config_finalize). The command line's override takes
 * TrainingArguments' place; without one, a key HF Trainer fills from a
 * TrainingArguments field gets that field's default (transformers 5.x
 * training_args.py), as an unmodified HF Trainer run would; the others are
 * derived (config_derive.c). hf: the default as JSON, NULL when derived. */
static const struct {
    const char *path, *rule, *hf, *hf_note;
} k_auto[] = {
    {"train_micro_batch_size_per_gpu", "per_device_train_batch_size", "8",
     "HF Trainer's default: TrainingArguments.per_device_train_batch_size 8"},
    {"gradient_accumulation_steps", "gradient_accumulation_steps", "1",
     "HF Trainer's default: TrainingArguments.gradient_accumulation_steps 1"},
    {"train_batch_size", "micro x accumulation x world size", NULL, NULL},
    {"gradient_clipping", "max_grad_norm", "1.0", "HF Trainer's default: TrainingArguments.max_grad_norm 1.0"},
    {"optimizer.params.lr", "learning_rate", "5e-5", "HF Trainer's default: TrainingArguments.learning_rate 5e-5"},
    {"optimizer.params.betas", "adam_beta1, adam_beta2", "[0.9, 0.999]",
     "HF Trainer's default: TrainingArguments.adam_beta1 0.9, adam_beta2 0.999"},
    {"optimizer.params.eps", "adam_epsilon", "1e-8", "HF Trainer's default: TrainingArguments.adam_epsilon 1e-8"},
    {"optimizer.params.weight_decay", "weight_decay", "0.0",
     "HF Trainer's default: TrainingArguments.weight_decay 0.0"},
    {"scheduler.params.warmup_min_lr", "0", NULL, NULL},
    {"scheduler.params.warmup_max_lr", "optimizer.params.lr", NULL, NULL},
    {"scheduler.params.warmup_num_steps", "max(1, scheduler.warmup_iters when given, else 0)", NULL, NULL},
    {"scheduler.params.total_num_steps", "train_iters", NULL, NULL},
    {"fp16.enabled", "fp16", "false", "HF Trainer's default: TrainingArguments.fp16 False"},
    {"bf16.enabled", "bf16", "false", "HF Trainer's default: TrainingArguments.bf16 False"},
    {"zero_optimization.reduce_bucket_size", "model.n_embd^2", NULL, NULL},
    {"zero_optimization.stage3_prefetch_bucket_size", "0.9 x model.n_embd^2", NULL, NULL},
    {"zero_optimization.stage3_param_persistence_threshold", "10 x model.n_embd", NULL, NULL},
};

/* DeepSpeed's documented top-level keys (config-json.md), and those whose
 * presence makes a file a DeepSpeed file. */
static const char *const k_top[] = {"train_batch_size",
                                    "train_micro_batch_size_per_gpu",
                                    "gradient_accumulation_steps",
                                    "managed_gradient_accumulation",
                                    "optimizer",
                                    "scheduler",
                                    "communication_data_type",
                                    "gradient_allreduce_op",
                                    "prescale_gradients",
                                    "gradient_predivide_factor",
                                    "sparse_gradients",
                                    "fp16",
                                    "bf16",
                                    "amp",
                                    "torch_autocast",
                                    "gradient_clipping",
                                    "zero_optimization",
                                    "aio",
                                    "tensor_parallel",
                                    "hybrid_engine",
                                    "expert_parallel",
                                    "steps_per_print",
                                    "wall_clock_breakdown",
                                    "dump_state",
                                    "autotuning",
                                    "flops_profiler",
                                    "activation_checkpointing",
                                    "sparse_attention",
                                    "data_efficiency",
                                    "curriculum_learning",
                                    "tensorboard",
                                    "wandb",
                                    "comet",
                                    "csv_monitor",
                                    "elasticity",
                                    "comms_logger",
                                    "compression_training",
                                    "checkpoint",
                                    "compile",
                                    "data_types",
                                    "zero_allow_untested_optimizer",
                                    "zero_force_ds_cpu_optimizer",
                                    "memory_breakdown",
                                    "disable_allgather",
                                    "dataloader_drop_last",
                                    "pipeline",
                                    "progressive_layer_drop",
                                    NULL};
static const char *const k_core[] = {"train_batch_size",
                                     "train_micro_batch_size_per_gpu",
                                     "gradient_accumulation_steps",
                                     "optimizer",
                                     "scheduler",
                                     "fp16",
                                     "bf16",
                                     "zero_optimization",
                                     NULL};

static int in_list(const char *const *list, const char *s) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], s)) return 1;
    return 0;
}

static int ieq(const char *a, const char *b) {
    for (;; a++, b++) {
        int ca = (unsigned char)*a, cb = (unsigned char)*b;
        if (ca >= 'A' && ca <= 'Z') ca += 32;
        if (cb >= 'A' && cb <= 'Z') cb += 32;
        if (ca != cb) return 0;
        if (!ca) return 1;
    }
}

const lf__ds_key *lf__ds_keys(int *n) {
    *n = NDS;
    return k_ds;
}

const lf__ds_key *lf__ds_key_find(const char *path) {
    const lf__ds_key *best = NULL;
    size_t best_len = 0;
    for (int i = 0; i < NDS; i++) {
        const char *p = k_ds[i].path;
        size_t n = strlen(p);
        if (!k_ds[i].state) continue;
        if (!strcmp(p, path)) return &k_ds[i];
        /* "sec.*" holds "sec" itself and everything under it */
        if (n >= 2 && !strcmp(p + n - 2, ".*") && !strncmp(p, path, n - 2) &&
            (path[n - 2] == '.' || path[n - 2] == 0) && n > best_len) {
            best = &k_ds[i];
            best_len = n;
        }
    }
    return best;
}

const char *lf__ds_value_refused(const char *path, const cJSON *v) {
    if (!cJSON_IsString(v)) return NULL;
    for (int i = 0; i < NDS; i++)
        if (k_ds[i].bad && !strcmp(k_ds[i].path, path) && ieq(k_ds[i].bad, v->valuestring)) return k_ds[i].bad_why;
    return NULL;
}

const char *lf__ds_auto_rule(const char *path) {
    for (size_t i = 0; i < sizeof k_auto / sizeof k_auto[0]; i++)
        if (!strcmp(k_auto[i].path, path)) return k_auto[i].rule;
    return NULL;
}

const char *lf__ds_auto_hf_default(const char *path, const char **note) {
    for (size_t i = 0; i < sizeof k_auto / sizeof k_auto[0]; i++)
        if (!strcmp(k_auto[i].path, path)) {
            *note = k_auto[i].hf_note;
            return k_auto[i].hf;
        }
    return NULL;
}

long long lf__ds_auto_from_hidden(const char *path, long long h) {
    if (strstr(path, "stage3_param_persistence_threshold")) return 10 * h;
    if (strstr(path, "stage3_prefetch_bucket_size")) return (long long)(0.9 * (double)(h * h));
    return h * h;
}

int lf__ds_is_section(const char *path) {
    size_t len = strlen(path);
    for (int i = 0; i < NDS; i++)
        if (k_ds[i].state && !strncmp(k_ds[i].path, path, len) && k_ds[i].path[len] == '.') return 1;
    return 0;
}

int lf__ds_value_is(const cJSON *v, const char *ok) {
    cJSON *o = cJSON_Parse(ok);
    int eq = 0;
    if (o && cJSON_IsNumber(o) && cJSON_IsNumber(v)) eq = o->valuedouble == v->valuedouble;
    else if (o && cJSON_IsString(o) && cJSON_IsString(v)) eq = ieq(o->valuestring, v->valuestring);
    else if (o && cJSON_IsBool(o) && cJSON_IsBool(v)) eq = cJSON_IsTrue(o) == cJSON_IsTrue(v);
    cJSON_Delete(o);
    return eq;
}

int lf__ds_is_deepspeed_file(const cJSON *root) {
    int core = 0;
    if (!cJSON_IsObject(root)) return 0;
    for (const cJSON *m = root->child; m; m = m->next) {
        if (!m->string || !in_list(k_top, m->string)) return 0;
        core |= in_list(k_core, m->string);
    }
    return core;
}

/* scheduler.params of each DeepSpeed scheduler (lr_schedules.py's constructors) */
static const struct {
    const char *leaf;
    unsigned types; /* bit per lf_sched_type */
} k_sched_params[] = {
#define WL (1u << LF_SCHED_WARMUP_LR)
#define WD (1u << LF_SCHED_WARMUP_DECAY_LR)
#define WC (1u << LF_SCHED_WARMUP_COSINE_LR)
#define OC (1u << LF_SCHED_ONE_CYCLE)
#define RT (1u << LF_SCHED_LR_RANGE_TEST)
    {"warmup_min_lr", WL | WD},
    {"warmup_max_lr", WL | WD},
    {"warmup_num_steps", WL | WD | WC},
    {"warmup_type", WL | WD | WC},
    {"total_num_steps", WD | WC},
    {"warmup_min_ratio", WC},
    {"cos_min_ratio", WC},
    {"cycle_min_lr", OC},
    {"cycle_max_lr", OC},
    {"decay_lr_rate", OC},
    {"cycle_first_step_size", OC},
    {"cycle_second_step_size", OC},
    {"cycle_first_stair_count", OC},
    {"cycle_second_stair_count", OC},
    {"decay_step_size", OC},
    {"cycle_momentum", OC},
    {"cycle_min_mom", OC},
    {"cycle_max_mom", OC},
    {"decay_mom_rate", OC},
    {"lr_range_test_min_lr", RT},
    {"lr_range_test_step_size", RT},
    {"lr_range_test_step_rate", RT},
    {"lr_range_test_staircase", RT},
    {"last_batch_iteration", WL | WD | WC | OC | RT},
#undef WL
#undef WD
#undef WC
#undef OC
#undef RT
};

int lf__ds_sched_param_of(const char *leaf, int sched_type) {
    for (size_t i = 0; i < sizeof k_sched_params / sizeof k_sched_params[0]; i++)
        if (!strcmp(k_sched_params[i].leaf, leaf)) return (k_sched_params[i].types >> sched_type) & 1u;
    return 0;
}

const char *lf__ds_sched_name(int sched_type) {
    switch (sched_type) {
    case LF_SCHED_WARMUP_LR: return "WarmupLR";
    case LF_SCHED_WARMUP_DECAY_LR: return "WarmupDecayLR";
    case LF_SCHED_WARMUP_COSINE_LR: return "WarmupCosineLR";
    case LF_SCHED_ONE_CYCLE: return "OneCycle";
    case LF_SCHED_LR_RANGE_TEST: return "LRRangeTest";
    case LF_SCHED_CONSTANT: return "constant";
    default: return "cosine";
    }
}
