/*
 * Data: token shards, datasets (a directory with dataset.json), tokenizers
 * and the batch sampler.
 *
 * Token shard, version 1 (all integers little-endian), 64-byte header:
 *   off  size  field
 *     0     8  magic "LFSHARD\0"
 *     8     4  u32 version = 1
 *    12     4  u32 bytes_per_token: 2 (u16 tokens) or 4 (u32 tokens)
 *    16     8  u64 n_tokens
 *    24     4  u32 flags: bit 0 = a loss mask follows the tokens
 *    28     4  u32 vocab_size (every token < vocab_size)
 *    32     4  u32 payload checksum: CRC-32 (zlib) of every byte after the header
 *    36    28  reserved, zero
 *   64         tokens (n_tokens * bytes_per_token)
 *              then, when flags bit 0: n_tokens bytes of loss mask
 *              (1 = the token counts as a target, 0 = it does not)
 * Shards are read with mmap. A header that does not match the file size, an
 * unknown magic/version/dtype or a checksum mismatch is an error naming the file.
 *
 * Dataset directory:
 *   dataset.json   manifest: {"format":"llmforge-dataset","version":1,
 *                   "tokenizer":{"spec":"char:vocab.json","sha256":...},
 *                   "vocab_size":V,
 *                   "splits":{"train":{"shards":["train.bin"],"tokens":N},
 *                             "val":{...}},
 *                   "sources":[{"path":...,"sha256":...,"bytes":...}]}
 *   vocab.json     for char datasets: {"type":"char","chars":["\n"," ",...]}
 *   train.bin, val.bin  shards
 */
#ifndef LLMFORGE_DATA_H
#define LLMFORGE_DATA_H

#include "llmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LF_SHARD_MAGIC "LFSHARD"
#define LF_SHARD_VERSION 1
#define LF_SHARD_HEADER_BYTES 64
#define LF_SHARD_FLAG_MASK 1u

/* ---------------------------------------------------------------- shards */
typedef struct lf_shard lf_shard;

/* Write a shard (tokens as u16 when vocab_size <= 65536, else u32). mask may
 * be NULL. Written to path.tmp, fsynced, renamed. */
lf_status lf_shard_write(const char *path, const uint32_t *tokens, const uint8_t *mask, size_t n,
                         uint32_t vocab_size);
/* Open (mmap) and validate a shard; verify_checksum != 0 checks the CRC. */
lf_status lf_shard_open(lf_shard **out, const char *path, int verify_checksum);
void lf_shard_close(lf_shard *s);
size_t lf_shard_num_tokens(const lf_shard *s);
uint32_t lf_shard_vocab_size(const lf_shard *s);
int lf_shard_has_mask(const lf_shard *s);
uint32_t lf_shard_token(const lf_shard *s, size_t i);
/* 1 if token i counts as a target (always 1 without a mask). */
int lf_shard_mask(const lf_shard *s, size_t i);

/* ---------------------------------------------------------------- tokenizers */
typedef struct lf_tokenizer lf_tokenizer;

/* Open a tokenizer from a spec string: "char:PATH/vocab.json", "gpt2:DIR",
 * "tiktoken:FILE", "bpe:FILE" (kinds listed below). Relative paths
 * in the spec are resolved against base_dir when base_dir != NULL. */
lf_status lf_tokenizer_open(lf_tokenizer **out, const char *spec, const char *base_dir);
void lf_tokenizer_free(lf_tokenizer *t);
int lf_tokenizer_vocab_size(const lf_tokenizer *t);
/* Encode UTF-8 text with the default options (lf_encode_opts_default: special
 * tokens are ordinary text, invalid UTF-8 is an error naming its byte offset).
 * *ids is allocated (lf_free). A character outside the vocabulary is an error
 * naming it and its byte offset. */
lf_status lf_tokenizer_encode(const lf_tokenizer *t, const char *text, size_t len, uint32_t **ids,
                              size_t *n);
/* Decode ids to a NUL-terminated string (lf_free); *len excludes the NUL.
 * Byte-level BPE kinds return the exact bytes the ids stand for: the ids of
 * a text decode to that text, but an arbitrary id sequence (one cut inside a
 * multi-byte character, as when streaming one token at a time) may decode to
 * bytes that are not valid UTF-8 on their own, and a text holding U+0000
 * decodes with that NUL inside (use *len). An id outside the vocabulary is
 * LF_ERR_RANGE naming the id and its position. */
