/* Token shards: byte layout against data.h, round trips (u16/u32, with and
 * without a loss mask), and every malformed-file error with its message. */
#include "test_util.h"
#include <sys/stat.h>
#include "llmforge/data.h"

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static size_t file_size(const char *path) {
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return (size_t)sb.st_size;
}

static char *join(const char *dir, const char *name) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

/* Write a shard and check it reads back token for token, and its bytes match data.h. */
static void round_trip(uint32_t vocab, int with_mask, size_t n) {
    char *dir = lf_test_tmpdir();
    char *path = join(dir, "s.bin");
    uint32_t *tok = malloc(n * sizeof *tok + 1);
    uint8_t *mask = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        tok[i] = (uint32_t)(lf_rng_u64(1, LF_RNG_TEST, i) % vocab);
        mask[i] = (uint8_t)(i % 3 == 0 ? 0 : (i % 3 == 1 ? 1 : 7)); /* nonzero is stored as 1 */
    }
    if (n > 0) tok[n - 1] = vocab - 1; /* the largest id survives */
    LF_ASSERT_OK(lf_shard_write(path, tok, with_mask ? mask : NULL, n, vocab));

    const unsigned bpt = vocab <= 65536 ? 2 : 4;
    assert_int_equal(file_size(path), 64 + n * bpt + (with_mask ? n : 0));
    char *tmp = join(dir, "s.bin.tmp");
    assert_int_not_equal(access(tmp, F_OK), 0); /* no temporary left behind */

    /* the header byte by byte */
    char *raw;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &raw, &len));
    const unsigned char *h = (const unsigned char *)raw;
    assert_memory_equal(h, "LFSHARD\0", 8);
    assert_int_equal(rd32(h + 8), 1);
    assert_int_equal(rd32(h + 12), bpt);
    assert_int_equal(rd64(h + 16), n);
    assert_int_equal(rd32(h + 24), with_mask ? 1 : 0);
    assert_int_equal(rd32(h + 28), vocab);
    assert_int_equal(rd32(h + 32), lf_crc32(0, h + 64, len - 64));
    for (int i = 36; i < 64; i++) assert_int_equal(h[i], 0);
    for (size_t i = 0; i < n; i++) {
        uint32_t v = bpt == 2 ? (uint32_t)h[64 + 2 * i] | (uint32_t)h[64 + 2 * i + 1] << 8 : rd32(h + 64 + 4 * i);
        assert_int_equal(v, tok[i]);
        if (with_mask) assert_int_equal(h[64 + n * bpt + i], mask[i] ? 1 : 0);
    }
    lf_free(raw);

    lf_shard *s;
    LF_ASSERT_OK(lf_shard_open(&s, path, 1));
    assert_int_equal(lf_shard_num_tokens(s), n);
    assert_int_equal(lf_shard_vocab_size(s), vocab);
    assert_int_equal(lf_shard_has_mask(s), with_mask);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(lf_shard_token(s, i), tok[i]);
        assert_int_equal(lf_shard_mask(s, i), with_mask ? (mask[i] != 0) : 1);
    }
    /* out-of-range reads are harmless */
    assert_int_equal(lf_shard_token(s, n), 0);
    assert_int_equal(lf_shard_mask(s, n + 5), 1);
    lf_shard_close(s);

    free(tok);
    free(mask);
    free(tmp);
    free(path);
    lf_test_rmrf(dir);
    free(dir);
}

static void test_round_trip_u16(void **state) {
    (void)state;
    round_trip(65, 0, 1000);
    round_trip(65536, 0, 5000); /* largest vocabulary that still fits u16 */
}
static void test_round_trip_u16_mask(void **state) {
    (void)state;
    round_trip(1000, 1, 777);
}
static void test_round_trip_u32(void **state) {
    (void)state;
    round_trip(65537, 0, 1000);
    round_trip(50257 * 4, 0, 100000); /* crosses the 64 KiB write buffer */
}
static void test_round_trip_u32_mask(void **state) {
    (void)state;
    round_trip(100000, 1, 70000);
}
static void test_round_trip_empty(void **state) {
    (void)state;
    round_trip(10, 0, 0);
    round_trip(10, 1, 0);
}

