/* BPE training (lf_bpe_train) and the bpe: kind: the committed model trained
 * on tinyshakespeare is reproduced byte for byte; its ids equal tiktoken's
 * (load_tiktoken_bpe of the same file, tests/fixtures/
 * tiktoken_bpe_shakespeare.jsonl); a model trained on 90% of a corpus
 * round-trips the held-out 10%; the tie-break is by bytes; the 16 MiB block
 * cuts change no count (a corpus repeated 20 times gives the same merges);
 * bad inputs and options are errors naming the file. */
#include "test_bpe_util.h"
#include "data/data_impl.h"

#define SHAKESPEARE LF_SHARED_DIR "/data/tinyshakespeare.txt"
#define MODEL_FIXTURE LF_SOURCE_DIR "/tests/fixtures/tiktoken_bpe_shakespeare.tiktoken"

static char *path_in(const char *dir, const char *name) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

static lf_tokenizer *open_bpe(const char *path) {
    char spec[2048];
    snprintf(spec, sizeof spec, "bpe:%s", path);
    lf_tokenizer *t;
    LF_ASSERT_OK(lf_tokenizer_open(&t, spec, NULL));
    return t;
}

static void test_trained_fixture_matches_tiktoken(void **state) {
    (void)state;
    lf_tokenizer *t = open_bpe(MODEL_FIXTURE);
    assert_int_equal(lf_tokenizer_vocab_size(t), 1024);
    uint32_t eot;
    LF_ASSERT_OK(lf_tokenizer_special_id(t, "<|endoftext|>", &eot));
    assert_int_equal(eot, 1023);
    size_t n;
    bpe_case *cs = bpe_cases_load(LF_SOURCE_DIR "/tests/fixtures/tiktoken_bpe_shakespeare.jsonl", &n);
    assert_true(n >= 400);
    bpe_check_cases(t, cs, n, "tiktoken_bpe_shakespeare.jsonl");
    bpe_cases_free(cs, n);
    lf_tokenizer_free(t);
}

static void test_training_reproduces_fixture(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir(), *out = path_in(dir, "m.tiktoken");
    const char *in[] = {SHAKESPEARE};
    lf_bpe_train_opts o = lf_bpe_train_opts_default();
    o.vocab_size = 1024;
    lf_bpe_train_stats s;
    LF_ASSERT_OK(lf_bpe_train(in, 1, &o, out, &s));
    assert_int_equal(s.input_bytes, 1115394);
    assert_int_equal(s.vocab_size, 1024);
    assert_int_equal(s.merges, 1024 - 257);
    assert_true(s.unique_pieces > 10000 && s.pieces > s.unique_pieces);
    char *a, *b;
    size_t la, lb;
    LF_ASSERT_OK(lf_file_read_all(out, 0, &a, &la));
    LF_ASSERT_OK(lf_file_read_all(MODEL_FIXTURE, 0, &b, &lb));
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    /* the first lines: bytes in order, then the most frequent pair */
    assert_memory_equal(a, "AA== 0\nAQ== 1\n", 14);
    assert_non_null(strstr(a, "\nIHQ= 256\n")); /* " t" */
    lf_free(a);
    lf_free(b);
    lf_test_rmrf(dir);
    free(out);
    free(dir);
}

