/* CSV record source (src/data/reader_csv.c) through lf_reader: RFC 4180
 * quoting (embedded commas, LF and CRLF inside quotes, doubled quotes),
 * empty fields, blank lines, a byte order mark, the header (required,
 * duplicate names, columns chosen by name, fine-tuning pairs), bad rows
 * (wrong field count, stray quotes, text after a closing quote, lone CR,
 * invalid UTF-8, NUL, empty text) with and without skip_bad_records, the
 * unterminated quote at end of file, the record cap, rows crossing the
 * 64 KiB input buffer, and a random round trip through an RFC 4180 writer. */
#include "test_util.h"
#include "llmforge/data.h"

typedef struct tmpf {
    char *dir;
    char path[1024];
} tmpf;

static void write_file(tmpf *t, const char *name, const void *data, size_t len) {
    if (!t->dir) t->dir = lf_test_tmpdir();
    assert_non_null(t->dir);
    snprintf(t->path, sizeof t->path, "%s/%s", t->dir, name);
    LF_ASSERT_OK(lf_file_write_all(t->path, data, len));
}

static void write_str(tmpf *t, const char *name, const char *s) { write_file(t, name, s, strlen(s)); }

static void tmp_free(tmpf *t) {
    if (t->dir) lf_test_rmrf(t->dir);
    free(t->dir);
    t->dir = NULL;
}

static lf_reader_opts opts_mode(lf_record_mode mode) {
    lf_reader_opts o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    return o;
}

/* Read every record: texts joined with '|' (or "prompt>response"), lines
 * joined with ',' into lines (may be NULL). Returns the count. */
static int read_all(const char *path, const lf_reader_opts *o, char *buf, size_t cap, char *lines, lf_status *st_out) {
    lf_reader *r = NULL;
    lf_status st = lf_reader_open(&r, path, o);
    int n = 0;
    buf[0] = 0;
    if (lines) lines[0] = 0;
    while (st == LF_OK) {
        lf_record rec;
        int eof;
        st = lf_reader_next(r, &rec, &eof);
        if (st != LF_OK || eof) break;
        char one[512];
        if (rec.text) {
            assert_int_equal(strlen(rec.text), rec.text_len);
            snprintf(one, sizeof one, "%s%s", n ? "|" : "", rec.text);
        } else {
            snprintf(one, sizeof one, "%s%s>%s", n ? "|" : "", rec.prompt, rec.response);
        }
        strncat(buf, one, cap - strlen(buf) - 1);
        if (lines) sprintf(lines + strlen(lines), "%s%llu", n ? "," : "", (unsigned long long)rec.line);
        assert_int_equal(rec.index, (uint64_t)n + lf_reader_skipped(r));
        n++;
    }
    lf_reader_close(r);
    *st_out = st;
    return n;
}

static void test_rfc4180(void **state) {
    (void)state;
    tmpf t = {0};
    write_str(&t, "a.csv",
              "id,text,extra\r\n"                         /* 1 */
              "1,plain,x\r\n"                             /* 2 */
              "2,\"with, comma\",\r\n"                    /* 3: an empty last field */
              "3,\"two\nlines\",y\n"                      /* 4-5: LF inside quotes */
              "4,\"crlf\r\ninside\",\"\"\r\n"             /* 6-7: CRLF inside quotes, quoted empty */
              "5,\"say \"\"hi\"\"\",z\n"                  /* 8: doubled quotes */
              "\n"                                        /* 9: blank */
              "\r\n"                                      /* 10: blank */
              "6,\"\"\"\",q\n"                            /* 11: a lone quote */
              "7,caf\xc3\xa9 \xf0\x9f\x98\x80,\"a\"\"b,c\nd\"\n" /* 12-13 */
              "8,last,no newline");                      /* 14 */
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, t.path, &o));
    assert_int_equal(lf_reader_format(r), LF_INPUT_CSV);
    lf_record rec;
    int eof;
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(eof, 0);
    assert_string_equal(rec.text, "plain");
    assert_int_equal(rec.text_len, 5);
    assert_int_equal(rec.line, 2);
    assert_int_equal(rec.index, 0);
    assert_string_equal(rec.text_key, "text");
    assert_null(rec.prompt);
    lf_reader_close(r);

    char buf[1024], lines[256];
    lf_status st;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, lines, &st), 8);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "plain|with, comma|two\nlines|crlf\r\ninside|say \"hi\"|\"|caf\xc3\xa9 \xf0\x9f\x98\x80|last");
    assert_string_equal(lines, "2,3,4,6,8,11,12,14");
    /* another column, empty values and embedded quotes/newlines included */
    o.text_field = "extra";
    o.skip_bad_records = 1;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, lines, &st), 6);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "x|y|z|q|a\"b,c\nd|no newline");
    assert_string_equal(lines, "2,4,8,11,12,14");
    tmp_free(&t);
}

