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
/* llm.c's token files: 256 x int32 header (magic, version, n_tokens), u16 tokens (version 1) or u32 (2) */
#define LF_LLMC_MAGIC 20240520u
#define LF_LLMC_HEADER_BYTES 1024

/* ---------------------------------------------------------------- shards */
typedef struct lf_shard lf_shard;

/* Write a shard (tokens as u16 when vocab_size <= 65536, else u32). mask may
 * be NULL. Written to path.tmp, fsynced, renamed. */
lf_status lf_shard_write(const char *path, const uint32_t *tokens, const uint8_t *mask, size_t n, uint32_t vocab_size);

/* Streaming shard writer (src/data/shard_writer.c): the same file, format and
 * guarantees as lf_shard_write, but the tokens arrive in pieces and memory is
 * a fixed buffer (LF_SHARD_WRITER_BUF_BYTES for tokens, a quarter of it for
 * the mask) whatever the shard's size. Tokens go to path.tmp behind a zero
 * header with the CRC computed on the way; with a mask the mask bytes go to a
 * second temporary file, path.mask.tmp, appended after the tokens at close.
 * lf_shard_writer_close writes the header last, fsyncs, renames path.tmp to
 * path and fsyncs the directory, so path is either absent, the earlier file,
 * or the complete new shard.
 *
 * Not thread-safe: one writer is used by one thread at a time. */
#define LF_SHARD_WRITER_BUF_BYTES ((size_t)1 << 20)
typedef struct lf_shard_writer lf_shard_writer;

/* Create path.tmp (and path.mask.tmp when has_mask) for a shard of tokens
 * < vocab_size (u16 when vocab_size <= 65536, else u32). Errors:
 * LF_ERR_INVALID_ARG (empty path, vocab_size 0), LF_ERR_IO (cannot create,
 * naming the file and the system's reason), LF_ERR_NOMEM. */
lf_status lf_shard_writer_open(lf_shard_writer **out, const char *path, uint32_t vocab_size, int has_mask);
/* Append n tokens; mask (n bytes, nonzero = target) may be NULL, meaning
 * every token is a target; it is ignored by a writer without a mask. A token
 * >= vocab_size is LF_ERR_RANGE naming the shard, the token and its index in
 * the shard; a failed write is LF_ERR_IO. After an error the writer only
 * accepts lf_shard_writer_free. */
lf_status lf_shard_writer_append(lf_shard_writer *w, const uint32_t *tokens, const uint8_t *mask, size_t n);
/* Tokens appended so far. */
uint64_t lf_shard_writer_num_tokens(const lf_shard_writer *w);
/* Finish the shard (header, fsync, rename) and free the writer, also on
 * failure (then path.tmp is removed and path untouched). NULL: LF_OK. */
lf_status lf_shard_writer_close(lf_shard_writer *w);
/* Discard an unfinished shard (remove the temporary files) and free the
 * writer. NULL is a no-op. */
void lf_shard_writer_free(lf_shard_writer *w);

/* Split writer (src/data/shard_writer.c): the shards of one split, named
 * DIR/NAME_000.bin, NAME_001.bin, ... (at least three digits), each of at
 * most max_tokens tokens. A shard file is created on the first token it
 * receives and finished when it holds max_tokens (the next token starts the
 * next shard) or at lf_split_writer_finish, so a split that receives nothing
 * has no shard and none is ever empty. Memory: one lf_shard_writer. */
typedef struct lf_split_writer lf_split_writer;
/* max_tokens 0: LF_PREPARE_SHARD_TOKENS. Creates no file. Errors:
 * LF_ERR_INVALID_ARG (empty dir or name, vocab_size 0), LF_ERR_NOMEM. */
lf_status lf_split_writer_open(lf_split_writer **out, const char *dir, const char *name, uint32_t vocab_size,
                               int has_mask, uint64_t max_tokens);
/* Append n tokens (mask as lf_shard_writer_append), cutting shards at
 * exactly max_tokens; errors as lf_shard_writer_append and _close. */
lf_status lf_split_writer_append(lf_split_writer *w, const uint32_t *tokens, const uint8_t *mask, size_t n);
/* Finish the shard being written, if any. Further appends start a new one. */
lf_status lf_split_writer_finish(lf_split_writer *w);
/* Shards finished so far, and tokens appended so far (finished or not). */
uint64_t lf_split_writer_num_shards(const lf_split_writer *w);
uint64_t lf_split_writer_num_tokens(const lf_split_writer *w);
/* File name (without the directory) of shard k, "NAME_%03llu.bin", into buf;
 * LF_ERR_RANGE when it does not fit. */
lf_status lf_split_writer_shard_name(const lf_split_writer *w, uint64_t k, char *buf, size_t size);
/* Remove the finished shards of this writer from the directory (a failed
 * preparation undoing its output). */
void lf_split_writer_remove_shards(lf_split_writer *w);
/* Discard the shard being written (its temporary files) and free. NULL is a
 * no-op; finished shards stay. */
