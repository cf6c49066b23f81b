/* Record readers (src/data/reader_jsonl.c): JSON Lines and JSON arrays with
 * field selection (text, custom fields, auto-detected prompt/response and
 * input_text/target_text pairs), bad records named FILE:LINE with the field,
 * --skip-bad-records counting, invalid UTF-8, the record size cap, empty
 * files, a byte order mark, records crossing the 64 KiB input buffer, and
 * whole-file text documents. */
#include "test_util.h"
#include <sys/stat.h>
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

/* Read every record; returns the count; texts joined with '|' into buf
 * (pretraining) or "prompt>response" (fine-tuning). */
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
        char one[512];
        if (rec.text) snprintf(one, sizeof one, "%s%s", n ? "|" : "", rec.text);
        else snprintf(one, sizeof one, "%s%s>%s", n ? "|" : "", rec.prompt, rec.response);
        strncat(buf, one, cap - strlen(buf) - 1);
        n++;
    }
    lf_reader_close(r);
    *st_out = st;
    return n;
}

static void test_text_field(void **state) {
    (void)state;
    tmpf t = {0};
    write_str(&t, "a.jsonl",
              "{\"text\": \"hello\", \"id\": 1}\n"
              "\n"
              "   \n"
              "{\"id\": 2, \"text\": \"w\\u00e9rld \\\"q\\\" \\n\"}\r\n"
              "{\"text\": \"caf\xc3\xa9 \xf0\x9f\x98\x80\", \"body\": \"other\"}"); /* no final newline */
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, t.path, &o));
    assert_int_equal(lf_reader_format(r), LF_INPUT_JSONL);
    lf_record rec;
    int eof;
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(eof, 0);
    assert_string_equal(rec.text, "hello");
    assert_int_equal(rec.text_len, 5);
    assert_int_equal(rec.line, 1);
    assert_int_equal(rec.index, 0);
    assert_string_equal(rec.text_key, "text");
    assert_null(rec.prompt);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.text, "w\xc3\xa9rld \"q\" \n");
    assert_int_equal(rec.line, 4); /* blank lines are no records but count as lines */
    assert_int_equal(rec.index, 1);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.text, "caf\xc3\xa9 \xf0\x9f\x98\x80");
    assert_int_equal(rec.line, 5);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(eof, 1);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof)); /* eof again */
    assert_int_equal(eof, 1);
    assert_int_equal(lf_reader_skipped(r), 0);
    lf_reader_close(r);

    /* a custom field */
    char buf[1024];
    lf_status st;
    o.text_field = "body";
    write_str(&t, "b.jsonl", "{\"body\": \"x\", \"text\": \"no\"}\n{\"body\": \"y\"}\n");
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 2);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "x|y");
    /* and the same file by the default field: line 2 has none */
    o.text_field = NULL;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 1);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("b.jsonl:2: field 'text' is missing");
    tmp_free(&t);
}

