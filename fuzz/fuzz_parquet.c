/*
 * Fuzz harness: the Parquet record source (src/data/reader_parquet.c)
 * through lf_reader_open / lf_reader_next, format LF_INPUT_PARQUET.
 *
 * Input: the bytes of a Parquet file, written to a memfd path
 * (fuzz_memfile). Each input is read to the end three times:
 *   1. pretraining, column "text", skip_bad_records on;
 *   2. fine-tuning, pair auto-detected from the schema (prompt/response or
 *      input_text/target_text), bad records are errors;
 *   3. fine-tuning with prompt and response both naming column "text" (one
 *      column selected twice), skip_bad_records on.
 * Invariants: a refused open leaves the handle NULL; every failure has a
 * message naming the file; every record's strings are NUL-terminated at
 * their length, valid UTF-8 without NUL, the text/response non-empty;
 * rec.line == rec.index + 1 and indices strictly increase; skipped records
 * are counted only with skip_bad_records.
 */
#include "fuzz_util.h"
#include "llmforge/data.h"
#include "data/data_impl.h"

static int text_ok(const char *s, size_t n) {
    if (!s || s[n] != 0) return 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0) return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        const char *why;
        int k = lf__utf8_decode((const unsigned char *)s + i, n - i, &cp, &why);
        if (!k) return 0;
        i += (size_t)k;
    }
    return 1;
}

static void run(const char *path, lf_record_mode mode, const char *pf, const char *rf, int skip) {
    lf_reader_opts o;
    memset(&o, 0, sizeof o);
    o.format = LF_INPUT_PARQUET;
    o.mode = mode;
    o.prompt_field = pf;
    o.response_field = rf;
    o.skip_bad_records = skip;
    lf_reader *r = NULL;
    lf_status st = lf_reader_open(&r, path, &o);
    fuzz_note(mode == LF_RECORD_SFT ? "lf_reader_open (sft)" : "lf_reader_open", st);
    if (st != LF_OK) {
        FUZZ_CHECK(r == NULL);
        FUZZ_CHECK(strstr(lf_last_error(), path) != NULL);
        return;
    }
    uint64_t next_min = 0;
    for (;;) {
        lf_record rec;
        int eof;
        st = lf_reader_next(r, &rec, &eof);
        if (st != LF_OK) {
            fuzz_note("lf_reader_next", st);
            FUZZ_CHECK(strstr(lf_last_error(), path) != NULL);
            break;
        }
        if (eof) break;
        FUZZ_CHECK(rec.line == rec.index + 1);
        FUZZ_CHECK(rec.index >= next_min);
        next_min = rec.index + 1;
        if (mode == LF_RECORD_PRETRAIN) {
            FUZZ_CHECK(rec.text_len > 0 && text_ok(rec.text, rec.text_len));
            FUZZ_CHECK(rec.prompt == NULL && rec.response == NULL);
        } else {
            FUZZ_CHECK(text_ok(rec.prompt, rec.prompt_len));
            FUZZ_CHECK(rec.response_len > 0 && text_ok(rec.response, rec.response_len));
            if (pf && rf && strcmp(pf, rf) == 0)
                FUZZ_CHECK(rec.prompt_len == rec.response_len && memcmp(rec.prompt, rec.response, rec.prompt_len) == 0);
        }
    }
    if (!skip) FUZZ_CHECK(lf_reader_skipped(r) == 0);
    lf_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_memfile(data, size);
    run(path, LF_RECORD_PRETRAIN, NULL, NULL, 1);
    run(path, LF_RECORD_SFT, NULL, NULL, 0);
    run(path, LF_RECORD_SFT, "text", "text", 1);
    return 0;
}
