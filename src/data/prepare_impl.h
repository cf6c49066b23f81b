/* Private declarations shared by prepare.c (inputs, batches, commit,
 * dataset.json) and prepare_encode.c (encoding on any thread, the pool). */
#ifndef LF_DATA_PREPARE_IMPL_H
#define LF_DATA_PREPARE_IMPL_H
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "chat_template.h"
#include "data_impl.h"

#define NO_KEY SIZE_MAX

typedef struct source {
    char *path;
    lf_input_format fmt; /* as resolved by the reader */
    uint64_t bytes, records, skipped;
    char sha256[65];
    int split;        /* the dataset's own split (LF__SPLIT_NONE when its name tells none; --keep-splits) */
    char *split_name; /* as the dataset names it ("validation"), NULL when none */
} source;

enum { ITEM_RECORD = 0, ITEM_SKIP = 1 };

/* One record (or one message of a record the reader skipped) of a batch. */
typedef struct item {
    uint32_t src;  /* index in prep.src */
    uint8_t kind;  /* ITEM_RECORD, ITEM_SKIP */
    uint8_t large; /* encoded by the calling thread on all threads */
    uint8_t msgs;  /* fine-tuning: a conversation (a = its messages as JSON) through the chat template */
    uint64_t line;
    size_t a_off, a_len;   /* text (pretraining) or prompt, in the arena, then a NUL */
    size_t b_off, b_len;   /* fine-tuning: the response, right after the prompt's NUL */
    size_t ka_off, kb_off; /* field names in the arena, NO_KEY when none; ITEM_SKIP: ka_off = message */
    /* dpo: the rejected response (b: the chosen) right after b's NUL, and its field name */
    size_t c_off, c_len, kc_off;
    /* set by the encoding thread */
    lf_status st; /* LF_OK, or a fatal error (msg) */
    int bad;      /* a bad record to skip (msg) */
    char *msg;    /* malloc'd */
    int split;
    uint32_t *ids; /* lf_alloc'd; pretraining: ids(text); fine-tuning: prompt, response, eot */
    uint8_t *mask; /* malloc'd; fine-tuning: 0 on the prompt, 1 after */
    size_t n, targets;
} item;

typedef struct batch {
    item *it;
    size_t n, cap;
    char *arena;
    size_t alen, acap;
    size_t bytes;       /* strings + sizeof(item) per item */
    uint64_t bytes_at;  /* input position (over all passes) after its last record */
    atomic_size_t next; /* next item to claim */
} batch;

struct prep;

/* Helper threads: wait for a batch, encode records from it until none is
 * left, report idle. */
typedef struct pool {
    struct prep *p;
    pthread_t *th;
    int n_th;
    pthread_mutex_t mu;
    pthread_cond_t wake, idle;
    batch *cur;   /* the batch being encoded, NULL when none */
    uint64_t gen; /* incremented per batch handed out */
    int busy;     /* threads inside a batch */
    int stop;
} pool;

typedef struct prep {
    const lf_prepare_opts *o;
    const char *out_dir;
    size_t shard_tokens;
    int n_threads;
    size_t batch_bytes;
    double w[LF_PREPARE_N_SPLITS];
    source *src; /* the expanded list of files */
    size_t n_src, cap_src;
    uint64_t bytes_total, bytes_base; /* bytes_base: sizes of the files (and passes) finished */
    int pass, passes;
    double t0;
    lf_tokenizer *tok;
    int V, eot, sft;
    int dpo; /* mode dpo (sft is set too: masked pairs); see join_dpo */
    lf_split_writer *sw[LF_PREPARE_N_SPLITS];
    uint64_t records[LF_PREPARE_N_SPLITS], targets[LF_PREPARE_N_SPLITS];
    uint64_t shuf_n, shuf_i, shuf_counts[LF_PREPARE_N_SPLITS]; /* split_shuffle: records, next index, counts */
    int retired;                                               /* the earlier dataset.json was removed */
    batch b[2];
    batch *fill;        /* being filled by the calling thread */
    batch *inflight;    /* handed to the pool, not yet committed */
    pool *pl;           /* NULL with one thread */
    uint32_t cur_src;   /* the source being read (for reader skips) */
    lf_status fill_err; /* an error inside the reader's skip callback */
    uint64_t skipped;
    char first_skip[512];
    char *spec_out;           /* spec written to dataset.json */
    char tok_sha[65];         /* "" when the tokenizer names no single file */
    char tok_file_sha[2][65]; /* gpt2:DIR: SHA-256 of DIR/encoder.json and DIR/vocab.bpe ("" otherwise) */
    int has_tpl;              /* a chat template renders the pairs */
    lf__chat_template tpl;
    char tpl_sha[65]; /* of the chat_template.json written */
} prep;

/* Encode one record of b (n_threads: lf_tokenizer_encode_parallel's); the
 * result or the failure is noted on it (prepare_encode.c). */
void lf__prep_encode_item(const prep *p, const batch *b, item *it, int n_threads);
/* Claim and encode records of b until none is left (large ones are left to
 * the calling thread). */
void lf__prep_encode_batch(const prep *p, batch *b);
/* n helper threads; NULL (and no error) when none could be started: the
 * calling thread then does all the work, with the same result. */
pool *lf__prep_pool_create(prep *p, int n);
void lf__prep_pool_start(pool *pl, batch *b); /* hand b to the helpers */
/* Help encode b, then wait until no helper is inside it. */
void lf__prep_pool_wait(const prep *p, pool *pl, batch *b);
void lf__prep_pool_free(pool *pl); /* stops and joins the helpers; NULL: no-op */

#endif
