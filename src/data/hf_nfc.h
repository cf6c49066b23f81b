/*
 * The NFC normalizer of Hugging Face tokenizers (src/data/hf_nfc.c), for the
 * "hf:" tokenizer kind (tokenizer_hf.c). Private to the data module.
 */
#ifndef LLMFORGE_DATA_HF_NFC_H
#define LLMFORGE_DATA_HF_NFC_H

#include <stddef.h>
#include <stdint.h>
#include "llmforge/core.h"

/* A growing byte buffer (p malloc'd, free it; all zero is an empty one). */
typedef struct lf__nfc_buf {
    unsigned char *p;
    size_t len, cap;
} lf__nfc_buf;

/* Append s[0, n) to b as it is: LF_OK or LF_ERR_NOMEM. */
lf_status lf__nfc_buf_put(lf__nfc_buf *b, const void *s, size_t n);

/* 1 when s[0, n) may change under NFC: it holds a byte >= 0xCC (a code point
 * from U+0300 on, or an invalid byte). 0 guarantees that NFC leaves every
 * valid run of s as it is: every code point below U+0300 has combining class
 * 0 and NFC_Quick_Check Yes (tests/data/test_hf_tokenizer.c checks all such
 * strings of one and two code points). */
int lf__hf_nfc_needed(const unsigned char *s, size_t n);

/* Append the NFC of the valid UTF-8 text s[0, n), as tokenizers 0.23
 * computes it, to b. LF_OK; LF_ERR_NOMEM; LF_ERR_FORMAT when s is not valid
 * UTF-8 after all (a caller's bug, reported, never a crash). On failure b
 * holds what it held before plus a part of the result. */
lf_status lf__hf_nfc_append(const unsigned char *s, size_t n, lf__nfc_buf *b);

/* 1 for a code point that normalization keeps as it is and that cuts the
 * text in two, normalized apart: one tokenizers' Unicode 9 tables do not
 * have but utf8proc reorders or composes, or U+11A7 (see hf_nfc.c). */
int lf__hf_nfc_pass_through(uint32_t cp);

#endif
