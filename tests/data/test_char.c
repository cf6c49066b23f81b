/* Character-level tokenizer and preparation (nanoGPT shakespeare_char
 * semantics), directory input, the dataset manifest, and
 * dataset_open on corrupted manifests. */
#include "test_util.h"
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "llmforge/data.h"
#include "data/data_impl.h"

static char *join(const char *dir, const char *name) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

static void write_str(const char *path, const char *s) { LF_ASSERT_OK(lf_file_write_all(path, s, strlen(s))); }

static cJSON *read_json(const char *path) {
    char *buf;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &buf, &len));
    cJSON *j = cJSON_ParseWithLength(buf, len);
    lf_free(buf);
    assert_non_null(j);
    return j;
}

static void write_json(const char *path, const cJSON *j) {
    char *s = cJSON_Print(j);
    write_str(path, s);
    cJSON_free(s);
}

/* Decode a whole shard to text through the tokenizer. */
static char *shard_text(const char *dir, const char *name, const lf_tokenizer *t) {
    char *path = join(dir, name);
    lf_shard *s;
    LF_ASSERT_OK(lf_shard_open(&s, path, 1));
    size_t n = lf_shard_num_tokens(s);
    uint32_t *ids = malloc(n * sizeof *ids + 4);
    for (size_t i = 0; i < n; i++) ids[i] = lf_shard_token(s, i);
    char *text;
    size_t len;
    LF_ASSERT_OK(lf_tokenizer_decode(t, ids, n, &text, &len));
    assert_int_equal(strlen(text), len);
    free(ids);
    lf_shard_close(s);
    free(path);
    return text;
}

/* ---------------------------------------------------------------- prepare, small text */
/* 20 code points in 26 bytes: a 90% split by bytes would land elsewhere.
 * "ab€c😀abcabcabcabc" (17) + "é" (index 17, last of train) + "ü\n" (val). */
#define SMALL_TEXT "ab\xE2\x82\xAC" "c\xF0\x9F\x98\x80" "abcabcabcabc\xC3\xA9\xC3\xBC\n"
#define SMALL_TRAIN "ab\xE2\x82\xAC" "c\xF0\x9F\x98\x80" "abcabcabcabc\xC3\xA9"
#define SMALL_VAL "\xC3\xBC\n"

