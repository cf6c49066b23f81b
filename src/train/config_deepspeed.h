/* DeepSpeed's configuration vocabulary as llmforge reads it (config_deepspeed.c),
 * used by the configuration table (config*.c). */
#ifndef LF_TRAIN_CONFIG_DEEPSPEED_H
#define LF_TRAIN_CONFIG_DEEPSPEED_H
#include <cjson/cJSON.h>
#include "llmforge/train.h"

/* What llmforge does with a DeepSpeed key that has no row of its own in the
 * configuration table. */
typedef enum lf__ds_state {
    LF__DS_IGNORED = 1, /* accepted, any value; one notice line says why */
    LF__DS_REFUSED = 2, /* refused, any value, with the reason */
    LF__DS_ONLY = 3,    /* accepted when the value is the one llmforge does (quietly), refused otherwise */
} lf__ds_state;

typedef struct lf__ds_key {
    const char *path;    /* dotted path; "sec.*" is the whole section */
    lf__ds_state state;  /* 0 in rows about values of a table key (bad/bad_why only) */
    const char *ok;      /* LF__DS_ONLY: the value accepted, as JSON text ("true", "-1") */
    const char *why;     /* the notice (IGNORED) or the refusal (REFUSED, ONLY) */
    const char *bad;     /* a string value refused (case-insensitive) even where the key is accepted */
    const char *bad_why; /* its reason */
} lf__ds_key;

/* The row of path (exact, else the innermost "section.*" holding it), NULL if none. */
const lf__ds_key *lf__ds_key_find(const char *path);
/* Every row, in order (for the help text and the key-state API): *n rows. */
const lf__ds_key *lf__ds_keys(int *n);
/* The reason a value of path is refused (a row whose bad matches the string
 * v), NULL if none. */
const char *lf__ds_value_refused(const char *path, const cJSON *v);

/* The rule that resolves "auto" for path (HF Trainer's), NULL when HF
 * Trainer does not fill that key. */
const char *lf__ds_auto_rule(const char *path);
/* "auto" on path with no command-line override: HF TrainingArguments' default
 * as JSON text and *note what to say of it; NULL when the value is derived. */
const char *lf__ds_auto_hf_default(const char *path, const char **note);
/* The value HF Trainer gives an "auto" zero_optimization key that follows
 * the model's hidden size h (trainer_config_finalize): reduce_bucket_size
 * h^2, stage3_prefetch_bucket_size int(0.9 h^2), stage3_param_persistence_threshold
 * 10 h. */
long long lf__ds_auto_from_hidden(const char *path, long long h);
/* path names a section holding rows of this table ("zero_optimization.offload_param"). */
int lf__ds_is_section(const char *path);
/* v equals the JSON text ok (an LF__DS_ONLY row's): numbers by value, strings
 * case-insensitively, booleans. */
int lf__ds_value_is(const cJSON *v, const char *ok);

/* A DeepSpeed file: every top-level key is one of DeepSpeed's documented
 * top-level keys, and at least one of the batch, optimizer, scheduler,
 * precision or ZeRO keys is there. */
int lf__ds_is_deepspeed_file(const cJSON *root);

/* scheduler.params.<leaf>: 0 when leaf is not a parameter of DeepSpeed
 * scheduler type (an lf_sched_type >= LF_SCHED_WARMUP_LR); 1 when it is. */
int lf__ds_sched_param_of(const char *leaf, int sched_type);
/* The DeepSpeed scheduler types' names, as scheduler.type spells them. */
const char *lf__ds_sched_name(int sched_type);

#endif
