/* Private declarations shared by the checkpoint module's files
 * (checkpoint.c, checkpoint_write.c, checkpoint_read.c). */
#ifndef LF_CHECKPOINT_IMPL_H
#define LF_CHECKPOINT_IMPL_H
#include <string.h>
#include "llmforge/checkpoint.h"

#define CK_PATH_MAX 4096
#define CK_STATE_CAP ((size_t)256 << 20) /* trainer_state.json holds a resolved config, not tensors */
#define CK_MODEL_FILE "model.safetensors"
#define CK_OPTIM_FILE "optimizer.safetensors"
#define CK_STATE_FILE "trainer_state.json"
#define CK_M_PREFIX "exp_avg."
#define CK_V_PREFIX "exp_avg_sq."

/* A checkpoint root's step directory: its name and step. */
typedef struct {
    char name[256];
    long step;
} step_ent;

/* The parameter table's entries sorted by name (lf__ck_table_check). */
typedef struct {
    const lf_param_info **by_name;
    int n;
} pindex;

static inline int starts_with(const char *s, const char *pre) { return strncmp(s, pre, strlen(pre)) == 0; }
static inline int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

/* out (CK_PATH_MAX) := a/b; LF_ERR_INVALID_ARG when too long. */
lf_status lf__ck_path_join(char *out, const char *a, const char *b);
/* out (CK_PATH_MAX) := in without trailing slashes (but keep "/"). */
lf_status lf__ck_path_norm(char *out, const char *in);
const char *lf__ck_base_name(const char *p);
/* A copy of s (lf_alloc; NULL when out of memory). */
char *lf__ck_dup(const char *s);
int lf__ck_is_dir(const char *p);
int lf__ck_is_file(const char *p);
/* The entry named name, or NULL. */
const lf_param_info *lf__ck_pindex_find(const pindex *ix, const char *name);
/* Checks the table against the buffers (what: the operation, for
 * messages) and builds the name index (ix->by_name: free). */
lf_status lf__ck_table_check(const char *what, const lf_ckpt_tensors *tt, pindex *ix);
/* The step directories of root, newest first (see checkpoint.c). */
int lf__ck_list_steps(const char *root, int clean, step_ent **out, size_t *count);

/* A PEFT LoRA adapter directory as a model (lora_adapter.c): its base
 * (base_model_name_or_path, local), the adapters attached and loaded; the
 * tokenizer spec and *dir_out of a LoRA run's step directory are its own,
 * a bare PEFT directory's its base's. */
lf_status lf__lora_load_model(const char *dir, lf_backend *be, lf_model **out, char *tokenizer, size_t cap,
                              char **dir_out);
char *lf__lora_strdup(const char *s); /* lf_alloc'd copy, NULL when out of memory */

#endif
