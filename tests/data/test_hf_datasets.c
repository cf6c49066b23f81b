/* Hugging Face dataset layouts read as they are (src/data/dataset_dir.c,
 * hub_configs.c, reader_json_doc.c, the Alpaca form of reader_jsonl.c),
 * against tests/fixtures/hf_datasets (written by pyarrow and `datasets`:
 * tools/reference/make_hf_dataset_fixtures.py; expected.json is what
 * `datasets` read back):
 *  - a hub repository with a configs: header, its other config (--subset),
 *    one without a header (splits from file names), one with split
 *    directories: lf_prepare with keep_splits writes per split exactly the
 *    records `datasets` read, in its order: the shard tokens equal the
 *    expected texts' encodings, each followed by end-of-text;
 *  - a JSON object holding its records under "data" (with and without
 *    json_field), Alpaca records (prompt and response by the joining rule);
 *  - split names from paths; a save_to_disk directory's files and split;
 *  - save_to_disk directories and Arrow IPC stream/file files (reader_arrow.c):
 *    records and tokens as datasets/pyarrow read them, nulls, a large_string
 *    column behind list and struct columns, a file cut at every length or
 *    with any byte flipped;
 *  - bad input: a configs: path matching nothing, a repository with
 *    nothing readable, keep_splits over a file naming no split: clear
 *    errors naming the file, and no dataset.json. */
#include "test_util.h"
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "llmforge/data.h"
#include "data/data_impl.h"
#include "prepare_fixture.h"

#define FIX LF_SOURCE_DIR "/tests/fixtures/hf_datasets"

static cJSON *expected(const char *name) {
    static cJSON *root;
    if (!root) {
        char *text = NULL;
        size_t len = 0;
        LF_ASSERT_OK(lf_file_read_all(FIX "/expected.json", 1 << 20, &text, &len));
        root = cJSON_ParseWithLength(text, len);
        lf_free(text);
        assert_non_null(root);
    }
    cJSON *c = cJSON_GetObjectItemCaseSensitive(root, name);
    assert_non_null(c);
    return c;
}

/* The tokens of split `s` (all its shards, in order) in out_dir. */
static void check_split_tokens(const char *out, const char *split, const cJSON *texts, lf_tokenizer *tok, int eot) {
    size_t want_n = 0, cap = 0;
    uint32_t *want = NULL;
    const cJSON *t;
    cJSON_ArrayForEach(t, texts) {
        uint32_t *ids = NULL;
        size_t n = 0;
        LF_ASSERT_OK(lf_tokenizer_encode(tok, t->valuestring, strlen(t->valuestring), &ids, &n));
        if (want_n + n + 1 > cap) {
            cap = 2 * (want_n + n + 1);
            want = realloc(want, cap * sizeof *want);
        }
        memcpy(want + want_n, ids, n * sizeof *ids);
        want_n += n;
        want[want_n++] = (uint32_t)eot;
        lf_free(ids);
    }
    size_t got = 0;
    for (int k = 0;; k++) {
        char name[64];
        snprintf(name, sizeof name, "%s_%03d.bin", split, k);
        struct stat sb;
        const char *p = join2(out, name);
        if (stat(p, &sb) != 0) break;
        lf_shard *sh = NULL;
        LF_ASSERT_OK(lf_shard_open(&sh, p, 1));
        for (size_t i = 0; i < lf_shard_num_tokens(sh); i++, got++) {
            assert_true(got < want_n);
            assert_int_equal(lf_shard_token(sh, i), want[got]);
        }
        lf_shard_close(sh);
    }
    assert_int_equal(got, want_n);
    free(want);
}

/* Prepare `input` keeping its splits; every split of expected[name] holds
 * exactly its records (train, validation -> val, test). */