void lf_split_writer_free(lf_split_writer *w);
/* Open (mmap) and validate a shard; verify_checksum != 0 checks the CRC.
 * llm.c's shard files (magic 20240520, versions 1 and 2) are read too: they
 * carry no mask and no checksum, and their vocab_size is one more than their
 * largest token (found by a scan at open). */
lf_status lf_shard_open(lf_shard **out, const char *path, int verify_checksum);
void lf_shard_close(lf_shard *s);
size_t lf_shard_num_tokens(const lf_shard *s);
uint32_t lf_shard_vocab_size(const lf_shard *s);
int lf_shard_has_mask(const lf_shard *s);
/* 1 for a shard in llm.c's format. */
int lf_shard_is_llmc(const lf_shard *s);
uint32_t lf_shard_token(const lf_shard *s, size_t i);
/* 1 if token i counts as a target (always 1 without a mask). */
int lf_shard_mask(const lf_shard *s, size_t i);

/* ---------------------------------------------------------------- tokenizers */
typedef struct lf_tokenizer lf_tokenizer;

/* Open a tokenizer from a spec string: "char:PATH/vocab.json", "gpt2:DIR",
 * "tiktoken:FILE", "bpe:FILE", "hf:FILE" (kinds listed below). Relative paths
 * in the spec are resolved against base_dir when base_dir != NULL. */
lf_status lf_tokenizer_open(lf_tokenizer **out, const char *spec, const char *base_dir);
void lf_tokenizer_free(lf_tokenizer *t);
int lf_tokenizer_vocab_size(const lf_tokenizer *t);
/* Encode UTF-8 text with the default options (lf_encode_opts_default: special
 * tokens are ordinary text, invalid UTF-8 is an error naming its byte offset).
 * *ids is allocated (lf_free). A character outside the vocabulary is an error
 * naming it and its byte offset. */
lf_status lf_tokenizer_encode(const lf_tokenizer *t, const char *text, size_t len, uint32_t **ids, size_t *n);
/* Decode ids to a NUL-terminated string (lf_free); *len excludes the NUL.
 * Byte-level BPE kinds return the exact bytes the ids stand for: the ids of
 * a text decode to that text, but an arbitrary id sequence (one cut inside a
 * multi-byte character, as when streaming one token at a time) may decode to
 * bytes that are not valid UTF-8 on their own, and a text holding U+0000
 * decodes with that NUL inside (use *len). An id outside the vocabulary is
 * LF_ERR_RANGE naming the id and its position. */
lf_status lf_tokenizer_decode(const lf_tokenizer *t, const uint32_t *ids, size_t n, char **text, size_t *len);

/* Tokenizer kinds (spec prefixes), see docs/tokenizers.md:
 *   char:FILE      vocab.json of code points (nanoGPT shakespeare_char)
 *   gpt2:DIR       GPT-2 byte-level BPE from DIR/encoder.json + DIR/vocab.bpe;
 *                  ids equal tiktoken's "gpt2" encoding; <|endoftext|> = 50256
 *   tiktoken:FILE  a tiktoken rank file (one "base64(token) rank" per line)
 *                  with GPT-2's pre-tokeniser; <|endoftext|> = largest rank + 1
 *   bpe:FILE       a BPE trained by lf_bpe_train (same file format and
 *                  conventions as tiktoken:FILE)
 *   hf:FILE        a Hugging Face tokenizer.json of the byte-level BPE family
 *                  (GPT-2, Llama 3, Qwen2, SmolLM): ids equal to the tokenizers
 *                  library's encode(text, add_special_tokens=False), added
 *                  tokens marked "special" recognised only with allow_special
 *                  (non-special added tokens always, as tokenizers does), no
 *                  BOS/EOS added; an NFC normalizer (Qwen2) is applied, so
 *                  decode(encode(x)) is x in NFC (each stretch between added
 *                  tokens normalized apart). Files with another normalizer,
 *                  another model type or a pre-tokenizer other than ByteLevel /
 *                  Split / Digits are LF_ERR_UNSUPPORTED naming the file and
 *                  field; malformed ones LF_ERR_FORMAT (docs/tokenizers.md).
 *                  vocab_size = largest id + 1.
 *
 * Invalid UTF-8 (byte-level BPE kinds): by default (LF_UTF8_STRICT) encoding
 * fails with LF_ERR_FORMAT naming the byte offset of the first invalid byte
 * and the defect (RFC 3629: overlong forms, surrogates, code points above
 * U+10FFFF, truncated sequences and stray continuation bytes are invalid).
 * With LF_UTF8_BYTES the text is cut at every invalid byte: each maximal valid
 * run is encoded exactly as that run alone would be, and each invalid byte
 * becomes the token of that single byte, so decode(encode(x)) == x for any
 * bytes x (an hf: file with an NFC normalizer: x with its valid runs in NFC).
 * The char kind supports LF_UTF8_STRICT only.
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
lf_status lf_tokenizer_encode_parallel(const lf_tokenizer *t, const char *text, size_t len, const lf_encode_opts *opts,
                                       int n_threads, uint32_t **ids, size_t *n);

/* Id of a special token by its text ("<|endoftext|>"; hf: any added token,
 * "<|im_start|>"). LF_ERR_NOT_FOUND when the tokenizer has no such token (the
 * char kind has none). */
