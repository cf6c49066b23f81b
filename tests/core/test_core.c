/* Core: status strings, error messages (and their UTF-8 escaping), Philox
 * known answers, RNG distribution, arena, files and hashes, JSON numbers,
 * the write-fault hook. */
#include <errno.h>
#include <sys/stat.h>
#include "test_util.h"
#include <cjson/cJSON.h>

void lf__philox_raw(const uint32_t in[4], const uint32_t key_in[2], uint32_t out[4]);

static void test_philox_known_answers(void **state) {
    (void)state;
    /* Random123 kat_vectors, philox4x32 10 rounds */
    struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        lf__philox_raw(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++) assert_int_equal(out[j], kat[i].out[j]);
    }
}

static void test_rng_distribution(void **state) {
    (void)state;
    const int n = 200000;
    double su = 0, sn = 0, sn2 = 0;
    for (int i = 0; i < n; i++) {
        float u = lf_rng_uniform(7, LF_RNG_TEST, (uint64_t)i);
        assert_true(u >= 0.0f && u < 1.0f);
        su += u;
        float z = lf_rng_normal(7, LF_RNG_TEST, (uint64_t)i);
        sn += z;
        sn2 += (double)z * z;
    }
    assert_true(fabs(su / n - 0.5) < 0.005);
    assert_true(fabs(sn / n) < 0.01);
    assert_true(fabs(sn2 / n - 1.0) < 0.02);
    /* pure function of coordinates; purposes are independent streams */
    assert_int_equal(lf_rng_u64(1, LF_RNG_DATA, 5), lf_rng_u64(1, LF_RNG_DATA, 5));
    assert_true(lf_rng_u64(1, LF_RNG_DATA, 5) != lf_rng_u64(1, LF_RNG_EVAL, 5));
    assert_true(lf_rng_u64(1, LF_RNG_DATA, 5) != lf_rng_u64(2, LF_RNG_DATA, 5));
}

static void test_errors(void **state) {
    (void)state;
    assert_int_equal(lf_fail(LF_ERR_IO, "file '%s' is gone", "x.bin"), LF_ERR_IO);
    assert_string_equal(lf_last_error(), "file 'x.bin' is gone");
    lf_error_prefix("loading %s", "ckpt");
    assert_string_equal(lf_last_error(), "loading ckpt: file 'x.bin' is gone");
    assert_non_null(strstr(lf_status_str(LF_ERR_CHECKSUM), "checksum"));
    assert_non_null(strstr(lf_status_str((lf_status)-999), "unknown"));
}

static void test_arena(void **state) {
    (void)state;
    lf_arena *a;
    LF_ASSERT_OK(lf_arena_create(&a, 1000));
    void *p = lf_arena_push(a, 10);
    void *q = lf_arena_push(a, 100);
    assert_non_null(p);
    assert_non_null(q);
    assert_int_equal((uintptr_t)p % LF_ALIGN, 0);
    assert_int_equal((uintptr_t)q % LF_ALIGN, 0);
    assert_int_equal(lf_arena_used(a), 64 + 128);
    assert_null(lf_arena_push(a, 5000));
    LF_ASSERT_ERR_CONTAINS("arena exhausted");
    lf_arena_reset(a);
    assert_int_equal(lf_arena_used(a), 0);
    lf_arena_free(a);
    lf_arena_free(NULL);
}

