/* Private declarations shared by the configuration table's files (config.c
 * the table, defaults, the order of resolution and the public API;
 * config_parse.c reading JSON text and overrides into the table's fields;
 * config_derive.c derived keys: the schedule, DeepSpeed's schedulers and
 * "auto", the run header's notes; config_check.c cross-key validation;
 * config_text.c the dump of the resolved configuration and --help). */
#ifndef LF_TRAIN_CONFIG_IMPL_H
#define LF_TRAIN_CONFIG_IMPL_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmforge/train.h"
#include "config_deepspeed.h"

#define PATH_BUF 256         /* longest dotted key path handled (longer ones are unknown) */
#define LF__CFG_KEYS_MAX 256 /* rows the table may hold (parse_ctx's arrays; config.c asserts it) */

typedef enum key_type {
    KT_INT,     /* int field */
    KT_LONG,    /* long field */
    KT_FLOAT,   /* float field */
    KT_BOOL,    /* int field, 0/1, from true/false */
    KT_U64,     /* uint64_t field, from an integer literal only */
    KT_STRING,  /* char[cap] */
    KT_STRLIST, /* char[cap]: strings joined by '\n', from an array of strings (or one string) */
    KT_CHOICE,  /* char[cap]: one of choices (case-insensitive), stored as spelled in the table */
    KT_ENUM,    /* int field: index into choices (case-insensitive) */
    KT_PAIR,    /* two float fields (off, off2) from a 2-element array */
    KT_IGNORED, /* a DeepSpeed key that tunes its own machinery and changes no result: any value, ignored */
} key_type;

enum {
    KF_LO_OPEN = 1,    /* lower bound excluded */
    KF_HI_OPEN = 2,    /* upper bound excluded */
    KF_REQUIRED = 4,   /* string must be non-empty */
    KF_DERIVED = 8,    /* default computed from other keys (def_str says how) */
    KF_FULL_PATH = 16, /* an override names it by its full path only (lora.bias, lora.dropout: not model's) */
};

typedef struct key_def {
    const char *path;
    key_type type;
    size_t off, size; /* field offset and size (size: capacity for strings) */
    size_t off2;      /* KT_PAIR: second field */
    double lo, hi;    /* bounds of numbers (HUGE_VAL: none) */
    unsigned flags;
    double def[2];                          /* default of numbers and bools */
    const char *def_str;                    /* default of strings/choices; rule of derived keys */
    const char *const *choices;             /* NULL-terminated */
    const char *const *(*choices_fn)(void); /* instead of choices: a list owned elsewhere (model.arch's) */
    const char *alias;                      /* nanoGPT name accepted as a bare override */
    const char *help;
} key_def;

/* The table (config.c): lf__cfg_nkeys rows. */
extern const key_def lf__cfg_keys[];
extern const int lf__cfg_nkeys;

/* A key's choices, and the default of a string or choice key (NULL def_str:
 * the first choice). */
static inline const char *const *choices_of(const key_def *k) { return k->choices_fn ? k->choices_fn() : k->choices; }
static inline const char *def_str_of(const key_def *k) { return k->def_str ? k->def_str : choices_of(k)[0]; }

static inline int is_setting(const key_def *k) { return k->type != KT_IGNORED; }