static void test_sft_pairs(void **state) {
    (void)state;
    tmpf t = {0};
    write_str(&t, "p.jsonl",
              "{\"prompt\": \"1+1=\", \"response\": \"2\"}\n"
              "{\"input_text\": \"Q?\", \"target_text\": \"A\", \"prompt_id\": 7}\n"
              "{\"response\": \"r\", \"prompt\": \"\"}\n"); /* an empty prompt is allowed */
    lf_reader_opts o = opts_mode(LF_RECORD_SFT);
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
    assert_string_equal(rec.prompt, "Q?");
    assert_string_equal(rec.response, "A");
    assert_string_equal(rec.prompt_key, "input_text");
    assert_string_equal(rec.response_key, "target_text");
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.prompt, "");
    assert_int_equal(rec.prompt_len, 0);
    assert_string_equal(rec.response, "r");
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(eof, 1);
    lf_reader_close(r);

    char buf[1024];
    lf_status st;
    /* explicit fields */
    write_str(&t, "q.jsonl", "{\"question\": \"q1\", \"answer\": \"a1\", \"prompt\": \"no\", \"response\": \"no\"}\n");
    o.prompt_field = "question";
    o.response_field = "answer";
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "q1>a1");
    /* one of the two is an argument error */
    o.response_field = NULL;
    lf_reader *r2 = NULL;
    assert_int_equal(lf_reader_open(&r2, t.path, &o), LF_ERR_INVALID_ARG);
    assert_null(r2);
    o.prompt_field = NULL;

    /* half a pair, and no pair at all */
    write_str(&t, "h.jsonl", "{\"prompt\": \"x\"}\n");
    read_all(t.path, &o, buf, sizeof buf, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("h.jsonl:1: field 'response' is missing");
    write_str(&t, "n.jsonl", "{\"text\": \"x\"}\n");
    read_all(t.path, &o, buf, sizeof buf, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("n.jsonl:1: no fine-tuning fields");
    LF_ASSERT_ERR_CONTAINS("'input_text' and 'target_text'");
    /* an empty response is a bad record */
    write_str(&t, "e.jsonl", "{\"prompt\": \"x\", \"response\": \"\"}\n");
    read_all(t.path, &o, buf, sizeof buf, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("e.jsonl:1: field 'response' is empty");
    tmp_free(&t);
}

/* Each bad line alone after a good one: the error names file:line and the field. */
static void test_bad_lines(void **state) {
    (void)state;
    static const struct {
        const char *line;
        lf_status st;
        const char *msg;
    } cases[] = {
        {"not json", LF_ERR_FORMAT, "x.jsonl:2: not valid JSON"},
        {"{\"text\": \"a\"", LF_ERR_FORMAT, "x.jsonl:2: not valid JSON"},
        {"{\"text\": \"a\"} {\"text\": \"b\"}", LF_ERR_FORMAT, "x.jsonl:2: not valid JSON (text after the end"},
        {"[\"text\"]", LF_ERR_FORMAT, "x.jsonl:2: not a JSON object (an array)"},
        {"\"text\"", LF_ERR_FORMAT, "x.jsonl:2: not a JSON object (a string)"},
        {"{\"txt\": \"a\"}", LF_ERR_FORMAT, "x.jsonl:2: field 'text' is missing"},
        {"{\"text\": 12}", LF_ERR_FORMAT, "x.jsonl:2: field 'text' is a number, expected a string"},
        {"{\"text\": null}", LF_ERR_FORMAT, "x.jsonl:2: field 'text' is null, expected a string"},
        {"{\"text\": [\"a\"]}", LF_ERR_FORMAT, "x.jsonl:2: field 'text' is an array, expected a string"},
        {"{\"text\": true}", LF_ERR_FORMAT, "x.jsonl:2: field 'text' is a boolean"},
        {"{\"text\": \"\"}", LF_ERR_FORMAT, "x.jsonl:2: field 'text' is empty"},
        {"{\"text\": \"ab\xff\"}", LF_ERR_FORMAT, "x.jsonl:2: field 'text': invalid UTF-8 at byte offset 2"},
        {"{\"text\": \"\xc0\xaf\"}", LF_ERR_FORMAT, "overlong"},
        {"{\"text\": \"\xed\xa0\x80\"}", LF_ERR_FORMAT, "surrogate"},
        {"{\"text\": \"a\\u0000b\"}", LF_ERR_FORMAT, "x.jsonl:2: a string holds the escape \\u0000"},
        {"{\"text\": \"a\\ud800\"}", LF_ERR_FORMAT, "x.jsonl:2: not valid JSON"}, /* lone surrogate escape */
    };
    tmpf t = {0};
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512], buf[256];
        snprintf(body, sizeof body, "{\"text\": \"good\"}\n%s\n{\"text\": \"after\"}\n", cases[i].line);
        write_str(&t, "x.jsonl", body);
        lf_status st;
        int n = read_all(t.path, &o, buf, sizeof buf, &st);
        if (st != cases[i].st || !strstr(lf_last_error(), cases[i].msg))
            fail_msg("case %zu '%s': status %s, message '%s', expected '%s'", i, cases[i].line, lf_status_str(st),
                     lf_last_error(), cases[i].msg);
        assert_int_equal(n, 1);
        assert_string_equal(buf, "good");
    }
    /* "\\u0000" is a backslash and text, not the escape */
    write_str(&t, "x.jsonl", "{\"text\": \"a\\\\u0000b\"}\n");
    char buf[256];
    lf_status st;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "a\\u0000b");
    /* a syntax error on a later line of a multi-line array element names that line */
    write_str(&t, "y.json", "[\n{\"text\": \"a\"},\n{\n\"text\":\n\"b\" \"c\"\n}\n]\n");
    read_all(t.path, &o, buf, sizeof buf, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("y.json:5: not valid JSON");
    tmp_free(&t);
}

