/*
 * Private interfaces of the data module (not installed, not part of the API):
 *  - raw views of a mapped shard, for the batch sampler's hot loop;
 *  - the tokenizer operations table: one entry per spec prefix ("char:",
 *    "gpt2:", "tiktoken:", "bpe:", "hf:"), dispatched by tokenizer.c (ggml-style table of
 *    function pointers; a kind that lacks an operation leaves it NULL and the
 *    wrapper answers LF_ERR_UNSUPPORTED).
 */
#ifndef LLMFORGE_DATA_IMPL_H
#define LLMFORGE_DATA_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "core/utf8.h" /* lf__utf8_decode and friends, used throughout data/ */
#include "llmforge/data.h"

/* ---------------------------------------------------------------- shards (shard.c) */
/* Little-endian loads; compilers turn these into single loads on LE hosts. */
static inline uint32_t lf__ld_u16le(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static inline uint32_t lf__ld_u32le(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
/* Raw little-endian token bytes (n_tokens * bytes_per_token). */
const unsigned char *lf__shard_token_bytes(const lf_shard *s);
/* 2 or 4. */
unsigned lf__shard_bytes_per_token(const lf_shard *s);
/* n_tokens mask bytes, or NULL when the shard has no mask. */
const unsigned char *lf__shard_mask_bytes(const lf_shard *s);
const char *lf__shard_path(const lf_shard *s);

/* ---------------------------------------------------------------- tokenizers */
typedef struct lf__tokenizer_ops {
    const char *prefix; /* "char:" */
    /* Open from the resolved argument of the spec (the part after the prefix). */
    lf_status (*open)(void **state, int *vocab_size, const char *arg);
    void (*free)(void *state);
    lf_status (*encode)(const void *state, const char *text, size_t len, uint32_t **ids, size_t *n);
    lf_status (*decode)(const void *state, const uint32_t *ids, size_t n, char **text, size_t *len);
    /* 1 when the argument is a file path to resolve against a base dir. */
    int arg_is_path;
    /* Optional (NULL: lf_tokenizer_encode_opts accepts the default options
     * only, through encode). Encode with options; base_off is added to the
     * byte offsets named in error messages (a part of a larger text). */
    lf_status (*encode_ex)(const void *state, const char *text, size_t len, const lf_encode_opts *opts, size_t base_off,
                           uint32_t **ids, size_t *n);
    /* Optional (NULL: never cut, lf_tokenizer_encode_parallel runs serially).
     * The first position p in [from, len) such that encoding text[0, p) and
     * text[p, len) separately (with any options) gives the ids of
     * text[0, len); len when there is none. */
    size_t (*cut)(const void *state, const char *text, size_t len, size_t from);
    /* Optional (NULL: no special tokens). Id of a special token by its text. */
    lf_status (*special_id)(const void *state, const char *name, uint32_t *id);
    /* Optional (NULL: no end-of-text). The end-of-text id, or -1 (lf_tokenizer_eot). */
    int (*eot)(const void *state);
} lf__tokenizer_ops;

extern const lf__tokenizer_ops lf__tokenizer_char_ops; /* tokenizer_char.c */
/* vocab.json text for the given code points, in the given order
 * ({"type":"char","chars":[...]}); *json is freed with cJSON_free. */
lf_status lf__char_vocab_json(const uint32_t *cps, size_t n, char **json);

/* Byte-level BPE kinds (tokenizer_bpe.c). */
extern const lf__tokenizer_ops lf__tokenizer_gpt2_ops;     /* "gpt2:DIR" */
extern const lf__tokenizer_ops lf__tokenizer_tiktoken_ops; /* "tiktoken:FILE" */
extern const lf__tokenizer_ops lf__tokenizer_bpe_ops;      /* "bpe:FILE" */
/* Hugging Face tokenizer.json, byte-level BPE (tokenizer_hf.c). */
extern const lf__tokenizer_ops lf__tokenizer_hf_ops; /* "hf:FILE" */

/* Encode with n_threads threads through ops->cut and ops->encode_ex
 * (bpe_parallel.c; lf_tokenizer_encode_parallel's body). */
lf_status lf__tokenizer_encode_parallel(const lf__tokenizer_ops *ops, const void *state, const char *text, size_t len,
                                        const lf_encode_opts *opts, int n_threads, uint32_t **ids, size_t *n);

/* ---------------------------------------------------------------- byte-level BPE internals (bpe_*.c) */
/* GPT-2 pre-tokeniser (bpe_pretok.c): tiktoken's r50k/gpt2 pattern
 *   '(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s
 * (equivalent to GPT-2's encoder.py pattern) with \s, \p{L}, \p{N} spelled
 * out so they hold tiktoken's Unicode 16 classes on any PCRE2. Compiled once
 * (JIT when available), matched concurrently with a scanner per call. */
typedef struct lf__pretok lf__pretok;
lf_status lf__pretok_create(lf__pretok **out);
void lf__pretok_free(lf__pretok *p);
/* The PCRE2 pattern source (UTF-8, for messages and tests). */
const char *lf__pretok_pattern(void);
/* A pre-tokeniser from a pattern written for Oniguruma's Ruby syntax (a
 * Hugging Face tokenizer.json Split regex; literal != 0: a plain string to
 * find), rewritten for PCRE2 as bpe_pretok.c describes and compiled with UTF,
 * UCP and MULTILINE (JIT when available). name (a static or longer-lived
 * string) prefixes its messages. Errors: LF_ERR_FORMAT (PCRE2 refuses the
 * pattern, naming the offset; not UTF-8), LF_ERR_UNSUPPORTED (a construct with
 * no PCRE2 form), LF_ERR_RANGE (over LF_PRETOK_MAX_PATTERN bytes),
 * LF_ERR_NOMEM. Matching through lf__pretok_next as for the GPT-2 pattern;
 * a match that exceeds PCRE2's backtracking limits is LF_ERR_RANGE. */
#define LF_PRETOK_MAX_PATTERN (64u << 10)
lf_status lf__pretok_create_custom(lf__pretok **out, const char *pattern, size_t len, int literal, const char *name);
/* The PCRE2 source a pre-tokeniser compiled (after the rewriting). */
const char *lf__pretok_source(const lf__pretok *p);

/* One thread's matcher: the PCRE2 match data (and a JIT stack made only if
 * a match needs more than the default 32 KiB). */
typedef struct lf__pretok_scan {
    const lf__pretok *p;
    void *md; /* pcre2_match_data_8 * */
    void *mc; /* pcre2_match_context_8 *, NULL until needed */
    void *js; /* pcre2_jit_stack_8 *, NULL until needed */
} lf__pretok_scan;
lf_status lf__pretok_scan_init(lf__pretok_scan *s, const lf__pretok *p);
void lf__pretok_scan_done(lf__pretok_scan *s);
/* The next piece of text[0, len) (valid UTF-8) at or after pos: sets
 * [*start, *end) and returns LF_OK, or LF_ERR_NOT_FOUND when none is left
 * (text that matches no alternative is skipped, as tiktoken does; the
 * pattern leaves none). Other statuses: a PCRE2 failure (message set). */
lf_status lf__pretok_next(lf__pretok_scan *s, const unsigned char *text, size_t len, size_t pos, size_t *start,
                          size_t *end);
/* The cut rule shared by the BPE kinds and the trainer (see ops->cut). */
size_t lf__bpe_cut(const char *text, size_t len, size_t from);

/* Byte-level BPE vocabulary and merge tables (bpe_merge.c). Read-only after
 * lf__bpe_build; ids are tiktoken ranks: merging two adjacent parts gives the
 * token whose bytes are their concatenation, lowest rank first, leftmost
 * first among equal ranks (tiktoken's byte_pair_merge). */
#define LF_BPE_MAX_RANKS (1u << 24)
#define LF_BPE_NONE UINT32_MAX
typedef struct lf__bpe {
    uint32_t n_ranks;      /* largest rank + 1 */
    size_t n_tokens;       /* ranks in use (holes allowed) */
    uint32_t *tok_off;     /* (n_ranks) offset of the token's bytes in blob */
    uint32_t *tok_len;     /* (n_ranks) length; 0 for a rank not in use */
    unsigned char *blob;   /* token bytes */
    uint32_t byte_id[256]; /* rank of each single byte */
    uint32_t *map;         /* (map_mask+1) token bytes -> rank + 1, 0 = empty */
    uint32_t *map_tag;     /* (map_mask+1) upper hash bits of the slot's key */
    size_t map_mask;
    uint64_t *pair_key; /* (pair_mask+1) left << 32 | right, UINT64_MAX = empty */
    uint32_t *pair_val; /* (pair_mask+1) priority of the merge: the concatenation's rank, or
                                with an explicit merge list its position in the list */
    size_t pair_mask;
    uint32_t *merge_id; /* (n_merges) token made by the merge of priority p; NULL without a
                                merge list (the priority is then the token's rank) */
    uint32_t n_merges;
} lf__bpe;
/* Take ownership of tokens (bytes in blob, tok_off/tok_len per rank, all
 * malloc'd) and build the lookup tables. Fails (LF_ERR_FORMAT, naming `what`)
 * on a repeated token or a single byte without a token. */
lf_status lf__bpe_build(lf__bpe *b, const char *what);
/* The same tables from an explicit merge list (Hugging Face tokenizer.json),
 * in two steps: lf__bpe_build_map builds the token map and byte_id[] alone
 * (so the caller can look the merges' tokens up), then lf__bpe_set_merges
 * the pair table: merge p joins the tokens left[p] and right[p] into
 * result[p], and only the listed pairs ever merge, lowest p first (leftmost
 * among equal), as tokenizers' BPE does; a pair listed twice keeps its later
 * p (tokenizers collects the list into a hash map); left[p] or right[p]
 * LF_BPE_NONE leaves merge p out (one that can never apply). The caller
 * checks that every id names a token. Errors as lf__bpe_build. */
lf_status lf__bpe_build_map(lf__bpe *b, const char *what);
lf_status lf__bpe_set_merges(lf__bpe *b, const uint32_t *left, const uint32_t *right, const uint32_t *result,
                             uint32_t n_merges, const char *what);
void lf__bpe_release(lf__bpe *b);
/* The token the merge of priority p makes (lf__bpe_pair's answer). */
static inline uint32_t lf__bpe_result(const lf__bpe *b, uint32_t p) { return b->merge_id ? b->merge_id[p] : p; }
/* The 64-bit hash of a byte string the BPE tables use (also the trainer's). */
uint64_t lf__bpe_hash(const unsigned char *p, size_t n);
/* Rank of the token with exactly these bytes, LF_BPE_NONE when none. */
uint32_t lf__bpe_lookup(const lf__bpe *b, const unsigned char *p, size_t n);
/* Priority of merging ranks a then b (the token it makes: lf__bpe_result),
 * LF_BPE_NONE when they do not merge. */
uint32_t lf__bpe_pair(const lf__bpe *b, uint32_t a, uint32_t r);
/* BPE of one piece (1 <= n < 2^32 bytes) into out (room for n ids); returns
 * the count, SIZE_MAX when out of memory (no message). algo 0: automatic,
 * 1: quadratic scan (as tiktoken), 2: heap (for long pieces). The three give
 * the same ids (tests check it). */
size_t lf__bpe_merge(const lf__bpe *b, const unsigned char *p, size_t n, uint32_t *out, int algo);

/* Resolve relative paths inside a spec against base_dir ("char:vocab.json",
 * "/d" -> "char:/d/vocab.json"). Specs of unknown kinds, or whose argument is
 * not a path, are copied unchanged. *out is malloc'd (free()). */
lf_status lf__tokenizer_spec_resolve(const char *spec, const char *base_dir, char **out);
/* The file a resolved spec names, or NULL when its kind has none
 * (points into spec). */
const char *lf__tokenizer_spec_file(const char *spec);
/* The files a gpt2:DIR tokenizer reads from DIR: "encoder.json", "vocab.bpe". */
extern const char *const lf__gpt2_files[2];

/* ---------------------------------------------------------------- record readers (reader_jsonl.c) */
/* The format a file name tells: .jsonl/.ndjson/.jsonlines -> JSONL, .json
 * -> JSON (an array, or JSONL when the reader sniffs no '['), .txt/.text/.md
 * or no extension -> text; LF_INPUT_AUTO when the name tells none. */
lf_input_format lf__input_format_of_name(const char *path);

/* A JSON file read as one document (reader_json_doc.c): the top-level
 * array, or the list under a key of the top-level object (field, or its one
 * list-valued key). */
typedef struct lf__json_doc {
    char *text; /* the file (lf_alloc'd) */
    size_t len, pos, line_at;
    uint64_t line; /* line of byte line_at */
    int done;
} lf__json_doc;
/* Errors: LF_ERR_FORMAT naming the file (not valid JSON: *not_json = 1,
 * with line and column; no list, several lists, a missing field, an empty
 * list), LF_ERR_RANGE (over LF_READER_MAX_TEXT_BYTES), LF_ERR_IO. */
lf_status lf__json_doc_open(lf__json_doc *d, const char *path, const char *field, int *not_json);
/* The next element's bytes and line, or *eof. */
lf_status lf__json_doc_next(lf__json_doc *d, const char **elem, size_t *n, uint64_t *line, int *eof);
size_t lf__json_doc_offset(const lf__json_doc *d);
void lf__json_doc_free(lf__json_doc *d);
/* How a JSON file that starts with '{' reads: NOT_JSON (its first
 * non-blank line is not one JSON value: pretty-printed), DOCUMENT (one line,
 * the whole file: an object with one list of objects and none of the keys
 * a record is read by: "text", "prompt", ..., record_key), else LINES (also
 * when it cannot tell: a first line longer than cap, an unreadable file). */
enum { LF__JSON_SNIFF_NOT_JSON = 0, LF__JSON_SNIFF_LINES = 1, LF__JSON_SNIFF_DOCUMENT = 2 };
int lf__json_sniff(const char *path, size_t cap, const char *record_key);

/* ---------------------------------------------------------------- content-hash split (split.c) */
/* The record's position in [0,1): the first 8 bytes of SHA-256(key) read
 * big-endian, divided by 2^64 (as a double: the top 53 bits). */
double lf__split_unit(const void *key, size_t len);
/* The split (0 train, 1 val, 2 test) of position u under the weights
 * w[0..2] (>= 0, w[0] > 0): the first k with u < (w[0]+..+w[k]) / sum;
 * never a split whose weight is 0. */
int lf__split_pick(double u, const double w[3]);
/* The seeded shuffle split (split.c): pi(i), a bijection of [0, n) keyed by
 * seed; the exact counts of n records for weights w (val and test rounded
 * half up, train the rest); the split of record i. */
uint64_t lf__split_perm(uint64_t i, uint64_t n, uint64_t seed);
void lf__split_counts(uint64_t n, const double w[3], uint64_t out[3]);
int lf__split_shuffled(uint64_t i, uint64_t n, uint64_t seed, const uint64_t counts[3]);

/* ---------------------------------------------------------------- dataset directories (dataset_dir.c, hub_configs.c) */
/* The `configs:` list of a hub dataset card's YAML header (hub_configs.c). */
typedef struct lf__hub_files {
    char *split;     /* the split's name as the card writes it ("train", "validation", "unsupervised") */
    char **patterns; /* (n_patterns) glob patterns relative to the repository (or data_dir) */
    size_t n_patterns;
} lf__hub_files;
typedef struct lf__hub_config {
    char *name; /* config_name ("default" when the entry has none) */
    int is_default;
    char *data_dir; /* NULL when none */
    lf__hub_files *files;
    size_t n_files;
} lf__hub_config;
/* Read the configs of path (a README.md): *n 0 when it has no YAML header or
 * no configs key. Errors: LF_ERR_FORMAT naming path and line (invalid YAML,
 * a key of a config that is not supported, by its name), LF_ERR_IO,
 * LF_ERR_NOMEM. Free with lf__hub_configs_free. */
lf_status lf__hub_configs_read(const char *path, lf__hub_config **cfgs, size_t *n);
void lf__hub_configs_free(lf__hub_config *cfgs, size_t n);

/* One input file of an expanded directory. */
typedef struct lf__input_file {
    char *path;       /* dir/relative path; malloc'd */
    int split;        /* LF__SPLIT_NONE, or 0 train, 1 val, 2 test, as the dataset names it */
    char *split_name; /* the dataset's own name of that split, NULL when it names none */
} lf__input_file;
#define LF__SPLIT_NONE (-1)
/* The split a split name means: train/training -> 0, validation/valid/val/dev
 * -> 1, test/testing/eval/evaluation -> 2 (ASCII case-insensitive), else
 * LF__SPLIT_NONE. */
int lf__split_of_name(const char *name, size_t len);
/* The split a file's path tells, as `datasets` infers it: the first word of
 * the file name (words split at any byte not a letter or digit) that names
 * a split, else (dirs_too) the nearest directory of rel whose words name one;
 * *word (may be NULL) gets that word's start and *word_len its length. */
int lf__split_of_path(const char *rel, int dirs_too, const char **word, size_t *word_len);
/* The input files of a directory, in the order they are read:
 *  - a `datasets` save_to_disk DatasetDict (dataset_dict.json: its splits'
 *    subdirectories) or Dataset (state.json: its _data_files, its _split);
 *  - a hub repository whose README.md has a configs: header: the files its
 *    data_files patterns match (the config named subset, else the default
 *    one), with their splits; a pattern matching no file is an error naming
 *    README.md and the pattern;
 *  - otherwise every file of the tree (subdirectories recursively), byte-wise
 *    name order, with the split its path tells; in a hub repository (a
 *    README.md beside any other file) README.md and, beside record files, text
 *    files (LICENSE, notes) are not data.
 * Every file left out is logged once (lf_log, LF_LOG_INFO) with why; with no
 * file left the error (LF_ERR_INVALID_ARG) names the directory and the first
 * files left out. format: the format every file is read as, LF_INPUT_AUTO
 * for "by its name". */
lf_status lf__dataset_dir_expand(const char *dir, lf_input_format format, const char *subset, lf__input_file **files,
                                 size_t *n);
void lf__input_files_free(lf__input_file *files, size_t n);

/* ---------------------------------------------------------------- Parquet DELTA encodings (parquet_delta.c) */
enum { LF__PQ_DELTA_LENGTH_BYTE_ARRAY = 6, LF__PQ_DELTA_BYTE_ARRAY = 7 };
/* A page's string values, decoded: value i is buf[off[i], off[i] + len[i]). */
typedef struct lf__pq_delta {
    unsigned char *buf;
    size_t *off, *len;
    size_t n, next; /* values, and the next one to hand out */
} lf__pq_delta;
/* Decode the values of a DELTA_LENGTH_BYTE_ARRAY or DELTA_BYTE_ARRAY page
 * p[0, n) (at most max_values values, max_bytes decoded bytes) into d
 * (released first); NULL, or why the data is broken (static text). */
const char *lf__pq_delta_decode(lf__pq_delta *d, int enc, const unsigned char *p, size_t n, size_t max_values,
                                size_t max_bytes);
void lf__pq_delta_free(lf__pq_delta *d);

/* ---------------------------------------------------------------- conversations (prepare_chat.c) */
struct lf__chat_template;
/* [{"role": "user", "content": prompt}, {"role": "assistant", "content":
 * response}] as compact JSON (cJSON_free); NULL when out of memory. */
char *lf__prepare_pair_messages(const char *prompt, const char *response);
/* json[0, len) (a list of messages) rendered by t, tokenized piece by piece
 * (special tokens in template text only) and masked: 1 on the assistant
 * turns, 0 elsewhere, then eot with mask 0. *ids lf_alloc'd, *mask
 * malloc'd, *n of each, *targets with mask 1. Errors: the template's
 * (LF_ERR_INVALID_ARG for raise_exception), LF_ERR_UNSUPPORTED (no
 * assistant mask), the tokenizer's, LF_ERR_FORMAT (no assistant turn),
 * LF_ERR_NOMEM. */
lf_status lf__prepare_conversation(const struct lf__chat_template *t, const lf_tokenizer *tok, const char *json,
                                   size_t len, uint32_t eot, int n_threads, uint32_t **ids, uint8_t **mask, size_t *n,
                                   size_t *targets);

/* ---------------------------------------------------------------- helpers */
/* "dir/name" (or name itself when absolute or dir is NULL/empty); malloc'd. */
char *lf__path_join(const char *dir, const char *name);
/* The entries of dir (not "." and "..", nor hidden ones when skip_hidden)
 * in byte-wise name order; free with lf__free_names. */
lf_status lf__list_dir_sorted(const char *dir, int skip_hidden, char ***names, size_t *n);
void lf__free_names(char **names, size_t n);
/* The directory holding path ("." when it has no slash); malloc'd. */
char *lf__path_dir(const char *path);
/* Write data to path.tmp, fsync, rename over path, fsync the directory. */
lf_status lf__file_write_atomic(const char *path, const void *data, size_t len);

/* ---------------------------------------------------------------- record sources
 * Formats other than text/JSONL/JSON plug into lf_reader through this table:
 * open() gets the path (already checked to be a regular file) and the
 * reader's options and returns an opaque state; next() fills *rec (strings
 * owned by the state, valid until the next call) or sets *eof; errors name
 * path and position (row, row group, tar member) and, with
 * opts->skip_bad_records, a bad record is counted through *skipped and
 * skipped instead; close() frees; bytes_read() says how many bytes of the
 * file have been consumed so far (for progress: the compressed bytes of a
 * gzip stream, the furthest byte read of a Parquet file, the file's size
 * once next() has reported the end). Implemented by reader_csv.c
 * (lf__csv_source), reader_parquet.c (lf__parquet_source) and reader_wds.c
 * (lf__wds_source). */
typedef struct lf__record_source {
    lf_status (*open)(void **state, const char *path, const lf_reader_opts *opts);
    lf_status (*next)(void *state, lf_record *rec, int *eof, uint64_t *skipped);
    void (*close)(void *state);
    uint64_t (*bytes_read)(const void *state);
} lf__record_source;
extern const lf__record_source lf__csv_source;
extern const lf__record_source lf__parquet_source;
extern const lf__record_source lf__wds_source;
extern const lf__record_source lf__arrow_source; /* reader_arrow.c */

/* What every record reader shares (reader_common.c). A bad record, msg
 * already saying where ("FILE:LINE: ..."): without opts->skip_bad_records,
 * lf_fail(st, msg); with it, a counted skip: ++*skipped, *skip_now = 1,
 * opts->on_skip (if set) gets msg escaped as lf_fail would, and LF_OK. */
lf_status lf__reader_bad(const lf_reader_opts *opts, uint64_t *skipped, int *skip_now, lf_status st, const char *msg);
/* "a string", "an array", ... of a cJSON value, for messages. */
struct cJSON;
const char *lf__json_type_name(const struct cJSON *v);

/* Split tokens [pos, pos+count) as int32 into dst; with apply_mask a token
 * whose loss mask is 0 becomes -1 (the sampler's targets). LF_ERR_RANGE
 * past the split's end (dataset.c; used by pairs.c and sft_pack.c). */
lf_status lf__dataset_copy(const lf_dataset *d, lf_split split, size_t pos, size_t count, int32_t *dst, int apply_mask);

#endif