static void prepare_kept(const char *input, const char *subset, const char *name) {
    const char *out = path_in(name);
    lf_prepare_opts o = opts1(input, LF_RECORD_PRETRAIN, "char");
    o.keep_splits = 1;
    o.subset = subset;
    o.n_threads = 1;
    lf_prepare_result res;
    LF_ASSERT_OK(lf_prepare(&o, out, &res));
    lf_tokenizer *tok = NULL;
    LF_ASSERT_OK(lf_tokenizer_open(&tok, "char:vocab.json", out));
    static const char *const ours[3] = {"train", "val", "test"}, *const theirs[3] = {"train", "validation", "test"};
    const cJSON *exp = expected(name);
    for (int s = 0; s < 3; s++) {
        const cJSON *texts = cJSON_GetObjectItemCaseSensitive(exp, theirs[s]);
        assert_int_equal(res.records[s], texts ? (uint64_t)cJSON_GetArraySize(texts) : 0);
        if (texts) check_split_tokens(out, ours[s], texts, tok, res.eot);
    }
    lf_tokenizer_free(tok);
}

static void test_hub_configs(void **state) {
    (void)state;
    prepare_kept(FIX "/hub", NULL, "hub");
    prepare_kept(FIX "/hub", "alt", "hub_alt");
    /* dataset.json says how the splits were made and which split each file is */
    char *text = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(path_in("hub/dataset.json"), 1 << 20, &text, &len));
    cJSON *m = cJSON_ParseWithLength(text, len);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "split"), "method")->valuestring, "kept");
    const cJSON *src = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "sources"), 3); /* test, train x2, validation */
    assert_non_null(strstr(cJSON_GetObjectItem(src, "path")->valuestring, "data/validation-00000-of-00001.parquet"));
    assert_string_equal(cJSON_GetObjectItem(src, "split")->valuestring, "validation");
    cJSON_Delete(m);
    lf_free(text);
}

static void test_hub_names_and_dirs(void **state) {
    (void)state;
    prepare_kept(FIX "/hub_plain", NULL, "hub_plain"); /* README.md and LICENSE left out */
    prepare_kept(FIX "/hub_dirs", NULL, "hub_dirs");
}