static void test_files_and_hashes(void **state) {
    (void)state;
    char hex[65];
    lf_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_int_equal(lf_crc32(0, "123456789", 9), 0xCBF43926u);
    char *dir = lf_test_tmpdir();
    char path[600], sub[600];
    snprintf(sub, sizeof sub, "%s/a/b/c", dir);
    LF_ASSERT_OK(lf_mkdirs(sub));
    snprintf(path, sizeof path, "%s/f.txt", sub);
    LF_ASSERT_OK(lf_file_write_all(path, "abc", 3));
    char hex2[65];
    LF_ASSERT_OK(lf_sha256_file_hex(path, hex2));
    assert_string_equal(hex, hex2);
    char *buf;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &buf, &len));
    assert_int_equal(len, 3);
    assert_string_equal(buf, "abc");
    lf_free(buf);
    assert_int_equal(lf_file_read_all(path, 2, &buf, &len), LF_ERR_RANGE);
    snprintf(path, sizeof path, "%s/missing", dir);
    assert_int_equal(lf_file_read_all(path, 0, &buf, &len), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("missing");
    /* devices and FIFOs are refused at once, never read forever or blocked on */
    assert_int_equal(lf_file_read_all("/dev/zero", 0, &buf, &len), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS("not a regular file");
    assert_int_equal(lf_sha256_file_hex("/dev/zero", hex2), LF_ERR_IO);
    char fifo[700];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(lf_file_read_all(fifo, 0, &buf, &len), LF_ERR_IO);
    assert_int_equal(lf_sha256_file_hex(fifo, hex2), LF_ERR_IO);
    lf_test_rmrf(dir);
    free(dir);
}

/* lf_json_number reads back (strtod) as the same double, with the fewest
 * digits; lf_json_print does the same inside a tree, where cJSON's printer
 * alone writes 0.1+0.2 as 0.3. */
static void test_json_numbers(void **state) {
    (void)state;
    static const struct {
        double v;
        const char *text;
    } known[] = {
        {0.1, "0.1"},
        {0.1 + 0.2, "0.30000000000000004"},
        {1.0 / 3, "0.3333333333333333"},
        {1e23, "1e+23"},
        {1e6, "1000000"},
        {123456789012345.0, "123456789012345"},
        {-0.0, "-0"},
        {9007199254740992.0, "9007199254740992"},
        {1234.5, "1234.5"},
        {-2.5, "-2.5"},
        {0, "0"},
        {5e-324, "5e-324"}, /* subnormal: fewer digits are significant */
        {2.2250738585072014e-308, "2.2250738585072014e-308"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {NAN, "null"},
        {INFINITY, "null"},
        {-INFINITY, "null"},
    };
    char buf[LF_JSON_NUMBER_MAX];
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        int n = lf_json_number(buf, sizeof buf, known[i].v);
        assert_int_equal(n, (int)strlen(buf));
        assert_string_equal(buf, known[i].text);
    }
    /* random finite bit patterns: every exponent, every mantissa */
    for (uint64_t i = 0; i < 20000; i++) {
        uint64_t bits = lf_rng_u64(7, 0, i);
        double v;
        memcpy(&v, &bits, sizeof v);
        if (!isfinite(v)) continue;
        lf_json_number(buf, sizeof buf, v);
        if (strtod(buf, NULL) != v) fail_msg("%.17g written as %s", v, buf);
        int digits = 0; /* significant: from the first nonzero digit to the exponent */
        for (const char *p = buf; *p && *p != 'e'; p++) digits += (digits || (*p >= '1' && *p <= '9')) && *p != '.';
        if (digits > 17) fail_msg("%.17g written as %s", v, buf);
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "third", 1.0 / 3);
    cJSON *arr = cJSON_AddArrayToObject(root, "list");
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(0.1 + 0.2));
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(NAN));
    cJSON_AddItemToObjectCS(cJSON_AddObjectToObject(root, "deep"), "tiny", cJSON_CreateNumber(1e-300 / 3));
    for (int formatted = 0; formatted <= 1; formatted++) {
        char *s = lf_json_print(root, formatted);
        assert_non_null(s);
        cJSON *back = cJSON_Parse(s);
        assert_non_null(back);
        assert_true(cJSON_GetObjectItem(back, "third")->valuedouble == 1.0 / 3);
        assert_true(cJSON_GetArrayItem(cJSON_GetObjectItem(back, "list"), 0)->valuedouble == 0.1 + 0.2);
        assert_true(cJSON_IsNull(cJSON_GetArrayItem(cJSON_GetObjectItem(back, "list"), 1)));
        assert_true(cJSON_GetObjectItem(cJSON_GetObjectItem(back, "deep"), "tiny")->valuedouble == 1e-300 / 3);
        cJSON_Delete(back);
        cJSON_free(s);
    }
    /* the tree itself is unchanged */
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(root, "third")));
    cJSON_Delete(root);
    assert_null(lf_json_print(NULL, 0));
}

