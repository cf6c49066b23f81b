/*
 * Checkpoints: out_dir/ckpt/step_%08d/ holding
 *   model.safetensors      F32 weights by HF GPT-2 names and shapes (no
 *                          "transformer." prefix; tied lm_head not stored),
 *                          metadata {"format":"pt"}
 *   optimizer.safetensors  AdamW moments as whole (logical) tensors named
 *                          "exp_avg.<param>" and "exp_avg_sq.<param>"
 *   trainer_state.json     the caller's state object plus "files":
 *                          {"model.safetensors": {"sha256":..,"bytes":..}, ...}
 * Written into ckpt/.tmp_step_%08d, every file fsynced, the directory renamed
 * into place and fsynced, then ckpt/latest (a one-line text file holding the
 * directory name) replaced atomically (write latest.tmp, fsync, rename).
 * Rotation keeps the newest keep_last step directories and never removes the
 * one `latest` names nor `protect` (e.g. the best); lf_checkpoint_prune adds
 * keep_every and runs before a save as well as after, so a full disk gets
 * back what the new save makes obsolete first.
 * Resolving a root falls back, when `latest` is missing, empty or names an
 * incomplete directory, to the newest step directory whose files all match
 * their SHA-256 (a crash or ENOSPC between the rename of the step directory
 * and that of latest leaves exactly that), and says so in a warning.
 */
#ifndef LLMFORGE_CHECKPOINT_H
#define LLMFORGE_CHECKPOINT_H

#include "llmforge/core.h"
#include "llmforge/model.h"
#include "llmforge/data.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A small file saved inside the checkpoint directory (covered by the SHA-256
 * list like the tensor files): e.g. a Hugging Face config.json, the
 * tokenizer's vocabulary. name is a plain file name. */
typedef struct lf_ckpt_file {
    const char *name;
    const void *data;
    size_t len;
} lf_ckpt_file;

typedef struct lf_ckpt_tensors {
    const lf_param_info *table; /* parameter table (names, shapes, offsets) */
    int count;
    size_t total; /* floats in each buffer */
} lf_ckpt_tensors;

/* Save. params/m/v are host buffers of `total` floats (m, v may be NULL: no
 * optimizer file). state_json: a JSON object text (the trainer's state).
 * extra: n_extra further files written into the directory (may be NULL). On
 * success *saved_dir (may be NULL) receives the final directory path (lf_free). */
lf_status lf_checkpoint_save(const char *ckpt_root, long step, const lf_ckpt_tensors *tt, const float *params,
                             const float *m, const float *v, const char *state_json, const lf_ckpt_file *extra,
                             int n_extra, int keep_last, const char *protect, char **saved_dir);

/* The same save in parts, for ranks that each hold slices of the state
 * (ZeRO): one rank begins (ckpt/.tmp_step_N/ with model.safetensors and,
 * with_optim, optimizer.safetensors created at full size, headers written;
 * *tmp_dir receives the directory, lf_free), every rank writes its flat
 * ranges [lo, lo+n) of parameters (and moments) into those files in place
 * (pwrite + fsync; the slices of a save must not overlap), then the rank that
 * began commits (hashes, state, extras, rename, latest, rotation) once all
 * slices are written, or discards the directory. The files describe whole
 * tensors whatever the slicing, so any layout reads them back. Every rank
 * must see tmp_dir (one filesystem). */
lf_status lf_checkpoint_begin(const char *ckpt_root, long step, const lf_ckpt_tensors *tt, int with_optim,
                              char **tmp_dir);
lf_status lf_checkpoint_write_slice(const char *tmp_dir, const lf_ckpt_tensors *tt, size_t lo, size_t n,
                                    const float *params, const float *m, const float *v);
lf_status lf_checkpoint_commit(const char *ckpt_root, long step, const char *tmp_dir, const char *state_json,
                               const lf_ckpt_file *extra, int n_extra, int keep_last, const char *protect,
                               char **saved_dir);
void lf_checkpoint_discard(const char *tmp_dir);
/* Load flat elements [lo, lo+n) of the parameters (params may be NULL) and
 * moments (m, v: both or neither) into buffers of n floats, after the same
 * name and shape checks as lf_checkpoint_load; verify = 0 skips the SHA-256
 * check (another rank did it). */
