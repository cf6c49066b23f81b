/*
 * data.sampling "records": every window starts at a record start (position 0
 * or right after an end-of-text token), draws are deterministic in (seed, row),
 * and a dataset without an end-of-text id is refused with a clear message.
 */
#include "test_util.h"
#include "llmforge/data.h"

#define EOT 0
#define V 32

/* records of varying length 3..9, each ended by EOT */
static size_t make_dataset(const char *dir, int with_eot, uint32_t *tokens, size_t cap) {
    size_t n = 0;
    for (int r = 0; n + 12 < cap; r++) {
        int len = 3 + r % 7;
        for (int j = 0; j < len; j++) tokens[n++] = 1 + (uint32_t)((r * 7 + j) % (V - 1));
        tokens[n++] = EOT;
    }
    char path[700];
    LF_ASSERT_OK(lf_mkdirs(dir));
    snprintf(path, sizeof path, "%s/train_000.bin", dir);
    LF_ASSERT_OK(lf_shard_write(path, tokens, NULL, n, V));
    char manifest[1024];
    snprintf(manifest, sizeof manifest,
             "{\"format\":\"llmforge-dataset\",\"version\":1,\"vocab_size\":%d,%s"
             "\"tokenizer\":{\"spec\":\"none\"},\"splits\":{\"train\":{\"shards\":[\"train_000.bin\"],\"tokens\":%zu}}}",
             V, with_eot ? "\"eot\":0," : "", n);
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    LF_ASSERT_OK(lf_file_write_all(path, manifest, strlen(manifest)));
    return n;
}

static void test_windows_start_at_records(void **state) {
    (void)state;
    char *tmp = lf_test_tmpdir(), dir[600];
    snprintf(dir, sizeof dir, "%s/ds", tmp);
    static uint32_t tokens[5000];
    size_t n = make_dataset(dir, 1, tokens, 5000);
    lf_dataset *d = NULL;
    lf_status st = lf_dataset_open(&d, dir);
    if (st != LF_OK) fail_msg("%s", lf_last_error());
    assert_int_equal(lf_dataset_eot(d), EOT);
    const int B = 64, T = 16;
    int32_t x[64 * 16], y[64 * 16], x2[64 * 16], y2[64 * 16];
    /* before indexing: a clear error */
    assert_int_equal(lf_dataset_get_batch(d, LF_SPLIT_TRAIN, LF_SAMPLING_RECORDS, 1, LF_RNG_DATA, 0, B, T, x, y),
                     LF_ERR_INVALID_ARG);
    LF_ASSERT_OK(lf_dataset_index_records(d, LF_SPLIT_TRAIN, T));
    LF_ASSERT_OK(lf_dataset_index_records(d, LF_SPLIT_TRAIN, T)); /* idempotent */
    int distinct_first = 0;
    for (int rep = 0; rep < 4; rep++) {
        LF_ASSERT_OK(lf_dataset_get_batch(d, LF_SPLIT_TRAIN, LF_SAMPLING_RECORDS, 1, LF_RNG_DATA, (uint64_t)rep * B, B, T,
                                          x, y));
        for (int b = 0; b < B; b++) {
            /* find the window in the stream: its start must be 0 or follow an EOT */
            size_t s = n;
            for (size_t p = 0; p + T + 1 <= n; p++) {
                int same = 1;
                for (int t = 0; t < T && same; t++) same = (uint32_t)x[b * T + t] == tokens[p + t] &&
                                                        (uint32_t)y[b * T + t] == tokens[p + t + 1];
                if (same && (p == 0 || tokens[p - 1] == EOT)) {
                    s = p;
                    break;
                }
            }
            if (s == n) fail_msg("row %d does not start at a record", rep * B + b);
            distinct_first += x[b * T] != x[0];
        }
    }
    assert_true(distinct_first > 0); /* not always the same record */
    /* deterministic in (seed, row) */
    LF_ASSERT_OK(lf_dataset_get_batch(d, LF_SPLIT_TRAIN, LF_SAMPLING_RECORDS, 1, LF_RNG_DATA, 0, B, T, x, y));
    LF_ASSERT_OK(lf_dataset_get_batch(d, LF_SPLIT_TRAIN, LF_SAMPLING_RECORDS, 1, LF_RNG_DATA, 0, B, T, x2, y2));
    assert_memory_equal(x, x2, sizeof x);
    lf_dataset_close(d);

    /* no end-of-text in the manifest: refused */
    snprintf(dir, sizeof dir, "%s/noeot", tmp);
    make_dataset(dir, 0, tokens, 5000);
    LF_ASSERT_OK(lf_dataset_open(&d, dir));
    assert_int_equal(lf_dataset_eot(d), -1);
    assert_int_equal(lf_dataset_index_records(d, LF_SPLIT_TRAIN, T), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("end-of-text");
    lf_dataset_close(d);
    lf_test_rmrf(tmp);
    free(tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_windows_start_at_records)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
