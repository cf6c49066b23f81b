/*
 * Issue 17 defect (b): names taken from files reach error messages as valid
 * UTF-8, whatever bytes the file holds. Each case feeds a file whose name
 * (a Parquet column, a JSONL file path with a skipped record, a safetensors
 * tensor, a configuration key, a trainer_state.json file entry, a CSV
 * header) carries bytes that are not UTF-8, and checks that the message
 * fails as it should, is valid UTF-8, and shows the byte as \xNN.
 *
 * The first case is the reproduction: a Parquet footer mutated so
 * that column 'text' reads "\xfbext"; the message said
 *   no column 'text'; the columns are: <raw 0xFB>ext
 * before lf_fail escaped its messages.
 */
#include "test_util.h"
#include <sys/stat.h>
#include "llmforge/checkpoint.h"
#include "llmforge/data.h"
#include "llmforge/safetensors.h"
#include "llmforge/train.h"

static char *g_dir;

static int setup(void **state) {
    (void)state;
    g_dir = lf_test_tmpdir();
    return g_dir ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    lf_test_rmrf(g_dir);
    free(g_dir);
    return 0;
}

/* Strict UTF-8 validity (RFC 3629), written independently of core's. */
static int valid_utf8(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        int n = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
        if (n < 0 || (n == 1 && c < 0xc2) || (n == 3 && c > 0xf4)) return 0;
        uint32_t cp = n == 0 ? c : c & (0x3fu >> n);
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (p[i] & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        p += n + 1;
    }
    return 1;
}