lf_status lf_tokenizer_special_id(const lf_tokenizer *t, const char *name, uint32_t *id);

/* The end-of-text id: what prepare appends after every document and every
 * fine-tuning response, and where generation stops. gpt2/tiktoken/bpe: the
 * id of <|endoftext|> (50256 for gpt2); char: the id of "\n" (a character
 * vocabulary has no special tokens, so a newline ends a text); hf: the first
 * of <|endoftext|>, <|end_of_text|>, <|im_end|>, </s>, <eos> the file has (an
 * added token, else a vocabulary entry). -1 when the tokenizer has none (a
 * char vocabulary without "\n", an hf file with none of those) or t is NULL.
 * Records no error. */
int lf_tokenizer_eot(const lf_tokenizer *t);

/* ---------------------------------------------------------------- streaming detokenizer
 * Generated tokens to text one token at a time, never splitting a UTF-8
 * character: byte-level BPE splits many characters (CJK, emoji) across
 * tokens, and the bytes of an unfinished character wait in the stream for
 * the token that completes them. An ill-formed sequence becomes U+FFFD, one
 * per maximal subpart (Unicode 15 section 3.9; what Python's
 * bytes.decode('utf-8', 'replace') does; lf_tokenizer_decode itself returns
 * the raw bytes). So the pushes and the final flush of the ids of any text
 * concatenate to exactly lf_tokenizer_decode of all the ids.
 * A stream borrows its tokenizer (which must outlive it) and is used by one
 * thread at a time; several streams may share one tokenizer. */
typedef struct lf_detok_stream lf_detok_stream; /* holds the bytes of an incomplete UTF-8 sequence */

/* Errors: LF_ERR_INVALID_ARG (NULL out or t), LF_ERR_NOMEM. */
lf_status lf_detok_stream_create(lf_detok_stream **out, const lf_tokenizer *t);
/* Decode one token; *out (lf_free, NUL-terminated, *len bytes, possibly 0)
 * receives the complete UTF-8 characters now available: the held-back bytes
 * of earlier tokens and this token's, less an unfinished character at the
 * end (kept for the next call). Always well-formed UTF-8. Errors (the stream
 * is left as it was, *out NULL): LF_ERR_RANGE naming an id outside the
 * vocabulary (the tokenizer's decode), LF_ERR_INVALID_ARG, LF_ERR_NOMEM. */
lf_status lf_detok_stream_push(lf_detok_stream *s, uint32_t token, char **out, size_t *len);
/* End of the stream: *out (lf_free) receives what is left, an unfinished
 * character as one U+FFFD (empty when nothing is held back). The stream is
 * then empty and may go on with a new text. Errors as push. */
lf_status lf_detok_stream_flush(lf_detok_stream *s, char **out, size_t *len);
void lf_detok_stream_free(lf_detok_stream *s); /* NULL: no-op */

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
lf_status lf_bpe_train(const char *const *inputs, size_t n_inputs, const lf_bpe_train_opts *opts, const char *out_path,
                       lf_bpe_train_stats *stats);

/* ---------------------------------------------------------------- preparation */
typedef struct lf_prepare_stats {
    size_t n_chars; /* code points read */
    int vocab_size;
    size_t train_tokens, val_tokens;
} lf_prepare_stats;

/* nanoGPT shakespeare_char prepare: vocabulary = sorted unique code points of
 * the UTF-8 input; first 90% (of characters) train, last 10% val. Writes
 * out_dir/{vocab.json,train.bin,val.bin,dataset.json}. input_path may be a
 * file or a directory (every regular file in it, in sorted name order,
 * concatenated). Streams: the input is read twice in 1 MiB chunks (the
 * vocabulary, then the ids straight into lf_shard_writer), so memory does
 * not grow with the input; a file that changes between the passes is an
 * error naming it. A dataset.json already in out_dir is removed first. */
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
 *                   max_record_bytes is a bad record); or one JSON
 *                   document (read whole, at most LF_READER_MAX_TEXT_BYTES):
 *                   the list of records under json_field of its top-level
 *                   object, or under its one list-valued key
 *                   ({"data": [...]}), or a pretty-printed array;
 *   LF_INPUT_AUTO   by the name: .jsonl/.ndjson/.jsonlines -> JSONL; .json ->
 *                   JSON array when its first non-blank character is '[',
 *                   else JSONL; either is read as one JSON document when its
 *                   first non-blank line is not JSON but the whole file is
 *                   (pretty-printed), and a one-line .json object holding one
 *                   list of objects and no record field is that document
 *                   (docs/readers.md "JSON documents"); .csv, .parquet,
 *                   .tar/.tgz/.tar.gz, .arrow by their readers;
 *                   .txt/.text/.md or no extension -> text;
 *                   anything else is LF_ERR_INVALID_ARG at open.
 * A UTF-8 byte order mark at the start of a file is ignored.
 *
 * Fields. Pretraining (LF_RECORD_PRETRAIN): the string field text_field
 * ("text" when NULL). Fine-tuning (LF_RECORD_SFT): the string fields
 * prompt_field and response_field when given (both or neither), else per
 * record "prompt"/"response" when the object has either key, else
 * "input_text"/"target_text", else Alpaca's "instruction"/"output" with
 * "input" (prompt = instruction, then "\n\n" + input when input is present,
 * not null and not empty; JSON, CSV, Parquet and Arrow), or "messages" (a
 * list of {"role", "content"} objects with at least one assistant message,
 * rendered by a chat template). Every selected value must be a JSON string of
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
    LF_INPUT_ARROW = 7,   /* Arrow IPC stream/file, string columns (src/data/reader_arrow.c) */
} lf_input_format;