/* Held-out text round-trips and is compressed. */
static void test_heldout_roundtrip(void **state) {
    (void)state;
    char *text;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(SHAKESPEARE, 0, &text, &len));
    size_t cut = len / 10 * 9;
    while (text[cut] != '\n') cut++;
    char *dir = lf_test_tmpdir(), *train = path_in(dir, "train.txt"), *out = path_in(dir, "m.tiktoken");
    LF_ASSERT_OK(lf_file_write_all(train, text, cut));
    const char *in[] = {train};
    lf_bpe_train_opts o = lf_bpe_train_opts_default();
    o.vocab_size = 600;
    LF_ASSERT_OK(lf_bpe_train(in, 1, &o, out, NULL));
    lf_tokenizer *t = open_bpe(out);
    assert_int_equal(lf_tokenizer_vocab_size(t), 600);
    const char *held = text + cut;
    size_t hl = len - cut;
    uint32_t *ids;
    size_t n;
    LF_ASSERT_OK(lf_tokenizer_encode(t, held, hl, &ids, &n));
    print_message("held-out: %zu bytes -> %zu tokens (%.2f bytes/token)\n", hl, n, (double)hl / (double)n);
    assert_true((double)hl / (double)n > 1.8); /* 343 merges: about 2 (GPT-2, 50000 merges: 3.3) */
    char *back;
    size_t bl;
    LF_ASSERT_OK(lf_tokenizer_decode(t, ids, n, &back, &bl));
    assert_int_equal(bl, hl);
    assert_memory_equal(back, held, hl);
    lf_free(back);
    lf_free(ids);
    /* text the corpus never had still round-trips (byte fallback) */
    const char *odd = "Zwölf Boxkämpfer jagen 中文 😀 über den Sylter Deich <|endoftext|>\r\n\t";
    LF_ASSERT_OK(lf_tokenizer_encode(t, odd, strlen(odd), &ids, &n));
    LF_ASSERT_OK(lf_tokenizer_decode(t, ids, n, &back, &bl));
    assert_int_equal(bl, strlen(odd));
    assert_memory_equal(back, odd, bl);
    lf_free(back);
    lf_free(ids);
    lf_tokenizer_free(t);
    lf_free(text);
    lf_test_rmrf(dir);
    free(train);
    free(out);
    free(dir);
}

/* Whole file (lf_free). Out-parameter form: GCC's -Wdangling-pointer
 * mistakes a returned pointer read through char ** for a local's address. */
static void read_text(const char *path, char **s) {
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(path, 0, s, &len));
}

/* Equal counts go to the pair whose bytes sort first; min_frequency stops. */
static void test_tie_break_and_min_frequency(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir(), *in = path_in(dir, "c.txt"), *out = path_in(dir, "m.tiktoken");
    LF_ASSERT_OK(lf_file_write_all(in, "ab cd ab cd", 11));
    const char *inputs[] = {in};
    lf_bpe_train_opts o = lf_bpe_train_opts_default();
    o.vocab_size = 1000;
    o.min_frequency = 1;
    lf_bpe_train_stats s;
    LF_ASSERT_OK(lf_bpe_train(inputs, 1, &o, out, &s));
    /* pieces "ab", " cd", " ab", " cd": (a,b), ( ,c), (c,d) all count 2;
     * " c" < "ab" < "cd" by bytes -> " c"; then (" c",d) = 2 ties (a,b) = 2 and
     * " c" sorts first -> " cd"; then "ab"; then (" ","ab") = 1 -> " ab". */
    char *f;
    read_text(out, &f);
    const char *want = "IGM= 256\nIGNk 257\nYWI= 258\nIGFi 259\n";
    const char *tail = strstr(f, "/w== 255\n");
    assert_non_null(tail);
    assert_int_equal(strcmp(tail + 9, want), 0);
    assert_int_equal(s.merges, 4);
    assert_int_equal(s.vocab_size, 261);
    lf_free(f);
    /* min_frequency 2: " ab" (seen once) is not merged */
    o.min_frequency = 2;
    LF_ASSERT_OK(lf_bpe_train(inputs, 1, &o, out, &s));
    assert_int_equal(s.merges, 3);
    /* vocab_size caps the merges */
    o.vocab_size = 259;
    LF_ASSERT_OK(lf_bpe_train(inputs, 1, &o, out, &s));
    assert_int_equal(s.merges, 2);
    assert_int_equal(s.vocab_size, 259);
    lf_tokenizer *t = open_bpe(out);
    assert_int_equal(lf_tokenizer_vocab_size(t), 259);
    lf_tokenizer_free(t);
    lf_test_rmrf(dir);
    free(in);
    free(out);
    free(dir);
}