static void test_write_rejects_bad_tokens(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    char *path = join(dir, "bad.bin");
    uint32_t tok[4] = {0, 1, 65, 2};
    assert_int_equal(lf_shard_write(path, tok, NULL, 4, 65), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("bad.bin");
    LF_ASSERT_ERR_CONTAINS("token 65 at index 2");
    assert_int_not_equal(access(path, F_OK), 0);
    assert_int_equal(lf_shard_write(path, tok, NULL, 4, 0), LF_ERR_INVALID_ARG);
    assert_int_equal(lf_shard_write(path, NULL, NULL, 4, 100), LF_ERR_INVALID_ARG);
    char *nodir = join(dir, "no/such/dir/x.bin");
    assert_int_equal(lf_shard_write(nodir, tok, NULL, 2, 100), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS("x.bin");
    free(nodir);
    free(path);
    lf_test_rmrf(dir);
    free(dir);
}

/* ---------------------------------------------------------------- malformed files */
typedef struct fixture {
    char *dir, *path;
    char *bytes; /* the good file */
    size_t len;
} fixture;

/* A good 1000-token u16 shard (2064 bytes), kept in memory for corrupting. */
static void fx_make(fixture *f) {
    f->dir = lf_test_tmpdir();
    f->path = join(f->dir, "train.bin");
    uint32_t tok[1000];
    for (int i = 0; i < 1000; i++) tok[i] = (uint32_t)(i % 65);
    LF_ASSERT_OK(lf_shard_write(f->path, tok, NULL, 1000, 65));
    LF_ASSERT_OK(lf_file_read_all(f->path, 0, &f->bytes, &f->len));
    assert_int_equal(f->len, 2064);
}
static void fx_free(fixture *f) {
    lf_free(f->bytes);
    free(f->path);
    lf_test_rmrf(f->dir);
    free(f->dir);
}
/* Write a modified copy: (bytes, len) with one patch applied by the caller. */
static void fx_write(fixture *f, const void *bytes, size_t len) { LF_ASSERT_OK(lf_file_write_all(f->path, bytes, len)); }

static void expect_open_error(fixture *f, lf_status want, const char *needle) {
    lf_shard *s = (lf_shard *)(uintptr_t)1;
    lf_status got = lf_shard_open(&s, f->path, 1);
    if (got != want) fail_msg("status %s, wanted %s (%s)", lf_status_str(got), lf_status_str(want), lf_last_error());
    assert_null(s);
    LF_ASSERT_ERR_CONTAINS("shard '");
    LF_ASSERT_ERR_CONTAINS(f->path);
    LF_ASSERT_ERR_CONTAINS(needle);
}

static void test_truncated(void **state) {
    (void)state;
    fixture f;
    fx_make(&f);
    fx_write(&f, f.bytes, 1800);
    expect_open_error(&f, LF_ERR_FORMAT, "header says 1000 tokens (2064 bytes), file holds 1800 bytes");
    fx_write(&f, f.bytes, 10);
    expect_open_error(&f, LF_ERR_FORMAT, "file holds 10 bytes, less than the 64-byte header");
    fx_write(&f, f.bytes, 0);
    expect_open_error(&f, LF_ERR_FORMAT, "file holds 0 bytes");
    fx_free(&f);
}

static void test_size_mismatch(void **state) {
    (void)state;
    fixture f;
    fx_make(&f);
    char *big = calloc(1, f.len + 3);
    memcpy(big, f.bytes, f.len);
    fx_write(&f, big, f.len + 3);
    expect_open_error(&f, LF_ERR_FORMAT, "header says 1000 tokens (2064 bytes), file holds 2067 bytes");
    /* the mask flag set without mask bytes */
    memcpy(big, f.bytes, f.len);
    wr32((unsigned char *)big + 24, 1);
    fx_write(&f, big, f.len);
    expect_open_error(&f, LF_ERR_FORMAT, "header says 1000 tokens with a loss mask (3064 bytes), file holds 2064 bytes");
    /* a token count no file can hold */
    memcpy(big, f.bytes, f.len);
    memset(big + 16, 0xFF, 8);
    fx_write(&f, big, f.len);
    expect_open_error(&f, LF_ERR_FORMAT, "more than any file can hold");
    free(big);
    fx_free(&f);
}

static void test_bad_header_fields(void **state) {
    (void)state;
    fixture f;
    fx_make(&f);
    char *b = malloc(f.len);

    memcpy(b, f.bytes, f.len);
    memcpy(b, "GGUF\0\0\0\0", 8);
    fx_write(&f, b, f.len);
    expect_open_error(&f, LF_ERR_FORMAT, "bad magic");

    memcpy(b, f.bytes, f.len);
    wr32((unsigned char *)b + 8, 2);
    fx_write(&f, b, f.len);
    expect_open_error(&f, LF_ERR_UNSUPPORTED, "format version 2, this build reads version 1");

    memcpy(b, f.bytes, f.len);
    wr32((unsigned char *)b + 12, 3);
    fx_write(&f, b, f.len);
    expect_open_error(&f, LF_ERR_FORMAT, "bytes_per_token is 3, must be 2 or 4");

    memcpy(b, f.bytes, f.len);
    wr32((unsigned char *)b + 24, 6);
    fx_write(&f, b, f.len);
    expect_open_error(&f, LF_ERR_FORMAT, "unknown flag bits 0x6");

    memcpy(b, f.bytes, f.len);
    wr32((unsigned char *)b + 28, 0);
    fx_write(&f, b, f.len);
    expect_open_error(&f, LF_ERR_FORMAT, "vocab_size is 0");

    memcpy(b, f.bytes, f.len);
    wr32((unsigned char *)b + 28, 70000);
    fx_write(&f, b, f.len);
    expect_open_error(&f, LF_ERR_FORMAT, "vocab_size 70000 does not fit 2-byte tokens");

    memcpy(b, f.bytes, f.len);
    b[50] = 1;
    fx_write(&f, b, f.len);
    expect_open_error(&f, LF_ERR_FORMAT, "reserved header byte 50");

    free(b);
    fx_free(&f);
}

static void test_checksum(void **state) {
    (void)state;
    fixture f;
    fx_make(&f);
    char *b = malloc(f.len);
    memcpy(b, f.bytes, f.len);
    b[64 + 777] ^= 0x01;
    fx_write(&f, b, f.len);
    uint32_t good = rd32((const unsigned char *)f.bytes + 32);
    uint32_t bad = lf_crc32(0, b + 64, f.len - 64);
    char want[128];
    snprintf(want, sizeof want, "payload checksum mismatch (header 0x%08X, computed 0x%08X)", good, bad);
    expect_open_error(&f, LF_ERR_CHECKSUM, want);
    /* without verification the shard opens (the header is sound) */
    lf_shard *s;
    LF_ASSERT_OK(lf_shard_open(&s, f.path, 0));
    assert_int_equal(lf_shard_num_tokens(s), 1000);
    lf_shard_close(s);
    free(b);
    fx_free(&f);
}

static void test_missing_and_not_regular(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    char *path = join(dir, "nope.bin");
    lf_shard *s;
    assert_int_equal(lf_shard_open(&s, path, 1), LF_ERR_NOT_FOUND);
    assert_null(s);
    LF_ASSERT_ERR_CONTAINS("shard '");
    LF_ASSERT_ERR_CONTAINS("nope.bin");
    assert_int_equal(lf_shard_open(&s, dir, 1), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS("not a regular file");
    assert_int_equal(lf_shard_open(NULL, path, 1), LF_ERR_INVALID_ARG);
    lf_shard_close(NULL);
    assert_int_equal(lf_shard_num_tokens(NULL), 0);
    free(path);
    lf_test_rmrf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_u16),
        cmocka_unit_test(test_round_trip_u16_mask),
        cmocka_unit_test(test_round_trip_u32),
        cmocka_unit_test(test_round_trip_u32_mask),
        cmocka_unit_test(test_round_trip_empty),
        cmocka_unit_test(test_write_rejects_bad_tokens),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_size_mismatch),
        cmocka_unit_test(test_bad_header_fields),
        cmocka_unit_test(test_checksum),
        cmocka_unit_test(test_missing_and_not_regular),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
