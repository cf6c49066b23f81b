/* Parquet record source: not implemented yet (being written). */
#include "data_impl.h"

static lf_status src_open(void **state, const char *path, const lf_reader_opts *opts) {
    (void)opts;
    *state = NULL;
    return lf_fail(LF_ERR_UNSUPPORTED, "%s: the parquet reader is not available in this build yet", path);
}
static lf_status src_next(void *state, lf_record *rec, int *eof, uint64_t *skipped) {
    (void)state; (void)rec; (void)skipped;
    *eof = 1;
    return LF_OK;
}
static void src_close(void *state) { (void)state; }

const lf__record_source lf__parquet_source = {src_open, src_next, src_close};
