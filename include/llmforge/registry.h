/*
 * Model registry: provenance of every training run and checkpoint in one
 * SQLite database, so that "which data, config and code made this
 * checkpoint, what was it trained from, which one is in production" has an
 * answer that does not depend on remembering directory names.
 *
 * The database (one file, WAL mode, see lf_registry_open) holds
 *   runs         one per `llmforge train` invocation: the resolved
 *                configuration and its SHA-256, the dataset manifest's and
 *                the tokenizer's SHA-256, the code version (`git describe`
 *                at build time, "unknown" outside a checkout), host, pid,
 *                world size, start and end time, status (running, finished,
 *                failed, preempted) and the failure message;
 *   checkpoints  run, step, absolute path, the SHA-256 of each of its files
 *                (from its trainer_state.json), one SHA-256 over that list,
 *                the model file's SHA-256 (what --init-from and relink match
 *                on), best/latest flags, and when and why it was removed;
 *   metrics      per checkpoint, name -> value, with their source ("train":
 *                the evaluation at that step; "suite": eval.suite or
 *                `llmforge models eval`);
 *                A run started by `llmforge sweep` is linked to its sweep
 *                and trial (lf_registry_run_link_sweep);
 *   edges        the lineage of a run: resumed-from (--resume), initialised-
 *                from or fine-tuned-from (--init-from; fine-tuned when the
 *                run's dataset holds prompt/response pairs, `prepare --mode
 *                sft`), pointing at a registry checkpoint found by path or by
 *                model hash, or at an external model (a Hugging Face
 *                directory, an unregistered file) recorded by path and hash;
 *   tags         free-text names on checkpoints ("prod", "best", ...).
 *
 * References: a checkpoint is named by "c<N>", a run by "r<N>" (meaning its
 * newest checkpoint where a checkpoint is wanted), by a path (a checkpoint
 * step directory, a run's ckpt/ or ckpt/latest, or its out_dir), or by a
 * tag that exactly one checkpoint carries (lf_registry_find).
 *
 * Ownership and threads: an lf_registry handle is used by one thread at a
 * time; any number of processes may open the same file at once (SQLite's
 * locking; every write is one BEGIN IMMEDIATE transaction, and a writer
 * waits up to LF_REGISTRY_BUSY_TIMEOUT_MS for another to finish). Strings
 * returned through char ** are lf_alloc'd (lf_free). Every function returns
 * LF_OK or a negative status with a message naming the registry file and
 * what failed (lf_last_error): LF_ERR_INVALID_ARG (NULL or malformed
 * arguments), LF_ERR_NOT_FOUND (no such file, run, checkpoint or tag),
 * LF_ERR_FORMAT (the file is not a SQLite database, or is damaged),
 * LF_ERR_UNSUPPORTED (a schema newer than this build), LF_ERR_IO (cannot
 * create, read or write it: permissions, read-only file system, full disk),
 * LF_ERR_BUSY (another process held the lock past the timeout), LF_ERR_NOMEM.
 *
 * The trainer records into the registry on rank 0 (registry.enabled,
 * registry.path; train.h) and never fails because of it: an unusable
 * registry is a warning and the run goes on unrecorded.
 */
#ifndef LLMFORGE_REGISTRY_H
#define LLMFORGE_REGISTRY_H

#include <stddef.h>
#include <stdint.h>
#include "llmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schema this build writes; lf_registry_open migrates older files to it. */
#define LF_REGISTRY_SCHEMA_VERSION 3
/* How long a writer waits for another process's transaction. */
#define LF_REGISTRY_BUSY_TIMEOUT_MS 10000
/* The environment variable naming the registry file. */
#define LF_REGISTRY_ENV "LLMFORGE_REGISTRY"

typedef struct lf_registry lf_registry;

/* The registry file: `configured` when non-empty (registry.path, the CLI's
 * --registry), else $LLMFORGE_REGISTRY when set and non-empty, else
 * $HOME/.local/share/llmforge/registry.db. Writes at most cap bytes to out.
 * LF_ERR_NOT_FOUND when HOME is unset and nothing else names a file;
 * LF_ERR_INVALID_ARG when the path does not fit. */
lf_status lf_registry_path_resolve(const char *configured, char *out, size_t cap);

/* lf_registry_open flags. */
enum {
    LF_REGISTRY_CREATE = 1, /* create the file (and its directory) when it does not exist */
};

/* Open (and with LF_REGISTRY_CREATE create) the registry at path: WAL
 * journal, busy timeout, foreign keys on; then the schema is brought to
 * LF_REGISTRY_SCHEMA_VERSION by running, in one transaction, every migration
 * from the file's version (PRAGMA user_version; 0 for a new file). A file
 * that is not a database, or whose schema is damaged, is LF_ERR_FORMAT; a
 * newer schema LF_ERR_UNSUPPORTED; a missing file without CREATE
 * LF_ERR_NOT_FOUND. Nothing is left open on failure. */