/* Counts survive the 16 MiB blocks: 20 copies of the corpus (22 MB, two
 * blocks) give the merges of one copy (every count x20, same order). */
static void test_blocks_change_nothing(void **state) {
    (void)state;
    char *text;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(SHAKESPEARE, 0, &text, &len));
    char *dir = lf_test_tmpdir(), *big = path_in(dir, "big.txt"), *m1 = path_in(dir, "m1"), *m20 = path_in(dir, "m20");
    FILE *f = fopen(big, "wb");
    for (int i = 0; i < 20; i++) assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
    lf_bpe_train_opts o = lf_bpe_train_opts_default();
    o.vocab_size = 2000;
    o.min_frequency = 1;
    const char *one[] = {SHAKESPEARE}, *twenty[] = {big};
    lf_bpe_train_stats s1, s20;
    LF_ASSERT_OK(lf_bpe_train(one, 1, &o, m1, &s1));
    LF_ASSERT_OK(lf_bpe_train(twenty, 1, &o, m20, &s20));
    assert_int_equal(s20.pieces, 20 * s1.pieces);
    assert_int_equal(s20.unique_pieces, s1.unique_pieces);
    char *a, *b;
    read_text(m1, &a);
    read_text(m20, &b);
    assert_string_equal(a, b);
    lf_free(a);
    lf_free(b);
    /* two inputs are two texts: the same as one file holding both */
    const char *two[] = {SHAKESPEARE, SHAKESPEARE};
    lf_bpe_train_stats s2;
    LF_ASSERT_OK(lf_bpe_train(two, 2, &o, m20, &s2));
    assert_int_equal(s2.pieces, 2 * s1.pieces);
    lf_free(text);
    lf_test_rmrf(dir);
    free(big);
    free(m1);
    free(m20);
    free(dir);
}

static void test_training_errors(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir(), *in = path_in(dir, "bad.txt"), *out = path_in(dir, "m.tiktoken");
    lf_bpe_train_opts o = lf_bpe_train_opts_default();
    o.vocab_size = 300;
    const char *missing[] = {"/nonexistent/corpus.txt"};
    assert_int_equal(lf_bpe_train(missing, 1, &o, out, NULL), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("/nonexistent/corpus.txt");
    LF_ASSERT_OK(lf_file_write_all(in, "fine text\nthen \xc3\x28 bad", 21));
    const char *bad[] = {in};
    assert_int_equal(lf_bpe_train(bad, 1, &o, out, NULL), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("bad.txt");
    LF_ASSERT_ERR_CONTAINS("byte offset 15");
    o.vocab_size = 256;
    assert_int_equal(lf_bpe_train(bad, 1, &o, out, NULL), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("vocab_size 256");
    assert_int_equal(lf_bpe_train(bad, 0, &o, out, NULL), LF_ERR_INVALID_ARG);
    o.vocab_size = 300;
    const char *ok[] = {SHAKESPEARE};
    assert_int_equal(lf_bpe_train(ok, 1, &o, "/nonexistent/dir/m.tiktoken", NULL) != LF_OK, 1);
    /* an empty corpus: the 256 bytes and <|endoftext|> */
    LF_ASSERT_OK(lf_file_write_all(in, "", 0));
    lf_bpe_train_stats s;
    LF_ASSERT_OK(lf_bpe_train(bad, 1, &o, out, &s));
    assert_int_equal(s.vocab_size, 257);
    lf_tokenizer *t = open_bpe(out);
    assert_int_equal(lf_tokenizer_vocab_size(t), 257);
    lf_tokenizer_free(t);
    lf_test_rmrf(dir);
    free(in);
    free(out);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trained_fixture_matches_tiktoken),
        cmocka_unit_test(test_training_reproduces_fixture),
        cmocka_unit_test(test_heldout_roundtrip),
        cmocka_unit_test(test_tie_break_and_min_frequency),
        cmocka_unit_test(test_blocks_change_nothing),
        cmocka_unit_test(test_training_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
