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
 * one `latest` names nor `protect` (e.g. the best).
 */
#ifndef LLMFORGE_CHECKPOINT_H
#define LLMFORGE_CHECKPOINT_H

#include "llmforge/core.h"
#include "llmforge/model.h"

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
    size_t total;               /* floats in each buffer */
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
/* Resolve "ckpt_root/latest" (or a step directory given directly) to a
 * directory path (lf_free). LF_ERR_NOT_FOUND when there is none. */
lf_status lf_checkpoint_resolve(const char *path, char **dir);

/* Load a checkpoint directory: verifies each file's SHA-256 against
 * trainer_state.json, loads weights (and moments when m, v != NULL) into
 * host buffers by name with shape checks. *state_json receives the
 * trainer_state.json text (lf_free; may be NULL). */
lf_status lf_checkpoint_load(const char *dir, const lf_ckpt_tensors *tt, float *params, float *m, float *v,
                             char **state_json);

/* Load weights from a safetensors file by HF GPT-2 name into host params:
 * accepts an optional "transformer." prefix; ignores "lm_head.weight" (tied)
 * and the HF attention mask buffers ("*.attn.bias" of 4 dims,
 * "*.attn.masked_bias"); every missing tensor, unexpected tensor, shape
 * mismatch or non-F32 dtype is reported by name (all of them, in one message). */
lf_status lf_weights_load(const char *path, const lf_ckpt_tensors *tt, float *params);

#ifdef __cplusplus
}
#endif
#endif