typedef enum lf_record_mode {
    LF_RECORD_PRETRAIN = 0, /* one text per record */
    LF_RECORD_SFT = 1,      /* a prompt and a response per record */
    LF_RECORD_DPO = 2,      /* a prompt, a chosen and a rejected response per record (JSONL, JSON, Parquet) */
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
    const char *text_field;   /* NULL: "text" */
    const char *prompt_field; /* NULL (with response_field NULL): auto-detected pair */
    const char *response_field;
    /* LF_RECORD_DPO: the fields prompt_field (NULL: "prompt"), response_field
     * (NULL: "chosen") and rejected_field (NULL: "rejected"), each a
     * non-empty string */
    const char *rejected_field;
    int skip_bad_records;
    size_t max_record_bytes; /* 0: LF_READER_MAX_RECORD_BYTES; JSONL/JSON only */
    lf_skip_fn on_skip;      /* may be NULL */
    void *on_skip_user;
    /* JSON only: the records are the list under this key of the file's one
     * top-level object ({"data": [...]}, as datasets' field=); NULL: an
     * object file is read through its one list-valued key. */
    const char *json_field;
} lf_reader_opts;

/* One record; the pointers belong to the reader and stay valid until the
 * next lf_reader_next or lf_reader_close. Strings are valid UTF-8, hold no
 * NUL, and are NUL-terminated (the lengths exclude the NUL). */
