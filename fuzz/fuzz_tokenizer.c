/*
 * Fuzz harness: char tokenizer (src/data/tokenizer_char.c, tokenizer.c).
 *
 * Input: a vocab.json, a NUL byte, then UTF-8 text (no NUL: the whole input
 * is the vocabulary and the text is empty). The vocabulary is written to a
 * per-process file and opened as "char:PATH". When it opens:
 *   - encode(text) either fails with a message or yields ids all below
 *     vocab_size, and then decode(encode(text)) == text byte for byte;
 *   - the text bytes, read as little-endian u32 ids reduced modulo
 *     vocab_size + 2, are decoded too: ids out of range must be refused, and
 *     in-range ids must decode to something that encodes back to the same
 *     ids.
 */
#include "fuzz_util.h"
#include "llmforge/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t vlen = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "";
    size_t tlen = nul ? size - vlen - 1 : 0;

    char spec[80];
    snprintf(spec, sizeof spec, "char:%s", fuzz_memfile(data, vlen));
    lf_tokenizer *t = NULL;
    lf_status ost = lf_tokenizer_open(&t, spec, NULL);
    fuzz_note("lf_tokenizer_open", ost);
    if (ost != LF_OK) {
        FUZZ_CHECK(t == NULL);
        FUZZ_CHECK(lf_last_error()[0] != 0);
        return 0;
    }
    const int V = lf_tokenizer_vocab_size(t);
    FUZZ_CHECK(V >= 1);

    /* encode -> decode */
    uint32_t *ids = NULL;
    size_t n = 0;
    lf_status est = lf_tokenizer_encode(t, text, tlen, &ids, &n);
    fuzz_note("lf_tokenizer_encode", est);
    if (est == LF_OK) {
        FUZZ_CHECK(ids != NULL && n <= tlen);
        for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] < (uint32_t)V);
        char *back = NULL;
        size_t blen = 0;
        FUZZ_CHECK(lf_tokenizer_decode(t, ids, n, &back, &blen) == LF_OK);
        FUZZ_CHECK(back != NULL && blen == tlen && back[blen] == 0);
        FUZZ_CHECK(memcmp(back, text, tlen) == 0);
        lf_free(back);
        lf_free(ids);
    } else {
        FUZZ_CHECK(ids == NULL && n == 0);
        FUZZ_CHECK(lf_last_error()[0] != 0);
    }

    /* arbitrary ids -> decode (-> encode) */
    size_t m = tlen / 4;
    uint32_t *raw = malloc((m ? m : 1) * sizeof *raw);
    if (raw) {
        int out_of_range = 0;
        for (size_t i = 0; i < m; i++) {
            const uint8_t *p = (const uint8_t *)text + 4 * i;
            uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            raw[i] = (uint32_t)(v % ((uint64_t)V + 2));
            out_of_range |= raw[i] >= (uint32_t)V;
        }
        char *s = NULL;
        size_t slen = 0;
        lf_status st = lf_tokenizer_decode(t, raw, m, &s, &slen);
        fuzz_note("lf_tokenizer_decode of the text as ids", st);
        FUZZ_CHECK((st == LF_OK) == !out_of_range);
        if (st == LF_OK) {
            FUZZ_CHECK(s != NULL && s[slen] == 0);
            uint32_t *again = NULL;
            size_t n2 = 0;
            FUZZ_CHECK(lf_tokenizer_encode(t, s, slen, &again, &n2) == LF_OK);
            FUZZ_CHECK(n2 == m && memcmp(again, raw, m * sizeof *raw) == 0);
            lf_free(again);
            lf_free(s);
        } else {
            FUZZ_CHECK(s == NULL);
        }
        free(raw);
    }
    lf_tokenizer_free(t);
    return 0;
}
