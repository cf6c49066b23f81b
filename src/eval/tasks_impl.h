/*
 * Internals of the task harness shared by tasks.c (files, results, dispatch),
 * task_ll.c (log-likelihood scoring: multiple choice, classification,
 * ranking, perplexity) and task_gen.c (generation, exact match).
 *
 * Invariants: a loaded task owns every string it points to; examples are in
 * file order and keep their 1-based line numbers for messages. Results hold
 * metrics in the order they were added; a task's metrics are the contiguous
 * range [m0, m1).
 */
#ifndef LF_EVAL_TASKS_IMPL_H
#define LF_EVAL_TASKS_IMPL_H

#include <cjson/cJSON.h>
#include "llmforge/eval.h"

#define EV_MAX_ITEMS 65536 /* choices, candidates, references, labels per example */

typedef struct ev_example {
    long line;
    char *text;   /* context / text / prompt / query */
    char **items; /* choices / candidates / references / answers / per-line labels */
    int n_items;
    int *gold;     /* multiple_choice, ranking: gold indices; classification: the label's index */
    int n_gold;    /* (into items when the line has labels, else into the task's labels) */
    int *filtered; /* ranking: indices removed before ranking */
    int n_filtered;
} ev_example;

typedef struct ev_task {
    char *file; /* as given */
    char *name;
    lf_eval_kind kind;
    char *delim;   /* target_delimiter */
    char **labels; /* classification: header label set (may be NULL) */
    int n_labels;
    char **verb_from, **verb_to; /* verbalizers: label -> text */
    int n_verb;
    char **stop; /* generation / exact_match */
    int n_stop;
    int stop_given; /* the header had "stop" (possibly []) */
    int max_new_tokens;
    float temperature;
    int top_k;
    uint64_t seed;
    long stride; /* perplexity: 0 = block_size */
    lf_tie_policy ties;
    long hits[LF_RANKING_MAX_K];
    int n_hits;
    /* perplexity sources other than "text" lines */
    char *text; /* text_file contents */
    size_t text_len;
    char *text_path;
    char *dataset_dir;
    char *split;
    lf_dataset *ds;       /* dataset source: opened at load */
    lf_tokenizer *ds_tok; /* its tokenizer (bytes per token) */
    lf_shard **shards;    /* the split's shards, in order */
    size_t n_shards;
    size_t *shard_start; /* (n_shards + 1) first token of each shard in the split */
    long limit_windows;  /* > 0: at most this many windows (text_file, dataset) */
    ev_example *ex;
    size_t n_ex, cap_ex;
} ev_task;

struct lf_eval_tasks {
    ev_task *task;
    int n;
};

/* ---------------------------------------------------------------- results */
typedef struct ev_res_task {
    char *name, *file;
    lf_eval_kind kind;
    size_t examples;
    double seconds;
    size_t m0, m1;     /* metrics of this task */
    cJSON *detail;     /* kind-specific keys, merged into the task's JSON object */
    char *table_extra; /* text printed after the table (confusion matrix), may be NULL */
} ev_res_task;

struct lf_eval_results {
    lf_eval_metric *m;
    char **short_name; /* metric name without the task prefix */
    size_t n_m, cap_m;
    ev_res_task *t;
    size_t n_t, cap_t;
};

/* Add a metric "<current task>/<metric>" to the task begun last. */
lf_status lf__ev_metric(lf_eval_results *r, const char *metric, double value, int higher_is_better);
/* The current task's detail object (created on first use); NULL on NOMEM. */
cJSON *lf__ev_detail(lf_eval_results *r);
/* Set the current task's extra table text (takes ownership of text). */
void lf__ev_table_extra(lf_eval_results *r, char *text);

/* ---------------------------------------------------------------- scoring */
/* One sequence to score: inputs tok[0 .. n-1), target k (1 <= k < n) is
 * predicted at position k-1; the last n_cont targets are scored, except
 * where mask[k] == 0 (mask may be NULL). 2 <= n <= block_size + 1. */
typedef struct ev_seq {
    int32_t *tok;
    const uint8_t *mask;
    int n, n_cont;
    double ll;     /* out */
    long n_scored; /* out */
    int greedy;    /* out */
} ev_seq;

/* Score seqs in batches of `batch` (0 = automatic) rows. */
lf_status lf__ev_score(lf_model *m, ev_seq *s, size_t n, int batch);

/* Context shared by the runners. */
typedef struct ev_ctx {
    lf_model *m;
    const lf_tokenizer *tok;
    const lf_eval_run_opts *opts;
    lf_eval_results *res;
    int V, L;     /* model vocab_size, block_size */
    int have_eot; /* lf_tokenizer_eot(tok) is an id of the model */
    uint32_t eot;
} ev_ctx;

/* Build the (context, continuation) sequence of the harness into *seq
 * (seq->tok allocated with malloc). `where` prefixes error messages
 * ("file:line" or "request 3"). */
lf_status lf__ev_pair_seq(const ev_ctx *c, const char *where, const char *context, const char *continuation,
                          ev_seq *seq);

lf_status lf__ev_run_perplexity(const ev_ctx *c, const ev_task *t);
lf_status lf__ev_run_choice(const ev_ctx *c, const ev_task *t);   /* multiple_choice, classification, ranking */
lf_status lf__ev_run_generate(const ev_ctx *c, const ev_task *t); /* generation, exact_match */

/* strdup that records LF_ERR_NOMEM (NULL on failure). */
char *lf__ev_strdup(const char *s);

#endif
