/*
 * libFuzzer harness for the CSV record source (src/data/reader_csv.c)
 * through lf_reader. The first input byte chooses the options, the rest is
 * the file:
 *   bit 0  fine-tuning (prompt/response auto-detected) instead of pretraining
 *   bit 1  skip_bad_records
 *   bit 2  a tiny record cap (16 bytes)
 *   bit 3  named columns: text_field "a" / prompt "a", response "b"
 * Invariants: a refused file leaves the reader NULL with a message; every
 * record is valid UTF-8 without NUL, NUL-terminated at its length, non-empty
 * where text is required; lines never go backwards and indices count up;
 * after an error the reader stays stopped.
 */
#include "fuzz_util.h"
#include "llmforge/data.h"
#include "data/data_impl.h"

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        const char *why;
        if ((unsigned char)s[i] < 0x80) {
            if (!s[i]) return 0;
            i++;
            continue;
        }
        int k = lf__utf8_decode((const unsigned char *)s + i, n - i, &cp, &why);
        if (!k) return 0;
        i += (size_t)k;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t sel = data[0];
    lf_reader_opts o;
    memset(&o, 0, sizeof o);
    o.format = LF_INPUT_CSV;
    o.mode = sel & 1 ? LF_RECORD_SFT : LF_RECORD_PRETRAIN;
    o.skip_bad_records = (sel >> 1) & 1;
    o.max_record_bytes = (sel >> 2) & 1 ? 16 : 0;
    if ((sel >> 3) & 1) {
        if (o.mode == LF_RECORD_SFT) {
            o.prompt_field = "a";
            o.response_field = "b";
        } else {
            o.text_field = "a";
        }
    }
    const char *path = fuzz_memfile(data + 1, size - 1);
    lf_reader *r = NULL;
    lf_status st = lf_reader_open(&r, path, &o);
    fuzz_note("lf_reader_open", st);
    if (st != LF_OK) {
        FUZZ_CHECK(r == NULL);
        FUZZ_CHECK(lf_last_error()[0]);
        return 0;
    }
    FUZZ_CHECK(lf_reader_format(r) == LF_INPUT_CSV);
    uint64_t last_line = 0, count = 0;
    for (int i = 0; i < 100000; i++) {
        lf_record rec;
        int eof;
        st = lf_reader_next(r, &rec, &eof);
        if (st != LF_OK) {
            fuzz_note("lf_reader_next", st);
            FUZZ_CHECK(lf_last_error()[0]);
            FUZZ_CHECK(lf_reader_next(r, &rec, &eof) != LF_OK);
            break;
        }
        if (eof) break;
        FUZZ_CHECK(rec.line >= 2 && rec.line > last_line);
        FUZZ_CHECK(rec.index == count + lf_reader_skipped(r));
        last_line = rec.line;
        count++;
        if (o.mode == LF_RECORD_PRETRAIN) {
            FUZZ_CHECK(rec.text && strlen(rec.text) == rec.text_len && rec.text_len > 0);
            FUZZ_CHECK(valid_utf8(rec.text, rec.text_len));
            FUZZ_CHECK(rec.text_key && !rec.prompt && !rec.response);
            if (o.max_record_bytes) FUZZ_CHECK(rec.text_len <= o.max_record_bytes);
        } else {
            FUZZ_CHECK(rec.prompt && strlen(rec.prompt) == rec.prompt_len);
            FUZZ_CHECK(rec.response && strlen(rec.response) == rec.response_len && rec.response_len > 0);
            FUZZ_CHECK(valid_utf8(rec.prompt, rec.prompt_len) && valid_utf8(rec.response, rec.response_len));
            FUZZ_CHECK(rec.prompt_key && rec.response_key && !rec.text);
        }
    }
    if (!o.skip_bad_records) FUZZ_CHECK(lf_reader_skipped(r) == 0);
    lf_reader_close(r);
    return 0;
}
