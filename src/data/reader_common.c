/*
 * What the record readers (reader_jsonl.c, reader_csv.c, reader_parquet.c,
 * reader_wds.c) share: the bad-record policy of lf_reader_opts and the
 * words their messages use for JSON types. Each reader still words its own
 * messages ("FILE:LINE: ...", "row N (row group G)", "sample 'KEY'").
 *
 * Invariant: a skipped record's message reaches on_skip escaped exactly as
 * lf_fail would have recorded it (names from the file, a file name), so a
 * skip and a failure say the same bytes.
 */
#include <cjson/cJSON.h>
#include "data_impl.h"

lf_status lf__reader_bad(const lf_reader_opts *opts, uint64_t *skipped, int *skip_now, lf_status st, const char *msg) {
    if (!opts->skip_bad_records) return lf_fail(st, "%s", msg);
    (*skipped)++;
    *skip_now = 1;
    if (opts->on_skip) {
        char safe[1024];
        lf_str_escape(safe, sizeof safe, msg);
        opts->on_skip(safe, opts->on_skip_user);
    }
    return LF_OK;
}

const char *lf__json_type_name(const cJSON *v) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "not a JSON value";
}
