/* Robustness of the text layer every metric shares: the strict UTF-8
 * validator (offsets and reasons), and random input — arbitrary bytes and
 * random valid UTF-8 mixing ASCII, whitespace, CJK, combining marks and the
 * characters with special lower-casing — through every text metric with
 * every option. Arbitrary bytes may only give LF_OK or LF_ERR_FORMAT; valid
 * UTF-8 must always give LF_OK. Run under ASan/UBSan this is the fuzz test. */
#include "test_util.h"
#include "llmforge/eval.h"

static void test_validate(void **state) {
    (void)state;
    static const struct {
        const char *s;
        size_t len, off;
        const char *why;
    } bad[] = {
        {"ab\x80", 3, 2, "unexpected continuation byte"},
        {"\xC0\xAF", 2, 0, "overlong encoding"},
        {"x\xE0\x80\xAF", 4, 1, "overlong encoding"},
        {"\xED\xA0\x80", 3, 0, "surrogate code point"},
        {"\xF4\x90\x80\x80", 4, 0, "code point above U+10FFFF"},
        {"abc\xE2\x82", 5, 3, "truncated sequence"},
        {"\xC3(", 2, 0, "invalid continuation byte"},
        {"\xFF", 1, 0, "byte never valid in UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t off = 99;
        assert_int_equal(lf_utf8_validate(bad[i].s, bad[i].len, "f.txt:3", &off), LF_ERR_FORMAT);
        assert_int_equal(off, bad[i].off);
        char want[128];
        snprintf(want, sizeof want, "f.txt:3: invalid UTF-8 at byte %zu (%s)", bad[i].off, bad[i].why);
        assert_string_equal(lf_last_error(), want);
    }
    LF_ASSERT_OK(lf_utf8_validate("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80", 10, NULL, NULL));
    LF_ASSERT_OK(lf_utf8_validate("", 0, NULL, NULL));
}

static uint64_t g_ctr;
static uint32_t rnd(uint32_t n) { return (uint32_t)(lf_rng_u64(42, LF_RNG_TEST, g_ctr++) % n); }

/* Random bytes (valid == 0) or random valid UTF-8 (valid == 1), NUL-terminated. */
static void random_text(char *buf, size_t cap, int valid) {
    static const uint32_t special[] = {' ', '\n', '\t', 0xA0, 0x3000, 0x2028, 0x3A3, 0x130, 0x212A, 0x301, 0x345,
                                       0x4E2D, 0x6587, 0x3042, 0xAC00, 0xFF21, 0xFF10, 0x20000, 0x1F600, '.', ',',
                                       '-', '&', ';', '<', '0', '9', 'A', 'z', 'y', 0xDF, 0x1E9E};
    size_t n = 0, len = rnd((uint32_t)(cap / 4));
    while (n < len) {
        if (!valid) {
            buf[n++] = (char)(1 + rnd(255)); /* no NUL */
            continue;
        }
        uint32_t c;
        switch (rnd(4)) {
        case 0: c = 0x20 + rnd(0x5F); break;
        case 1: c = special[rnd(sizeof special / sizeof special[0])]; break;
        case 2: c = 0x80 + rnd(0x2F80); break;
        default: do c = 1 + rnd(0x10FFFF); while (c >= 0xD800 && c < 0xE000); break;
        }
        if (c < 0x80) buf[n++] = (char)c;
        else if (c < 0x800) {
            buf[n++] = (char)(0xC0 | (c >> 6));
            buf[n++] = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            buf[n++] = (char)(0xE0 | (c >> 12));
            buf[n++] = (char)(0x80 | ((c >> 6) & 0x3F));
            buf[n++] = (char)(0x80 | (c & 0x3F));
        } else {
            buf[n++] = (char)(0xF0 | (c >> 18));
            buf[n++] = (char)(0x80 | ((c >> 12) & 0x3F));
            buf[n++] = (char)(0x80 | ((c >> 6) & 0x3F));
            buf[n++] = (char)(0x80 | (c & 0x3F));
        }
    }
    buf[n] = 0;
}

static void expect(lf_status st, int valid, const char *what) {
    if (st == LF_OK || (!valid && st == LF_ERR_FORMAT)) return;
    fail_msg("%s on %s input: %s: %s", what, valid ? "valid" : "random", lf_status_str(st), lf_last_error());
}

static void test_random_text(void **state) {
    (void)state;
    char a[512], b[512], c[512];
    for (int iter = 0; iter < 1500; iter++) {
        int valid = iter % 3 != 0;
        random_text(a, sizeof a, valid);
        random_text(b, sizeof b, valid);
        random_text(c, sizeof c, 1);
        const char *refs[] = {b, c};
        lf_bleu_config bc = lf_bleu_config_default();
        bc.tokenize = (lf_bleu_tokenize)(iter % 4);
        bc.smooth = (lf_bleu_smooth)((iter / 4) % 4);
        bc.lowercase = iter & 1;
        lf_bleu_score bs;
        expect(lf_bleu_sentence_score(&bc, a, refs, 2, &bs), valid, "bleu");
        char *t = NULL;
        expect(lf_bleu_tokenize_text(&bc, a, &t), valid, "bleu tokenize");
        lf_free(t);
        lf_rouge_config rc = lf_rouge_config_default();
        rc.types = 0x7FF; /* every type */
        rc.use_stemmer = (iter / 2) & 1;
        rc.tokenizer = (lf_rouge_tokenizer)(iter % 3);
        lf_rouge_score rs;
        expect(lf_rouge_score_text(&rc, refs, 2, a, &rs), valid, "rouge");
        double em, f1;
        expect(lf_squad_score(a, refs, 2, &em, &f1), valid, "squad");
        t = NULL;
        expect(lf_squad_normalize(b, &t), valid, "squad normalize");
        lf_free(t);
        lf_confusion *cm;
        LF_ASSERT_OK(lf_confusion_create(&cm));
        expect(lf_confusion_add(cm, a, b), valid, "confusion");
        lf_confusion_free(cm);
        if (valid) {
            for (int k = 0; k < LF_ROUGE_NUM_TYPES; k++) {
                assert_true(rs.type[k].fmeasure >= 0 && rs.type[k].fmeasure <= 1);
                assert_true(rs.type[k].precision >= 0 && rs.type[k].precision <= 1);
            }
            assert_true(bs.score >= 0 && bs.score <= 100);
            assert_true(f1 >= 0 && f1 <= 1);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_random_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