lf_status lf_checkpoint_load_slice(const char *dir, const lf_ckpt_tensors *tt, int verify, size_t lo, size_t n,
                                   float *params, float *m, float *v, char **state_json);
/* Resolve to a step directory path (*dir, lf_free): a step directory is
 * itself; a checkpoint root (holding `latest` or step directories) is what
 * its `latest` names, a run directory its ckpt/'s, a "latest" file what it
 * names. When `latest` is missing, empty, or names a directory whose
 * trainer_state.json is missing or unreadable or whose files are missing or
 * of another size than it records, the newest step directory whose every
 * file matches its size and SHA-256 is chosen instead, and a warning
 * (lf_log) names it and why latest was passed over. LF_ERR_NOT_FOUND when
 * there is no checkpoint (no latest and no step directory); LF_ERR_FORMAT /
 * LF_ERR_CHECKSUM when there are some but none is complete (the message
 * lists them). */
lf_status lf_checkpoint_resolve(const char *path, char **dir);
/* The same; flags LF_CKPT_RESOLVE_STRICT: no fallback, a broken or missing
 * `latest` is the error (`llmforge ckpt verify`). */
#define LF_CKPT_RESOLVE_STRICT 1u
lf_status lf_checkpoint_resolve_flags(const char *path, unsigned flags, char **dir);

/* Whether a checkpoint directory is complete: trainer_state.json reads and
 * lists model.safetensors, and every file it lists is there with its
 * recorded size and SHA-256. *n_files (may be NULL): the files listed.
 * LF_OK; LF_ERR_NOT_FOUND (trainer_state.json or a listed file missing),
 * LF_ERR_CHECKSUM (a size or hash differs), LF_ERR_FORMAT (unreadable
 * state); every bad file is named in the message. Reads only. */
lf_status lf_checkpoint_verify(const char *dir, int *n_files);

/* Retention: which step directories of a root survive a save of `step`. */
typedef struct lf_ckpt_retention {
    int keep_last;       /* the newest keep_last step directories, `step` counted (<= 0: all) */
    long keep_every;     /* and every step that is a multiple of this, forever (0: none) */
    const char *protect; /* and this one (a name or path under the root, e.g. the best; NULL: none) */
} lf_ckpt_retention;
/* Remove every step directory of ckpt_root that r does not keep once `step`
 * is saved, never the one `latest` names (when latest is missing or names
 * nothing: the newest other step directory with a trainer_state.json, the
 * one a resume falls back to), `protect`, or step itself (which need not
 * exist yet), and the temporaries a crash left (.tmp_step_*,
 * .del_step_*, .old_step_*, latest.tmp). Called before a save it frees what
 * the save makes obsolete anyway, so a run on a full disk can save again;
 * after it, it is the usual rotation. One writer per root (rank 0); failures
 * are logged (lf_log), never fatal. Returns how many step directories it
 * removed. */
int lf_checkpoint_prune(const char *ckpt_root, long step, const lf_ckpt_retention *r);

/* Load a checkpoint directory: verifies each file's SHA-256 against
 * trainer_state.json, loads weights (and moments when m, v != NULL) into
 * host buffers by name with shape checks. *state_json receives the
 * trainer_state.json text (lf_free; may be NULL). */
lf_status lf_checkpoint_load(const char *dir, const lf_ckpt_tensors *tt, float *params, float *m, float *v,
                             char **state_json);

/* Load weights from a safetensors file by Hugging Face name into host
 * params: accepts a family's tensor-name prefix (GPT-2's "transformer.",
 * lf_hf_tensor_unprefixed); ignores "lm_head.weight" (tied) and the buffers
 * the architecture tables name (GPT-2's "*.attn.bias" of 4 dims and
 * "*.attn.masked_bias", lf_hf_tensor_ignored); every missing tensor, unexpected tensor, shape
 * mismatch or non-F32 dtype is reported by name (all of them, in one message). */
lf_status lf_weights_load(const char *path, const lf_ckpt_tensors *tt, float *params);

/* ---------------------------------------------------------------- loading a model
 * (src/checkpoint/model_load.c): what sample, eval and serve load, with no
 * trainer involved. */

/* The model configuration and tokenizer spec a checkpoint directory was
 * trained with (from its trainer_state.json). */
lf_status lf_checkpoint_read_model(const char *dir, lf_model_config *cfg, char *tokenizer, size_t cap);