/* lf_str_escape: valid characters pass, every invalid byte and control
 * character becomes \xNN, a character is never split, output always fits. */
static void test_escape(void **state) {
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"text", "text"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"}, /* 2-, 3-, 4-byte */
        {"\xfb" "ext", "\\xfb" "ext"},             /* the mutated Parquet column of issue 17 */
        {"\xc0\xaf", "\\xc0\\xaf"},                /* overlong '/' */
        {"\xed\xa0\x80", "\\xed\\xa0\\x80"},       /* a UTF-16 surrogate */
        {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"}, /* above U+10FFFF */
        {"ab\xe2\x82", "ab\\xe2\\x82"},            /* cut short */
        {"\xe2\x82" "A", "\\xe2\\x82" "A"},        /* a lead byte whose sequence is cut by ASCII */
        {"a\nb\tc\x7f", "a\\x0ab\\x09c\\x7f"},     /* C0 controls and DEL */
        {"x\xc2\x85y\xc2\xa0", "x\\xc2\\x85y\xc2\xa0"}, /* C1 control NEL escaped, NBSP kept */
        {"\\x41", "\\x41"},                        /* a backslash is left alone: escaping is idempotent */
        {"", ""},
    };
    char out[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = lf_str_escape(out, sizeof out, cases[i].in);
        if (strcmp(out, cases[i].out) != 0) fail_msg("case %zu: got '%s', want '%s'", i, out, cases[i].out);
        assert_int_equal(n, strlen(cases[i].out));
    }
    /* an explicit length stops there, and a NUL inside is a control character */
    lf_str_escape_n(out, sizeof out, "a\0b", 3);
    assert_string_equal(out, "a\\x00b");
    /* small buffers: whole characters and whole escapes only, always terminated */
    assert_int_equal(lf_str_escape(out, 3, "\xc3\xa9\xc3\xa9"), 2); /* one é fits with its NUL, two do not */
    assert_string_equal(out, "\xc3\xa9");
    assert_int_equal(lf_str_escape(out, 4, "\xfb"), 0); /* "\xfb" needs 5 bytes */
    assert_string_equal(out, "");
    assert_int_equal(lf_str_escape(out, 0, "abc"), 0);
    assert_int_equal(lf_str_escape(NULL, 10, "abc"), 0);
}

/* Every message is escaped on its way in: lf_fail, lf_error_prefix, lf_log. */
static char g_logged[2100];
static void capture_log(lf_log_level level, const char *msg, void *user) {
    (void)level;
    (void)user;
    snprintf(g_logged, sizeof g_logged, "%s", msg);
}

static void test_messages_escaped(void **state) {
    (void)state;
    lf_fail(LF_ERR_FORMAT, "no column '%s'; the columns are: %s", "text", "\xfb" "ext");
    assert_string_equal(lf_last_error(), "no column 'text'; the columns are: \\xfb" "ext");
    lf_error_prefix("reading '%s'", "data\xff.parquet");
    assert_string_equal(lf_last_error(), "reading 'data\\xff.parquet': no column 'text'; the columns are: \\xfb" "ext");
    /* a message cut at its 1023-byte limit inside a character keeps no piece of it */
    char long_name[1100];
    memset(long_name, 'a', 1022);
    memcpy(long_name + 1022, "\xc3\xa9", 3);
    lf_fail(LF_ERR_FORMAT, "%s", long_name);
    const char *m = lf_last_error();
    assert_int_equal(strlen(m), 1022);
    for (const char *p = m; *p; p++) assert_true((unsigned char)*p < 0x80);
    lf_log_set_callback(capture_log, NULL);
    lf_log(LF_LOG_WARN, "tensor '%s' is unexpected", "h.\x80.w");
    lf_log_set_callback(NULL, NULL);
    assert_string_equal(g_logged, "tensor 'h.\\x80.w' is unexpected");
    /* the message may quote itself (the old code wrote the buffer it read) */
    lf_fail(LF_ERR_IO, "first");
    lf_fail(LF_ERR_IO, "%s, then second", lf_last_error());
    assert_string_equal(lf_last_error(), "first, then second");
}