static void test_bad_layouts(void **state) {
    (void)state;
    lf_prepare_opts o = opts1(FIX "/hub_missing", LF_RECORD_PRETRAIN, "char");
    assert_int_equal(lf_prepare(&o, path_in("m"), NULL), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("hub_missing/README.md");
    LF_ASSERT_ERR_CONTAINS("'data/test-*' matches no file");
    struct stat sb;
    assert_int_not_equal(stat(path_in("m/dataset.json"), &sb), 0);

    o = opts1(FIX "/hub_empty", LF_RECORD_PRETRAIN, "char");
    assert_int_equal(lf_prepare(&o, path_in("e"), NULL), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("hub_empty' holds no input files");
    LF_ASSERT_ERR_CONTAINS("data/notes.bin (its name tells no input format)");
    LF_ASSERT_ERR_CONTAINS("README.md (the dataset card");
    assert_int_not_equal(stat(path_in("e/dataset.json"), &sb), 0);

    o = opts1(FIX "/json_field.json", LF_RECORD_PRETRAIN, "char");
    o.keep_splits = 1;
    assert_int_equal(lf_prepare(&o, path_in("k"), NULL), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("json_field.json' tells no split");

    o = opts1(FIX "/hub", LF_RECORD_PRETRAIN, "char");
    o.subset = "nope";
    assert_int_equal(lf_prepare(&o, path_in("s"), NULL), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("no config 'nope' (its configs: 'default', 'alt')");
}

/* Every record of path equals the expected list: texts, or [prompt, response]. */
static void check_records_as(const char *path, const lf_reader_opts *ro, const cJSON *want, lf_input_format fmt) {
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, path, ro));
    assert_int_equal(lf_reader_format(r), fmt);
    const cJSON *w = want->child;
    for (;;) {
        lf_record rec;
        int eof = 0;
        LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
        if (eof) break;
        assert_non_null(w);
        if (ro->mode == LF_RECORD_PRETRAIN) {
            assert_string_equal(rec.text, w->valuestring);
        } else {
            assert_string_equal(rec.prompt, cJSON_GetArrayItem(w, 0)->valuestring);
            assert_string_equal(rec.response, cJSON_GetArrayItem(w, 1)->valuestring);
        }
        w = w->next;
    }
    assert_null(w);
    lf_reader_close(r);
}

static void check_records(const char *path, const lf_reader_opts *ro, const cJSON *want) {
    check_records_as(path, ro, want, LF_INPUT_JSON);
}

static void test_json_field_and_alpaca(void **state) {
    (void)state;
    lf_reader_opts ro;
    memset(&ro, 0, sizeof ro);
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(expected("json_field"), "train");
    check_records(FIX "/json_field.json", &ro, want); /* its one list */
    ro.json_field = "data";
    check_records(FIX "/json_field.json", &ro, want);
    ro.format = LF_INPUT_JSON;
    check_records(FIX "/json_field.json", &ro, want);
    ro.json_field = "version";
    lf_reader *r = NULL;
    assert_int_equal(lf_reader_open(&r, FIX "/json_field.json", &ro), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("key 'version' (--field) holds a string, not a list of records");

    memset(&ro, 0, sizeof ro);
    ro.mode = LF_RECORD_SFT;
    check_records(FIX "/alpaca.json", &ro, cJSON_GetObjectItemCaseSensitive(expected("alpaca"), "train"));
    check_records_as(FIX "/alpaca.csv", &ro, cJSON_GetObjectItemCaseSensitive(expected("alpaca_csv"), "train"),
                     LF_INPUT_CSV);
    check_records_as(FIX "/alpaca_parquet/data/train-00000-of-00001.parquet", &ro,
                     cJSON_GetObjectItemCaseSensitive(expected("alpaca_parquet"), "train"), LF_INPUT_PARQUET);

    /* a pretty-printed object whose first line is not JSON, named .jsonl;
     * several lists need a name; a broken document names its line */
    const char *p = path_in("pretty.jsonl");
    const char *doc = "{\n  \"a\": [{\"text\": \"x\"}],\n  \"b\": []\n}\n";
    LF_ASSERT_OK(lf_file_write_all(p, doc, strlen(doc)));
    memset(&ro, 0, sizeof ro);
    assert_int_equal(lf_reader_open(&r, p, &ro), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("several lists ('a', 'b'): name the one of records with --field");
    ro.json_field = "a";
    LF_ASSERT_OK(lf_reader_open(&r, p, &ro));
    lf_record rec;
    int eof = 0;
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.text, "x");
    assert_int_equal(rec.line, 2);
    lf_reader_close(r);
    const char *broken = "{\n  \"a\": [{\"text\": \"x\"},\n}\n";
    LF_ASSERT_OK(lf_file_write_all(p, broken, strlen(broken)));
    assert_int_equal(lf_reader_open(&r, p, &ro), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("pretty.jsonl:3: not valid JSON");

    /* minified on one line: the object's one list of objects is the records;
     * a one-line record with a list (no list of objects, or a "text" key)
     * stays one JSON Lines record */
    const char *q = path_in("mini.json");
    const char *mini = "{\"version\": 2, \"data\": [{\"text\": \"m1\"}, {\"text\": \"m2\"}]}";
    LF_ASSERT_OK(lf_file_write_all(q, mini, strlen(mini)));
    memset(&ro, 0, sizeof ro);
    LF_ASSERT_OK(lf_reader_open(&r, q, &ro));
    assert_int_equal(lf_reader_format(r), LF_INPUT_JSON);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.text, "m1");
    lf_reader_close(r);
    const char *one = "{\"text\": \"t\", \"tags\": [{\"a\": 1}]}\n";
    LF_ASSERT_OK(lf_file_write_all(q, one, strlen(one)));
    LF_ASSERT_OK(lf_reader_open(&r, q, &ro));
    assert_int_equal(lf_reader_format(r), LF_INPUT_JSONL);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.text, "t");
    lf_reader_close(r);
}

static void test_split_names(void **state) {
    (void)state;
    assert_int_equal(lf__split_of_path("data/train-00000-of-00002.parquet", 1, NULL, NULL), 0);
    assert_int_equal(lf__split_of_path("data/validation-00000-of-00001.parquet", 1, NULL, NULL), 1);
    assert_int_equal(lf__split_of_path("data/test/part-0.jsonl", 1, NULL, NULL), 2);
    assert_int_equal(lf__split_of_path("data/test/part-0.jsonl", 0, NULL, NULL), LF__SPLIT_NONE);
    assert_int_equal(lf__split_of_path("dev.csv", 1, NULL, NULL), 1);
    assert_int_equal(lf__split_of_path("contest/trainer.jsonl", 1, NULL, NULL), LF__SPLIT_NONE);
    assert_int_equal(lf__split_of_name("Validation", 10), 1);
    assert_int_equal(lf__split_of_name("unsupervised", 12), LF__SPLIT_NONE);
}

/* save_to_disk directories and Arrow IPC files: records and tokens as
 * datasets/pyarrow read them; a file cut at any length is an error naming
 * it, never records that stop early, and prepare leaves no dataset.json. */
static void test_arrow(void **state) {
    (void)state;
    prepare_kept(FIX "/save_ds", NULL, "save_ds");
    prepare_kept(FIX "/save_dict", NULL, "save_dict");
    lf_reader_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.mode = LF_RECORD_SFT;
    check_records_as(FIX "/save_alpaca/data-00000-of-00001.arrow", &ro,
                     cJSON_GetObjectItemCaseSensitive(expected("save_alpaca"), "train"), LF_INPUT_ARROW);
    memset(&ro, 0, sizeof ro);
    lf_reader *r = NULL;
    lf_record rec;
    int eof = 0;
    LF_ASSERT_OK(lf_reader_open(&r, FIX "/misc_file.arrow", &ro));
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(lf_reader_next(r, &rec, &eof), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("misc_file.arrow:2: row 2: column 'text' is null");
    lf_reader_close(r);
    ro.skip_bad_records = 1;
    check_records_as(FIX "/misc_file.arrow", &ro, cJSON_GetObjectItemCaseSensitive(expected("misc_file"), "train"),
                     LF_INPUT_ARROW);
    ro.skip_bad_records = 0;
    ro.text_field = "id";
    assert_int_equal(lf_reader_open(&r, FIX "/misc_file.arrow", &ro), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("column 'id' holds the Arrow type int, not a string");

    char *full = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(FIX "/save_ds/data-00000-of-00001.arrow", 1 << 20, &full, &len));
    const char *cut = path_in("cut.arrow");
    for (size_t n = 0; n < len; n++) {
        LF_ASSERT_OK(lf_file_write_all(cut, full, n));
        memset(&ro, 0, sizeof ro);
        lf_status st = lf_reader_open(&r, cut, &ro);
        while (st == LF_OK) {
            st = lf_reader_next(r, &rec, &eof);
            if (st == LF_OK && eof) fail_msg("a file cut to %zu of %zu bytes read to its end", n, len);
        }
        lf_reader_close(r);
        r = NULL;
        assert_int_equal(st, LF_ERR_FORMAT);
        LF_ASSERT_ERR_CONTAINS("cut.arrow");
    }
    /* every byte flipped: an error or records, never a crash (ASan builds check the reads) */
    char *flip = malloc(len);
    assert_non_null(flip);
    for (size_t i = 0; i < len; i++) {
        memcpy(flip, full, len);
        flip[i] ^= (char)0xA5;
        LF_ASSERT_OK(lf_file_write_all(cut, flip, len));
        memset(&ro, 0, sizeof ro);
        ro.skip_bad_records = 1;
        lf_status st = lf_reader_open(&r, cut, &ro);
        for (int k = 0; st == LF_OK && k < 100; k++) {
            st = lf_reader_next(r, &rec, &eof);
            if (st == LF_OK && eof) break;
            if (st == LF_OK) assert_int_equal(strlen(rec.text), rec.text_len);
        }
        lf_reader_close(r);
        r = NULL;
    }
    free(flip);
    LF_ASSERT_OK(lf_file_write_all(cut, full, len - 1));
    lf_prepare_opts o = opts1(cut, LF_RECORD_PRETRAIN, "char");
    assert_int_equal(lf_prepare(&o, path_in("c"), NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("cut short?");
    struct stat sb;
    assert_int_not_equal(stat(path_in("c/dataset.json"), &sb), 0);
    assert_int_not_equal(stat(path_in("c/train_000.bin"), &sb), 0);
    lf_free(full);
}

/* A tree read through symbolic links (a hub cache's snapshot), one of them
 * a cycle: each file once, the cycle left out. */
static void test_links(void **state) {
    (void)state;
    const char *d = path_in("snap");
    LF_ASSERT_OK(lf_mkdirs(join2(d, "data/train")));
    assert_int_equal(symlink(FIX "/hub_dirs/data/train/part-0.jsonl", join2(d, "data/train/part-0.jsonl")), 0);
    assert_int_equal(symlink("..", join2(d, "data/train/up")), 0);
    assert_int_equal(symlink(".", join2(d, "self")), 0);
    lf__input_file *f = NULL;
    size_t n = 0;
    LF_ASSERT_OK(lf__dataset_dir_expand(d, LF_INPUT_AUTO, NULL, &f, &n));
    assert_int_equal(n, 1);
    assert_non_null(strstr(f[0].path, "snap/data/train/part-0.jsonl"));
    assert_int_equal(f[0].split, 0);
    lf__input_files_free(f, n);
}

/* A forced format in a dataset directory reads the files of that format
 * only: README.md and LICENSE are not Parquet. */
static void test_forced_format(void **state) {
    (void)state;
    lf__input_file *f = NULL;
    size_t n = 0;
    LF_ASSERT_OK(lf__dataset_dir_expand(FIX "/hub_plain", LF_INPUT_PARQUET, NULL, &f, &n));
    assert_int_equal(n, 2);
    assert_non_null(strstr(f[0].path, "data/test-00000-of-00001.parquet"));
    assert_non_null(strstr(f[1].path, "data/train-00000-of-00001.parquet"));
    lf__input_files_free(f, n);
}

static void test_save_to_disk_layout(void **state) {
    (void)state;
    lf__input_file *f = NULL;
    size_t n = 0;
    LF_ASSERT_OK(lf__dataset_dir_expand(FIX "/save_dict", LF_INPUT_AUTO, NULL, &f, &n));
    assert_int_equal(n, 2); /* in name order */
    assert_non_null(strstr(f[0].path, "save_dict/test/data-00000-of-00001.arrow"));
    assert_int_equal(f[0].split, 2);
    assert_non_null(strstr(f[1].path, "save_dict/train/data-00000-of-00001.arrow"));
    assert_int_equal(f[1].split, 0);
    lf__input_files_free(f, n);
    LF_ASSERT_OK(lf__dataset_dir_expand(FIX "/save_ds", LF_INPUT_AUTO, NULL, &f, &n));
    assert_int_equal(n, 1);
    assert_string_equal(f[0].split_name, "train");
    lf__input_files_free(f, n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hub_configs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hub_names_and_dirs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_layouts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_field_and_alpaca, setup, teardown),
        cmocka_unit_test(test_split_names),
        cmocka_unit_test(test_save_to_disk_layout),
        cmocka_unit_test(test_forced_format),
        cmocka_unit_test_setup_teardown(test_links, setup, teardown),
        cmocka_unit_test_setup_teardown(test_arrow, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
