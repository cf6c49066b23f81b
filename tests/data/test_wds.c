/* WebDataset tar record source (src/data/reader_wds.c) through lf_reader:
 * the committed fixtures (tests/fixtures/wds, written by
 * tools/reference/make_wds_fixtures.py with Python's tarfile and gzip) read
 * as expected.json says, in pretraining and fine-tuning modes; gzip told by
 * its magic, not the name; concatenated gzip members; GNU long names, pax
 * paths and ustar prefixes (checked through the sample keys in messages);
 * the record cap; bad samples with and without skip; archives built here
 * (base-256 sizes, pax size, sparse, links, old-style directories,
 * interleaved keys, invalid size fields, malformed pax); and damage:
 * truncation at many points of plain and gzip archives and flipped checksum,
 * name and gzip bytes all give errors naming the member and offset, never a
 * crash or a silently shorter dataset. */
#include "test_util.h"
#include <cjson/cJSON.h>
#include "llmforge/data.h"

#define FIX LF_SOURCE_DIR "/tests/fixtures/wds/"

typedef struct tmpf {
    char *dir;
    char path[1024];
} tmpf;

/* Plain write (no fsync: the truncation tests write thousands of files). */
static void write_file(tmpf *t, const char *name, const void *data, size_t len) {
    if (!t->dir) t->dir = lf_test_tmpdir();
    assert_non_null(t->dir);
    snprintf(t->path, sizeof t->path, "%s/%s", t->dir, name);
    FILE *f = fopen(t->path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void tmp_free(tmpf *t) {
    if (t->dir) lf_test_rmrf(t->dir);
    free(t->dir);
    t->dir = NULL;
}

static unsigned char *load(const char *path, size_t *len) {
    char *p = NULL;
    LF_ASSERT_OK(lf_file_read_all(path, 0, &p, len));
    return (unsigned char *)p;
}

static lf_reader_opts opts_mode(lf_record_mode mode) {
    lf_reader_opts o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    return o;
}

typedef struct msgs {
    int n;
    char m[16][512];
} msgs;

static void on_skip(const char *msg, void *user) {
    msgs *s = user;
    if (s->n < 16) snprintf(s->m[s->n], sizeof s->m[0], "%s", msg);
    s->n++;
}

/* Read every record: texts joined with '|' ("prompt>response" in fine-tuning).
 * Checks line = index + 1 (sample numbers) and the string invariants. */
static int read_all(const char *path, const lf_reader_opts *o, char *buf, size_t cap, lf_status *st_out) {
    lf_reader *r = NULL;
    lf_status st = lf_reader_open(&r, path, o);
    int n = 0;
    buf[0] = 0;
    while (st == LF_OK) {
        lf_record rec;
        int eof;
        st = lf_reader_next(r, &rec, &eof);
        if (st != LF_OK || eof) break;
        assert_int_equal(rec.line, rec.index + 1);
        assert_int_equal(rec.index, (uint64_t)n + lf_reader_skipped(r));
        char one[512];
        if (rec.text) {
            assert_int_equal(strlen(rec.text), rec.text_len);
            snprintf(one, sizeof one, "%s%s", n ? "|" : "", rec.text);
        } else {
            assert_int_equal(strlen(rec.prompt), rec.prompt_len);
            assert_int_equal(strlen(rec.response), rec.response_len);
            snprintf(one, sizeof one, "%s%s>%s", n ? "|" : "", rec.prompt, rec.response);
        }
        strncat(buf, one, cap - strlen(buf) - 1);
        n++;
    }
    if (st != LF_OK) assert_true(lf_last_error()[0] != 0);
    lf_reader_close(r);
    *st_out = st;
    return n;
}

/* expected.json's list for (fixture, mode) joined as read_all joins. */
static int expected(const char *fixture, const char *mode, char *buf, size_t cap) {
    char *js = NULL;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(FIX "expected.json", 0, &js, &len));
    cJSON *root = cJSON_Parse(js);
    assert_non_null(root);
    const cJSON *list = cJSON_GetObjectItem(cJSON_GetObjectItem(root, fixture), mode);
    int n = 0;
    buf[0] = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        if (n) strncat(buf, "|", cap - strlen(buf) - 1);
        if (cJSON_IsString(e)) {
            strncat(buf, e->valuestring, cap - strlen(buf) - 1);
        } else {
            strncat(buf, cJSON_GetArrayItem(e, 0)->valuestring, cap - strlen(buf) - 1);
            strncat(buf, ">", cap - strlen(buf) - 1);
            strncat(buf, cJSON_GetArrayItem(e, 1)->valuestring, cap - strlen(buf) - 1);
        }
        n++;
    }
    cJSON_Delete(root);
    lf_free(js);
    return list ? n : -1;
}