static void test_bom_blank_and_header(void **state) {
    (void)state;
    tmpf t = {0};
    char buf[1024], lines[256];
    lf_status st;
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    /* a byte order mark, blank lines before the header */
    write_str(&t, "b.csv", "\xEF\xBB\xBF\n\r\ntext\nA\n\nB\n");
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, lines, &st), 2);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "A|B");
    assert_string_equal(lines, "4,6");
    /* a quoted header name */
    write_str(&t, "q.csv", "\"te,xt\",\"text\"\n1,2\n");
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, NULL, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "2");
    /* a header and no rows: no records, not an error */
    write_str(&t, "h.csv", "text\n");
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, NULL, &st), 0);
    LF_ASSERT_OK(st);
    /* empty files */
    static const char *empties[] = {"", "\xEF\xBB\xBF", "\n\n", "\r\n"};
    for (size_t i = 0; i < sizeof empties / sizeof *empties; i++) {
        write_str(&t, "e.csv", empties[i]);
        lf_reader *r = NULL;
        assert_int_equal(lf_reader_open(&r, t.path, &o), LF_ERR_FORMAT);
        assert_null(r);
        LF_ASSERT_ERR_CONTAINS("e.csv: the file is empty (a CSV file needs a header row)");
    }
    /* duplicate names, a missing column, a broken header, all at open */
    static const struct {
        const char *text;
        const char *msg;
    } cases[] = {
        {"a,text,b,a\n1,2,3,4\n", "d.csv:1: duplicate column name 'a' in the header (columns 1 and 4)"},
        {"\n\ntext,x,text\n", "d.csv:3: duplicate column name 'text' in the header (columns 1 and 3)"},
        {",a,\n", "d.csv:1: duplicate column name '' in the header (columns 1 and 3)"},
        {"a,b\n1,2\n", "d.csv: no column 'text' in the header (columns: 'a', 'b')"},
        {"a,\"text\n", "d.csv:1: unterminated quoted field: the quote opened at line 1, column 3 (field 2)"},
        {"a,te\"xt\n", "d.csv:1: header row: line 1, column 5 (field 2): a quote (\") inside an unquoted field"},
        {"a,t\xffx\n", "d.csv:1: column 2 of the header: invalid UTF-8 at byte offset 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_str(&t, "d.csv", cases[i].text);
        lf_reader *r = NULL;
        assert_int_equal(lf_reader_open(&r, t.path, &o), LF_ERR_FORMAT);
        assert_null(r);
        LF_ASSERT_ERR_CONTAINS(cases[i].msg);
    }
    /* more than 2^20 columns */
    size_t nc = ((size_t)1 << 20) + 8; /* "text" and 2^20 + 4 commas */
    char *wide = malloc(nc + 1);
    assert_non_null(wide);
    memset(wide, ',', nc);
    memcpy(wide, "text", 4);
    wide[nc] = '\n';
    write_file(&t, "w.csv", wide, nc + 1);
    free(wide);
    lf_reader *rw = NULL;
    assert_int_equal(lf_reader_open(&rw, t.path, &o), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("w.csv:1: the header has more than 1048576 columns");
    /* a NUL byte in a header name */
    write_file(&t, "z.csv", "a,t\0x\n", 6);
    lf_reader *r = NULL;
    assert_int_equal(lf_reader_open(&r, t.path, &o), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("z.csv:1: column 2 of the header holds a NUL byte");
    tmp_free(&t);
}

static void test_sft_columns(void **state) {
    (void)state;
    tmpf t = {0};
    char buf[1024];
    lf_status st;
    lf_reader_opts o = opts_mode(LF_RECORD_SFT);
    write_str(&t, "p.csv", "id,response,prompt\n1,\"2\",1+1=\n2,r,\n");
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, t.path, &o));
    lf_record rec;
    int eof;
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.prompt, "1+1=");
    assert_string_equal(rec.response, "2");
    assert_string_equal(rec.prompt_key, "prompt");
    assert_string_equal(rec.response_key, "response");
    assert_null(rec.text);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.prompt, ""); /* an empty prompt is allowed */
    assert_int_equal(rec.prompt_len, 0);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(eof, 1);
    lf_reader_close(r);

    write_str(&t, "i.csv", "input_text,target_text\nQ?,A\n");
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, NULL, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "Q?>A");
    /* named columns; the same column twice is allowed */
    write_str(&t, "n.csv", "question,answer,prompt,response\nq1,a1,no,no\n");
    o.prompt_field = "question";
    o.response_field = "answer";
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, NULL, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "q1>a1");
    o.prompt_field = o.response_field = "answer";
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, NULL, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "a1>a1");
    o.prompt_field = "question";
    o.response_field = "nope";
    read_all(t.path, &o, buf, sizeof buf, NULL, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("n.csv: no column 'nope' in the header");
    o.prompt_field = o.response_field = NULL;
    /* half a pair; no pair */
    write_str(&t, "h.csv", "prompt\nx\n");
    read_all(t.path, &o, buf, sizeof buf, NULL, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("h.csv: no column 'response' in the header (columns: 'prompt')");
    write_str(&t, "x.csv", "text\nx\n");
    read_all(t.path, &o, buf, sizeof buf, NULL, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("x.csv: no fine-tuning columns");
    /* an empty response is a bad record */
    write_str(&t, "e.csv", "prompt,response\nx,\n");
    read_all(t.path, &o, buf, sizeof buf, NULL, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("e.csv:2: column 'response' is empty");
    tmp_free(&t);
}

/* Each bad row alone after a good one; then all of them with skip. */
static void test_bad_rows(void **state) {
    (void)state;
    static const struct {
        const char *row;
        lf_status st;
        const char *msg;
    } cases[] = {
        {"1,2,3\n", LF_ERR_FORMAT, "x.csv:3: row has 3 fields, the header has 2"},
        {"1\n", LF_ERR_FORMAT, "x.csv:3: row has 1 field, the header has 2"},
        {"1,a\"b\n", LF_ERR_FORMAT, "x.csv:3: line 3, column 4 (field 2): a quote (\") inside an unquoted field"},
        {"1,\"ab\"c\n", LF_ERR_FORMAT, "x.csv:3: line 3, column 7 (field 2): text after the closing quote"},
        {"1,\"a\nb\" c\n", LF_ERR_FORMAT, "x.csv:3: line 4, column 3 (field 2): text after the closing quote"},
        {"1,a\rb\n", LF_ERR_FORMAT, "x.csv:3: line 3, column 4 (field 2): a carriage return (CR) not followed"},
        {"1,\n", LF_ERR_FORMAT, "x.csv:3: column 'text' is empty"},
        {"1,\"\"\n", LF_ERR_FORMAT, "x.csv:3: column 'text' is empty"},
        {"1,ab\xff\n", LF_ERR_FORMAT, "x.csv:3: column 'text': invalid UTF-8 at byte offset 2 of the value (byte 0xFF"},
        {"1,\xc0\xaf\n", LF_ERR_FORMAT, "overlong"},
        {"1,\"\xed\xa0\x80\"\n", LF_ERR_FORMAT, "surrogate"},
        {"1,\xe2\x82\n", LF_ERR_FORMAT, "x.csv:3: column 'text': invalid UTF-8 at byte offset 0"},
        {"\xff,ok\n", LF_ERR_FORMAT, NULL}, /* only the selected columns are checked */
    };
    tmpf t = {0};
    char buf[1024];
    lf_status st;
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[256];
        snprintf(text, sizeof text, "id,text\n0,good\n%s9,after\n", cases[i].row);
        write_str(&t, "x.csv", text);
        o.skip_bad_records = 0;
        int n = read_all(t.path, &o, buf, sizeof buf, NULL, &st);
        if (!cases[i].msg) {
            LF_ASSERT_OK(st);
            assert_int_equal(n, 3);
            continue;
        }
        assert_int_equal(n, 1);
        if (st != cases[i].st) fail_msg("case %zu: status %d, message %s", i, st, lf_last_error());
        LF_ASSERT_ERR_CONTAINS(cases[i].msg);
        o.skip_bad_records = 1;
        n = read_all(t.path, &o, buf, sizeof buf, NULL, &st);
        LF_ASSERT_OK(st);
        assert_int_equal(n, 2);
        assert_string_equal(buf, "good|after");
    }
    /* a NUL byte in a value */
    write_file(&t, "z.csv", "text\na\0b\nc\n", 11);
    o.skip_bad_records = 0;
    read_all(t.path, &o, buf, sizeof buf, NULL, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("z.csv:2: column 'text': NUL byte at byte offset 1 of the value");

    /* everything at once, skipped and counted, on_skip called in order */
    write_str(&t, "all.csv",
              "id,text\n"
              "1,one\n"
              "2,\"x\",3\n"          /* 3: too many */
              "3,\"multi\nline\"q\n" /* 4-5: garbage after the quote: resumes at the next row */
              "4,two\n"              /* 6 */
              "5,a\"b\"c,d\n"        /* 7 */
              "6,\"three\"\n");      /* 8 */
    o.skip_bad_records = 1;
    char lines[128];
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, lines, &st), 3);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "one|two|three");
    assert_string_equal(lines, "2,6,8");
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, t.path, &o));
    lf_record rec;
    int eof;
    for (;;) {
        LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
        if (eof) break;
    }
    assert_int_equal(lf_reader_skipped(r), 3);
    lf_reader_close(r);
    tmp_free(&t);
}