lf_status lf_tokenizer_decode(const lf_tokenizer *t, const uint32_t *ids, size_t n, char **text,
                              size_t *len);

/* Tokenizer kinds (spec prefixes), see docs/tokenizers.md:
 *   char:FILE      vocab.json of code points (nanoGPT shakespeare_char)
 *   gpt2:DIR       GPT-2 byte-level BPE from DIR/encoder.json + DIR/vocab.bpe;
 *                  ids equal tiktoken's "gpt2" encoding; <|endoftext|> = 50256
 *   tiktoken:FILE  a tiktoken rank file (one "base64(token) rank" per line)
 *                  with GPT-2's pre-tokeniser; <|endoftext|> = largest rank + 1
 *   bpe:FILE       a BPE trained by lf_bpe_train (same file format and
 *                  conventions as tiktoken:FILE)
 *
 * Invalid UTF-8 (byte-level BPE kinds): by default (LF_UTF8_STRICT) encoding
 * fails with LF_ERR_FORMAT naming the byte offset of the first invalid byte
 * and the defect (RFC 3629: overlong forms, surrogates, code points above
 * U+10FFFF, truncated sequences and stray continuation bytes are invalid).
 * With LF_UTF8_BYTES the text is cut at every invalid byte: each maximal valid
 * run is encoded exactly as that run alone would be, and each invalid byte
 * becomes the token of that single byte, so decode(encode(x)) == x for any
 * bytes x. The char kind supports LF_UTF8_STRICT only.
 *
 * Thread safety: an open tokenizer is read-only; lf_tokenizer_encode*,
 * lf_tokenizer_decode and lf_tokenizer_special_id may be called from any
 * number of threads at once on the same tokenizer. */
typedef enum lf_utf8_policy {
    LF_UTF8_STRICT = 0, /* invalid UTF-8 is LF_ERR_FORMAT naming its byte offset */
    LF_UTF8_BYTES = 1,  /* each invalid byte is encoded as its own single-byte token */
} lf_utf8_policy;

/* Options for lf_tokenizer_encode_opts; a plain struct owned by the caller.
 * Start from lf_encode_opts_default() (all zero: what lf_tokenizer_encode does). */
typedef struct lf_encode_opts {
    /* 1: the text of a special token ("<|endoftext|>") becomes its id, as
     * tiktoken's encode(text, allowed_special="all"); 0 (default): it is
     * encoded as ordinary text, as tiktoken's encode_ordinary. */
    int allow_special;
    lf_utf8_policy invalid_utf8;
} lf_encode_opts;

lf_encode_opts lf_encode_opts_default(void);

/* lf_tokenizer_encode with options (opts NULL = defaults). Errors: as
 * lf_tokenizer_encode; LF_ERR_UNSUPPORTED for LF_UTF8_BYTES with a kind that
 * has no byte fallback (char). */
lf_status lf_tokenizer_encode_opts(const lf_tokenizer *t, const char *text, size_t len, const lf_encode_opts *opts,
                                   uint32_t **ids, size_t *n);

/* The same ids as lf_tokenizer_encode_opts, computed by n_threads threads
 * (POSIX threads; n_threads <= 1 or a short text: the calling thread alone).
 * The text is cut only where cutting cannot change the result (byte-level
 * BPE: before an ASCII space or newline that follows an ASCII character other
 * than whitespace), the parts are encoded concurrently and the ids
 * concatenated. On an error the message is the one the serial call gives
 * (the first error in text order, offsets relative to the whole text). */
lf_status lf_tokenizer_encode_parallel(const lf_tokenizer *t, const char *text, size_t len,
                                       const lf_encode_opts *opts, int n_threads, uint32_t **ids, size_t *n);

/* Id of a special token by its text ("<|endoftext|>"). LF_ERR_NOT_FOUND when
 * the tokenizer has no such token (the char kind has none). */
lf_status lf_tokenizer_special_id(const lf_tokenizer *t, const char *name, uint32_t *id);