static void test_fixtures(void **state) {
    (void)state;
    static const char *names[] = {"basic.tar", "basic.tar.gz", "multi.tar.gz", "sft.tar",
                                  "names_gnu.tar", "names_pax.tar", "names_ustar.tar"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        for (int mode = 0; mode < 2; mode++) {
            char want[2048], got[2048], path[1024];
            int n = expected(names[i], mode ? "sft" : "pretrain", want, sizeof want);
            if (n < 0) continue;
            snprintf(path, sizeof path, FIX "%s", names[i]);
            lf_reader_opts o = opts_mode(mode ? LF_RECORD_SFT : LF_RECORD_PRETRAIN);
            lf_status st;
            lf_reader *r = NULL;
            LF_ASSERT_OK(lf_reader_open(&r, path, &o));
            assert_int_equal(lf_reader_format(r), LF_INPUT_WDS);
            lf_reader_close(r);
            int m = read_all(path, &o, got, sizeof got, &st);
            if (st != LF_OK) fail_msg("%s: %s", names[i], lf_last_error());
            assert_int_equal(m, n);
            assert_string_equal(got, want);
        }
    }
}

/* The keys of the long-name fixtures, seen in the messages of skipped samples
 * (in fine-tuning mode every sample there is bad). */
static void test_long_names(void **state) {
    (void)state;
    char *js = NULL;
    size_t len;
    LF_ASSERT_OK(lf_file_read_all(FIX "expected.json", 0, &js, &len));
    cJSON *root = cJSON_Parse(js);
    assert_non_null(root);
    static const char *names[] = {"names_gnu.tar", "names_pax.tar", "names_ustar.tar"};
    for (size_t i = 0; i < 3; i++) {
        char path[1024], buf[256];
        snprintf(path, sizeof path, FIX "%s", names[i]);
        msgs ms = {0};
        lf_reader_opts o = opts_mode(LF_RECORD_SFT);
        o.skip_bad_records = 1;
        o.on_skip = on_skip;
        o.on_skip_user = &ms;
        lf_status st;
        assert_int_equal(read_all(path, &o, buf, sizeof buf, &st), 0);
        LF_ASSERT_OK(st);
        const cJSON *keys = cJSON_GetObjectItem(cJSON_GetObjectItem(root, names[i]), "keys");
        assert_int_equal(ms.n, cJSON_GetArraySize(keys));
        for (int k = 0; k < ms.n; k++) {
            char want[256];
            snprintf(want, sizeof want, ":%d: sample '%.150s", k + 1, cJSON_GetArrayItem(keys, k)->valuestring);
            if (!strstr(ms.m[k], want)) fail_msg("%s: message '%s' lacks '%s'", names[i], ms.m[k], want);
        }
    }
    cJSON_Delete(root);
    lf_free(js);
}