lf_status lf_registry_open(lf_registry **out, const char *path, unsigned flags);
/* NULL is a harmless no-op. */
void lf_registry_close(lf_registry *r);
/* The path the handle was opened with. */
const char *lf_registry_file(const lf_registry *r);
/* The schema version of the open file (LF_REGISTRY_SCHEMA_VERSION after a
 * successful open), or a negative status. */
int lf_registry_schema_version(lf_registry *r);
/* This build's code version: `git describe --always --dirty --tags` of the
 * source tree when it was built, "unknown" when it was not a git checkout. */
const char *lf_registry_code_version(void);

/* ---------------------------------------------------------------- recording */

typedef enum lf_run_status {
    LF_RUN_RUNNING = 0,
    LF_RUN_FINISHED = 1,
    LF_RUN_FAILED = 2,
    LF_RUN_PREEMPTED = 3, /* ended without recording an end, and resumed since */
} lf_run_status;

/* "running", "finished", "failed", "preempted"; "unknown" otherwise. */
const char *lf_run_status_name(lf_run_status s);

typedef struct lf_registry_run_info {
    const char *out_dir;        /* the run directory (stored as an absolute path) */
    const char *config_json;    /* the resolved configuration (its SHA-256 is computed) */
    const char *dataset;        /* data.dataset (stored as an absolute path) */
    const char *dataset_hash;   /* lf_registry_hash_dataset, or NULL/"" when unknown */
    const char *tokenizer;      /* the tokenizer spec, or NULL */
    const char *tokenizer_hash; /* lf_registry_hash_tokenizer, or NULL/"" */
    const char *code_version;   /* NULL: lf_registry_code_version() */
    const char *host;           /* NULL: gethostname() */
    long pid;                   /* 0: getpid() */
    int world_size;             /* ranks of the run (>= 1) */
    double started;             /* unix seconds; 0: now */
    /* lineage (each may be NULL) */
    const char *resumed_from;   /* the checkpoint directory --resume loaded */
    const char *init_from;      /* the --init-from path: a safetensors file or a model directory */
    const char *init_from_hash; /* its lf_registry_hash_model, or NULL: computed here */
    int fine_tune;              /* 1: --init-from is recorded as fine-tuned-from, else initialised-from */
} lf_registry_run_info;

/* Record a run as running; *run_id receives its id. The parent of
 * resumed_from / init_from is the registry checkpoint at that path, else the
 * one whose model file has that hash (the newest when several), else an
 * external node (a Hugging Face directory when it holds config.json and is
 * not an llmforge checkpoint, else a file). A resumed-from parent whose run
 * is still "running" is marked "preempted" (it never recorded its end).
 * LF_ERR_NOT_FOUND / LF_ERR_IO when init_from cannot be read for hashing. */
lf_status lf_registry_run_begin(lf_registry *r, const lf_registry_run_info *info, int64_t *run_id);
/* Record the end of a run: its status, end time (now) and message (may be NULL). */
lf_status lf_registry_run_end(lf_registry *r, int64_t run_id, lf_run_status status, const char *message);

typedef struct lf_registry_metric {
    const char *name; /* "val_loss", "<task>/<metric>" (at most 255 bytes) */
    double value;     /* non-finite values are stored as NULL (JSON null) */
} lf_registry_metric;

typedef struct lf_registry_ckpt_info {
    int64_t run_id;
    long step;
    const char *path;                  /* the step directory: its trainer_state.json gives the files' SHA-256 */
    const char *best_path;             /* the run directory's best checkpoint now (this one or an older one), or NULL */
    const lf_registry_metric *metrics; /* the evaluation at this step (may be NULL) */
    int n_metrics;
} lf_registry_ckpt_info;

/* Record a checkpoint (again: the same run and step replace the record).
 * It becomes its run directory's latest; best_path moves the best flag; the
 * metrics are stored with source "train". Checkpoints of the same run
 * directory whose directories are gone (checkpoint.keep_last rotation) are
 * marked removed. *ckpt_id (may be NULL) receives the id. LF_ERR_NOT_FOUND /
 * LF_ERR_FORMAT when trainer_state.json is missing or has no "files". */
lf_status lf_registry_checkpoint_add(lf_registry *r, const lf_registry_ckpt_info *c, int64_t *ckpt_id);
/* Link the runs recorded with run directory out_dir (compared absolute, as
 * lf_registry_run_begin stores it) and, when pid > 0, with that process id
 * and host (NULL: this host's name), to a sweep and one of its trials (the
 * strings `llmforge sweep` uses: the sweep directory's absolute path and the
 * trial's name, "t003"); linking again overwrites. The pid tells a trial's
 * own runs from those an earlier sweep left in the same directory. *n_runs
 * (may be NULL) receives the number of runs linked (0 when none matches). */