/* The end-of-text id: what prepare appends after every document and every
 * fine-tuning response, and where generation stops. gpt2/tiktoken/bpe: the
 * id of <|endoftext|> (50256 for gpt2); char: the id of "\n" (a character
 * vocabulary has no special tokens, so a newline ends a text). -1 when the
 * tokenizer has none (a char vocabulary without "\n") or t is NULL.
 * Records no error. */
int lf_tokenizer_eot(const lf_tokenizer *t);

/* ---------------------------------------------------------------- BPE training */
/* Byte-level BPE training with GPT-2 pre-tokenisation (docs/tokenizers.md):
 * every input file is UTF-8 text (invalid UTF-8 is an error naming the file
 * and byte offset); the pre-token frequencies are counted, then the most
 * frequent adjacent pair is merged until the vocabulary is full or no pair
 * occurs min_frequency times. Ties go to the pair whose left token's bytes
 * sort first (then the right token's; shorter before longer when one is a
 * prefix of the other), so the result does not depend on hashing or on the
 * order of equal counts. The output is a tiktoken rank file: ranks 0..255 are
 * the single bytes 0x00..0xFF, then one rank per merge in order; ids are the
 * ranks and <|endoftext|> is the id after the last rank. Written atomically. */
typedef struct lf_bpe_train_opts {
    uint32_t vocab_size;    /* total ids including <|endoftext|>; 257 .. 2^24 (default 50257) */
    uint64_t min_frequency; /* a pair seen fewer times is never merged (default 2) */
} lf_bpe_train_opts;

typedef struct lf_bpe_train_stats {
    uint64_t input_bytes;   /* bytes read over all inputs */
    uint64_t pieces;        /* pre-tokens counted */
    uint64_t unique_pieces; /* distinct pre-tokens */
    uint32_t merges;        /* ranks added after the 256 bytes */
    uint32_t vocab_size;    /* ids in the written tokenizer (ranks + <|endoftext|>) */
} lf_bpe_train_stats;

lf_bpe_train_opts lf_bpe_train_opts_default(void);

/* Train on the files inputs[0 .. n_inputs) and write the rank file to
 * out_path. stats may be NULL. Errors: LF_ERR_INVALID_ARG (no inputs, bad
 * options), LF_ERR_NOT_FOUND/LF_ERR_IO (an input cannot be read, the output
 * cannot be written), LF_ERR_FORMAT (invalid UTF-8, naming file and offset),
 * LF_ERR_NOMEM. */
lf_status lf_bpe_train(const char *const *inputs, size_t n_inputs, const lf_bpe_train_opts *opts,
                       const char *out_path, lf_bpe_train_stats *stats);

/* ---------------------------------------------------------------- preparation */
typedef struct lf_prepare_stats {
    size_t n_chars;         /* code points read */
    int vocab_size;
    size_t train_tokens, val_tokens;
} lf_prepare_stats;

/* nanoGPT shakespeare_char prepare: vocabulary = sorted unique code points of
 * the UTF-8 input; first 90% (of characters) train, last 10% val. Writes
 * out_dir/{vocab.json,train.bin,val.bin,dataset.json}. input_path may be a
 * file or a directory (every regular file in it, in sorted name order,
 * concatenated). */
lf_status lf_prepare_char(const char *input_path, const char *out_dir, lf_prepare_stats *stats);