typedef struct skips {
    int n;
    char first[512];
} skips;

static void collect_skip(const char *msg, void *user) {
    skips *s = user;
    if (s->n++ == 0) snprintf(s->first, sizeof s->first, "%s", msg);
}

static void test_skip_bad_records(void **state) {
    (void)state;
    tmpf t = {0};
    write_str(&t, "s.jsonl",
              "{\"text\": \"one\"}\n"
              "garbage\n"
              "{\"text\": 5}\n"
              "{\"text\": \"two\"}\n"
              "{\"other\": \"x\"}\n"
              "{\"text\": \"\xfe\"}\n"
              "{\"text\": \"three\"}\n"
              "[]\n");
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    skips sk = {0};
    o.skip_bad_records = 1;
    o.on_skip = collect_skip;
    o.on_skip_user = &sk;
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, t.path, &o));
    const char *want[] = {"one", "two", "three"};
    const uint64_t lines[] = {1, 4, 7}, idx[] = {0, 3, 6};
    for (int i = 0; i < 3; i++) {
        lf_record rec;
        int eof;
        LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
        assert_int_equal(eof, 0);
        assert_string_equal(rec.text, want[i]);
        assert_int_equal(rec.line, lines[i]);
        assert_int_equal(rec.index, idx[i]);
    }
    lf_record rec;
    int eof;
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(eof, 1);
    assert_int_equal(lf_reader_skipped(r), 5);
    assert_int_equal(sk.n, 5);
    assert_true(strstr(sk.first, "s.jsonl:2: not valid JSON") != NULL);
    lf_reader_close(r);

    /* a file of bad records only reads as no records, not an error */
    write_str(&t, "bad.jsonl", "x\ny\n");
    sk.n = 0;
    char buf[64];
    lf_status st;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 0);
    LF_ASSERT_OK(st);
    assert_int_equal(sk.n, 2);
    /* structural damage of an array is never skippable */
    write_str(&t, "u.json", "[{\"text\": \"a\"}, {\"text\": \"b\"");
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 1);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("u.json:1: unexpected end of file inside the array element");
    tmp_free(&t);
}

