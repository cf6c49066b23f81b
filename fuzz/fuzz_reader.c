/*
 * libFuzzer harness for the record reader (src/data/reader_jsonl.c): JSON Lines,
 * JSON arrays and plain text, pretraining and SFT fields, skip-bad-records and a
 * tiny record cap, chosen by the first input byte. Invariant: every record the
 * reader returns is valid UTF-8 without NUL bytes.
 */
#include "fuzz_util.h"
#include "llmforge/data.h"
#include "data/data_impl.h"

static int valid_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp; const char *why;
        if ((unsigned char)s[i] < 0x80) { if (!s[i]) return 0; i++; continue; }
        int k = lf__utf8_decode((const unsigned char *)s + i, n - i, &cp, &why);
        if (!k) return 0;
        i += (size_t)k;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t sel = data[0];
    lf_reader_opts o; memset(&o, 0, sizeof o);
    o.format = (lf_input_format)(sel & 3);
    o.mode = (sel >> 2) & 1 ? LF_RECORD_SFT : LF_RECORD_PRETRAIN;
    o.skip_bad_records = (sel >> 3) & 1;
    o.max_record_bytes = (sel >> 4) & 1 ? 16 : 0;
    if (o.format == LF_INPUT_AUTO) o.format = LF_INPUT_JSON;
    if (o.format == LF_INPUT_TEXT && o.mode == LF_RECORD_SFT) o.mode = LF_RECORD_PRETRAIN;
    const char *path = fuzz_memfile(data + 1, size - 1);
    lf_reader *r = NULL;
    lf_status st = lf_reader_open(&r, path, &o);
    if (st != LF_OK) { FUZZ_CHECK(r == NULL); FUZZ_CHECK(lf_last_error()[0]); return 0; }
    for (int i = 0; i < 100000; i++) {
        lf_record rec; int eof;
        st = lf_reader_next(r, &rec, &eof);
        if (st != LF_OK) { FUZZ_CHECK(lf_last_error()[0]); break; }
        if (eof) break;
        if (o.mode == LF_RECORD_PRETRAIN) {
            FUZZ_CHECK(rec.text && strlen(rec.text) == rec.text_len && rec.text_len > 0);
            FUZZ_CHECK(valid_utf8(rec.text, rec.text_len));
        } else {
            FUZZ_CHECK(rec.prompt && strlen(rec.prompt) == rec.prompt_len);
            FUZZ_CHECK(rec.response && strlen(rec.response) == rec.response_len && rec.response_len > 0);
            FUZZ_CHECK(valid_utf8(rec.prompt, rec.prompt_len) && valid_utf8(rec.response, rec.response_len));
        }
        FUZZ_CHECK(lf_reader_bytes_read(r) <= size - 1);
    }
    lf_reader_close(r);
    return 0;
}