/* One call from a model to run to a model: ckpt is a checkpoint directory,
 * a run's out_dir (lf_checkpoint_resolve: its latest), or a Hugging Face
 * model directory (lf_checkpoint_is_hf_dir; hf.h: config.json through the
 * family tables, safetensors shards in bf16/fp16/fp32 widened to fp32,
 * block_size = the model's maximum positions; a RoPE checkpoint whose
 * config.json gives more positions than its training block_size runs with
 * them). The model is created on
 * backend be (NULL: "cpu") with the weights in backend memory and no
 * gradient memory (lf_model_release_grads: a model to run). tokenizer
 * (cap bytes, may be NULL) receives the spec ("" when there is none;
 * relative paths are against *dir_out): a checkpoint's, or
 * "hf:tokenizer.json" for an HF directory that has one. *dir_out (may be
 * NULL; lf_free) receives the resolved directory. On error nothing is left
 * allocated and the message names the file. */
lf_status lf_checkpoint_load_model(const char *ckpt, lf_backend *be, lf_model **model, char *tokenizer, size_t cap,
                                   char **dir_out);

/* ---- LoRA adapters in PEFT's format (docs/checkpoints.md "LoRA") --------
 * A PEFT adapter directory: adapter_config.json and adapter_model.safetensors
 * (peft's save_pretrained; every LoRA checkpoint step directory holds them). */
/* adapter_config.json of dir into lc, its base_model_name_or_path into base
 * (may be NULL; "" when absent); keys llmforge does not implement (DoRA,
 * rank/alpha patterns, modules_to_save, ...) are LF_ERR_UNSUPPORTED naming
 * the key and file. */
lf_status lf_lora_adapter_config(const char *dir, lf_lora_config *lc, char *base, size_t cap);
/* adapter_model.safetensors of dir into m's adapters (attached with the
 * adapter's config): every adapter tensor by PEFT's name and shape, no other. */
lf_status lf_lora_adapter_load(lf_model *m, const char *dir);
/* The base of an adapter into out: base_dir when given, else the adapter's
 * base_model_name_or_path (named; relative to adapter_dir unless absolute)
 * when that is a local Hugging Face directory, else LF_ERR_NOT_FOUND. */
lf_status lf_lora_adapter_base(const char *adapter_dir, const char *named, const char *base_dir, char *out, size_t cap);
/* `llmforge merge`: base (base_dir, or the adapter's own) + adapter, merged as
 * PEFT's merge_and_unload, written to out_dir as a Hugging Face directory
 * (the base's config.json, generation and tokenizer files, and
 * model.safetensors in fp32). */
lf_status lf_lora_merge(const char *adapter_dir, const char *base_dir, const char *out_dir);

/* Whether path is a Hugging Face model directory rather than an llmforge
 * checkpoint or run: config.json and model.safetensors (or its index), no
 * trainer_state.json and no `latest`. */
int lf_checkpoint_is_hf_dir(const char *path);

/* The end-of-sequence ids a model directory names, as transformers'
 * generate() takes them: generation_config.json's eos_token_id (a number or
 * a list), else (an HF directory only) config.json's. *n = 0 when neither
 * names one (the caller falls back to the tokenizer's end of text). At most
 * cap ids (LF_ERR_RANGE beyond); LF_ERR_FORMAT naming the file for
 * anything but non-negative integer ids. */
lf_status lf_checkpoint_eos_ids(const char *dir, int32_t *ids, int cap, int *n);

/* The tokenizer of a loaded model: spec (what lf_checkpoint_load_model
 * gave) opened relative to dir, and checked against the model: a tokenizer
 * with more ids than the model's vocabulary rows is LF_ERR_MISMATCH naming
 * both sizes (fewer is fine: HF models pad their embeddings). */
lf_status lf_checkpoint_open_tokenizer(const char *dir, const char *spec, const lf_model *m, lf_tokenizer **tok);

/* lf_checkpoint_load_model, then its tokenizer (lf_checkpoint_open_tokenizer):
 * what eval and serve need to work on text. A directory that names no
 * tokenizer (an HF directory without tokenizer.json) is LF_ERR_NOT_FOUND
 * naming it. On error nothing is left allocated. */
lf_status lf_checkpoint_load_text_model(const char *ckpt, lf_backend *be, lf_model **m, lf_tokenizer **tok,
                                        char **dir_out);

#ifdef __cplusplus
}
#endif
#endif