typedef struct skips {
    int n;
    char first[512];
} skips;

static void on_skip(const char *msg, void *user) {
    skips *s = user;
    if (s->n++ == 0) snprintf(s->first, sizeof s->first, "%s", msg);
}

static void test_on_skip_and_unterminated(void **state) {
    (void)state;
    tmpf t = {0};
    char buf[1024];
    lf_status st;
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    skips sk = {0};
    o.skip_bad_records = 1;
    o.on_skip = on_skip;
    o.on_skip_user = &sk;
    write_str(&t, "s.csv", "text,b\nx,1\ny\nz,2\n");
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, NULL, &st), 2);
    LF_ASSERT_OK(st);
    assert_int_equal(sk.n, 1);
    assert_true(strstr(sk.first, "s.csv:3: row has 1 field, the header has 2") != NULL);

    /* an unterminated quote is fatal even with skip: no row boundary is left */
    write_str(&t, "u.csv", "text\nok\n\"open\nand,on\nand on");
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, NULL, &st), 1);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("u.csv:3: unterminated quoted field: the quote opened at line 3, column 1 (field 1) is not "
                           "closed before the end of the file");
    /* the reader stays stopped */
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, t.path, &o));
    lf_record rec;
    int eof;
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(lf_reader_next(r, &rec, &eof), LF_ERR_FORMAT);
    assert_int_not_equal(lf_reader_next(r, &rec, &eof), LF_OK);
    lf_reader_close(r);
    tmp_free(&t);
}

