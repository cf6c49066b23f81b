/*
 * safetensors reader and writer: round trip (several dtypes, a scalar, an
 * empty tensor, metadata with characters JSON must escape), a table of
 * hostile files (each must fail with the expected status and a message that
 * names the file and the tensor, never crash), truncation at every length and
 * header byte flips (run under ASan/UBSan), and a file written by the Python
 * `safetensors` package (tests/fixtures/st_from_python.safetensors, made by
 * tools/make_st_fixture.py).
 *
 * Set LF_ST_KEEP=/some/path.safetensors to keep the round-trip file (for
 * tools/check_safetensors.py).
 */
#include "test_util.h"
#include <sys/stat.h>
#include "llmforge/safetensors.h"

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

static void write_bytes(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (len) assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* A raw safetensors file: u64 hlen, header bytes, data bytes. */
static void write_raw(const char *path, uint64_t hlen, const char *hdr, size_t hdr_bytes, const void *data,
                      size_t data_len) {
    size_t n = 8 + hdr_bytes + data_len;
    unsigned char *buf = calloc(1, n + 1);
    assert_non_null(buf);
    memcpy(buf, &hlen, 8);
    memcpy(buf + 8, hdr, hdr_bytes);
    if (data_len) memcpy(buf + 8 + hdr_bytes, data, data_len);
    write_bytes(path, buf, n);
    free(buf);
}

static lf_st_tensor mk(const char *name, lf_st_dtype dt, int ndim, const int64_t *shape, const void *data) {
    lf_st_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.dtype = dt;
    t.ndim = ndim;
    t.numel = 1;
    for (int i = 0; i < ndim; i++) {
        t.shape[i] = shape[i];
        t.numel *= (size_t)shape[i];
    }
    t.nbytes = t.numel * lf_st_dtype_size(dt);
    t.data = data;
    return t;
}

static void test_dtypes(void **state) {
    (void)state;
    assert_string_equal(lf_st_dtype_name(LF_ST_BF16), "BF16");
    assert_int_equal(lf_st_dtype_size(LF_ST_BF16), 2);
    assert_int_equal(lf_st_dtype_size(LF_ST_U64), 8);
    assert_int_equal(lf_st_dtype_size(LF_ST_BOOL), 1);
    assert_string_equal(lf_st_dtype_name((lf_st_dtype)99), "?");
    assert_int_equal(lf_st_dtype_size((lf_st_dtype)-1), 0);
    /* NULL-safe accessors */
    lf_safetensors_close(NULL);
    assert_int_equal(lf_safetensors_count(NULL), 0);
    assert_null(lf_safetensors_at(NULL, 0));
    assert_null(lf_safetensors_find(NULL, "x"));
    assert_null(lf_safetensors_meta(NULL, "x"));
}

static void test_round_trip(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/rt.safetensors", g_dir);

    float f32[6] = {0.5f, -1.25f, 3.0f, 1e-7f, -0.0f, 65504.0f};
    int64_t i64[4] = {-1, 0, 1LL << 40, INT64_MIN};
    uint16_t f16[4] = {0x3C00, 0xC100, 0x7BFF, 0x0001};
    uint16_t bf16[3] = {0x3F80, 0xBF80, 0x4049};
    unsigned char bools[3] = {1, 0, 1};
    double scalar = 3.25;
    int32_t i32[2] = {7, -7};
    int8_t i8[3] = {-128, 0, 127};
    const int64_t s23[] = {2, 3}, s4[] = {4}, s22[] = {2, 2}, s3[] = {3}, s03[] = {0, 3}, s211[] = {2, 1, 1};
    lf_st_tensor ts[] = {
        mk("h.0.attn.c_attn.weight", LF_ST_F32, 2, s23, f32),
        mk("ids", LF_ST_I64, 1, s4, i64),
        mk("half", LF_ST_F16, 2, s22, f16),
        mk("brain", LF_ST_BF16, 1, s3, bf16),
        mk("mask", LF_ST_BOOL, 1, s3, bools),
        mk("scalar", LF_ST_F64, 0, NULL, &scalar),
        mk("empty", LF_ST_F32, 2, s03, NULL),
        mk("odd \"name\" \\ é", LF_ST_I32, 3, s211, i32),
        mk("bytes", LF_ST_I8, 1, s3, i8),
    };
    const int n = (int)(sizeof ts / sizeof ts[0]);
    const char *meta[] = {"format", "pt", "note", "quote \" backslash \\ newline \n tab \t ctl \x01 é"};
    LF_ASSERT_OK(lf_safetensors_write(path, ts, n, meta, 2));

    const char *keep = getenv("LF_ST_KEEP");
    if (keep && *keep) LF_ASSERT_OK(lf_safetensors_write(keep, ts, n, meta, 2));

    /* layout: 8 + N + data, N a multiple of 8, data packed in order */
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint64_t hlen = 0;
    assert_int_equal(fread(&hlen, 8, 1, f), 1);
    fclose(f);
    assert_int_equal(hlen % 8, 0);
    size_t data = 0;
    for (int i = 0; i < n; i++) data += ts[i].nbytes;
    assert_int_equal((uint64_t)sb.st_size, 8 + hlen + data);

    lf_safetensors *st = NULL;
    LF_ASSERT_OK(lf_safetensors_open(&st, path));
    assert_string_equal(lf_safetensors_path(st), path);
    assert_int_equal(lf_safetensors_count(st), n);
    const unsigned char *base = NULL;
    for (int i = 0; i < n; i++) {
        const lf_st_tensor *t = lf_safetensors_at(st, i);
        assert_non_null(t);
        assert_string_equal(t->name, ts[i].name); /* header order is the given order */
        assert_int_equal(t->dtype, ts[i].dtype);
        assert_int_equal(t->ndim, ts[i].ndim);
        for (int d = 0; d < t->ndim; d++) assert_int_equal(t->shape[d], ts[i].shape[d]);
        assert_int_equal(t->numel, ts[i].numel);
        assert_int_equal(t->nbytes, ts[i].nbytes);
        if (t->nbytes) assert_memory_equal(t->data, ts[i].data, t->nbytes);
        if (i == 0) base = t->data;
        /* contiguous, in order */
        size_t off = 0;
        for (int k = 0; k < i; k++) off += ts[k].nbytes;
        assert_ptr_equal((const unsigned char *)t->data, base + off);
        assert_ptr_equal(lf_safetensors_find(st, ts[i].name), t);
    }
    assert_int_equal((uintptr_t)base % 8, 0); /* data region 8-aligned in the mapping */
    assert_int_equal(lf_safetensors_at(st, n - 1 + 1) == NULL, 1);
    assert_null(lf_safetensors_at(st, -1));
    assert_null(lf_safetensors_find(st, "nope"));
    const lf_st_tensor *sc = lf_safetensors_find(st, "scalar");
    assert_int_equal(sc->ndim, 0);
    assert_int_equal(sc->numel, 1);
    assert_string_equal(lf_safetensors_meta(st, "format"), "pt");
    assert_string_equal(lf_safetensors_meta(st, "note"), meta[3]);
    assert_null(lf_safetensors_meta(st, "absent"));
    lf_safetensors_close(st);

    /* no tensors, no metadata: "{}" padded */
    LF_ASSERT_OK(lf_safetensors_write(path, NULL, 0, NULL, 0));
    LF_ASSERT_OK(lf_safetensors_open(&st, path));
    assert_int_equal(lf_safetensors_count(st), 0);
    lf_safetensors_close(st);
}

static void test_write_rejects(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/bad_w.safetensors", g_dir);
    float x[4] = {0};
    const int64_t s4[] = {4}, s2[] = {2};
    lf_st_tensor ts[2] = {mk("a", LF_ST_F32, 1, s4, x), mk("a", LF_ST_F32, 1, s2, x)};
    assert_int_equal(lf_safetensors_write(path, ts, 2, NULL, 0), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("'a' given twice");
    ts[1].nbytes = 4; /* disagrees with shape */
    snprintf(ts[1].name, sizeof ts[1].name, "b");
    assert_int_equal(lf_safetensors_write(path, ts, 2, NULL, 0), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("'b'");
    ts[1] = mk("__metadata__", LF_ST_F32, 1, s2, x);
    assert_int_equal(lf_safetensors_write(path, ts, 2, NULL, 0), LF_ERR_INVALID_ARG);
    ts[1] = mk("c", LF_ST_F32, 1, s2, NULL);
    assert_int_equal(lf_safetensors_write(path, ts, 2, NULL, 0), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("NULL");
    ts[1] = mk("\xff\xfe", LF_ST_F32, 1, s2, x);
    assert_int_equal(lf_safetensors_write(path, ts, 2, NULL, 0), LF_ERR_INVALID_ARG);
    const char *meta[] = {"k", "v", "k", "w"};
    assert_int_equal(lf_safetensors_write(path, ts, 1, meta, 2), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("metadata key 'k'");
    /* unwritable place: under a regular file (fails for root too) */
    char bad[1100];
    snprintf(bad, sizeof bad, "%s/rt_file", g_dir);
    write_bytes(bad, "x", 1);
    snprintf(bad, sizeof bad, "%s/rt_file/sub.safetensors", g_dir);
    assert_int_equal(lf_safetensors_write(bad, ts, 1, NULL, 0), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS(bad);
}

/* ---------------------------------------------------------------- hostile files */

typedef struct {
    const char *label;
    const char *header; /* header bytes (may be invalid on purpose) */
    long long hlen;     /* -1: strlen(header); -2: UINT64_MAX */
    size_t data_len;    /* bytes of (zero) data after the header */
    lf_status want;
    const char *names; /* text the message must contain besides the path ("" none) */
} bad_case;

#define T16 "\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]"

static const bad_case k_bad[] = {
    {"not json", "{\"w\": {" T16 "}", -1, 16, LF_ERR_FORMAT, "not valid JSON"},
    {"empty header", "", 0, 16, LF_ERR_FORMAT, "not valid JSON"},
    {"array header", "[1, 2, 3]", -1, 0, LF_ERR_FORMAT, "not a JSON object"},
    {"string header", "\"w\"", -1, 0, LF_ERR_FORMAT, "not a JSON object"},
    {"trailing garbage", "{} x", -1, 0, LF_ERR_FORMAT, "after the JSON"},
    {"two objects", "{}{}", -1, 0, LF_ERR_FORMAT, "after the JSON"},
    {"bad utf8", "{\"w\xc3\x28\": {" T16 "}}", -1, 16, LF_ERR_FORMAT, "UTF-8"},
    {"entry not object", "{\"w\": 5}", -1, 0, LF_ERR_FORMAT, "'w'"},
    {"missing dtype", "{\"w\": {\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 16, LF_ERR_FORMAT,
     "'w': missing 'dtype'"},
    {"missing shape", "{\"w\": {\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", -1, 16, LF_ERR_FORMAT,
     "'w': missing 'shape'"},
    {"missing offsets", "{\"w\": {\"dtype\":\"F32\",\"shape\":[4]}}", -1, 16, LF_ERR_FORMAT,
     "'w': missing 'data_offsets'"},
    {"dtype not string", "{\"w\": {\"dtype\":5,\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 16, LF_ERR_FORMAT,
     "'w': 'dtype' is not a string"},
    {"unknown dtype", "{\"w\": {\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}}", -1, 16, LF_ERR_UNSUPPORTED,
     "'w': unknown dtype 'Q4'"},
    {"fp8 dtype", "{\"w\": {\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", -1, 4, LF_ERR_UNSUPPORTED,
     "F8_E4M3"},
    {"shape not array", "{\"w\": {\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", -1, 16, LF_ERR_FORMAT,
     "'w': 'shape' is not an array"},
    {"negative dim", "{\"w\": {\"dtype\":\"F32\",\"shape\":[-1,4],\"data_offsets\":[0,16]}}", -1, 16, LF_ERR_FORMAT,
     "'w': shape[0]"},
    {"fractional dim", "{\"w\": {\"dtype\":\"F32\",\"shape\":[4,1.5],\"data_offsets\":[0,16]}}", -1, 16, LF_ERR_FORMAT,
     "'w': shape[1]"},
    {"string dim", "{\"w\": {\"dtype\":\"F32\",\"shape\":[\"4\"],\"data_offsets\":[0,16]}}", -1, 16, LF_ERR_FORMAT,
     "'w': shape[0]"},
    {"huge dim", "{\"w\": {\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,16]}}", -1, 16, LF_ERR_FORMAT,
     "'w': shape[0]"},
    {"overflow numel", "{\"w\": {\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,16]}}", -1, 16,
     LF_ERR_FORMAT, "'w': shape [4294967296, 4294967296] overflows"},
    {"overflow bytes", "{\"w\": {\"dtype\":\"F64\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,16]}}", -1, 16,
     LF_ERR_FORMAT, "'w': shape [2147483648, 2147483648] overflows"},
    {"too many dims", "{\"w\": {\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", -1, 1,
     LF_ERR_UNSUPPORTED, "'w': 9 dimensions"},
    {"offsets end<begin", "{\"w\": {\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", -1, 16, LF_ERR_FORMAT,
     "'w': data_offsets [8, 4] end before"},
    {"offsets beyond data", "{\"w\": {\"dtype\":\"F32\",\"shape\":[250],\"data_offsets\":[0,1000]}}", -1, 16,
     LF_ERR_FORMAT, "'w': data_offsets [0, 1000] reach beyond the data region of 16 bytes"},
    {"offsets one value", "{\"w\": {\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16]}}", -1, 16, LF_ERR_FORMAT,
     "'w': 'data_offsets'"},
    {"offsets strings", "{\"w\": {\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[\"0\",\"16\"]}}", -1, 16,
     LF_ERR_FORMAT, "'w': 'data_offsets'"},
    {"offsets negative", "{\"w\": {\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[-16,0]}}", -1, 16, LF_ERR_FORMAT,
     "'w': 'data_offsets'"},
    {"nbytes mismatch", "{\"w\": {\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", -1, 16, LF_ERR_FORMAT,
     "'w': data_offsets [0, 12] span 12 bytes, but F32 [2, 2] needs 16"},
    {"overlap",
     "{\"a\": {\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
     " \"b\": {\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
     -1, 24, LF_ERR_FORMAT, "'a' [0, 16] and 'b' [8, 24] overlap"},
    {"same range twice",
     "{\"a\": {\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
     " \"b\": {\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
     -1, 16, LF_ERR_FORMAT, "overlap"},
    {"duplicate name",
     "{\"a\": {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     " \"a\": {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
     -1, 16, LF_ERR_FORMAT, "'a' appears twice"},
    {"metadata value number", "{\"__metadata__\": {\"format\": \"pt\", \"epoch\": 3}}", -1, 0, LF_ERR_FORMAT,
     "'__metadata__' value of 'epoch' is not a string"},
    {"metadata value null", "{\"__metadata__\": {\"x\": null}}", -1, 0, LF_ERR_FORMAT, "'x' is not a string"},
    {"metadata not object", "{\"__metadata__\": [\"pt\"]}", -1, 0, LF_ERR_FORMAT,
     "'__metadata__' is not a JSON object"},
    {"header longer than file", "{}", 4096, 0, LF_ERR_FORMAT, "header length 4096, but only 2 bytes"},
    {"header over cap", "{}", 200000000, 0, LF_ERR_FORMAT, "cap"},
    {"header u64 max", "{}", -2, 0, LF_ERR_FORMAT, "cap"},
};

static void expect_fail(const char *path, lf_status want, const char *names, const char *label) {
    lf_safetensors *st = (lf_safetensors *)(uintptr_t)1;
    lf_status s = lf_safetensors_open(&st, path);
    if (s != want)
        fail_msg("case '%s': got %s (%s), want %s", label, lf_status_str(s), lf_last_error(), lf_status_str(want));
    assert_null(st);
    if (!strstr(lf_last_error(), path)) fail_msg("case '%s': message '%s' lacks the path", label, lf_last_error());
    if (names && *names && !strstr(lf_last_error(), names))
        fail_msg("case '%s': message '%s' lacks '%s'", label, lf_last_error(), names);
}

static void test_hostile_table(void **state) {
    (void)state;
    unsigned char zeros[64] = {0};
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        const bad_case *c = &k_bad[i];
        char path[1024];
        snprintf(path, sizeof path, "%s/bad_%02zu.safetensors", g_dir, i);
        size_t hb = strlen(c->header);
        uint64_t hlen = c->hlen == -1 ? hb : c->hlen == -2 ? UINT64_MAX : (uint64_t)c->hlen;
        write_raw(path, hlen, c->header, hb, zeros, c->data_len);
        expect_fail(path, c->want, c->names, c->label);
    }

    /* a tensor name longer than LF_ST_NAME_MAX */
    char hdr[1024], name[400], path[1024];
    memset(name, 'n', 300);
    name[300] = 0;
    snprintf(hdr, sizeof hdr, "{\"%s\": {" T16 "}}", name);
    snprintf(path, sizeof path, "%s/bad_longname.safetensors", g_dir);
    write_raw(path, strlen(hdr), hdr, strlen(hdr), zeros, 16);
    expect_fail(path, LF_ERR_UNSUPPORTED, "name longer than 255", "long name");

    /* a NUL inside the header */
    static const char nul_hdr[] = "{\"w\": {" T16 "}\0}";
    snprintf(path, sizeof path, "%s/bad_nul.safetensors", g_dir);
    write_raw(path, sizeof nul_hdr - 1, nul_hdr, sizeof nul_hdr - 1, zeros, 16);
    expect_fail(path, LF_ERR_FORMAT, "", "nul in header");

    /* too short to hold the length */
    for (size_t len = 0; len < 8; len++) {
        snprintf(path, sizeof path, "%s/short_%zu.safetensors", g_dir, len);
        write_bytes(path, "\x02\0\0\0\0\0\0\0", len);
        expect_fail(path, LF_ERR_FORMAT, "shorter than the 8-byte", "short file");
    }

    /* not there / not a file */
    snprintf(path, sizeof path, "%s/absent.safetensors", g_dir);
    expect_fail(path, LF_ERR_NOT_FOUND, "", "absent");
    expect_fail(g_dir, LF_ERR_IO, "not a regular file", "directory");

    /* accepted edge cases: whitespace padding, gaps, zero-size tensors, extra keys */
    static const char ok_hdr[] = "{\"z\": {\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[16,16]},"
                                 " \"w\": {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24], \"x\": 1},"
                                 " \"v\": {\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]},"
                                 " \"__metadata__\": null}   \n ";
    snprintf(path, sizeof path, "%s/ok_edge.safetensors", g_dir);
    write_raw(path, sizeof ok_hdr - 1, ok_hdr, sizeof ok_hdr - 1, zeros, 32);
    lf_safetensors *st;
    LF_ASSERT_OK(lf_safetensors_open(&st, path));
    assert_int_equal(lf_safetensors_count(st), 3);
    assert_int_equal(lf_safetensors_find(st, "z")->numel, 0);
    assert_int_equal(lf_safetensors_find(st, "v")->ndim, 0);
    lf_safetensors_close(st);
}

/* Every truncation of a valid file fails cleanly; flipped header bytes never crash. */
static void test_truncation_and_flips(void **state) {
    (void)state;
    char path[1024], cut[1024];
    snprintf(path, sizeof path, "%s/good.safetensors", g_dir);
    snprintf(cut, sizeof cut, "%s/cut.safetensors", g_dir);
    float a[6] = {1, 2, 3, 4, 5, 6};
    int64_t b[2] = {7, 8};
    const int64_t s23[] = {2, 3}, s2[] = {2};
    lf_st_tensor ts[] = {mk("a", LF_ST_F32, 2, s23, a), mk("b", LF_ST_I64, 1, s2, b)};
    const char *meta[] = {"format", "pt"};
    LF_ASSERT_OK(lf_safetensors_write(path, ts, 2, meta, 1));
    char *buf;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &buf, &len));

    for (size_t k = 0; k < len; k++) {
        write_bytes(cut, buf, k);
        lf_safetensors *st = NULL;
        lf_status s = lf_safetensors_open(&st, cut);
        if (s == LF_OK) fail_msg("truncation to %zu of %zu bytes was accepted", k, len);
        assert_int_equal(s, LF_ERR_FORMAT);
        assert_non_null(strstr(lf_last_error(), cut));
    }
    /* truncating the data region names the tensor that no longer fits */
    write_bytes(cut, buf, len - 1);
    lf_safetensors *st = NULL;
    assert_int_equal(lf_safetensors_open(&st, cut), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("tensor 'b'");
    LF_ASSERT_ERR_CONTAINS("reach beyond the data region");

    uint64_t hlen;
    memcpy(&hlen, buf, 8);
    static const unsigned char vals[] = {0x00, ' ', '"', '{', '}', '[', ']', ',', ':', '9', '-', 0xff, 0xc3};
    int accepted = 0;
    for (size_t k = 0; k < 8 + hlen; k++) {
        for (size_t j = 0; j < sizeof vals; j++) {
            char saved = buf[k];
            buf[k] = (char)vals[j];
            write_bytes(cut, buf, len);
            st = NULL;
            lf_status s = lf_safetensors_open(&st, cut);
            if (s == LF_OK) {
                accepted++; /* e.g. a digit changed inside a metadata string */
                for (int i = 0; i < lf_safetensors_count(st); i++) {
                    const lf_st_tensor *t = lf_safetensors_at(st, i);
                    volatile unsigned char sink = 0;
                    for (size_t q = 0; q < t->nbytes; q++) sink ^= ((const unsigned char *)t->data)[q];
                    (void)sink;
                }
                lf_safetensors_close(st);
            } else {
                assert_null(st);
                assert_true(strlen(lf_last_error()) > 0);
            }
            buf[k] = saved;
        }
    }
    (void)accepted;
    lf_free(buf);
}

/* A file written by the Python safetensors package (tools/make_st_fixture.py). */
static void test_python_fixture(void **state) {
    (void)state;
    const char *path = LF_SOURCE_DIR "/tests/fixtures/st_from_python.safetensors";
    lf_safetensors *st;
    LF_ASSERT_OK(lf_safetensors_open(&st, path));
    assert_int_equal(lf_safetensors_count(st), 7);
    assert_string_equal(lf_safetensors_meta(st, "format"), "np");
    assert_string_equal(lf_safetensors_meta(st, "source"), "tools/make_st_fixture.py");
    assert_string_equal(lf_safetensors_meta(st, "note"), "quote \" backslash \\ unicode \xc3\xa9");

    const lf_st_tensor *t = lf_safetensors_find(st, "f32");
    assert_non_null(t);
    assert_int_equal(t->dtype, LF_ST_F32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 2);
    assert_int_equal(t->shape[1], 3);
    float f[6];
    memcpy(f, t->data, sizeof f);
    for (int i = 0; i < 6; i++) assert_true(f[i] == 0.5f * (float)i - 1.0f);

    t = lf_safetensors_find(st, "i64");
    assert_int_equal(t->dtype, LF_ST_I64);
    int64_t q[3];
    memcpy(q, t->data, sizeof q);
    assert_true(q[0] == -1 && q[1] == (1LL << 40) && q[2] == 3);

    t = lf_safetensors_find(st, "f16");
    assert_int_equal(t->dtype, LF_ST_F16);
    uint16_t h[2];
    memcpy(h, t->data, sizeof h);
    assert_int_equal(h[0], 0x3C00); /* 1.0 */
    assert_int_equal(h[1], 0xC100); /* -2.5 */

    t = lf_safetensors_find(st, "u8");
    assert_int_equal(t->dtype, LF_ST_U8);
    assert_memory_equal(t->data, "\x00\xff\x07", 3);

    t = lf_safetensors_find(st, "mask");
    assert_int_equal(t->dtype, LF_ST_BOOL);
    assert_memory_equal(t->data, "\x01\x00\x01", 3);

    t = lf_safetensors_find(st, "scalar");
    assert_int_equal(t->dtype, LF_ST_F64);
    assert_int_equal(t->ndim, 0);
    double d;
    memcpy(&d, t->data, sizeof d);
    assert_true(d == 3.25);

    t = lf_safetensors_find(st, "h.0.i32");
    assert_int_equal(t->dtype, LF_ST_I32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 3);
    assert_int_equal(t->shape[1], 1);
    int32_t w[3];
    memcpy(w, t->data, sizeof w);
    assert_true(w[0] == 10 && w[1] == -20 && w[2] == 30);
    lf_safetensors_close(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hostile_table, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncation_and_flips, setup, teardown),
        cmocka_unit_test(test_python_fixture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