static void test_prepare_small(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    char *in = join(dir, "input.txt");
    char *out = join(dir, "out/nested");
    write_str(in, SMALL_TEXT);

    lf_prepare_stats st;
    LF_ASSERT_OK(lf_prepare_char(in, out, &st));
    assert_int_equal(st.n_chars, 20);
    assert_int_equal(st.vocab_size, 8);
    assert_int_equal(st.train_tokens, 18);
    assert_int_equal(st.val_tokens, 2);

    /* vocab.json: sorted by code point */
    char *vpath = join(out, "vocab.json");
    cJSON *v = read_json(vpath);
    assert_string_equal(cJSON_GetObjectItem(v, "type")->valuestring, "char");
    const cJSON *chars = cJSON_GetObjectItem(v, "chars");
    static const char *const want_chars[] = {"\n", "a", "b", "c", "\xC3\xA9", "\xC3\xBC", "\xE2\x82\xAC",
                                             "\xF0\x9F\x98\x80"};
    assert_int_equal(cJSON_GetArraySize(chars), 8);
    for (int i = 0; i < 8; i++) assert_string_equal(cJSON_GetArrayItem(chars, i)->valuestring, want_chars[i]);
    cJSON_Delete(v);

    /* shards decode to the split text: the boundary is in code points */
    lf_tokenizer *t;
    LF_ASSERT_OK(lf_tokenizer_open(&t, "char:vocab.json", out));
    assert_int_equal(lf_tokenizer_vocab_size(t), 8);
    char *train = shard_text(out, "train.bin", t);
    char *val = shard_text(out, "val.bin", t);
    assert_string_equal(train, SMALL_TRAIN);
    assert_string_equal(val, SMALL_VAL);
    lf_free(train);
    lf_free(val);

    /* encode/decode round trip */
    uint32_t *ids;
    size_t n;
    LF_ASSERT_OK(lf_tokenizer_encode(t, SMALL_TEXT, strlen(SMALL_TEXT), &ids, &n));
    assert_int_equal(n, 20);
    assert_int_equal(ids[0], 1);  /* a */
    assert_int_equal(ids[2], 6);  /* € */
    assert_int_equal(ids[4], 7);  /* 😀 */
    assert_int_equal(ids[19], 0); /* \n */
    char *back;
    size_t blen;
    LF_ASSERT_OK(lf_tokenizer_decode(t, ids, n, &back, &blen));
    assert_int_equal(blen, strlen(SMALL_TEXT));
    assert_string_equal(back, SMALL_TEXT);
    lf_free(back);
    lf_free(ids);
    /* the empty text */
    LF_ASSERT_OK(lf_tokenizer_encode(t, "", 0, &ids, &n));
    assert_int_equal(n, 0);
    lf_free(ids);
    lf_tokenizer_free(t);

    /* dataset.json */
    char *mpath = join(out, "dataset.json");
    cJSON *m = read_json(mpath);
    assert_string_equal(cJSON_GetObjectItem(m, "format")->valuestring, "llmforge-dataset");
    assert_int_equal(cJSON_GetObjectItem(m, "version")->valueint, 1);
    const cJSON *tok = cJSON_GetObjectItem(m, "tokenizer");
    assert_string_equal(cJSON_GetObjectItem(tok, "spec")->valuestring, "char:vocab.json");
    char sha[65];
    LF_ASSERT_OK(lf_sha256_file_hex(vpath, sha));
    assert_string_equal(cJSON_GetObjectItem(tok, "sha256")->valuestring, sha);
    assert_int_equal(cJSON_GetObjectItem(m, "vocab_size")->valueint, 8);
    const cJSON *splits = cJSON_GetObjectItem(m, "splits");
    const cJSON *tr = cJSON_GetObjectItem(splits, "train"), *va = cJSON_GetObjectItem(splits, "val");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(tr, "shards")), 1);
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(tr, "shards"), 0)->valuestring, "train.bin");
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(va, "shards"), 0)->valuestring, "val.bin");
    assert_int_equal(cJSON_GetObjectItem(tr, "tokens")->valueint, 18);
    assert_int_equal(cJSON_GetObjectItem(va, "tokens")->valueint, 2);
    const cJSON *sources = cJSON_GetObjectItem(m, "sources");
    assert_int_equal(cJSON_GetArraySize(sources), 1);
    const cJSON *s0 = cJSON_GetArrayItem(sources, 0);
    assert_string_equal(cJSON_GetObjectItem(s0, "path")->valuestring, in);
    LF_ASSERT_OK(lf_sha256_file_hex(in, sha));
    assert_string_equal(cJSON_GetObjectItem(s0, "sha256")->valuestring, sha);
    assert_int_equal(cJSON_GetObjectItem(s0, "bytes")->valueint, strlen(SMALL_TEXT));
    cJSON_Delete(m);

    /* no temporaries left behind */
    char *tmp = join(out, "dataset.json.tmp");
    assert_int_not_equal(access(tmp, F_OK), 0);
    free(tmp);

    /* the dataset opens; the spec resolves to an absolute path */
    lf_dataset *d;
    LF_ASSERT_OK(lf_dataset_open(&d, out));
    assert_int_equal(lf_dataset_vocab_size(d), 8);
    assert_int_equal(lf_dataset_num_tokens(d, LF_SPLIT_TRAIN), 18);
    assert_int_equal(lf_dataset_num_tokens(d, LF_SPLIT_VAL), 2);
    assert_string_equal(lf_dataset_dir(d), out);
    char *abs = realpath(out, NULL);
    char want_spec[1024];
    snprintf(want_spec, sizeof want_spec, "char:%s/vocab.json", abs);
    assert_string_equal(lf_dataset_tokenizer_spec(d), want_spec);
    LF_ASSERT_OK(lf_tokenizer_open(&t, lf_dataset_tokenizer_spec(d), NULL));
    assert_int_equal(lf_tokenizer_vocab_size(t), 8);
    lf_tokenizer_free(t);
    free(abs);
    lf_dataset_close(d);

    /* preparing again over the same directory replaces the files */
    LF_ASSERT_OK(lf_prepare_char(in, out, NULL));

    free(mpath);
    free(vpath);
    free(in);
    free(out);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- tokenizer errors */