/* ---------------------------------------------------------------- record readers (docs/data.md)
 * A reader yields the records of one file in order, in memory bounded by the
 * largest record (never the file):
 *   LF_INPUT_TEXT   the whole file is one document (at most
 *                   LF_READER_MAX_TEXT_BYTES; pretraining only);
 *   LF_INPUT_JSONL  JSON Lines: one JSON object per line; blank lines are
 *                   skipped; a line longer than max_record_bytes is a bad
 *                   record;
 *   LF_INPUT_JSON   one JSON array of objects ([{...}, {...}]), streamed
 *                   element by element (an element longer than
 *                   max_record_bytes is a bad record);
 *   LF_INPUT_AUTO   by the name: .jsonl/.ndjson/.jsonlines -> JSONL; .json ->
 *                   JSON array when its first non-blank character is '[',
 *                   else JSONL; .txt/.text/.md or no extension -> text;
 *                   anything else is LF_ERR_INVALID_ARG at open.
 * A UTF-8 byte order mark at the start of a file is ignored.
 *
 * Fields. Pretraining (LF_RECORD_PRETRAIN): the string field text_field
 * ("text" when NULL). Fine-tuning (LF_RECORD_SFT): the string fields
 * prompt_field and response_field when given (both or neither), else per
 * record "prompt"/"response" when the object has either key, else
 * "input_text"/"target_text". Every selected value must be a JSON string of
 * valid UTF-8 (RFC 3629; \u escapes are decoded first); the text of a
 * pretraining record and the response of a fine-tuning record must not be
 * empty (an empty prompt is allowed). A record holding the escape \u0000
 * anywhere is refused (U+0000 cannot be carried through the C strings).
 *
 * Bad records: a line or element that is not JSON, not an object, lacks a
 * selected field, holds a non-string or invalid UTF-8 there, is empty where
 * text is required, or is too long. By default the first one is an error
 * (LF_ERR_FORMAT, or LF_ERR_RANGE for a too-long record) whose message
 * starts "FILE:LINE: " and names the field; with skip_bad_records it is
 * counted (lf_reader_skipped), passed to on_skip, and reading goes on.
 * Never skippable: an unreadable file, an empty file (no byte but blanks and
 * a byte order mark; a JSON array with no element), a JSON array whose
 * structure is broken (no '[', unterminated, text after ']'), a text file
 * with a NUL byte. */
typedef enum lf_input_format {
    LF_INPUT_AUTO = 0,
    LF_INPUT_TEXT = 1,
    LF_INPUT_JSONL = 2,
    LF_INPUT_JSON = 3,
    LF_INPUT_CSV = 4,     /* RFC 4180, header row; columns by name (src/data/reader_csv.c) */
    LF_INPUT_PARQUET = 5, /* string columns (src/data/reader_parquet.c) */
    LF_INPUT_WDS = 6,     /* WebDataset tar shards, plain or gzip (src/data/reader_wds.c) */
} lf_input_format;

typedef enum lf_record_mode {
    LF_RECORD_PRETRAIN = 0, /* one text per record */
    LF_RECORD_SFT = 1,      /* a prompt and a response per record */
} lf_record_mode;

#define LF_READER_MAX_RECORD_BYTES ((size_t)64 << 20) /* default cap of a JSON line/element */
#define LF_READER_MAX_TEXT_BYTES ((size_t)1 << 30)    /* cap of a text document */

/* Called for each skipped record with its message ("FILE:LINE: ..."),
 * valid during the call only. */
typedef void (*lf_skip_fn)(const char *msg, void *user);

/* Plain options owned by the caller; zero-initialised means: auto format,
 * pretraining, field "text", errors on bad records, 64 MiB cap. The strings
 * must outlive the reader. */
typedef struct lf_reader_opts {
    lf_input_format format;
    lf_record_mode mode;
    const char *text_field;     /* NULL: "text" */
    const char *prompt_field;   /* NULL (with response_field NULL): auto-detected pair */
    const char *response_field;
    int skip_bad_records;
    size_t max_record_bytes;    /* 0: LF_READER_MAX_RECORD_BYTES; JSONL/JSON only */
    lf_skip_fn on_skip;         /* may be NULL */
    void *on_skip_user;
} lf_reader_opts;

/* One record; the pointers belong to the reader and stay valid until the
 * next lf_reader_next or lf_reader_close. Strings are valid UTF-8, hold no
 * NUL, and are NUL-terminated (the lengths exclude the NUL). */
typedef struct lf_record {
    const char *text;     /* pretraining; NULL in fine-tuning mode */
    size_t text_len;
    const char *prompt;   /* fine-tuning; NULL in pretraining mode */
    size_t prompt_len;
    const char *response;
    size_t response_len;
    uint64_t line;        /* 1-based line where the record starts */
    uint64_t index;       /* 0-based position among the file's records, skipped ones included */
    /* Names of the fields the strings came from (for messages; NULL for a
     * text file), e.g. "input_text"/"target_text" when auto-detected. */
    const char *text_key, *prompt_key, *response_key;
} lf_record;

typedef struct lf_reader lf_reader;