lf_status lf_registry_run_link_sweep(lf_registry *r, const char *out_dir, long pid, const char *host, const char *sweep,
                                     const char *trial, int *n_runs);
/* The runs linked to a sweep, by trial: {"t000":["r1","r4"],"t001":["r2"]}
 * (each trial's runs oldest first). */
lf_status lf_registry_sweep_runs_json(lf_registry *r, const char *sweep, char **json);
/* Record metrics of a checkpoint (a metric already recorded is replaced);
 * source: "train", "suite", ... (NULL: "suite"). */
lf_status lf_registry_metrics_put(lf_registry *r, int64_t ckpt_id, const lf_registry_metric *m, int n,
                                  const char *source);

/* ---------------------------------------------------------------- reading */

/* The checkpoint a reference names (see the top of this file). A path that
 * holds a checkpoint the registry knows under another path is found by its
 * model hash. LF_ERR_NOT_FOUND naming the reference; LF_ERR_INVALID_ARG when
 * a tag is on several checkpoints (they are listed). */
lf_status lf_registry_find(lf_registry *r, const char *ref, int64_t *ckpt_id);

/* A metric condition: "val_loss<2.5", "arith/exact_match>=0.9". */
typedef enum lf_registry_op {
    LF_REGISTRY_LT = 0,
    LF_REGISTRY_LE = 1,
    LF_REGISTRY_GT = 2,
    LF_REGISTRY_GE = 3,
    LF_REGISTRY_EQ = 4,
    LF_REGISTRY_NE = 5,
} lf_registry_op;

typedef struct lf_registry_cond {
    char metric[256];
    lf_registry_op op;
    double value;
} lf_registry_cond;

/* Parse "NAME OP VALUE" (OP one of < <= > >= == != ; spaces allowed around
 * it). LF_ERR_INVALID_ARG naming the text when it is not one. */
lf_status lf_registry_cond_parse(const char *text, lf_registry_cond *out);
/* 1 when v satisfies c (never for a NaN v). */
int lf_registry_cond_holds(const lf_registry_cond *c, double v);
/* "<", "<=", ... */
const char *lf_registry_op_name(lf_registry_op op);

typedef struct lf_registry_filter {
    const char *tag;               /* only checkpoints carrying this tag (NULL: any) */
    const lf_registry_cond *where; /* every condition must hold on a recorded metric */
    int n_where;
    int include_removed; /* 1: also checkpoints whose directory was removed */
} lf_registry_filter;

/* Checkpoints, oldest first, as a JSON array of objects:
 *   {"id":"c3","run":"r1","step":20,"path":"/abs/...","created":unix,
 *    "latest":bool,"best":bool,"removed":null|{"time":unix,"by":"gc|rotation|missing"},
 *    "run_status":"finished","tags":["prod"],"metrics":{"val_loss":2.1,...}}
 * f may be NULL (every checkpoint on disk). */
lf_status lf_registry_list_json(lf_registry *r, const lf_registry_filter *f, char **json);
/* One checkpoint with everything known about it: the list entry plus
 * "sha256", "model_sha256", "files":{name:{"sha256","bytes"}},
 * "metric_sources":{name:source}, and "run_record": the run's record
 *   {"id","out_dir","status","message","started","ended","host","pid",
 *    "world_size","code_version","config_hash","dataset","dataset_hash",
 *    "tokenizer","tokenizer_hash","sweep":null|"/abs/sweep/dir","sweep_trial":null|"t003",
 *    "config":{...},"checkpoints":["c1",...],
 *    "parent":null|{"kind","checkpoint":"c2"|null,"path","sha256","external":"hf"|"file"|null}}. */
lf_status lf_registry_show_json(lf_registry *r, int64_t ckpt, char **json);
/* The chain from a checkpoint back to its origin:
 *   {"chain":[{"id":"c5","run":"r3","step":30,"path":...,"removed":bool,
 *              "edge":null|{"kind":"initialised-from","parent":"c2"|null,"path":...,"sha256":...}}, ...],
 *    "origin":"scratch"|"hf"|"file"|"unregistered"}
 * Each entry's edge leads to the next entry; the last entry's edge is null
 * (the run started from scratch) or names an external parent. */
lf_status lf_registry_lineage_json(lf_registry *r, int64_t ckpt, char **json);
/* What differs between the runs of two checkpoints:
 *   {"a":"c1","b":"c4","config":[{"key":"optimizer.params.lr","a":0.001,"b":0.002}, ...],
 *    "data":[{"key":"dataset_hash","a":"..","b":".."}, ...]}
 * config: every leaf of the resolved configurations that differs (a key
 * missing on one side is null there); data: dataset, dataset_hash,
 * tokenizer, tokenizer_hash, code_version, world_size, parent (the lineage
 * edge), step. */