/* The write-fault hook: lf_file_write_all makes 4 counted operations (open,
 * write, fsync, close); failing each in turn fails the write with the file
 * and the injected errno named, and leaves no file behind; the hook fires
 * once; -1 turns it off. */
static void test_io_faults(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/f.txt", dir);
    long before = lf_io_op_count();
    LF_ASSERT_OK(lf_file_write_all(path, "abc", 3));
    long ops = lf_io_op_count() - before;
    assert_int_equal(ops, 4);
    for (long k = 0; k < ops; k++) {
        unlink(path);
        lf_io_fail_after(k, ENOSPC);
        assert_int_equal(lf_file_write_all(path, "abc", 3), LF_ERR_IO);
        LF_ASSERT_ERR_CONTAINS(path);
        LF_ASSERT_ERR_CONTAINS("No space left on device");
        assert_int_equal(access(path, F_OK), -1); /* nothing half-written stays */
        LF_ASSERT_OK(lf_file_write_all(path, "abc", 3)); /* once only */
    }
    lf_io_fail_after(1, 0); /* err <= 0: EIO */
    assert_int_equal(lf_file_write_all(path, "abc", 3), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS("Input/output error");
    lf_io_fail_after(0, EIO);
    lf_io_fail_after(-1, EIO); /* off before it fired */
    LF_ASSERT_OK(lf_file_write_all(path, "abc", 3));
    /* lf_fsync_dir and lf_mkdirs go through it too */
    lf_io_fail_after(0, EIO);
    assert_int_equal(lf_fsync_dir(dir), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS(dir);
    char sub[700];
    snprintf(sub, sizeof sub, "%s/new/dir", dir);
    lf_io_fail_after(1, ENOSPC);
    assert_int_equal(lf_mkdirs(sub), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS("No space left on device");
    lf_io_fail_after(-1, 0);
    lf_test_rmrf(dir);
    free(dir);
}

/* lf_json_find_nul_escape: the \u0000 escapes readers refuse before cJSON cuts a string */
static void test_json_nul_escape(void **state) {
    (void)state;
    enum { NONE = -1 };
    static const struct { const char *s; int at; } cases[] = {
        {"{\"a\":\"x\\u0000y\"}", 7},      /* {"a":"x\u0000y"}: its backslash at 7 */
        {"{\"a\":\"x\\\\u0000\"}", NONE},  /* {"a":"x\\u0000"}: an escaped backslash, then text */
        {"\\\\\\u0000", 2},                /* \\\u0000: the third backslash starts it */
        {"\\u000", NONE},                  /* too short */
        {"\\u0001", NONE},
        {"", NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].s);
        size_t want = cases[i].at == NONE ? n : (size_t)cases[i].at;
        size_t got = lf_json_find_nul_escape(cases[i].s, n);
        if (got != want) fail_msg("case %zu '%s': %zu, want %zu", i, cases[i].s, got, want);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_nul_escape),
        cmocka_unit_test(test_philox_known_answers), cmocka_unit_test(test_rng_distribution),
        cmocka_unit_test(test_errors),              cmocka_unit_test(test_arena),
        cmocka_unit_test(test_files_and_hashes),    cmocka_unit_test(test_json_numbers),
        cmocka_unit_test(test_escape),              cmocka_unit_test(test_messages_escaped),
        cmocka_unit_test(test_io_faults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
