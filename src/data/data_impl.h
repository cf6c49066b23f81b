/*
 * Private interfaces of the data module (not installed, not part of the API):
 *  - strict UTF-8 decoding shared by the tokenizers and prepare;
 *  - raw views of a mapped shard, for the batch sampler's hot loop;
 *  - the tokenizer operations table: one entry per spec prefix ("char:",
 *    later "gpt2:", "bpe:"), dispatched by tokenizer.c (ggml-style table of
 *    function pointers; a kind that lacks an operation leaves it NULL and the
 *    wrapper answers LF_ERR_UNSUPPORTED).
 */
#ifndef LLMFORGE_DATA_IMPL_H
#define LLMFORGE_DATA_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "llmforge/data.h"

/* ---------------------------------------------------------------- UTF-8 (utf8.c) */
/* Decode one code point from s[0 .. len), len >= 1, strictly (RFC 3629: no
 * overlong forms, no surrogates, nothing above U+10FFFF, no truncated or
 * stray continuation bytes). Returns the sequence length 1..4 and sets *cp,
 * or returns 0 and sets *why to a fixed description of the defect. */
int lf__utf8_decode(const unsigned char *s, size_t len, uint32_t *cp, const char **why);
/* Encode a valid code point; returns its length 1..4 (0 for an invalid one). */
int lf__utf8_encode(uint32_t cp, unsigned char out[4]);
/* "U+00E9 'é'", "U+000A '\n'", "U+0085" (controls without a printable form
 * are shown by number only, or as a C escape when they have one). */
void lf__utf8_describe(uint32_t cp, char *buf, size_t size);

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
} lf__tokenizer_ops;

extern const lf__tokenizer_ops lf__tokenizer_char_ops; /* tokenizer_char.c */
/* vocab.json text for the given code points, in the given order
 * ({"type":"char","chars":[...]}); *json is freed with cJSON_free. */
lf_status lf__char_vocab_json(const uint32_t *cps, size_t n, char **json);

/* Resolve relative paths inside a spec against base_dir ("char:vocab.json",
 * "/d" -> "char:/d/vocab.json"). Specs of unknown kinds, or whose argument is
 * not a path, are copied unchanged. *out is malloc'd (free()). */
lf_status lf__tokenizer_spec_resolve(const char *spec, const char *base_dir, char **out);
/* The file a resolved spec names, or NULL when its kind has none
 * (points into spec). */
const char *lf__tokenizer_spec_file(const char *spec);

/* ---------------------------------------------------------------- helpers */
/* "dir/name" (or name itself when absolute or dir is NULL/empty); malloc'd. */
char *lf__path_join(const char *dir, const char *name);
/* The directory holding path ("." when it has no slash); malloc'd. */
char *lf__path_dir(const char *path);
/* Write data to path.tmp, fsync, rename over path, fsync the directory. */
lf_status lf__file_write_atomic(const char *path, const void *data, size_t len);

#endif