/* gzip is told by its magic bytes, not by the name. */
static void test_gzip_by_magic(void **state) {
    (void)state;
    tmpf t = {0};
    char want[1024], got[1024];
    lf_status st;
    expected("basic.tar", "pretrain", want, sizeof want);
    size_t zl, pl;
    unsigned char *z = load(FIX "basic.tar.gz", &zl), *p = load(FIX "basic.tar", &pl);
    static const struct {
        const char *name;
        int gz;
        lf_input_format fmt;
    } cases[] = {
        {"gz_named.tar", 1, LF_INPUT_AUTO}, {"plain_named.tgz", 0, LF_INPUT_AUTO},
        {"plain.TAR.GZ", 0, LF_INPUT_AUTO}, {"shard.data", 1, LF_INPUT_WDS},
        {"shard2.bin", 0, LF_INPUT_WDS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_file(&t, cases[i].name, cases[i].gz ? z : p, cases[i].gz ? zl : pl);
        lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
        o.format = cases[i].fmt;
        assert_int_equal(read_all(t.path, &o, got, sizeof got, &st), 5);
        LF_ASSERT_OK(st);
        assert_string_equal(got, want);
    }
    /* bytes after the gzip stream that are not another gzip member are ignored, as gzip(1) does */
    unsigned char *zt = malloc(zl + 100);
    assert_non_null(zt);
    memcpy(zt, z, zl);
    memset(zt + zl, 0, 100);
    memcpy(zt + zl + 50, "junk", 4);
    write_file(&t, "trailing.tar.gz", zt, zl + 100);
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    assert_int_equal(read_all(t.path, &o, got, sizeof got, &st), 5);
    LF_ASSERT_OK(st);
    assert_string_equal(got, want);
    free(zt);
    lf_free(z);
    lf_free(p);
    tmp_free(&t);
}

static void test_fields_and_modes(void **state) {
    (void)state;
    char got[1024];
    lf_status st;
    /* a named text field: the .json members only (a .txt is then ignored) */
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    o.text_field = "text";
    read_all(FIX "basic.tar", &o, got, sizeof got, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("basic.tar:1: sample 'dir/000': no .json member (needed for the text field 'text')");
    msgs ms = {0};
    o.skip_bad_records = 1;
    o.on_skip = on_skip;
    o.on_skip_user = &ms;
    assert_int_equal(read_all(FIX "basic.tar", &o, got, sizeof got, &st), 2);
    LF_ASSERT_OK(st);
    assert_string_equal(got, "from json|json loses");
    assert_int_equal(ms.n, 3);
    assert_true(strstr(ms.m[2], "basic.tar:5: sample 'dir/004'") != NULL);
    /* a field the .json lacks */
    o.text_field = "other";
    o.skip_bad_records = 0;
    read_all(FIX "basic.tar", &o, got, sizeof got, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("basic.tar:1: sample 'dir/000': no .json member");
    o.skip_bad_records = 1;
    ms.n = 0;
    assert_int_equal(read_all(FIX "basic.tar", &o, got, sizeof got, &st), 0);
    LF_ASSERT_OK(st);
    assert_true(strstr(ms.m[2], "basic.tar:3: sample 'dir/002': member 'dir/002.json': field 'other' is a number, "
                                "expected a string") != NULL);
    /* fine-tuning fields named; a pretraining view of the sft shard */
    o = opts_mode(LF_RECORD_SFT);
    o.prompt_field = "prompt";
    o.response_field = "text";
    o.skip_bad_records = 1;
    assert_int_equal(read_all(FIX "sft.tar", &o, got, sizeof got, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(got, "h\xc3\xa9llo >t3");
    o = opts_mode(LF_RECORD_PRETRAIN);
    o.skip_bad_records = 1;
    assert_int_equal(read_all(FIX "sft.tar", &o, got, sizeof got, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(got, "ignored in sft mode"); /* s/3's .txt wins; the others have no "text" */
}

static void test_record_cap(void **state) {
    (void)state;
    char got[1024];
    lf_status st;
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    o.max_record_bytes = 12; /* "hello world\n" fits; the 14-byte UTF-8 text and the .json do not */
    read_all(FIX "basic.tar.gz", &o, got, sizeof got, &st);
    assert_int_equal(st, LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("basic.tar.gz:2: sample 'dir/001': member 'dir/001.txt' is 14 bytes, larger than the limit "
                           "of 12 bytes for one record");
    o.skip_bad_records = 1;
    assert_int_equal(read_all(FIX "basic.tar.gz", &o, got, sizeof got, &st), 3);
    LF_ASSERT_OK(st);
    assert_string_equal(got, "hello world\n|txt wins|four"); /* 003: the .json is too big, but the .txt wins */
}

/* ---------------------------------------------------------------- archives built here */
typedef struct tb {
    unsigned char *p;
    size_t len, cap;
} tb;

static void tb_grow(tb *b, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
}

static void tb_checksum(unsigned char *h) {
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

/* Append a ustar header; size_field NULL: octal of size. Returns its offset. */
static size_t tb_header(tb *b, const char *name, uint64_t size, char type, const unsigned char *size_field) {
    tb_grow(b, 512);
    unsigned char *h = b->p + b->len;
    memset(h, 0, 512);
    memcpy(h, name, strlen(name) < 100 ? strlen(name) : 100);
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 108, "0000000", 8);
    memcpy(h + 116, "0000000", 8);
    if (size_field) memcpy(h + 124, size_field, 12);
    else snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    memcpy(h + 136, "14430377400", 12);
    h[156] = (unsigned char)type;
    memcpy(h + 257, "ustar\0" "00", 8);
    tb_checksum(h);
    b->len += 512;
    return b->len - 512;
}

static void tb_data(tb *b, const void *d, size_t n) {
    size_t pad = (512 - n % 512) % 512;
    tb_grow(b, n + pad);
    memcpy(b->p + b->len, d, n);
    memset(b->p + b->len + n, 0, pad);
    b->len += n + pad;
}

static void tb_file(tb *b, const char *name, const char *data) {
    tb_header(b, name, strlen(data), '0', NULL);
    tb_data(b, data, strlen(data));
}

static void tb_end(tb *b) {
    tb_grow(b, 1024);
    memset(b->p + b->len, 0, 1024);
    b->len += 1024;
}

static void test_bad_samples(void **state) {
    (void)state;
    tmpf t = {0};
    tb b = {0};
    tb_file(&b, "s/00.txt", "good");
    tb_file(&b, "s/01.txt", "ab\xc3\x28"); /* 2 */
    tb_header(&b, "s/02.txt", 3, '0', NULL);
    tb_data(&b, "a\0b", 3);                /* 3 */
    tb_file(&b, "s/03.txt", "");           /* 4 */
    tb_file(&b, "s/04.jpg", "\xff\xd8");   /* 5 */
    tb_file(&b, "s/05.json", "{\"text\": ");  /* 6 */
    tb_file(&b, "s/06.json", "[1]");       /* 7 */
    tb_file(&b, "s/07.json", "{\"text\": \"a\\u0000b\"}"); /* 8 */
    tb_file(&b, "s/08.txt", "one");
    tb_file(&b, "s/08.TXT", "two");        /* 9: two .txt (extensions compare case-insensitively) */
    tb_file(&b, "s/09.json", "{\"text\": \"x\"} y"); /* 10 */
    tb_file(&b, "s/10.txt", "\xEF\xBB\xBFwith bom"); /* a byte order mark is dropped */
    tb_file(&b, "s/11.txt", "last");
    tb_end(&b);
    write_file(&t, "bad.tar", b.p, b.len);
    static const char *msg[] = {
        "bad.tar:2: sample 's/01': member 's/01.txt': invalid UTF-8 at byte offset 2 (byte 0xC3",
        "bad.tar:3: sample 's/02': member 's/02.txt': NUL byte at byte offset 1",
        "bad.tar:4: sample 's/03': member 's/03.txt' is empty",
        "bad.tar:5: sample 's/04': no .txt or .json member",
        "bad.tar:6: sample 's/05': member 's/05.json': not valid JSON",
        "bad.tar:7: sample 's/06': member 's/06.json': not a JSON object (an array)",
        "bad.tar:8: sample 's/07': member 's/07.json': a string holds the escape \\u0000",
        "bad.tar:9: sample 's/08': 2 members with the extension 'txt'",
        "bad.tar:10: sample 's/09': member 's/09.json': not valid JSON (text after the end of the value)",
    };
    msgs ms = {0};
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    o.skip_bad_records = 1;
    o.on_skip = on_skip;
    o.on_skip_user = &ms;
    char got[1024];
    lf_status st;
    assert_int_equal(read_all(t.path, &o, got, sizeof got, &st), 3);
    LF_ASSERT_OK(st);
    assert_string_equal(got, "good|with bom|last");
    assert_int_equal(ms.n, 9);
    for (int i = 0; i < 9; i++)
        if (!strstr(ms.m[i], msg[i])) fail_msg("skip %d: '%s' lacks '%s'", i, ms.m[i], msg[i]);
    /* without skip: the first one stops the reader */
    o.skip_bad_records = 0;
    assert_int_equal(read_all(t.path, &o, got, sizeof got, &st), 1);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS(msg[0]);
    /* fine-tuning: a missing response, a non-string prompt, an empty response */
    b.len = 0;
    tb_file(&b, "f/0.json", "{\"prompt\": \"p\"}");
    tb_file(&b, "f/1.json", "{\"prompt\": 3, \"response\": \"r\"}");
    tb_file(&b, "f/2.json", "{\"input_text\": \"p\", \"target_text\": \"\"}");
    tb_file(&b, "f/3.json", "{\"input_text\": \"p\", \"target_text\": \"ok\"}");
    tb_file(&b, "f/4.json", "{\"q\": \"p\"}");
    tb_end(&b);
    write_file(&t, "sft.tar", b.p, b.len);
    static const char *smsg[] = {
        "sft.tar:1: sample 'f/0': member 'f/0.json': field 'response' is missing",
        "sft.tar:2: sample 'f/1': member 'f/1.json': field 'prompt' is a number, expected a string",
        "sft.tar:3: sample 'f/2': member 'f/2.json': field 'target_text' is empty",
        "sft.tar:5: sample 'f/4': member 'f/4.json': no fine-tuning fields",
    };
    o = opts_mode(LF_RECORD_SFT);
    o.skip_bad_records = 1;
    o.on_skip = on_skip;
    o.on_skip_user = &ms;
    ms.n = 0;
    assert_int_equal(read_all(t.path, &o, got, sizeof got, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(got, "p>ok");
    assert_int_equal(ms.n, 4);
    for (int i = 0; i < 4; i++)
        if (!strstr(ms.m[i], smsg[i])) fail_msg("skip %d: '%s' lacks '%s'", i, ms.m[i], smsg[i]);
    free(b.p);
    tmp_free(&t);
}

static void test_tar_features(void **state) {
    (void)state;
    tmpf t = {0};
    tb b = {0};
    char got[1024];
    lf_status st;
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);

    /* base-256 size; links and devices carry no data whatever their size says;
     * an old-style directory ('\0' with a trailing slash); 'g' and 'K'
     * skipped with their data; interleaved keys make separate samples */
    unsigned char b256[12] = {0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5};
    tb_header(&b, "k/a.txt", 5, '0', b256);
    tb_data(&b, "b256!", 5);
    tb_header(&b, "k/hard.txt", 700, '1', NULL);
    tb_header(&b, "k/sym.txt", 0, '2', NULL);
    tb_header(&b, "k/old/", 0, '\0', NULL);
    tb_header(&b, "k/fifo.txt", 0, '6', NULL);
    tb_header(&b, "pax_global_header", 12, 'g', NULL);
    tb_data(&b, "9 path=x.y\n", 11 + 1);
    tb_header(&b, "././@LongLink", 4, 'K', NULL);
    tb_data(&b, "lnk", 4);
    tb_file(&b, "k/b.txt", "bee");
    tb_file(&b, "k/a.json", "{\"text\": \"a again\"}");
    /* pax "path" and "size" apply to the next member only */
    static const char pax[] = "20 path=k/paxed.txt\n10 size=3\n12 mtime=17\n";
    tb_header(&b, "PaxHeaders/x", sizeof pax - 1, 'x', NULL);
    tb_data(&b, pax, sizeof pax - 1);
    tb_header(&b, "ignored-name", 0, '0', NULL); /* size 0 here: pax says 3 */
    tb_data(&b, "pax", 3);
    tb_header(&b, "././@LongLink", 9, 'L', NULL);
    tb_data(&b, "k/gnu.txt\0junk", 9);
    tb_file(&b, "short-ignored.txt", "gnu");
    tb_file(&b, "k/plain.txt", "plain");
    tb_end(&b);
    write_file(&t, "f.tar", b.p, b.len);
    assert_int_equal(read_all(t.path, &o, got, sizeof got, &st), 6);
    if (st != LF_OK) fail_msg("%s", lf_last_error());
    assert_string_equal(got, "b256!|bee|a again|pax|gnu|plain");

    /* an archive of nothing but its end blocks: no records, no error */
    b.len = 0;
    tb_end(&b);
    write_file(&t, "e.tar", b.p, b.len);
    assert_int_equal(read_all(t.path, &o, got, sizeof got, &st), 0);
    LF_ASSERT_OK(st);

    /* fatal structure errors */
    struct {
        const char *name;
        lf_status st;
        const char *msg;
    } cases[] = {
        {"empty.tar", LF_ERR_FORMAT, "empty.tar: the file is empty (not a tar archive)"},
        {"noend.tar", LF_ERR_FORMAT, "noend.tar: truncated archive: the file ends at offset 1024 without the end-of-archive block"},
        {"text.tar", LF_ERR_CHECKSUM, "text.tar: tar header at offset 0 (member 'hello"},
        {"size.tar", LF_ERR_FORMAT, "size.tar: tar header at offset 1024 (member 'k/bad.txt'): invalid size field"},
        {"neg.tar", LF_ERR_FORMAT, "neg.tar: tar header at offset 0 (member 'k/neg.txt'): invalid size field"},
        {"sparse.tar", LF_ERR_UNSUPPORTED, "sparse.tar: tar header at offset 0 (member 'k/s.txt'): GNU sparse members"},
        {"pax.tar", LF_ERR_FORMAT, "pax.tar: malformed pax header at offset 0"},
        {"paxend.tar", LF_ERR_FORMAT, "paxend.tar: the archive ends at offset 1024 right after an extended header"},
        {"paxsize.tar", LF_ERR_FORMAT, "paxsize.tar: pax header at offset 0: invalid size '12x'"},
        {"huge.tar", LF_ERR_FORMAT, "huge.tar: truncated archive: member 'k/huge.txt' (header at offset 0) is cut off at offset 1024"},
        {"hugejpg.tar", LF_ERR_FORMAT, "hugejpg.tar: truncated archive: member 'k/huge.jpg' (header at offset 0)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        b.len = 0;
        const char *n = cases[i].name;
        if (!strcmp(n, "noend.tar")) {
            tb_file(&b, "k/a.txt", "a");
        } else if (!strcmp(n, "text.tar")) {
            tb_grow(&b, 600);
            memset(b.p, 'x', 600);
            memcpy(b.p, "hello, this is not a tar archive\n", 33);
            b.len = 600;
        } else if (!strcmp(n, "size.tar")) {
            tb_file(&b, "k/ok.txt", "ok");
            tb_header(&b, "k/bad.txt", 0, '0', (const unsigned char *)"0000001x000");
            tb_end(&b);
        } else if (!strcmp(n, "neg.tar")) {
            unsigned char neg[12];
            memset(neg, 0xff, 12);
            tb_header(&b, "k/neg.txt", 0, '0', neg);
            tb_end(&b);
        } else if (!strcmp(n, "sparse.tar")) {
            tb_header(&b, "k/s.txt", 0, 'S', NULL);
            tb_end(&b);
        } else if (!strcmp(n, "pax.tar")) {
            tb_header(&b, "PaxHeaders/x", 12, 'x', NULL);
            tb_data(&b, "99 path=abc\n", 12);
            tb_file(&b, "k/a.txt", "a");
            tb_end(&b);
        } else if (!strcmp(n, "paxsize.tar")) {
            tb_header(&b, "PaxHeaders/x", 12, 'x', NULL);
            tb_data(&b, "12 size=12x\n", 12);
            tb_file(&b, "k/a.txt", "a");
            tb_end(&b);
        } else if (!strcmp(n, "paxend.tar")) {
            tb_header(&b, "PaxHeaders/x", 12, 'x', NULL);
            tb_data(&b, "12 path=abc\n", 12);
            tb_end(&b);
        } else if (!strcmp(n, "huge.tar") || !strcmp(n, "hugejpg.tar")) {
            unsigned char big[12] = {0x80, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0}; /* 2^40 bytes */
            tb_header(&b, n[4] == 'j' ? "k/huge.jpg" : "k/huge.txt", 0, '0', big);
            tb_data(&b, "only this", 9);
        }
        write_file(&t, n, b.p, b.len);
        lf_status want = cases[i].st;
        for (int skip = 0; skip < 2; skip++) {
            o.skip_bad_records = skip; /* structural damage is never skippable */
            assert_int_equal(read_all(t.path, &o, got, sizeof got, &st), 0); /* size.tar: k/ok waits for the next header */
            if (st != want) fail_msg("%s: status %d: %s", n, st, lf_last_error());
            LF_ASSERT_ERR_CONTAINS(cases[i].msg);
        }
        o.skip_bad_records = 0;
    }
    free(b.p);
    tmp_free(&t);
}

/* ---------------------------------------------------------------- damage */
/* Records of data[0, n) written as name: *st and the joined texts. */
static int read_bytes(tmpf *t, const char *name, const unsigned char *data, size_t n, char *got, size_t cap,
                      lf_status *st) {
    write_file(t, name, data, n);
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    return read_all(t->path, &o, got, cap, st);
}

static void test_truncation(void **state) {
    (void)state;
    tmpf t = {0};
    static const char *names[] = {"basic.tar", "names_gnu.tar", "names_pax.tar", "basic.tar.gz", "multi.tar.gz"};
    for (size_t f = 0; f < sizeof names / sizeof *names; f++) {
        char path[1024], want[2048], got[2048];
        snprintf(path, sizeof path, FIX "%s", names[f]);
        size_t len;
        unsigned char *data = load(path, &len);
        int gz = data[0] == 0x1f;
        lf_status st;
        int nwant = read_bytes(&t, gz ? "x.tar.gz" : "x.tar", data, len, want, sizeof want, &st);
        LF_ASSERT_OK(st);
        size_t first_ok = len + 1;
        int tried = 0;
        for (size_t cut = 0; cut < len; cut++) {
            /* every byte of a gzip file; around every block boundary and every 37th byte of a tar */
            size_t r = cut % 512;
            if (!gz && !(r <= 1 || r == 100 || r == 156 || r == 511 || cut % 37 == 0)) continue;
            tried++;
            int n = read_bytes(&t, gz ? "x.tar.gz" : "x.tar", data, cut, got, sizeof got, &st);
            if (st == LF_OK) {
                /* only a plain tar cut after its end-of-archive block reads whole */
                if (gz) fail_msg("%s cut at %zu: read as complete", names[f], cut);
                assert_int_equal(n, nwant);
                assert_string_equal(got, want);
                if (first_ok > len) first_ok = cut;
                continue;
            }
            if (first_ok <= len) fail_msg("%s cut at %zu fails after a cut at %zu succeeded", names[f], cut, first_ok);
            assert_true(st == LF_ERR_FORMAT || st == LF_ERR_CHECKSUM);
            assert_true(strstr(lf_last_error(), "x.tar") != NULL);
            if (!gz && cut > 0) assert_true(strstr(lf_last_error(), "offset") != NULL);
            /* the records read before the error are a prefix of the whole */
            assert_true(n <= nwant);
            assert_memory_equal(got, want, strlen(got));
        }
        assert_true(tried > 100);
        if (!gz) {
            /* it reads whole from just after the first end block on */
            assert_true(first_ok <= len && first_ok % 512 == 0);
            for (size_t i = first_ok - 512; i < first_ok; i++) assert_int_equal(data[i], 0);
        }
        lf_free(data);
    }
    tmp_free(&t);
}

/* Octal field of a header. */
static uint64_t octal(const unsigned char *f, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n && f[i] >= '0' && f[i] <= '7'; i++) v = v * 8 + (uint64_t)(f[i] - '0');
    return v;
}

static void test_flipped_bytes(void **state) {
    (void)state;
    tmpf t = {0};
    static const char *names[] = {"basic.tar", "names_pax.tar", "names_gnu.tar"};
    for (size_t f = 0; f < sizeof names / sizeof *names; f++) {
        char path[1024], want[2048], got[2048];
        snprintf(path, sizeof path, FIX "%s", names[f]);
        size_t len;
        unsigned char *data = load(path, &len);
        lf_status st;
        int nwant = read_bytes(&t, "y.tar", data, len, want, sizeof want, &st);
        LF_ASSERT_OK(st);
        int headers = 0;
        for (size_t off = 0; off + 512 <= len;) {
            unsigned char *h = data + off;
            int zero = 1;
            for (int i = 0; i < 512 && zero; i++) zero = h[i] == 0;
            if (zero) break;
            static const size_t spots[] = {153, 0, 124 + 10, 156, 300};
            for (size_t s = 0; s < sizeof spots / sizeof *spots; s++) {
                h[spots[s]] ^= 0x10;
                int n = read_bytes(&t, "y.tar", data, len, got, sizeof got, &st);
                h[spots[s]] ^= 0x10;
                if (st != LF_ERR_CHECKSUM) fail_msg("%s: header %zu byte %zu: status %d", names[f], off, spots[s], st);
                char needle[64];
                snprintf(needle, sizeof needle, "tar header at offset %zu", off);
                LF_ASSERT_ERR_CONTAINS(needle);
                LF_ASSERT_ERR_CONTAINS("bad checksum");
                assert_true(n <= nwant);
                assert_memory_equal(got, want, strlen(got));
            }
            uint64_t size = octal(h + 124, 12);
            off += 512 + (size + 511) / 512 * 512;
            headers++;
        }
        assert_true(headers >= 2);
        lf_free(data);
    }
    /* gzip: a flipped byte in the deflate data or trailer is an error (the
     * CRC-32 is checked even after the end-of-archive block); the flips
     * that pass (the header's mtime or OS byte) change nothing */
    size_t len;
    unsigned char *data = load(FIX "basic.tar.gz", &len);
    char want[2048], got[2048];
    lf_status st;
    read_bytes(&t, "y.tgz", data, len, want, sizeof want, &st);
    LF_ASSERT_OK(st);
    int errors = 0;
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            data[i] ^= (unsigned char)(1u << bit);
            read_bytes(&t, "y.tgz", data, len, got, sizeof got, &st);
            data[i] ^= (unsigned char)(1u << bit);
            if (st == LF_OK) {
                assert_string_equal(got, want); /* e.g. mtime, OS, FTEXT, deflate padding bits */
            } else {
                errors++;
            }
        }
    }
    assert_true(errors > (int)len);
    lf_free(data);
    tmp_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),      cmocka_unit_test(test_long_names),
        cmocka_unit_test(test_gzip_by_magic), cmocka_unit_test(test_fields_and_modes),
        cmocka_unit_test(test_record_cap),    cmocka_unit_test(test_bad_samples),
        cmocka_unit_test(test_tar_features),  cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_flipped_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