/* Open path for reading records. Errors: LF_ERR_INVALID_ARG (bad options,
 * fine-tuning from a text file, a name whose format auto cannot tell),
 * LF_ERR_NOT_FOUND / LF_ERR_IO (the file cannot be opened), LF_ERR_NOMEM. */
lf_status lf_reader_open(lf_reader **out, const char *path, const lf_reader_opts *opts);
/* The next record: LF_OK with *rec filled and *eof = 0, or LF_OK with
 * *eof = 1 at the end of the file. Errors (the reader is then unusable):
 * LF_ERR_FORMAT / LF_ERR_RANGE for a bad record (without skip_bad_records)
 * or a broken file, LF_ERR_IO, LF_ERR_NOMEM; messages start "FILE:LINE: ". */
lf_status lf_reader_next(lf_reader *r, lf_record *rec, int *eof);
void lf_reader_close(lf_reader *r);
/* Records skipped so far (skip_bad_records). */
uint64_t lf_reader_skipped(const lf_reader *r);
/* Bytes of the file consumed so far (for progress). */
uint64_t lf_reader_bytes_read(const lf_reader *r);
/* The format in use (auto resolved). */
lf_input_format lf_reader_format(const lf_reader *r);
/* "auto", "text", "jsonl", "json"; NULL for an unknown value. */
const char *lf_input_format_name(lf_input_format f);

/* ---------------------------------------------------------------- preparation from records (docs/data.md)
 * lf_prepare reads every input with an lf_reader, tokenizes each record and
 * writes token shards, split by content hash:
 *
 *   pretraining   ids(text) + [eot]                     no loss mask
 *   fine-tuning   ids(prompt) + ids(response) + [eot]   mask 0 on the prompt,
 *                                                       1 on response and eot
 *
 * (prompt and response are encoded separately, so no token spans the join).
 * eot is lf_tokenizer_eot(); a tokenizer without one is LF_ERR_INVALID_ARG.
 *
 * Tokenizer: "char" alone builds a character vocabulary from the data (the
 * sorted code points of every selected text, plus "\n", the end-of-text of
 * character vocabularies) in a first pass over the inputs and writes
 * out_dir/vocab.json; "char:FILE" copies FILE to out_dir/vocab.json; other
 * specs are opened with lf_tokenizer_open (relative paths against the current
 * directory) and recorded by absolute path, or relative to out_dir when the
 * file lies inside it.
 *
 * Split: u = (first 8 bytes of SHA-256(key), big-endian) / 2^64 with key =
 * the text (pretraining) or prompt, one 0x00 byte, response (fine-tuning);
 * the record goes to train when u < f_train, else to val when u < f_train +
 * f_val, else to test (fractions normalised to sum 1; a split whose fraction
 * is 0 receives nothing). The split of a record depends on its content only:
 * appending records never moves another, and equal records land together.
 *
 * Output in out_dir: {train,val,test}_NNN.bin shards of at most shard_tokens
 * tokens each (a record may continue in the next shard; empty splits get no
 * shard and no entry in "splits"), then dataset.json (format of the header
 * above, plus "mode", "eot", per-split "records" and "target_tokens", the
 * split rule, "skipped_records", and per source its format, records and
 * skipped records). Memory: up to shard_tokens tokens (4 bytes, + 1 mask byte
 * in fine-tuning) per split, plus one record. */
#define LF_PREPARE_N_SPLITS 3 /* train, val, test */
#define LF_PREPARE_SHARD_TOKENS ((size_t)100 * 1000 * 1000)

typedef void (*lf_progress_fn)(uint64_t bytes_done, uint64_t bytes_total, void *user);

typedef struct lf_prepare_opts {
    const char *const *inputs; /* files or directories (every regular file inside, sorted by name;
                                  with LF_INPUT_AUTO, files whose format the name does not tell are
                                  skipped, and so are text files holding a NUL byte) */
    size_t n_inputs;
    lf_input_format format;
    lf_record_mode mode;
    const char *text_field, *prompt_field, *response_field; /* as lf_reader_opts */
    int skip_bad_records;
    size_t max_record_bytes;   /* 0: LF_READER_MAX_RECORD_BYTES */
    const char *tokenizer;     /* spec, see above */
    double split[LF_PREPARE_N_SPLITS]; /* train, val, test weights (>= 0, train > 0) */
    size_t shard_tokens;       /* 0: LF_PREPARE_SHARD_TOKENS */
    lf_progress_fn progress;   /* may be NULL; called after each record batch and at the end */
    void *progress_user;
    lf_skip_fn on_skip;        /* may be NULL; each skipped record (second pass only with "char") */
    void *on_skip_user;
} lf_prepare_opts;