static void test_json_array(void **state) {
    (void)state;
    tmpf t = {0};
    /* strings holding brackets, commas, quotes and escapes; nested values; elements over several lines */
    write_str(&t, "a.json",
              "\xef\xbb\xbf [\n"
              "  {\"text\": \"a, [b] {c}\", \"meta\": {\"k\": [1, 2, {\"x\": \"]\"}]}},\n"
              "  {\n"
              "    \"text\": \"q\\\"uote\\\\\"\n"
              "  }\n"
              "  ,{\"text\":\"last\"}]\n\n");
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    lf_reader *r = NULL;
    LF_ASSERT_OK(lf_reader_open(&r, t.path, &o));
    assert_int_equal(lf_reader_format(r), LF_INPUT_JSON);
    lf_record rec;
    int eof;
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.text, "a, [b] {c}");
    assert_int_equal(rec.line, 2);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.text, "q\"uote\\");
    assert_int_equal(rec.line, 3);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_string_equal(rec.text, "last");
    assert_int_equal(rec.line, 6);
    LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
    assert_int_equal(eof, 1);
    lf_reader_close(r);

    /* fine-tuning pairs in an array, as fine-tuning sets are often shipped */
    char buf[256];
    lf_status st;
    lf_reader_opts so = opts_mode(LF_RECORD_SFT);
    write_str(&t, "p.json", "[{\"input_text\": \"i\", \"target_text\": \"t\"}, {\"prompt\": \"p\", \"response\": \"r\"}]");
    assert_int_equal(read_all(t.path, &so, buf, sizeof buf, &st), 2);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "i>t|p>r");

    /* a .json file of one object per line is read as JSON Lines */
    write_str(&t, "l.json", "\n{\"text\": \"x\"}\n{\"text\": \"y\"}\n");
    LF_ASSERT_OK(lf_reader_open(&r, t.path, &o));
    assert_int_equal(lf_reader_format(r), LF_INPUT_JSONL);
    lf_reader_close(r);
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 2);
    LF_ASSERT_OK(st);
    /* ... but not when the format is forced */
    o.format = LF_INPUT_JSON;
    read_all(t.path, &o, buf, sizeof buf, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("l.json:2: expected '['");
    o.format = LF_INPUT_AUTO;

    static const struct {
        const char *body, *msg;
        int n;
    } broken[] = {
        {"[]", "e.json:1: the JSON array is empty", 0},
        {"  [ \n ] ", "e.json:2: the JSON array is empty", 0},
        {"[{\"text\": \"a\"},]", "e.json:1: expected an array element, found ']'", 1},
        {"[,{\"text\": \"a\"}]", "e.json:1: expected an array element, found ','", 0},
        {"[{\"text\": \"a\"}] x", "e.json:1: text after the closing ']'", 1},
        {"[{\"text\": \"a\"},\n", "e.json:2: unexpected end of file: the JSON array is not closed", 1},
        {"[{\"text\": \"a\"}\n", "e.json:1: unexpected end of file inside the array element", 0},
        {"[{\"text\": \"a\"}, {\"text\": \"b]", "e.json:1: unexpected end of file inside the array element", 1},
        {"[{\"text\": \"a\"}, 7]", "e.json:1: not a JSON object (a number)", 1},
    };
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        write_str(&t, "e.json", broken[i].body);
        int n = read_all(t.path, &o, buf, sizeof buf, &st);
        if (st == LF_OK || !strstr(lf_last_error(), broken[i].msg) || n != broken[i].n)
            fail_msg("case %zu: %d records, status %s, message '%s', expected '%s'", i, n, lf_status_str(st),
                     lf_last_error(), broken[i].msg);
    }
    /* a bad element is skippable */
    o.skip_bad_records = 1;
    write_str(&t, "k.json", "[{\"text\": 1}, {\"text\": \"ok\"}, {\"text\": \"x\" \"y\"}, {\"txt\": \"\"}]");
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "ok");
    tmp_free(&t);
}