static void test_tokenizer_errors(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    char *vpath = join(dir, "vocab.json");
    write_str(vpath, "{\"type\":\"char\",\"chars\":[\"\\n\",\" \",\"a\",\"b\",\"\xC3\xA9\"]}");
    lf_tokenizer *t;
    LF_ASSERT_OK(lf_tokenizer_open(&t, "char:vocab.json", dir));
    assert_int_equal(lf_tokenizer_vocab_size(t), 5);
    uint32_t *ids = (uint32_t *)(uintptr_t)1;
    size_t n = 99;

    /* a character outside the vocabulary: named with its byte offset */
    assert_int_equal(lf_tokenizer_encode(t, "ab z", 4, &ids, &n), LF_ERR_NOT_FOUND);
    assert_null(ids);
    assert_int_equal(n, 0);
    LF_ASSERT_ERR_CONTAINS("U+007A 'z'");
    LF_ASSERT_ERR_CONTAINS("byte offset 3");
    LF_ASSERT_ERR_CONTAINS("vocab.json");
    assert_int_equal(lf_tokenizer_encode(t, "a\xC3\xA9\xCE\xBB", 5, &ids, &n), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("U+03BB '\xCE\xBB'");
    LF_ASSERT_ERR_CONTAINS("byte offset 3");
    assert_int_equal(lf_tokenizer_encode(t, "a\x01", 2, &ids, &n), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("U+0001 at byte offset 1");
    assert_int_equal(lf_tokenizer_encode(t, "a\0b", 3, &ids, &n), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("U+0000");

    /* invalid UTF-8 */
    assert_int_equal(lf_tokenizer_encode(t, "ab\xC3(", 4, &ids, &n), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("invalid UTF-8 at byte offset 2");
    LF_ASSERT_ERR_CONTAINS("0xC3");
    assert_int_equal(lf_tokenizer_encode(t, "ab\xC3\xA9\xC3", 5, &ids, &n), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("byte offset 4");
    assert_int_equal(lf_tokenizer_encode(t, "\xED\xA0\x80", 3, &ids, &n), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("surrogate");
    /* len is honoured: the byte after it is never read */
    LF_ASSERT_OK(lf_tokenizer_encode(t, "ab\xC3", 2, &ids, &n));
    assert_int_equal(n, 2);
    lf_free(ids);

    /* decode: an id out of range */
    uint32_t bad[3] = {0, 7, 1};
    char *text = (char *)(uintptr_t)1;
    size_t len = 5;
    assert_int_equal(lf_tokenizer_decode(t, bad, 3, &text, &len), LF_ERR_RANGE);
    assert_null(text);
    LF_ASSERT_ERR_CONTAINS("token id 7 at position 1");
    LF_ASSERT_ERR_CONTAINS("vocab_size 5");
    lf_tokenizer_free(t);
    lf_tokenizer_free(NULL);

    /* unknown spec prefix */
    assert_int_equal(lf_tokenizer_open(&t, "gpt9:foo.json", dir), LF_ERR_UNSUPPORTED);
    assert_null(t);
    LF_ASSERT_ERR_CONTAINS("gpt9:foo.json");
    LF_ASSERT_ERR_CONTAINS("supported: char:");
    assert_int_equal(lf_tokenizer_open(&t, "char:", dir), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_tokenizer_open(&t, "char:missing.json", dir), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("missing.json");

    /* malformed vocabularies */
    static const struct { const char *json; const char *needle; } bad_vocab[] = {
        {"{\"type\":\"char\",\"chars\":[\"a\",\"b\",\"a\"]}", "chars[2] U+0061 'a' repeats chars[0]"},
        {"{\"type\":\"char\",\"chars\":[\"a\",\"bc\"]}", "chars[1] is not a single UTF-8 character"},
        {"{\"type\":\"char\",\"chars\":[\"a\",\"\"]}", "chars[1] is not a single UTF-8 character"},
        {"{\"type\":\"char\",\"chars\":[\"a\",3]}", "chars[1]"},
        {"{\"type\":\"char\",\"chars\":[\"\xC3\"]}", "chars[0] is not a single UTF-8 character (truncated"},
        {"{\"type\":\"char\",\"chars\":[]}", "holds 0 entries"},
        {"{\"type\":\"bpe\",\"chars\":[\"a\"]}", "key 'type' must be \"char\""},
        {"{\"type\":\"char\"}", "key 'chars'"},
        {"{\"type\":\"char\",\"chars\":[\"a\"", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof bad_vocab / sizeof bad_vocab[0]; i++) {
        write_str(vpath, bad_vocab[i].json);
        lf_status s = lf_tokenizer_open(&t, "char:vocab.json", dir);
        if (s != LF_ERR_FORMAT) fail_msg("case %zu: %s (%s)", i, lf_status_str(s), lf_last_error());
        LF_ASSERT_ERR_CONTAINS(vpath);
        LF_ASSERT_ERR_CONTAINS(bad_vocab[i].needle);
    }
    free(vpath);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- prepare errors */
static void test_prepare_errors(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    char *in = join(dir, "in.txt");
    char *out = join(dir, "out");
    lf_prepare_stats st;

    write_str(in, "hello\nw\xC3\xB6rld\xC3(\n");
    assert_int_equal(lf_prepare_char(in, out, &st), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS(in);
    LF_ASSERT_ERR_CONTAINS("invalid UTF-8 at byte offset 12");
    assert_int_equal(st.n_chars, 0);

    write_str(in, "");
    assert_int_equal(lf_prepare_char(in, out, &st), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS(in);
    LF_ASSERT_ERR_CONTAINS("empty");

    LF_ASSERT_OK(lf_file_write_all(in, "ab\0cd", 5));
    assert_int_equal(lf_prepare_char(in, out, &st), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("NUL byte at byte offset 2");

    char *missing = join(dir, "nope.txt");
    assert_int_equal(lf_prepare_char(missing, out, &st), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("nope.txt");
    free(missing);

    /* nothing was written by the failed attempts */
    char *m = join(out, "dataset.json");
    assert_int_not_equal(access(m, F_OK), 0);
    free(m);

    /* a directory with nothing but binary files */
    char *bdir = join(dir, "bin");
    assert_int_equal(mkdir(bdir, 0755), 0);
    char *b = join(bdir, "x.dat");
    LF_ASSERT_OK(lf_file_write_all(b, "\0\1\2", 3));
    assert_int_equal(lf_prepare_char(bdir, out, &st), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("holds no text files");
    free(b);
    free(bdir);

    free(in);
    free(out);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- directory input */
static void test_prepare_directory(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    char *src = join(dir, "src");
    char *out = join(dir, "out");
    assert_int_equal(mkdir(src, 0755), 0);
    char *a = join(src, "a.txt"), *b = join(src, "b.txt"), *c = join(src, "a.dat"), *l = join(src, "c.txt");
    char *sub = join(src, "d"), *subf = join(src, "d/e.txt");
    write_str(b, "world\n");
    write_str(a, "hello ");
    LF_ASSERT_OK(lf_file_write_all(c, "\x00\x01xyz", 5)); /* binary: skipped */
    assert_int_equal(symlink("a.txt", l), 0);              /* symlink: skipped */
    assert_int_equal(mkdir(sub, 0755), 0);                 /* subdirectory: skipped */
    write_str(subf, "QQQ");

    lf_prepare_stats st;
    LF_ASSERT_OK(lf_prepare_char(src, out, &st));
    assert_int_equal(st.n_chars, 12);
    assert_int_equal(st.vocab_size, 9); /* \n ' ' d e h l o r w */
    assert_int_equal(st.train_tokens, 10);
    assert_int_equal(st.val_tokens, 2);

    lf_tokenizer *t;
    LF_ASSERT_OK(lf_tokenizer_open(&t, "char:vocab.json", out));
    char *train = shard_text(out, "train.bin", t), *val = shard_text(out, "val.bin", t);
    assert_string_equal(train, "hello worl"); /* a.txt then b.txt */
    assert_string_equal(val, "d\n");
    lf_free(train);
    lf_free(val);
    lf_tokenizer_free(t);

    char *mpath = join(out, "dataset.json");
    cJSON *m = read_json(mpath);
    const cJSON *sources = cJSON_GetObjectItem(m, "sources");
    assert_int_equal(cJSON_GetArraySize(sources), 2);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(sources, 0), "path")->valuestring, a);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(sources, 1), "path")->valuestring, b);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(sources, 1), "bytes")->valueint, 6);
    cJSON_Delete(m);

    /* an invalid UTF-8 file in the directory is an error naming it */
    char *bad = join(src, "b2.txt");
    LF_ASSERT_OK(lf_file_write_all(bad, "ok\n\xFF", 4));
    assert_int_equal(lf_prepare_char(src, out, &st), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS(bad);
    LF_ASSERT_ERR_CONTAINS("byte offset 3");
    free(bad);

    free(mpath);
    free(a);
    free(b);
    free(c);
    free(l);
    free(sub);
    free(subf);
    free(src);
    free(out);
    lf_test_rmrf(dir);
    free(dir);
}

/* The default corpus of `make run`, where the machine has it. */
static void test_prepare_fortunes(void **state) {
    (void)state;
    const char *src = "/usr/share/games/fortunes";
    if (access(src, R_OK) != 0) skip();
    char *dir = lf_test_tmpdir();
    char *out = join(dir, "out");
    lf_prepare_stats st;
    LF_ASSERT_OK(lf_prepare_char(src, out, &st));
    assert_true(st.n_chars > 100000);
    assert_true(st.vocab_size > 60 && st.vocab_size < 1000);
    char *mpath = join(out, "dataset.json");
    cJSON *m = read_json(mpath);
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(m, "sources")) {
        const char *p = cJSON_GetObjectItem(e, "path")->valuestring;
        size_t pl = strlen(p);
        assert_false(pl > 4 && strcmp(p + pl - 4, ".dat") == 0);
        assert_false(pl > 3 && strcmp(p + pl - 3, ".u8") == 0);
        n++;
    }
    assert_true(n > 0);
    cJSON_Delete(m);
    lf_dataset *d;
    LF_ASSERT_OK(lf_dataset_open(&d, out));
    assert_int_equal(lf_dataset_num_tokens(d, LF_SPLIT_TRAIN) + lf_dataset_num_tokens(d, LF_SPLIT_VAL), st.n_chars);
    lf_dataset_close(d);
    free(mpath);
    free(out);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- nanoGPT's numbers */
static void test_tinyshakespeare(void **state) {
    (void)state;
    const char *src = LF_SHARED_DIR "/data/tinyshakespeare.txt";
    if (access(src, R_OK) != 0) fail_msg("missing %s", src);
    char *dir = lf_test_tmpdir();
    lf_prepare_stats st;
    LF_ASSERT_OK(lf_prepare_char(src, dir, &st));
    assert_int_equal(st.n_chars, 1115394);
    assert_int_equal(st.vocab_size, 65);
    assert_int_equal(st.train_tokens, 1003854);
    assert_int_equal(st.val_tokens, 111540);

    lf_dataset *d;
    LF_ASSERT_OK(lf_dataset_open(&d, dir));
    assert_int_equal(lf_dataset_vocab_size(d), 65);
    assert_int_equal(lf_dataset_num_tokens(d, LF_SPLIT_TRAIN), 1003854);
    assert_int_equal(lf_dataset_num_tokens(d, LF_SPLIT_VAL), 111540);
    lf_tokenizer *t;
    LF_ASSERT_OK(lf_tokenizer_open(&t, lf_dataset_tokenizer_spec(d), NULL));
    /* nanoGPT: stoi = {'\n':0, ' ':1, '!':2, ...}; "First Citizen:" opens the text */
    uint32_t *ids;
    size_t n;
    LF_ASSERT_OK(lf_tokenizer_encode(t, "\n !", 3, &ids, &n));
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);
    assert_int_equal(ids[2], 2);
    lf_free(ids);
    int32_t x[14], y[14];
    LF_ASSERT_OK(lf_dataset_get_batch(d, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 0, LF_RNG_DATA, 0, 1, 14, x, y));
    uint32_t u[14];
    for (int i = 0; i < 14; i++) u[i] = (uint32_t)x[i];
    char *text;
    size_t len;
    LF_ASSERT_OK(lf_tokenizer_decode(t, u, 14, &text, &len));
    assert_string_equal(text, "First Citizen:");
    lf_free(text);
    lf_tokenizer_free(t);
    lf_dataset_close(d);

    char *mpath = join(dir, "dataset.json");
    cJSON *m = read_json(mpath);
    const cJSON *s0 = cJSON_GetArrayItem(cJSON_GetObjectItem(m, "sources"), 0);
    assert_string_equal(cJSON_GetObjectItem(s0, "sha256")->valuestring,
                        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed");
    cJSON_Delete(m);
    free(mpath);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- corrupted manifests */
typedef struct mfx {
    char *dir, *data, *mpath;
} mfx;

static void mfx_make(mfx *f) {
    f->dir = lf_test_tmpdir();
    char *in = join(f->dir, "in.txt");
    f->data = join(f->dir, "data");
    write_str(in, "the quick brown fox jumps over the lazy dog\n");
    LF_ASSERT_OK(lf_prepare_char(in, f->data, NULL));
    f->mpath = join(f->data, "dataset.json");
    free(in);
}
static void mfx_free(mfx *f) {
    free(f->mpath);
    free(f->data);
    lf_test_rmrf(f->dir);
    free(f->dir);
}

static void expect_dataset_error(const mfx *f, lf_status want, const char *needle) {
    lf_dataset *d = (lf_dataset *)(uintptr_t)1;
    lf_status got = lf_dataset_open(&d, f->data);
    if (got != want) fail_msg("status %s, wanted %s (%s)", lf_status_str(got), lf_status_str(want), lf_last_error());
    assert_null(d);
    LF_ASSERT_ERR_CONTAINS(needle);
}

/* Apply one edit to a fresh copy of the good manifest. */
typedef void (*edit_fn)(cJSON *m);
static void edit_manifest(const mfx *f, const cJSON *good, edit_fn fn) {
    cJSON *m = cJSON_Duplicate(good, 1);
    fn(m);
    write_json(f->mpath, m);
    cJSON_Delete(m);
}

static void e_no_train(cJSON *m) { cJSON_DeleteItemFromObject(cJSON_GetObjectItem(m, "splits"), "train"); }
static void e_no_val(cJSON *m) { cJSON_DeleteItemFromObject(cJSON_GetObjectItem(m, "splits"), "val"); }
static void e_vocab(cJSON *m) { cJSON_SetNumberValue(cJSON_GetObjectItem(m, "vocab_size"), 40); }
static void e_vocab_neg(cJSON *m) { cJSON_SetNumberValue(cJSON_GetObjectItem(m, "vocab_size"), -3); }
static void e_format(cJSON *m) { cJSON_ReplaceItemInObject(m, "format", cJSON_CreateString("gguf")); }
static void e_version(cJSON *m) { cJSON_SetNumberValue(cJSON_GetObjectItem(m, "version"), 2); }
static void e_no_splits(cJSON *m) { cJSON_DeleteItemFromObject(m, "splits"); }
static void e_tokens(cJSON *m) {
    cJSON_SetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "splits"), "val"), "tokens"), 7);
}
static void e_shards_empty(cJSON *m) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "splits"), "train"), "shards",
                              cJSON_CreateArray());
}
static void e_shard_missing(cJSON *m) {
    cJSON *sh = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "splits"), "val"), "shards");
    cJSON_ReplaceItemInArray(sh, 0, cJSON_CreateString("val_missing.bin"));
}
static void e_spec(cJSON *m) { cJSON_DeleteItemFromObject(cJSON_GetObjectItem(m, "tokenizer"), "spec"); }
static void e_sha(cJSON *m) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(m, "tokenizer"), "sha256",
                              cJSON_CreateString("0000000000000000000000000000000000000000000000000000000000000000"));
}