/* Pretraining, auto format, split 0.9/0.1/0, no inputs, tokenizer NULL. */
lf_prepare_opts lf_prepare_opts_default(void);

typedef struct lf_prepare_result {
    uint64_t records[LF_PREPARE_N_SPLITS];
    uint64_t tokens[LF_PREPARE_N_SPLITS];
    uint64_t target_tokens[LF_PREPARE_N_SPLITS]; /* tokens whose mask is 1 */
    uint64_t shards[LF_PREPARE_N_SPLITS];
    uint64_t skipped;        /* bad records skipped (skip_bad_records) */
    uint64_t sources;        /* files read */
    int vocab_size;
    int eot;
    char first_skip[512];    /* message of the first skipped record, "" when none */
} lf_prepare_result;

/* Errors: LF_ERR_INVALID_ARG (options, no records at all, nothing for the
 * train split), the reader's and tokenizer's errors (a record that cannot be
 * encoded is a bad record named FILE:LINE and the field), LF_ERR_IO,
 * LF_ERR_NOMEM. result may be NULL. */
lf_status lf_prepare(const lf_prepare_opts *opts, const char *out_dir, lf_prepare_result *result);

/* ---------------------------------------------------------------- datasets and batches */
typedef enum lf_split { LF_SPLIT_TRAIN = 0, LF_SPLIT_VAL = 1 } lf_split;
typedef enum lf_sampling {
    LF_SAMPLING_RANDOM = 0,     /* nanoGPT: start ~ U[0, N-T) per row */
    LF_SAMPLING_SEQUENTIAL = 1, /* row i starts at (i*T) mod (N-T-1) */
    LF_SAMPLING_RECORDS = 2,    /* start ~ a uniformly drawn record start (the token after an
                                   end-of-text, or 0); needs lf_dataset_index_records */
} lf_sampling;

typedef struct lf_dataset lf_dataset;

/* Open a dataset directory (reads dataset.json, opens and validates shards). */
lf_status lf_dataset_open(lf_dataset **out, const char *dir);
void lf_dataset_close(lf_dataset *d);
int lf_dataset_vocab_size(const lf_dataset *d);
/* Tokens in a split (0 if the split is absent). */
size_t lf_dataset_num_tokens(const lf_dataset *d, lf_split split);
/* Tokenizer spec with paths resolved against the dataset dir (e.g. "char:/abs/vocab.json"). */
const char *lf_dataset_tokenizer_spec(const lf_dataset *d);
const char *lf_dataset_dir(const lf_dataset *d);

/* The dataset's end-of-text id ("eot" in dataset.json), or -1. */
int lf_dataset_eot(const lf_dataset *d);
/* Index where each record of a split starts (after every end-of-text
 * token), for LF_SAMPLING_RECORDS: one pass over the split's tokens and 8
 * bytes per record. LF_ERR_UNSUPPORTED when the dataset names no
 * end-of-text; LF_ERR_RANGE when no record starts at least block_size+1
 * tokens before the end. Idempotent. */
lf_status lf_dataset_index_records(lf_dataset *d, lf_split split, int T);

/* Fill inputs/targets (B,T) int32 with rows first_row .. first_row+B-1.
 * Row r starts at s(r) (see lf_sampling; random draws
 * lf_rng_u64(seed, purpose, r) % (N - T)); inputs = tok[s .. s+T),
 * targets = tok[s+1 .. s+T+1), a target whose mask is 0 becomes -1.
 * Error when the split has fewer than T+2 tokens (names split and sizes). */
lf_status lf_dataset_get_batch(const lf_dataset *d, lf_split split, lf_sampling sampling, uint64_t seed,
                               uint32_t purpose, uint64_t first_row, int B, int T, int32_t *inputs,
                               int32_t *targets);

#ifdef __cplusplus
}
#endif
#endif
