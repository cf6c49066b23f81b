/*
 * Hugging Face model directories: what `save_pretrained(dir,
 * safe_serialization=True)` writes, read without Python.
 *
 * A directory holds config.json (the model's PretrainedConfig as JSON:
 * model_type, sizes, options) and the weights, either
 *   - model.safetensors (one file), or
 *   - model-0000i-of-0000n.safetensors shards and model.safetensors.index.json,
 *     {"metadata": {...}, "weight_map": {"<tensor name>": "<shard file>", ...}}.
 * When both are present the index wins (transformers does the same).
 * Tensor names are the model's parameter names (model.layers.0.self_attn.
 * q_proj.weight, ...); linear weights are stored (out, in), row-major.
 *
 * lf_hf_open checks the directory as a whole before anything is read from
 * it: every shard the index names exists inside the directory (a plain file
 * name, no '/'), opens as safetensors, and holds every tensor the index puts
 * in it; no tensor is held by two shards. Tensors a shard holds that the
 * index does not list are still readable. Errors name the file and, where
 * there is one, the tensor or the key.
 *
 * lf_hf_model_config maps config.json to an lf_model_config for the model
 * types llmforge implements and refuses, naming the key, any option that
 * would change the computation in a way llmforge does not implement.
 *
 * Thread safety: a handle is read-only after lf_hf_open; any number of
 * threads may read tensors from it concurrently. lf_hf_close must not race
 * with them.
 */
#ifndef LLMFORGE_HF_H
#define LLMFORGE_HF_H

#include "llmforge/core.h"
#include "llmforge/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lf_hf_model lf_hf_model;

/* Open a model directory (see above). On success *out owns the parsed
 * config and the mapped shards until lf_hf_close. On failure *out is NULL
 * and nothing stays open. Statuses: LF_ERR_NOT_FOUND (no config.json; a
 * directory with neither model.safetensors nor model.safetensors.index.json;
 * a shard the index names does not exist), LF_ERR_FORMAT (config.json or the
 * index is not valid JSON of the expected shape, e.g. no string model_type,
 * a shard name with '/'; a shard that is not valid safetensors, e.g.
 * truncated), LF_ERR_MISMATCH (the index puts a tensor in a shard that does
 * not hold it; a tensor held by two shards), LF_ERR_RANGE (config.json over
 * 16 MiB, the index over 64 MiB, more than 65536 shards), LF_ERR_IO,
 * LF_ERR_NOMEM, LF_ERR_INVALID_ARG (NULL arguments). */
lf_status lf_hf_open(lf_hf_model **out, const char *dir);
/* Unmaps every shard and frees the handle; NULL is a no-op. */
void lf_hf_close(lf_hf_model *h);

/* config.json's "model_type" ("llama", "gpt2", ...), valid until close. */
const char *lf_hf_model_type(const lf_hf_model *h);
/* config.json's text exactly as read (NUL-terminated), valid until close. */
const char *lf_hf_config_text(const lf_hf_model *h);
/* The directory as given to lf_hf_open. */
const char *lf_hf_dir(const lf_hf_model *h);