static void test_dataset_open_errors(void **state) {
    (void)state;
    mfx f;
    mfx_make(&f);
    cJSON *good = read_json(f.mpath);

    write_str(f.mpath, "{\"format\": \"llmforge-dataset\", ");
    expect_dataset_error(&f, LF_ERR_FORMAT, "invalid JSON");
    LF_ASSERT_ERR_CONTAINS(f.mpath);
    write_str(f.mpath, "[1,2]");
    expect_dataset_error(&f, LF_ERR_FORMAT, "not a JSON object");

    static const struct { edit_fn fn; lf_status st; const char *needle; } cases[] = {
        {e_no_train, LF_ERR_FORMAT, "key 'splits.train' is missing"},
        {e_no_splits, LF_ERR_FORMAT, "key 'splits'"},
        {e_vocab, LF_ERR_MISMATCH, "has vocab_size 28, dataset.json says 40"},
        {e_vocab_neg, LF_ERR_FORMAT, "key 'vocab_size'"},
        {e_format, LF_ERR_FORMAT, "key 'format'"},
        {e_version, LF_ERR_UNSUPPORTED, "key 'version' is 2"},
        {e_tokens, LF_ERR_MISMATCH, "key 'splits.val.tokens' says 7 tokens, its shards hold 5"},
        {e_shards_empty, LF_ERR_FORMAT, "key 'splits.train.shards' must be a non-empty array"},
        {e_shard_missing, LF_ERR_NOT_FOUND, "val_missing.bin"},
        {e_spec, LF_ERR_FORMAT, "key 'tokenizer.spec'"},
        {e_sha, LF_ERR_CHECKSUM, "key 'tokenizer.sha256' says 0000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        edit_manifest(&f, good, cases[i].fn);
        lf_dataset *d = NULL;
        lf_status got = lf_dataset_open(&d, f.data);
        if (got != cases[i].st)
            fail_msg("case %zu: %s, wanted %s (%s)", i, lf_status_str(got), lf_status_str(cases[i].st), lf_last_error());
        assert_null(d);
        if (!strstr(lf_last_error(), cases[i].needle))
            fail_msg("case %zu: '%s' lacks '%s'", i, lf_last_error(), cases[i].needle);
    }

    /* a manifest without val is fine: the split reads as absent */
    edit_manifest(&f, good, e_no_val);
    lf_dataset *d;
    LF_ASSERT_OK(lf_dataset_open(&d, f.data));
    assert_int_equal(lf_dataset_num_tokens(d, LF_SPLIT_VAL), 0);
    int32_t x[4], y[4];
    assert_int_equal(lf_dataset_get_batch(d, LF_SPLIT_VAL, LF_SAMPLING_RANDOM, 1, LF_RNG_EVAL, 0, 1, 4, x, y),
                     LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("no split 'val'");
    lf_dataset_close(d);

    /* a corrupted shard under a good manifest */
    write_json(f.mpath, good);
    char *vb = join(f.data, "val.bin");
    char *bytes;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(vb, 0, &bytes, &len));
    bytes[len - 1] ^= 0x40;
    LF_ASSERT_OK(lf_file_write_all(vb, bytes, len));
    expect_dataset_error(&f, LF_ERR_CHECKSUM, "val.bin");
    lf_free(bytes);
    free(vb);

    /* no manifest at all */
    remove(f.mpath);
    expect_dataset_error(&f, LF_ERR_NOT_FOUND, "dataset.json");
    LF_ASSERT_ERR_CONTAINS(f.data);

    cJSON_Delete(good);
    mfx_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prepare_small),
        cmocka_unit_test(test_tokenizer_errors),
        cmocka_unit_test(test_prepare_errors),
        cmocka_unit_test(test_prepare_directory),
        cmocka_unit_test(test_prepare_fortunes),
        cmocka_unit_test(test_tinyshakespeare),
        cmocka_unit_test(test_dataset_open_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