static void test_record_cap(void **state) {
    (void)state;
    tmpf t = {0};
    char buf[1024], lines[128];
    lf_status st;
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    o.max_record_bytes = 16;
    write_str(&t, "c.csv",
              "text,n\n"
              "short,1\n"                                      /* 2 */
              "\"this one is much too long\",2\n"              /* 3 */
              "\"long\nand\nquoted, \"\"with\"\" lines\",3\n"  /* 4-6: over the cap, skipped whole */
              "exactly 14 b,4\n"                               /* 7: 14 bytes: within */
              "tail,5\n");                                     /* 8 */
    read_all(t.path, &o, buf, sizeof buf, NULL, &st);
    assert_int_equal(st, LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("c.csv:3: row is longer than the limit of 16 bytes for one record");
    o.skip_bad_records = 1;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, lines, &st), 3);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "short|exactly 14 b|tail");
    assert_string_equal(lines, "2,7,8");
    /* the header over the cap is an error at open */
    write_str(&t, "h.csv", "text,a_very_long_column_name\n");
    lf_reader *r = NULL;
    assert_int_equal(lf_reader_open(&r, t.path, &o), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("h.csv:1: the header row is longer than the limit of 16 bytes");
    tmp_free(&t);
}

/* Fields far larger than the 64 KiB input buffer, quoted and not. */
static void test_buffer_boundaries(void **state) {
    (void)state;
    tmpf t = {0};
    const size_t big = 200000;
    size_t cap = 3 * big + 1000;
    char *data = malloc(cap);
    assert_non_null(data);
    size_t n = (size_t)sprintf(data, "a,text\n1,\"");
    for (size_t i = 0; i < big; i++) data[n++] = (char)(i % 50 == 49 ? '\n' : i % 7 == 0 ? '"' : 'a' + (char)(i % 26));
    /* double every quote inside the quoted field */
    char *q = malloc(cap);
    assert_non_null(q);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        q[m++] = data[i];
        if (i >= 10 && data[i] == '"') q[m++] = '"';
    }
    m += (size_t)sprintf(q + m, "\"\n2,");
    for (size_t i = 0; i < big; i++) q[m++] = 'z';
    m += (size_t)sprintf(q + m, "\r\n3,end\n");
    write_file(&t, "big.csv", q, m);
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, t.path, &o));
    lf_record rec;
    int eof;
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(rec.text_len, big);
    assert_memory_equal(rec.text, data + 10, big);
    assert_int_equal(rec.line, 2);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(rec.text_len, big);
    assert_int_equal(rec.text[big - 1], 'z');
    assert_int_equal(rec.line, 2 + big / 50 + 1);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.text, "end");
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(eof, 1);
    lf_reader_close(r);
    free(data);
    free(q);
    tmp_free(&t);
}