static void assert_safe(const char *msg, const char *needle) {
    printf("  message: %s\n", msg);
    if (!valid_utf8(msg)) fail_msg("message is not valid UTF-8: %s", msg);
    if (!strstr(msg, needle)) fail_msg("message '%s' lacks '%s'", msg, needle);
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* Open and read one record; the status of the first failure. */
static lf_status read_one(const char *path, const lf_reader_opts *o) {
    lf_reader *r = NULL;
    lf_status st = lf_reader_open(&r, path, o);
    if (st != LF_OK) return st;
    lf_record rec;
    int eof = 0;
    while (st == LF_OK && !eof) st = lf_reader_next(r, &rec, &eof);
    lf_reader_close(r);
    return st;
}

static void test_parquet_column(void **state) {
    (void)state;
    char *d = NULL;
    size_t n = 0;
    LF_ASSERT_OK(lf_file_read_all(LF_SOURCE_DIR "/tests/fixtures/parquet/matrix_none_plain_v1.parquet", 0, &d, &n));
    uint32_t flen;
    memcpy(&flen, d + n - 8, 4);
    assert_true(flen + 8 <= n);
    int hits = 0;
    for (size_t i = n - 8 - flen; i + 4 <= n - 8; i++)
        if (!memcmp(d + i, "text", 4)) {
            d[i] = (char)0xfb;
            hits++;
        }
    assert_true(hits >= 1);
    char path[600];
    snprintf(path, sizeof path, "%s/mutated.parquet", g_dir);
    write_bytes(path, d, n);
    lf_free(d);
    lf_reader_opts o = {0};
    assert_int_equal(read_one(path, &o), LF_ERR_FORMAT);
    assert_safe(lf_last_error(), "no column 'text'; the columns are: \\xfbext");
}

/* A skipped record's message (on_skip) and the error without skipping name
 * a file whose name is not UTF-8. */
static char g_skipped[1200];
static void on_skip(const char *msg, void *user) {
    (void)user;
    snprintf(g_skipped, sizeof g_skipped, "%s", msg);
}

static void test_jsonl_path(void **state) {
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/bad\xff.jsonl", g_dir);
    const char *text = "{\"text\": \"ok\"}\n{\"te\xffxt\": \"no text field\"}\n";
    write_bytes(path, text, strlen(text));
    lf_reader_opts o = {0};
    assert_int_equal(read_one(path, &o), LF_ERR_FORMAT);
    assert_safe(lf_last_error(), "bad\\xff.jsonl:2: field 'text' is missing");
    o.skip_bad_records = 1;
    o.on_skip = on_skip;
    g_skipped[0] = 0;
    LF_ASSERT_OK(read_one(path, &o));
    assert_safe(g_skipped, "bad\\xff.jsonl:2: field 'text' is missing");
}

static void test_csv_header(void **state) {
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/bad.csv", g_dir);
    const char *text = "id,t\xe9xt\n1,hello\n";
    write_bytes(path, text, strlen(text));
    lf_reader_opts o = {0};
    assert_true(read_one(path, &o) != LF_OK);
    assert_safe(lf_last_error(), "byte 0xE9"); /* the CSV reader names the byte itself */
}

/* A safetensors header whose tensor name is not UTF-8, and a valid file
 * whose unexpected tensor name is reported by lf_weights_load. */
static void test_safetensors_name(void **state) {
    (void)state;
    char hdr[256], path[600];
    int hl = snprintf(hdr, sizeof hdr, "{\"h.\xff.w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
    while (hl % 8) hdr[hl++] = ' ';
    unsigned char file[512];
    uint64_t n64 = (uint64_t)hl;
    memcpy(file, &n64, 8);
    memcpy(file + 8, hdr, (size_t)hl);
    memset(file + 8 + hl, 0, 4);
    snprintf(path, sizeof path, "%s/bad.safetensors", g_dir);
    write_bytes(path, file, 8 + (size_t)hl + 4);
    lf_safetensors *st = NULL;
    assert_true(lf_safetensors_open(&st, path) != LF_OK);
    assert_null(st);
    assert_safe(lf_last_error(), "bad.safetensors");
    /* a checkpoint's trainer_state.json whose "files" entry name is not UTF-8 */
    lf_param_info p = {.name = "w", .ndim = 1, .shape = {2}, .numel = 2, .offset = 0};
    lf_ckpt_tensors tt = {&p, 1, 2};
    float w[2] = {1, 2};
    char root[700], dir[800], sp[900];
    snprintf(root, sizeof root, "%s/ckpt", g_dir);
    const lf_ckpt_file notes = {"notes.txt", "hi", 2};
    LF_ASSERT_OK(lf_checkpoint_save(root, 1, &tt, w, NULL, NULL, "{}", &notes, 1, 0, NULL, NULL));
    snprintf(dir, sizeof dir, "%s/step_00000001", root);
    snprintf(sp, sizeof sp, "%s/trainer_state.json", dir);
    char *text = NULL;
    LF_ASSERT_OK(lf_file_read_all(sp, 0, &text, NULL));
    char *at = strstr(text, "\"notes.txt\"");
    assert_non_null(at);
    at[4] = (char)0xfe; /* "not\xfes.txt" */
    LF_ASSERT_OK(lf_file_write_all(sp, text, strlen(text)));
    lf_free(text);
    assert_true(lf_checkpoint_verify(dir, NULL) != LF_OK);
    assert_safe(lf_last_error(), "file 'not\\xfes.txt' is missing");
}

static void test_config_key(void **state) {
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/cfg.json", g_dir);
    const char *text = "{\"data\": {\"dataset\": \"x\"}, \"model\": {\"n_\xfflayer\": 2}}";
    write_bytes(path, text, strlen(text));
    lf_train_config c;
    assert_int_equal(lf_train_config_load_world(&c, path, 1, 0, NULL), LF_ERR_CONFIG);
    assert_safe(lf_last_error(), "model.n_\\xfflayer");
    /* and an override given on the command line */
    const char *over[] = {"model.n_\xfe=3"};
    assert_int_equal(lf_train_config_load_world(&c, NULL, 1, 1, over), LF_ERR_CONFIG);
    assert_safe(lf_last_error(), "n_\\xfe");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_parquet_column, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jsonl_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_safetensors_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_key, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