static void test_utf8_and_text(void **state) {
    (void)state;
    tmpf t = {0};
    char buf[256];
    lf_status st;
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    /* a text file is one document, byte order mark removed */
    write_str(&t, "doc.txt", "\xef\xbb\xbfline one\nline two\n");
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "line one\nline two\n");
    /* invalid UTF-8 in a text file names the line and the byte offset */
    write_str(&t, "bad.txt", "ok\nok\nbad \xe2\x82 here\n");
    read_all(t.path, &o, buf, sizeof buf, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("bad.txt:3: invalid UTF-8 at byte offset 10");
    /* ... and is skippable */
    o.skip_bad_records = 1;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 0);
    LF_ASSERT_OK(st);
    o.skip_bad_records = 0;
    /* a NUL byte is not text */
    write_file(&t, "nul.txt", "a\0b", 3);
    read_all(t.path, &o, buf, sizeof buf, &st);
    assert_int_equal(st, LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("nul.txt:1: NUL byte at byte offset 1");
    /* fine-tuning needs records */
    lf_reader_opts so = opts_mode(LF_RECORD_SFT);
    lf_reader *r = NULL;
    write_str(&t, "doc.txt", "x");
    assert_int_equal(lf_reader_open(&r, t.path, &so), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("not a text file");
    /* a name that tells no format needs a format */
    write_str(&t, "data.dat", "a,b\n");
    assert_int_equal(lf_reader_open(&r, t.path, &o), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("data.dat: cannot tell the format");
    o.format = LF_INPUT_TEXT;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "a,b\n");
    /* forced jsonl on a .txt name */
    o.format = LF_INPUT_JSONL;
    write_str(&t, "j.txt", "{\"text\": \"z\"}\n");
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 1);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "z");
    /* a missing file, a directory */
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/none.jsonl", t.dir);
    assert_int_equal(lf_reader_open(&r, missing, &o), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("none.jsonl: cannot open");
    assert_int_equal(lf_reader_open(&r, t.dir, &o), LF_ERR_INVALID_ARG);
    assert_null(r);
    /* a FIFO is refused without blocking, and so is a device */
    char fifo[1100];
    snprintf(fifo, sizeof fifo, "%s/fifo.jsonl", t.dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(lf_reader_open(&r, fifo, &o), LF_ERR_IO);
    LF_ASSERT_ERR_CONTAINS("not a regular file");
    assert_int_equal(lf_reader_open(&r, "/dev/zero", &o), LF_ERR_IO);
    assert_null(r);
    tmp_free(&t);
}

static void test_empty_files(void **state) {
    (void)state;
    static const struct {
        const char *name, *body, *msg;
    } cases[] = {
        {"e.jsonl", "", "e.jsonl: the file is empty"},
        {"e.jsonl", "\n\n  \n", "e.jsonl: the file is empty"},
        {"e.jsonl", "\xef\xbb\xbf", "e.jsonl: the file is empty"},
        {"e.json", "", "e.json: the file is empty"},
        {"e.json", " \n ", "e.json: the file is empty"},
        {"e.txt", "", "e.txt: the file is empty"},
        {"e.txt", "\xef\xbb\xbf", "e.txt: the file is empty"},
    };
    tmpf t = {0};
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    o.skip_bad_records = 1; /* an empty file is an error even so */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_str(&t, cases[i].name, cases[i].body);
        char buf[64];
        lf_status st;
        int n = read_all(t.path, &o, buf, sizeof buf, &st);
        if (st != LF_ERR_FORMAT || n != 0 || !strstr(lf_last_error(), cases[i].msg))
            fail_msg("case %zu: status %s, message '%s'", i, lf_status_str(st), lf_last_error());
    }
    tmp_free(&t);
}

/* The record cap: a longer line or element is a bad record (LF_ERR_RANGE),
 * consumed without being stored, so reading can go on past it. */
static void test_record_cap(void **state) {
    (void)state;
    tmpf t = {0};
    size_t big = 5000;
    char *body = malloc(big + 256);
    assert_non_null(body);
    int k = snprintf(body, 256, "{\"text\": \"a\"}\n{\"text\": \"");
    memset(body + k, 'x', big);
    k += (int)big;
    k += snprintf(body + k, 256, "\"}\n{\"text\": \"b\"}\n");
    write_file(&t, "big.jsonl", body, (size_t)k);
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    o.max_record_bytes = 1000;
    char buf[64];
    lf_status st;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 1);
    assert_int_equal(st, LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("big.jsonl:2: line is longer than the limit of 1000 bytes");
    o.skip_bad_records = 1;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 2);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "a|b");
    /* the default cap reads it */
    o.max_record_bytes = 0;
    o.skip_bad_records = 0;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 3);
    LF_ASSERT_OK(st);

    /* the same in an array */
    k = snprintf(body, 256, "[{\"text\": \"a\"},\n{\"text\": \"");
    memset(body + k, 'y', big);
    k += (int)big;
    k += snprintf(body + k, 256, "\"},\n{\"text\": \"b\"}]");
    write_file(&t, "big.json", body, (size_t)k);
    o.max_record_bytes = 1000;
    read_all(t.path, &o, buf, sizeof buf, &st);
    assert_int_equal(st, LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("big.json:2: array element is longer than the limit of 1000 bytes");
    o.skip_bad_records = 1;
    assert_int_equal(read_all(t.path, &o, buf, sizeof buf, &st), 2);
    LF_ASSERT_OK(st);
    assert_string_equal(buf, "a|b");
    free(body);
    tmp_free(&t);
}