typedef struct lf_record {
    const char *text; /* pretraining; NULL in fine-tuning mode */
    size_t text_len;
    const char *prompt; /* fine-tuning; NULL in pretraining mode */
    size_t prompt_len;
    const char *response;
    size_t response_len;
    /* Fine-tuning, JSONL/JSON only: a record with a "messages" list (and no
     * --prompt-field) gives it here as compact JSON text; prompt and
     * response are NULL then (docs/data.md, "Conversations"). */
    const char *messages;
    size_t messages_len;
    uint64_t line;  /* 1-based line where the record starts */
    uint64_t index; /* 0-based position among the file's records, skipped ones included */
    /* Names of the fields the strings came from (for messages; NULL for a
     * text file), e.g. "input_text"/"target_text" when auto-detected. */
    const char *text_key, *prompt_key, *response_key;
    const char *rejected; /* LF_RECORD_DPO: the rejected response (response: the chosen) */
    size_t rejected_len;
    const char *rejected_key;
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
/* Bytes of the file consumed so far, for progress: text, JSONL, JSON, CSV
 * and plain WebDataset tar the bytes read; a gzip tar the compressed bytes
 * zlib has taken; Parquet the end of the furthest page read. At the end of
 * a CSV, Parquet or WebDataset file it is the file's size. */
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
 * skipped records). Shards are streamed through lf_split_writer, one per
 * split. A dataset.json already in out_dir is removed before the first file
 * of this run is written there; on any failure the shards this run finished
 * are removed again and no dataset.json is written, so out_dir never holds a
 * manifest that does not describe its shards.
 *
 * Threads: records are read in order on the calling thread and gathered in
 * batches; n_threads threads (the calling thread and n_threads - 1 POSIX
 * threads) tokenize a batch and compute each record's split while the
 * calling thread reads the next one (and with n_threads > 1 one more thread
 * computes the sources' SHA-256 meanwhile); the tokens are then written in
 * input order. A record of LF_PREPARE_LARGE_RECORD_BYTES or more is encoded by
 * lf_tokenizer_encode_parallel on all threads instead. The output, the
 * counts, the skipped records (order and messages) and the errors do not
 * depend on n_threads.
 *
 * Memory is bounded independent of the input size: two batches of about
 * LF_PREPARE_BATCH_BYTES per thread (capped at 64 MiB of text) with their
 * token ids, one lf_shard_writer buffer per split, the reader's buffers, the
 * tokenizer, and for a single record larger than a batch, a few times that
 * record. */
#define LF_PREPARE_N_SPLITS 3 /* train, val, test */
#define LF_PREPARE_SHARD_TOKENS ((size_t)100 * 1000 * 1000)
#define LF_PREPARE_MAX_THREADS 1024
#define LF_PREPARE_BATCH_BYTES ((size_t)1 << 20)        /* text per thread per batch */
#define LF_PREPARE_LARGE_RECORD_BYTES ((size_t)1 << 20) /* encoded on all threads alone */

/* Where lf_prepare stands, handed to the progress callback. */
typedef struct lf_prepare_progress {
    uint64_t bytes_done;  /* input bytes read so far, over all passes (for gzip: compressed bytes) */
    uint64_t bytes_total; /* the input files' sizes times the passes */
    uint64_t records;     /* records written so far (all splits; 0 in the vocabulary pass) */
    uint64_t tokens;      /* tokens written so far (all splits) */
    uint64_t skipped;     /* bad records skipped so far */
    double seconds;       /* since lf_prepare started */
    int pass, passes;     /* 1-based; "char" makes 2 passes (vocabulary, then encoding), others 1 */
    int done;             /* 1 on the last call, made once everything is written */
} lf_prepare_progress;

/* Called on the thread that called lf_prepare; p is valid during the call. */
typedef void (*lf_prepare_progress_fn)(const lf_prepare_progress *p, void *user);

typedef struct lf_prepare_opts {
    const char *const *inputs; /* files or directories: every regular file inside, subdirectories
                                  too, in byte-wise name order (with LF_INPUT_AUTO, files whose format
                                  the name does not tell are skipped, and so are text files holding
                                  a NUL byte); a Hugging Face hub repository or save_to_disk
                                  directory reads its data files only (docs/data.md) */
    size_t n_inputs;
    lf_input_format format;
    lf_record_mode mode;
    const char *text_field, *prompt_field, *response_field; /* as lf_reader_opts */
    const char *rejected_field;                             /* as lf_reader_opts (mode dpo) */
    /* Fine-tuning only; NULL: the pairs as they are. "chatml" (the built-in),
     * a chat_template.json file, or a directory holding one (a checkpoint's):
     * each pair is rendered as `llmforge serve`'s chat endpoint renders a
     * conversation of that one user message (docs/data.md), the template
     * written to out_dir/chat_template.json, which training copies into every
     * checkpoint (so serve uses it). */
    const char *chat_template;
    int skip_bad_records;
    size_t max_record_bytes;           /* 0: LF_READER_MAX_RECORD_BYTES */
    const char *tokenizer;             /* spec, see above */
    double split[LF_PREPARE_N_SPLITS]; /* train, val, test weights (>= 0, train > 0) */
    size_t shard_tokens;               /* 0: LF_PREPARE_SHARD_TOKENS */
    int n_threads;                     /* tokenizing threads, 1 .. LF_PREPARE_MAX_THREADS; 0: the CPUs granted
                                  (lf_cpu_threads_detect: affinity mask, cgroup CPU limit) */
    lf_prepare_progress_fn progress;   /* may be NULL; called after each record batch and at the end */
    void *progress_user;
    lf_skip_fn on_skip; /* may be NULL; each skipped record (second pass only with "char") */
    void *on_skip_user;
    /* Keep the dataset's own splits (the split each input file's name, a hub
     * README.md configs: header or a save_to_disk directory names) instead of
     * the content-hash split; split[] is then not used and a file naming no
     * split is LF_ERR_INVALID_ARG. */
    int keep_splits;
    /* split_shuffle: instead of the content hash, exact proportions by a
     * permutation of the records seeded by split_seed (docs/data.md; the
     * inputs are read once more first, to count them). */
    int split_shuffle;
    uint64_t split_seed;
    const char *subset;     /* hub directory: the configs: entry (config_name) to read; NULL: its default */
    const char *json_field; /* as lf_reader_opts */
} lf_prepare_opts;

/* Pretraining, auto format, split 0.9/0.1/0, no inputs, tokenizer NULL. */
lf_prepare_opts lf_prepare_opts_default(void);

typedef struct lf_prepare_result {
    uint64_t records[LF_PREPARE_N_SPLITS];
    uint64_t tokens[LF_PREPARE_N_SPLITS];
    uint64_t target_tokens[LF_PREPARE_N_SPLITS]; /* tokens whose mask is 1 */
    uint64_t shards[LF_PREPARE_N_SPLITS];
    uint64_t skipped; /* bad records skipped (skip_bad_records) */
    uint64_t sources; /* files read */
    int vocab_size;
    int eot;
    char first_skip[512]; /* message of the first skipped record, "" when none */
} lf_prepare_result;

/* Errors: LF_ERR_INVALID_ARG (options, a chat template with pretraining,
 * no records at all, nothing for the train split), LF_ERR_RANGE (a split
 * weight, n_threads out of range), the chat template's (LF_ERR_NOT_FOUND,
 * LF_ERR_FORMAT, LF_ERR_CONFIG naming the file and key), the
 * reader's and tokenizer's errors (a record that cannot be encoded is a bad
 * record named FILE:LINE and the field), LF_ERR_IO (naming the file, e.g. a
 * shard that cannot be created), LF_ERR_NOMEM. result is filled only on
 * success and may be NULL. */
lf_status lf_prepare(const lf_prepare_opts *opts, const char *out_dir, lf_prepare_result *result);

/* ---------------------------------------------------------------- chat templates
 * The text a conversation becomes before tokenization, as a model's chat
 * template writes it (docs/data.md, "Chat templates"): a Hugging Face Jinja
 * template (tokenizer_config.json's "chat_template" or chat_template.jinja,
 * rendered byte for byte as transformers' apply_chat_template) or
 * llmforge's chat_template.json. What `llmforge chat-template` prints. */
typedef struct lf_chat_template lf_chat_template;
/* spec: "chatml" (the built-in), a directory (its chat_template.json, else
 * its Hugging Face template), a chat_template.json, a tokenizer_config.json
 * or a .jinja file. Errors: LF_ERR_NOT_FOUND (no such path, no template
 * there), LF_ERR_IO, LF_ERR_FORMAT / LF_ERR_CONFIG (a bad file, naming it
 * and the key), LF_ERR_FORMAT / LF_ERR_UNSUPPORTED (a Jinja syntax error or
 * a construct outside the supported subset, "FILE:LINE: ..."),
 * LF_ERR_NOMEM. The handle is read-only after opening: renders may run on
 * several threads at once. */
lf_status lf_chat_template_open(const char *spec, lf_chat_template **out);
void lf_chat_template_free(lf_chat_template *t);
/* Where the template came from ("built-in ChatML", a path). */
const char *lf_chat_template_source(const lf_chat_template *t);
int lf_chat_template_is_jinja(const lf_chat_template *t);
/* What strftime_now() returns for Jinja templates ("YYYY-MM-DD HH:MM:SS"),
 * instead of the current UTC time. LF_ERR_INVALID_ARG for another shape. */
lf_status lf_chat_template_set_date(lf_chat_template *t, const char *date);
/* Render messages_json[0, len) (a JSON list of {"role", "content", ...}
 * messages, or an object with "messages") into *out (malloc'd,
 * NUL-terminated, *out_len bytes). When turns is not NULL, *turns
 * (malloc'd) holds *n_turns (offset, length) pairs: the assistant turns of
 * the rendering without the generation prompt, each with its end-of-turn
 * marker (the loss mask of `prepare --mode sft`). Errors: LF_ERR_FORMAT
 * (not a list of messages), LF_ERR_INVALID_ARG (the template refused the
 * conversation: raise_exception's message; a message the llmforge format
 * cannot hold), LF_ERR_UNSUPPORTED (turns wanted from a template whose
 * rendering is not prefix-stable, naming the message), LF_ERR_RANGE (a
 * render bound), LF_ERR_NOMEM. */
lf_status lf_chat_template_render(const lf_chat_template *t, const char *messages_json, size_t len,
                                  int add_generation_prompt, char **out, size_t *out_len, size_t **turns, int *n_turns);
/* The prompt a chat model is given: messages rendered with the generation
 * prompt and tokenized as `llmforge serve`'s chat endpoint tokenizes it
 * (each span on its own, special tokens read in the template's text only).
 * *ids lf_alloc'd (*n of them); *text (when not NULL) the rendering,
 * malloc'd. Errors: lf_chat_template_render's and the tokenizer's (a
 * character the vocabulary lacks). */
lf_status lf_chat_template_encode(const lf_chat_template *t, const lf_tokenizer *tok, const char *messages_json,
                                  size_t len, uint32_t **ids, size_t *n, char **text);

/* ---------------------------------------------------------------- datasets and batches */
typedef enum lf_split { LF_SPLIT_TRAIN = 0, LF_SPLIT_VAL = 1 } lf_split;
typedef enum lf_sampling {
    LF_SAMPLING_RANDOM = 0,     /* nanoGPT: start ~ U[0, N-T) per row */
    LF_SAMPLING_SEQUENTIAL = 1, /* row i starts at (i*T) mod (N-T-1) */
    LF_SAMPLING_RECORDS = 2,    /* start ~ a uniformly drawn record start (the token after an
                                   end-of-text, or 0); needs lf_dataset_index_records */
    LF_SAMPLING_PACKED = 3,     /* epochs of packed sequences: the split cut into (N-1)/T
                                   windows of T+1 tokens, each epoch visits every window once in
                                   a shuffle keyed by (seed, epoch) (lf_dataset_packed_window) */
} lf_sampling;

typedef struct lf_dataset lf_dataset;

/* Open a dataset directory (reads dataset.json, opens and validates shards).
 * A directory without dataset.json that holds llm.c token files opens too:
 * *train*.bin and *val*.bin (sorted by name) are the splits, version-1 files
 * GPT-2 tokens (vocab 50257, end-of-text 50256), version-2 LLaMA-3 (128256);
 * the tokenizer spec is then NULL until lf_dataset_set_tokenizer. */
lf_status lf_dataset_open(lf_dataset **out, const char *dir);
/* Name the tokenizer of a dataset that names none (llm.c files). Its vocab
 * size must equal the dataset's (LF_ERR_MISMATCH); a dataset that names a
 * different tokenizer refuses (LF_ERR_CONFIG); the same spec is accepted. */
lf_status lf_dataset_set_tokenizer(lf_dataset *d, const char *spec);
/* 1 when the dataset was opened from llm.c files. */
int lf_dataset_is_llmc(const lf_dataset *d);
void lf_dataset_close(lf_dataset *d);
int lf_dataset_vocab_size(const lf_dataset *d);
/* Tokens in a split (0 if the split is absent). */
size_t lf_dataset_num_tokens(const lf_dataset *d, lf_split split);
/* Tokenizer spec with paths resolved against the dataset dir (e.g.
 * "char:/abs/vocab.json"); NULL for llm.c files until one is set. */
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

/* dataset.json's "mode": "pretrain", "sft", "dpo", or "" (absent, llm.c files). */
const char *lf_dataset_mode(const lf_dataset *d);

/* ---- preference pairs (DPO; src/data/pairs.c) -------------------------------
 * A dataset prepared with --mode dpo holds per triple two rows one after the
 * other in its split: ids(prompt) (mask 0), ids(chosen) + end-of-text (mask
 * 1), then ids(prompt) (mask 0), ids(rejected) + end-of-text (mask 1). A row
 * starts where the mask goes from 1 to 0 (or at 0): prepare refuses an empty
 * prompt, so every row starts with a masked token. Pair k is rows 2k
 * (chosen) and 2k+1 (rejected). lf_pairs_open scans the split once (8 bytes
 * per row). */
typedef struct lf_pairs lf_pairs;
/* Errors: LF_ERR_UNSUPPORTED (the dataset's mode is not "dpo"),
 * LF_ERR_NOT_FOUND (no such split), LF_ERR_FORMAT (an odd number of rows),
 * LF_ERR_NOMEM. */
lf_status lf_pairs_open(lf_pairs **out, const lf_dataset *d, lf_split split);
uint64_t lf_pairs_count(const lf_pairs *p);
/* Tokens of the longest row, and how many rows are longer than `limit` tokens. */
uint64_t lf_pairs_longest(const lf_pairs *p, uint64_t limit, uint64_t *n_longer);
/* Pair `pair` as two rows of T: inputs (2,T) and targets (2,T), row 0 the
 * chosen, row 1 the rejected. inputs[t] = x[t], targets[t] = x[t+1] where
 * x[t+1] is a completion token (mask 1), else -1; a row shorter than T+1 is
 * padded (inputs: end-of-text, or 0; targets -1), a longer one cut to its
 * first T+1 tokens. LF_ERR_RANGE for a pair index past the end. */
lf_status lf_pairs_get(const lf_pairs *p, uint64_t pair, int T, int32_t *inputs, int32_t *targets);
void lf_pairs_free(lf_pairs *p);

/* LF_SAMPLING_PACKED: windows per epoch of a split, (N-1)/T (0 when absent). */
uint64_t lf_dataset_packed_windows(const lf_dataset *d, lf_split split, int T);
/* The window (0 .. n_windows-1) row `row` reads: perm_e(row mod n) of epoch
 * e = row / n, a bijection of 0..n-1 for each (seed, purpose, e). O(1). */
uint64_t lf_dataset_packed_window(uint64_t row, uint64_t n_windows, uint64_t seed, uint32_t purpose);

/* Fill inputs/targets (B,T) int32 with rows first_row .. first_row+B-1.
 * Row r starts at s(r) (see lf_sampling; random draws
 * lf_rng_u64(seed, purpose, r) % (N - T)); inputs = tok[s .. s+T),
 * targets = tok[s+1 .. s+T+1), a target whose mask is 0 becomes -1.
 * Error when the split has fewer than T+2 tokens (names split and sizes). */
lf_status lf_dataset_get_batch(const lf_dataset *d, lf_split split, lf_sampling sampling, uint64_t seed,
                               uint32_t purpose, uint64_t first_row, int B, int T, int32_t *inputs, int32_t *targets);

/* ---------------------------------------------------------------- SFT rows of whole examples */
/* Fine-tuning rows made of whole examples (src/data/sft_pack.c;
 * docs/training.md "Packing"), instead of windows cut from the token
 * stream. An example is one record of the split: the tokens after an
 * end-of-text up to and including the next one (ids(prompt) + ids(response)
 * + [eot] in SFT data), giving L-1 positions for L tokens: inputs tok[s ..
 * s+L-2], targets tok[s+1 .. s+L-1] (-1 where the loss mask is 0). An
 * example longer than T positions is truncated to its first T (counted in
 * the stats; as TRL's max_length). Records of one token give no position
 * and are skipped.
 *   packed: examples are placed first-fit, in order, into the rows still
 *           open among the last LF_SFT_PACK_WINDOW (so a row's examples
 *           come from one stretch of the corpus, in corpus order);
 *   padded: one example per row.
 * The rest of a row is padding: input the end-of-text token, target -1.
 * Every row comes with the positions of its tokens inside their examples
 * (0, 1, ... restarting at each example; the padding counts as one run of
 * its own), what lf_forward_opts.pos takes. Row r of the sampler is row
 * perm_e(r mod R) of epoch e = r / R (R rows, the permutation of
 * lf_dataset_packed_window keyed by seed and purpose). */
#define LF_SFT_PACK_WINDOW 64
typedef enum lf_sft_pack_mode {
    LF_SFT_PACKED = 1, /* several whole examples per row */
    LF_SFT_PADDED = 2, /* one example per row */
} lf_sft_pack_mode;
typedef struct lf_sft_pack lf_sft_pack;
typedef struct lf_sft_pack_stats {
    uint64_t examples;  /* records with at least one position */
    uint64_t truncated; /* examples cut to T positions */
    uint64_t rows;      /* rows per epoch */
    uint64_t tokens;    /* positions holding an example token (rows * T - padding) */
    uint64_t targets;   /* of those, positions whose target counts (mask 1) */
    int block_size;     /* T, the row length */
} lf_sft_pack_stats;
/* Index split of d (one pass over its tokens) and lay out its rows of T.
 * LF_ERR_UNSUPPORTED when the dataset names no end-of-text token;
 * LF_ERR_RANGE when the split has no example. The dataset must outlive it. */
lf_status lf_sft_pack_create(lf_sft_pack **out, const lf_dataset *d, lf_split split, int T, lf_sft_pack_mode mode);
void lf_sft_pack_free(lf_sft_pack *p);
void lf_sft_pack_stats_get(const lf_sft_pack *p, lf_sft_pack_stats *out);
/* Rows first_row .. first_row+B-1 into inputs, targets, pos (B,T) each.
 * Thread-safe (reads only). */
lf_status lf_sft_pack_get_batch(const lf_sft_pack *p, uint64_t seed, uint32_t purpose, uint64_t first_row, int B,
                                int32_t *inputs, int32_t *targets, int32_t *pos);

/* ---------------------------------------------------------------- the training loader */
/* A step's batches for one rank, made ahead by a background thread
 * (src/data/loader.c). Row b of micro-batch a of rank r at step s is the
 * sampler's global row ((s*accum + a)*world + r)*B + b, so ranks read
 * disjoint rows and opening at step s resumes exactly, in O(1). */
typedef struct lf_loader lf_loader;
typedef struct lf_loader_opts {
    lf_split split;
    lf_sampling sampling;
    uint64_t seed;
    uint32_t purpose;        /* RNG purpose of the rows (LF_RNG_DATA for training) */
    int micro_batch;         /* B */
    int block_size;          /* T */
    int accum;               /* micro-batches per step */
    int rank, world;         /* this rank of world ranks */
    int prefetch;            /* steps made ahead by the thread (0..64); 0 = in the caller, no thread */
    const lf_sft_pack *pack; /* NULL, or rows of whole examples (sampling and split are then the pack's;
                                block_size must be its T); the caller keeps it alive */
} lf_loader_opts;

/* split train, random sampling, LF_RNG_DATA, B = T = accum = 1, rank 0 of 1, prefetch 2 */
lf_loader_opts lf_loader_opts_default(void);
/* The global row index of (step, micro-batch, row) under o. */
uint64_t lf_loader_row(const lf_loader_opts *o, uint64_t step, int micro, int b);
/* Start at first_step. Refuses at once what every batch would (a split
 * smaller than T+2, records sampling without an index, bad options). The
 * dataset must outlive the loader. */
lf_status lf_loader_open(lf_loader **out, const lf_dataset *ds, const lf_loader_opts *o, uint64_t first_step);
/* The next step's accum*B*T inputs and targets (micro-batch a at offset
 * a*B*T); *wait_s (may be NULL) = seconds this call waited for them. */
lf_status lf_loader_next(lf_loader *l, int32_t *inputs, int32_t *targets, double *wait_s);
/* The same with each token's position in its example (accum*B*T), for a
 * loader with a pack (pos may be NULL); without one, pos is 0..T-1 per row. */
lf_status lf_loader_next_pos(lf_loader *l, int32_t *inputs, int32_t *targets, int32_t *pos, double *wait_s);
/* The step the next lf_loader_next returns (the data cursor). */
uint64_t lf_loader_step(const lf_loader *l);
/* Seconds spent waiting in lf_loader_next so far. */
double lf_loader_wait_total(const lf_loader *l);
/* Passes over the split so far, all ranks together (packed: windows taken /
 * windows per epoch; otherwise tokens taken / split tokens). */
double lf_loader_epoch(const lf_loader *l);
void lf_loader_close(lf_loader *l);

#ifdef __cplusplus
}
#endif
#endif