lf_status lf_registry_diff_json(lf_registry *r, int64_t a, int64_t b, char **json);
/* The recorded metrics of two checkpoints side by side:
 *   {"a":"c1","b":"c4","metrics":[{"name":"val_loss","a":2.3,"b":2.1,"delta":-0.2}, ...]}
 * every metric either has, sorted by name; a missing side is null and so is the delta. */
lf_status lf_registry_compare_json(lf_registry *r, int64_t a, int64_t b, char **json);

/* ---------------------------------------------------------------- tags, promotion */

/* Put tag `name` (1..64 bytes of letters, digits and "._-:/@+") on a checkpoint;
 * move = 1 takes it off every other checkpoint in the same transaction.
 * Tagging twice is not an error. */
lf_status lf_registry_tag(lf_registry *r, int64_t ckpt, const char *name, int move);
/* LF_ERR_NOT_FOUND when the checkpoint does not carry the tag. */
lf_status lf_registry_untag(lf_registry *r, int64_t ckpt, const char *name);
/* Tag (moving the tag) only when every requirement holds on the recorded
 * metrics of ckpt. observed[i] (may be NULL) receives the recorded value of
 * req[i]'s metric (NaN when not recorded), held[i] (may be NULL) whether it
 * holds. When one does not hold nothing is tagged and the status is
 * LF_ERR_RANGE, the message naming every failing requirement with its value. */
lf_status lf_registry_promote(lf_registry *r, int64_t ckpt, const char *tag, const lf_registry_cond *req, int n,
                              double *observed, int *held);

/* ---------------------------------------------------------------- clean-up */

typedef struct lf_registry_gc_opts {
    int keep_best;        /* per run directory, the K best checkpoints by `metric` stay (K >= 0) */
    const char *metric;   /* NULL: "val_loss" */
    int higher_is_better; /* 0: lower is better */
    int dry_run;          /* 1: report, remove nothing */
} lf_registry_gc_opts;

/* Remove the checkpoint directories the policy no longer needs and mark them
 * removed. Kept, always: every tagged checkpoint, each run's newest
 * checkpoint, each run directory's latest (its ckpt/latest, checked on disk
 * as well), and the keep_best best by metric (a checkpoint without the
 * metric ranks last). A directory is removed only when its trainer_state.json
 * records the model hash the registry has (renamed to .del_<name> first, then
 * deleted); a directory already gone is marked removed ("missing"). Report:
 *   {"removed":[{"id","path"}],"kept":[{"id","why"}],"skipped":[{"id","path","why"}],"missing":[{"id","path"}],
 *    "dry_run":bool} */
lf_status lf_registry_gc(lf_registry *r, const lf_registry_gc_opts *o, char **json);
/* Find checkpoints again under dir (searched recursively, symlinks not
 * followed, at most 8 levels): every directory holding trainer_state.json
 * and model.safetensors is hashed, and registry checkpoints with that model
 * hash whose recorded directory no longer holds it get the new path (their
 * removed mark is cleared; a run whose out_dir is gone gets the new run
 * directory). Report:
 *   {"scanned":N,"relinked":[{"id","from","to"}],"unknown":[path, ...]} */
lf_status lf_registry_relink(lf_registry *r, const char *dir, char **json);

/* ---------------------------------------------------------------- hashes */

/* A dataset's identity: the SHA-256 of its dataset.json (which names every
 * shard, its token count, the sources and their hashes, and the tokenizer's
 * hash); for a directory of llm.c .bin files, the SHA-256 of the sorted list
 * of "name size" lines of its *.bin files. */
lf_status lf_registry_hash_dataset(const char *dir, char hex[65]);
/* A tokenizer's identity from its spec: the SHA-256 of the file of char:,
 * tiktoken:, bpe: and hf: specs; for gpt2:DIR the SHA-256 of
 * "encoder.json <sha256>\nvocab.bpe <sha256>\n". */
lf_status lf_registry_hash_tokenizer(const char *spec, char hex[65]);
/* A model's identity: the SHA-256 of a safetensors file, or of a directory's
 * model.safetensors; for a sharded Hugging Face directory (no
 * model.safetensors), the SHA-256 of the sorted "name sha256\n" lines of its
 * *.safetensors files. *is_hf (may be NULL) = 1 for a directory holding
 * config.json without trainer_state.json (a Hugging Face model). */
lf_status lf_registry_hash_model(const char *path, char hex[65], int *is_hf);

#ifdef __cplusplus
}
#endif
#endif