/* config.json -> *out (zeroed first, every field set explicitly;
 * padded_vocab_size = vocab_size, dropout 0):
 *   "llama", "mistral" -> LF_ARCH_LLAMA, LF_NORM_RMSNORM, bias 0:
 *       hidden_size -> n_embd, num_hidden_layers -> n_layer,
 *       num_attention_heads -> n_head, num_key_value_heads -> n_kv_head
 *       (absent or null: n_head), intermediate_size -> ffn_hidden,
 *       vocab_size, max_position_embeddings -> block_size,
 *       rms_norm_eps -> norm_eps (absent: 1e-6, transformers' default),
 *       RoPE (lf__hf_rope, src/model/hf.c): rope_theta (top level,
 *       transformers 4.x, or in rope_parameters, 5.x; absent: 10000) and
 *       the scaling object rope_scaling (4.x; wins when set) or
 *       rope_parameters: rope_type (or 4.x's type) default, linear, dynamic,
 *       yarn or llama3 with that type's keys -> rope (original max
 *       positions from the top level, the object, else
 *       max_position_embeddings), tie_word_embeddings (absent: false);
 *       head_dim -> head_dim (0 when it equals hidden/heads); llama's
 *       attention_bias -> bias and out_bias, mlp_bias -> mlp_bias.
 *       Refused with LF_ERR_UNSUPPORTED, naming the key: hidden_act other
 *       than "silu"; another RoPE type; a key of the RoPE object its type
 *       does not read; a factor below 1; partial_rotary_factor other than
 *       1; an odd head_dim or one above 1024; hidden_size not divisible by
 *       num_attention_heads without a head_dim; num_attention_heads not
 *       divisible by num_key_value_heads; mistral's attention_bias or
 *       mlp_bias true. A required RoPE key missing (llama3's factors):
 *       LF_ERR_CONFIG. mistral's sliding_window (absent or null: 0) ->
 *       sliding_window: lf_model_config_validate then refuses a block_size
 *       beyond it (llmforge attends to the whole context), so a window
 *       shorter than max_position_embeddings needs a smaller block_size
 *       (train --init-from defaults to one; an HF directory used as it is
 *       runs contexts up to the window).
 *   "qwen2": as llama with q/k/v biases (bias 1); use_sliding_window true
 *       refused.
 *   "qwen3": as llama with qk_norm 1 (q_norm / k_norm, one RMSNorm weight
 *       of head_dim per q and k head, before RoPE); head_dim absent: 128
 *       (Qwen3Config's default); attention_bias -> bias and out_bias.
 *       Refused: use_sliding_window true, a layer_types entry other than
 *       "full_attention", mlp_bias true.
 *   "phi3": as llama with fused_proj 1 (qkv_proj and gate_up_proj, the
 *       same [q|k|v] and [gate|up] rows); sliding_window as mistral's.
 *       Refused: a RoPE type other than default (longrope; Phi3Config reads
 *       yarn and su as longrope), resid_pdrop or embd_pdrop other than 0,
 *       attention_bias or mlp_bias true.
 *   A model_type a family names as kin it lacks (gemma, gemma2, gemma3,
 *       phi, MoE types): LF_ERR_UNSUPPORTED saying what it needs.
 *   "gpt2" -> LF_ARCH_GPT2, LF_NORM_LAYERNORM, bias 1, tied: n_embd, n_layer,
 *       n_head, n_positions -> block_size, vocab_size, n_inner (null: 0, the
 *       architecture's 4*n_embd), layer_norm_epsilon (absent: 1e-5).
 *       Refused with LF_ERR_UNSUPPORTED: n_inner other than 4*n_embd,
 *       layer_norm_epsilon other than 1e-5, activation_function other than
 *       "gelu_new" / "gelu_pytorch_tanh" (llmforge's GELU is the tanh form),
 *       tie_word_embeddings false, scale_attn_weights false,
 *       scale_attn_by_inverse_layer_idx true.
 * Other model types: LF_ERR_UNSUPPORTED naming the type and the supported
 * ones. A required key missing, a value of the wrong JSON type, not an
 * integer, or out of range (sizes 1 .. 2^30): LF_ERR_CONFIG naming
 * config.json and the key. The result is not validated further (the model
 * code's own validation does that). */
lf_status lf_hf_model_config(const lf_hf_model *h, lf_model_config *out);

/* Tensors over all shards, sorted by name (strcmp); i in [0, count). */
int lf_hf_num_tensors(const lf_hf_model *h);
/* NULL when i is out of range. */
const char *lf_hf_tensor_name(const lf_hf_model *h, int i);
/* The file (shard name inside the directory) holding a tensor, NULL when
 * there is no such tensor. */
const char *lf_hf_tensor_file(const lf_hf_model *h, const char *name);

/* Shape of a tensor: *ndim in [0, 4], shape[0 .. *ndim). LF_ERR_NOT_FOUND
 * for an unknown name, LF_ERR_UNSUPPORTED for more than 4 dimensions. */
lf_status lf_hf_tensor_shape(const lf_hf_model *h, const char *name, int *ndim, int64_t shape[4]);

/* Copy a tensor into dst as fp32, numel elements (must equal the tensor's).
 * F32 is copied, BF16 and F16 are widened exactly (F16 subnormals, signed
 * zeros, infinities and NaNs included). LF_ERR_NOT_FOUND (no such tensor),
 * LF_ERR_MISMATCH (numel differs), LF_ERR_UNSUPPORTED (another dtype); each
 * message names the tensor and its file. */
lf_status lf_hf_read_f32(const lf_hf_model *h, const char *name, float *dst, size_t numel);

/* Every tensor of a model's parameter table (lf_model_params_table) into
 * host params (table offsets, fp32) by name: the table's name, else with
 * GPT-2's "transformer." prefix; shapes must match. All missing tensors,
 * shape mismatches and unexpected tensors are listed in one
 * LF_ERR_MISMATCH. Ignored: lm_head.weight when tied, RoPE's inv_freq
 * buffers, GPT-2's attention-mask buffers (".attn.bias", ".attn.masked_bias"). */
lf_status lf_hf_load_params(const lf_hf_model *h, const lf_param_info *table, int count, int tied, float *params);

/* For readers of single safetensors files with Hugging Face names
 * (lf_weights_load): `name` past the tensor-name prefix some family's files
 * put before the model's names (GPT-2's "transformer."), or `name` itself;
 * and whether `name` (with ndim dimensions; -1: not checked) is a buffer a
 * family's files carry that holds no parameter (GPT-2's 4-dimensional
 * attention masks, RoPE's inv_freq). Both come from the architecture tables
 * (src/model/<family>.c), every family's at once: a file is read by names,
 * whichever family wrote it. */
const char *lf_hf_tensor_unprefixed(const char *name);
int lf_hf_tensor_ignored(const char *name, int ndim);

#ifdef __cplusplus
}
#endif
#endif