static inline const char *leaf_of(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

static inline void *field(lf_train_config *cfg, size_t off) { return (char *)cfg + off; }
static inline const void *cfield(const lf_train_config *cfg, size_t off) { return (const char *)cfg + off; }

static inline long long get_integer(const lf_train_config *cfg, const key_def *k) {
    if (k->type == KT_LONG) return *(const long *)cfield(cfg, k->off);
    return *(const int *)cfield(cfg, k->off);
}

static inline float get_float(const lf_train_config *cfg, size_t off) { return *(const float *)cfield(cfg, off); }

/* Source text of one JSON number (cJSON keeps only a double). */
typedef struct numraw {
    const cJSON *node;
    const char *s;
    size_t n;
} numraw;

typedef struct parse_ctx {
    lf_train_config cfg;
    unsigned char given[LF__CFG_KEYS_MAX]; /* set by the file or an override */
    const char *where[LF__CFG_KEYS_MAX];   /* where it was set: "in 'x.json'", "on the command line" */
    const char *cur;                       /* where the value being applied comes from */
    int from_cli;                          /* the value is an override */
    const char *cli_text;                  /* the override's value text, verbatim */
    numraw *nums;                          /* number literals of the text being applied */
    size_t n_nums;
    char file_where[LF_PATH_MAX + 32];
    int world;           /* world size of the batch identity */
    char world_note[48]; /* where it came from, for messages: " (openmpi)" or "" */
    /* every problem is collected (config_report), not only the first */
    int n_errors;
    lf_status first_st;
    char errors[8192];
    char notes[8192]; /* the run header's lines (lf_train_config_report.notes) */
    /* DeepSpeed files (config_deepspeed.c) */
    int ds_file;                             /* the file is one: DeepSpeed's and torch's defaults */
    unsigned char is_auto[LF__CFG_KEYS_MAX]; /* "auto" given: resolved as HF Trainer does */
    char auto_ignored[8][PATH_BUF];          /* ignored keys given "auto" (their notes need the model) */
    int n_auto_ignored;
} parse_ctx;

/* ---- config.c: the table */
int lf__cfg_find_key(const char *path);   /* row of a table path, -1 if none */
int lf__cfg_key_index(const char *path);  /* row of a path known to be in the table */
int lf__cfg_is_section(const char *path); /* some key is "path.<something>" */
int lf__cfg_ascii_ieq(const char *a, const char *b);
/* Shortest %.Ng (N <= 9) that reads back as v, ".0" on integral values. */
void lf__cfg_fmt_float(char *buf, size_t cap, float v);
/* Integer bounds of a row: the table's, clipped to the C type. */
void lf__cfg_int_bounds(const key_def *k, long long *lo, long long *hi);
/* A row's range as text: "[1, 1024]", "[0, 1)", "(0, inf)". */
void lf__cfg_fmt_range(char *buf, size_t cap, const key_def *k);
int lf__cfg_float_in_range(const key_def *k, double v);
/* Origin note of row i for messages about a key other than the one reported. */
const char *lf__cfg_note_of(const parse_ctx *c, int i);

/* ---- config_parse.c: reading values */
extern const char *const lf__cfg_cli_where; /* "on the command line" */
/* Append one line to a bounded buffer (a line that does not fit is dropped). */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
void lf__cfg_add_line(char *buf, size_t cap, const char *fmt, ...);
/* Keep the problem just reported and go on (LF_OK); out of memory, internal
 * errors and bad arguments are returned. */
lf_status lf__cfg_keep_error(parse_ctx *c, lf_status st);
/* "key 'path' where: value is out of range [..]" */
lf_status lf__cfg_range_error_text(const key_def *k, const char *where, const char *value);
/* Apply a configuration text (name: the file, for messages) / one "key=value" override. */
lf_status lf__cfg_apply_text(parse_ctx *c, const char *text, const char *name);
lf_status lf__cfg_apply_override(parse_ctx *c, const char *ov);

/* ---- config_derive.c: derived keys */
void lf__cfg_derive_schedule(parse_ctx *c); /* scheduler.decay_iters and min_lr when not given */
/* DeepSpeed's schedulers and their "auto"; problems are kept. */
lf_status lf__cfg_derive_deepspeed(parse_ctx *c);
void lf__cfg_make_notes(parse_ctx *c); /* the run header's lines */

/* ---- config_check.c: validation */
lf_status lf__cfg_check_ranges(parse_ctx *c); /* every key against its range, every problem kept */
lf_status lf__cfg_derive_batch(parse_ctx *c); /* DeepSpeed's batch identity */
lf_status lf__cfg_check_keys(parse_ctx *c);   /* the rules across keys, the batch identity first */

/* ---- config_text.c: the dump */
/* The value of row k as a cJSON node (numbers as raw text so they print exactly). */
cJSON *lf__cfg_value_json(const lf_train_config *cfg, const key_def *k);

#endif
