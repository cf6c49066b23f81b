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

/* Open a tokenizer from a spec string: "char:PATH/vocab.json". Relative paths
 * in the spec are resolved against base_dir when base_dir != NULL. */
lf_status lf_tokenizer_open(lf_tokenizer **out, const char *spec, const char *base_dir);
void lf_tokenizer_free(lf_tokenizer *t);
int lf_tokenizer_vocab_size(const lf_tokenizer *t);
/* Encode UTF-8 text. *ids is allocated (lf_free). A character outside the
 * vocabulary is an error naming it and its byte offset. */
lf_status lf_tokenizer_encode(const lf_tokenizer *t, const char *text, size_t len, uint32_t **ids,
                              size_t *n);
/* Decode ids to a NUL-terminated UTF-8 string (lf_free). */
lf_status lf_tokenizer_decode(const lf_tokenizer *t, const uint32_t *ids, size_t n, char **text,
                              size_t *len);

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

/* ---------------------------------------------------------------- datasets and batches */
typedef enum lf_split { LF_SPLIT_TRAIN = 0, LF_SPLIT_VAL = 1 } lf_split;
typedef enum lf_sampling {
    LF_SAMPLING_RANDOM = 0,     /* nanoGPT: start ~ U[0, N-T) per row */
    LF_SAMPLING_SEQUENTIAL = 1, /* row i starts at (i*T) mod (N-T-1) */
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