/* Random tables written by an RFC 4180 writer (quote when needed, double
 * quotes, LF or CRLF line ends) read back field for field. */
static void test_random_round_trip(void **state) {
    (void)state;
    tmpf t = {0};
    static const char *alphabet[] = {"a", "b", " ", ",", "\"", "\n", "\r\n", "\xc3\xa9", "\xf0\x9f\x98\x80", "x"};
    enum { ROWS = 60, COLS = 3 };
    for (int trial = 0; trial < 40; trial++) {
        char *csv = malloc(1 << 16);
        static char want[ROWS][COLS][128];
        size_t n = 0;
        int crlf = trial & 1;
        n += (size_t)sprintf(csv + n, "c0,text,c2%s", crlf ? "\r\n" : "\n");
        for (int r = 0; r < ROWS; r++) {
            for (int c = 0; c < COLS; c++) {
                uint64_t h = lf_rng_u64(trial, LF_RNG_TEST, (uint64_t)(r * COLS + c));
                int len = 1 + (int)(h % 9);
                char *w = want[r][c];
                w[0] = 0;
                for (int k = 0; k < len; k++) strcat(w, alphabet[(h >> (8 + 3 * k)) % 10]);
                int quote = strpbrk(w, ",\"\r\n") != NULL || (h >> 60) == 0;
                if (c) csv[n++] = ',';
                if (quote) csv[n++] = '"';
                for (const char *p = w; *p; p++) {
                    if (*p == '"') csv[n++] = '"';
                    csv[n++] = *p;
                }
                if (quote) csv[n++] = '"';
            }
            n += (size_t)sprintf(csv + n, "%s", crlf ? "\r\n" : "\n");
        }
        write_file(&t, "r.csv", csv, n);
        lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
        lf_reader *rd = NULL;
        LF_ASSERT_OK(lf_reader_open(&rd, t.path, &o));
        for (int r = 0; r < ROWS; r++) {
            lf_record rec;
            int eof;
            LF_ASSERT_OK(lf_reader_next(rd, &rec, &eof));
            assert_int_equal(eof, 0);
            assert_string_equal(rec.text, want[r][1]);
        }
        lf_record rec;
        int eof;
        LF_ASSERT_OK(lf_reader_next(rd, &rec, &eof));
        assert_int_equal(eof, 1);
        lf_reader_close(rd);
        /* and the fine-tuning view of the same file */
        o = opts_mode(LF_RECORD_SFT);
        o.prompt_field = "c0";
        o.response_field = "c2";
        LF_ASSERT_OK(lf_reader_open(&rd, t.path, &o));
        for (int r = 0; r < ROWS; r++) {
            LF_ASSERT_OK(lf_reader_next(rd, &rec, &eof));
            assert_string_equal(rec.prompt, want[r][0]);
            assert_string_equal(rec.response, want[r][2]);
        }
        lf_reader_close(rd);
        free(csv);
    }
    tmp_free(&t);
}

static void test_format_names(void **state) {
    (void)state;
    tmpf t = {0};
    write_str(&t, "data.CSV", "text\nx\n");
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, t.path, &o));
    assert_int_equal(lf_reader_format(r), LF_INPUT_CSV);
    lf_reader_close(r);
    /* --format csv on any name */
    write_str(&t, "data.tsv.txt", "text\ny\n");
    o.format = LF_INPUT_CSV;
    char buf[64];
    lf_status st;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, NULL, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "y");
    assert_string_equal(lf_input_format_name(LF_INPUT_CSV), "csv");
    /* a missing file */
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/none.csv", t.dir);
    assert_int_equal(lf_reader_open(&r, missing, &o), LF_ERR_NOT_FOUND);
    assert_null(r);
    tmp_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc4180),          cmocka_unit_test(test_bom_blank_and_header),
        cmocka_unit_test(test_sft_columns),      cmocka_unit_test(test_bad_rows),
        cmocka_unit_test(test_on_skip_and_unterminated), cmocka_unit_test(test_record_cap),
        cmocka_unit_test(test_buffer_boundaries), cmocka_unit_test(test_random_round_trip),
        cmocka_unit_test(test_format_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