/* Records and lines that straddle the 64 KiB input buffer, in both formats. */
static void test_buffer_boundaries(void **state) {
    (void)state;
    tmpf t = {0};
    const int n = 3000;
    size_t cap = (size_t)n * 200 + 300000;
    char *jl = malloc(cap), *ja = malloc(cap);
    assert_non_null(jl);
    assert_non_null(ja);
    size_t a = 0, b = 0;
    b += (size_t)snprintf(ja + b, cap - b, "[");
    for (int i = 0; i < n; i++) {
        int len = 1 + (int)(lf_rng_u64(3, LF_RNG_TEST, (uint64_t)i) % 150);
        if (i == 1234) len = 200000; /* one record larger than the input buffer */
        a += (size_t)snprintf(jl + a, cap - a, "{\"n\": %d, \"text\": \"", i);
        b += (size_t)snprintf(ja + b, cap - b, "%s\n {\"text\": \"", i ? "," : "");
        for (int c = 0; c < len; c++) jl[a++] = ja[b++] = (char)('a' + (i + c) % 26);
        a += (size_t)snprintf(jl + a, cap - a, "\"}\n");
        b += (size_t)snprintf(ja + b, cap - b, "\", \"n\": %d}", i);
    }
    b += (size_t)snprintf(ja + b, cap - b, "\n]\n");
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    for (int f = 0; f < 2; f++) {
        write_file(&t, f ? "b.json" : "b.jsonl", f ? ja : jl, f ? b : a);
        lf_reader *r = NULL;
        LF_ASSERT_OK(lf_reader_open(&r, t.path, &o));
        for (int i = 0; i < n; i++) {
            lf_record rec;
            int eof;
            LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
            assert_int_equal(eof, 0);
            size_t len = i == 1234 ? 200000 : 1 + (size_t)(lf_rng_u64(3, LF_RNG_TEST, (uint64_t)i) % 150);
            assert_int_equal(rec.text_len, len);
            for (size_t c = 0; c < len; c++)
                if (rec.text[c] != (char)('a' + (i + (int)c) % 26)) fail_msg("record %d byte %zu differs", i, c);
            assert_int_equal(rec.line, f ? (uint64_t)i + 2 : (uint64_t)i + 1);
        }
        lf_record rec;
        int eof;
        LF_ASSERT_OK(lf_reader_next(r, &rec, &eof));
        assert_int_equal(eof, 1);
        assert_int_equal(lf_reader_bytes_read(r), f ? b : a);
        lf_reader_close(r);
    }
    free(jl);
    free(ja);
    tmp_free(&t);
}

static void test_format_names(void **state) {
    (void)state;
    assert_string_equal(lf_input_format_name(LF_INPUT_AUTO), "auto");
    assert_string_equal(lf_input_format_name(LF_INPUT_TEXT), "text");
    assert_string_equal(lf_input_format_name(LF_INPUT_JSONL), "jsonl");
    assert_string_equal(lf_input_format_name(LF_INPUT_JSON), "json");
    assert_null(lf_input_format_name((lf_input_format)42));
    lf_reader *r = NULL;
    lf_reader_opts o = opts_mode(LF_RECORD_PRETRAIN);
    o.format = (lf_input_format)42;
    assert_int_equal(lf_reader_open(&r, "/nonexistent.jsonl", &o), LF_ERR_INVALID_ARG);
    o.format = LF_INPUT_AUTO;
    o.text_field = "";
    assert_int_equal(lf_reader_open(&r, "/nonexistent.jsonl", &o), LF_ERR_INVALID_ARG);
    lf_reader_close(NULL);
    assert_int_equal(lf_reader_skipped(NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_field),     cmocka_unit_test(test_sft_pairs),
        cmocka_unit_test(test_bad_lines),      cmocka_unit_test(test_skip_bad_records),
        cmocka_unit_test(test_json_array),     cmocka_unit_test(test_utf8_and_text),
        cmocka_unit_test(test_empty_files),    cmocka_unit_test(test_record_cap),
        cmocka_unit_test(test_buffer_boundaries), cmocka_unit_test(test_format_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
