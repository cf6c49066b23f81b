/* The one UTF-8 module (src/core/utf8.c): strict decoding (overlongs,
 * surrogates, code points above U+10FFFF, truncated and stray bytes), the
 * maximal subparts the U+FFFD policies rely on, the two wordings of the
 * defects, the validators and the encoder; and an exhaustive check of every
 * 1-, 2- and 3-byte sequence and every code point against an oracle built
 * from the definition (a sequence is valid iff it is the encoding of the
 * value its bits spell, and that value is a scalar value). */
#include "test_util.h"
#include "core/utf8.h"

/* ---------------------------------------------------------------- decode, encode, describe (from tests/data/test_char.c) */
static void test_utf8_strict(void **state) {
    (void)state;
    static const struct { const char *bytes; int len; uint32_t cp; } good[] = {
        {"\x00", 1, 0x0},          {"\x7F", 1, 0x7F},         {"\xC2\x80", 2, 0x80},
        {"\xDF\xBF", 2, 0x7FF},    {"\xE0\xA0\x80", 3, 0x800}, {"\xED\x9F\xBF", 3, 0xD7FF},
        {"\xEE\x80\x80", 3, 0xE000}, {"\xEF\xBF\xBF", 3, 0xFFFF}, {"\xF0\x90\x80\x80", 4, 0x10000},
        {"\xF4\x8F\xBF\xBF", 4, 0x10FFFF},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint32_t cp = 0;
        const char *why = NULL;
        assert_int_equal(lf__utf8_decode((const unsigned char *)good[i].bytes, (size_t)good[i].len, &cp, &why),
                         good[i].len);
        assert_int_equal(cp, good[i].cp);
        unsigned char back[4];
        assert_int_equal(lf__utf8_encode(cp, back), good[i].len);
        assert_memory_equal(back, good[i].bytes, (size_t)good[i].len);
    }
    static const struct { const char *bytes; int len; const char *why; } bad[] = {
        {"\x80", 1, "continuation"},          {"\xBF", 1, "continuation"},
        {"\xC0\x80", 2, "overlong"},          {"\xC1\xBF", 2, "overlong"},
        {"\xE0\x80\x80", 3, "overlong"},      {"\xE0\x9F\xBF", 3, "overlong"},
        {"\xF0\x80\x80\x80", 4, "overlong"},  {"\xF0\x8F\xBF\xBF", 4, "overlong"},
        {"\xED\xA0\x80", 3, "surrogate"},     {"\xED\xBF\xBF", 3, "surrogate"},
        {"\xF4\x90\x80\x80", 4, "above U+10FFFF"}, {"\xF5\x80\x80\x80", 4, "never valid"},
        {"\xFF", 1, "never valid"},           {"\xC3(", 2, "incomplete"},
        {"\xE2\x82(", 3, "incomplete"},       {"\xE2\x82", 2, "truncated"},
        {"\xF0\x9F\x98", 3, "truncated"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint32_t cp = 0;
        const char *why = "";
        assert_int_equal(lf__utf8_decode((const unsigned char *)bad[i].bytes, (size_t)bad[i].len, &cp, &why), 0);
        if (!strstr(why, bad[i].why)) fail_msg("case %zu: '%s' lacks '%s'", i, why, bad[i].why);
    }
    char d[48];
    lf__utf8_describe(0xE9, d, sizeof d);
    assert_string_equal(d, "U+00E9 '\xC3\xA9'");
    lf__utf8_describe('\n', d, sizeof d);
    assert_string_equal(d, "U+000A '\\n'");
    lf__utf8_describe(0x01, d, sizeof d);
    assert_string_equal(d, "U+0001");
    lf__utf8_describe(0x1F600, d, sizeof d);
    assert_string_equal(d, "U+1F600 '\xF0\x9F\x98\x80'");
}


/* ---------------------------------------------------------------- maximal subparts */
static void test_utf8_scan_subparts(void **state) {
    (void)state;
    static const struct { const char *bytes; int len, ret; lf__utf8_err err; } cases[] = {
        {"A", 1, 1, LF__UTF8_OK},
        {"\xC3\xA9", 2, 2, LF__UTF8_OK},
        {"\x80", 1, -1, LF__UTF8_CONTINUATION},
        {"\xC0\xAF", 2, -1, LF__UTF8_OVERLONG},           /* C0: the lead alone */
        {"\xE0\x80\x80", 3, -1, LF__UTF8_OVERLONG},       /* E0 80: no prefix of a valid form */
        {"\xF0\x8F\xBF\xBF", 4, -1, LF__UTF8_OVERLONG},
        {"\xED\xA0\x80", 3, -1, LF__UTF8_SURROGATE},
        {"\xF4\x90\x80\x80", 4, -1, LF__UTF8_ABOVE_MAX},
        {"\xF8\x88\x80\x80\x80", 5, -1, LF__UTF8_NEVER},  /* old 5-byte form */
        {"\xE2\x82(", 3, -2, LF__UTF8_MISSING},           /* E2 82 is a prefix: one subpart */
        {"\xF0\x9F\x98" "A", 4, -3, LF__UTF8_MISSING},
        {"\xC3" "A", 2, -1, LF__UTF8_MISSING},
        {"\xE2\x82", 2, -2, LF__UTF8_TRUNCATED},          /* the rest of the input */
        {"\xF0\x9F\x98", 3, -3, LF__UTF8_TRUNCATED},
        {"\xF4", 1, -1, LF__UTF8_TRUNCATED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t cp = 0;
        lf__utf8_err e = LF__UTF8_OK;
        int k = lf__utf8_scan((const unsigned char *)cases[i].bytes, (size_t)cases[i].len, &cp, &e);
        if (k != cases[i].ret || (k < 0 && e != cases[i].err))
            fail_msg("case %zu: returned %d (err %d), want %d (err %d)", i, k, (int)e, cases[i].ret, (int)cases[i].err);
    }
    /* NULL cp and err are allowed */
    assert_int_equal(lf__utf8_scan((const unsigned char *)"\xE2\x82\xAC", 3, NULL, NULL), 3);
    assert_int_equal(lf__utf8_scan((const unsigned char *)"\xED\xA0\x80", 3, NULL, NULL), -1);
    /* the scan never reads past n: a valid lead with n == 1 is truncated, not read on */
    assert_int_equal(lf__utf8_scan((const unsigned char *)"\xE2\x82\xAC", 1, NULL, NULL), -1);
}

/* ---------------------------------------------------------------- the two wordings */
static void test_utf8_why(void **state) {
    (void)state;
    assert_string_equal(lf__utf8_why(LF__UTF8_TRUNCATED), "truncated sequence at end of input");
    assert_string_equal(lf__utf8_why(LF__UTF8_MISSING), "incomplete sequence (a continuation byte is missing)");
    assert_string_equal(lf__utf8_why_short(LF__UTF8_TRUNCATED), "truncated sequence");
    assert_string_equal(lf__utf8_why_short(LF__UTF8_MISSING), "invalid continuation byte");
    assert_string_equal(lf__utf8_why_short(LF__UTF8_SURROGATE), "surrogate code point");
    assert_string_equal(lf__utf8_why(LF__UTF8_CONTINUATION), "unexpected continuation byte");
    size_t off = 99;
    assert_int_equal(lf_utf8_validate("ab\xE2\x82", 4, "f.txt", &off), LF_ERR_FORMAT);
    assert_int_equal(off, 2);
    assert_string_equal(lf_last_error(), "f.txt: invalid UTF-8 at byte 2 (truncated sequence)");
    assert_int_equal(lf_utf8_validate("\xC3\xA9\xF4\x90\x80\x80", 6, NULL, &off), LF_ERR_FORMAT);
    assert_string_equal(lf_last_error(), "text: invalid UTF-8 at byte 2 (code point above U+10FFFF)");
    LF_ASSERT_OK(lf_utf8_validate("plain ASCII, then \xE2\x82\xAC", 21, "t", NULL));
}

/* ---------------------------------------------------------------- validators */
static void test_utf8_validators(void **state) {
    (void)state;
    /* long ASCII runs go eight bytes at a time: a defect at every offset is still found */
    unsigned char buf[40];
    for (size_t at = 0; at < 32; at++) {
        memset(buf, 'x', sizeof buf);
        buf[at] = 0xED, buf[at + 1] = 0xA0, buf[at + 2] = 0x80; /* a surrogate */
        assert_int_equal(lf__utf8_valid_prefix(buf, sizeof buf), at);
        const char *why = NULL;
        assert_int_equal(lf__utf8_check(buf, sizeof buf, &why), at);
        assert_string_equal(why, "surrogate code point");
        assert_int_equal(lf__utf8_valid_prefix(buf, at), at);
    }
    const char *why = "untouched";
    assert_int_equal(lf__utf8_check((const unsigned char *)"caf\xC3\xA9", 5, &why), 5);
    assert_string_equal(why, "untouched");
    assert_int_equal(lf__utf8_valid_prefix((const unsigned char *)"caf\xC3", 4), 3);
    assert_int_equal(lf__utf8_valid_prefix((const unsigned char *)"", 0), 0);
    /* the helpers for text known to be valid */
    assert_int_equal(lf__utf8_lead_len('a'), 1);
    assert_int_equal(lf__utf8_lead_len(0xC3), 2);
    assert_int_equal(lf__utf8_lead_len(0xE2), 3);
    assert_int_equal(lf__utf8_lead_len(0xF0), 4);
    assert_true(lf__utf8_is_cont(0x80) && lf__utf8_is_cont(0xBF));
    assert_false(lf__utf8_is_cont(0x7F) || lf__utf8_is_cont(0xC0));
}

/* ---------------------------------------------------------------- exhaustive, against the definition */
/* 1 when s[0, n) is well-formed by the definition: the lead's bit pattern
 * says n, the rest are 10xxxxxx, and the value spelled is a scalar value
 * whose shortest encoding is n bytes. */
static int oracle(const unsigned char *s, int n, uint32_t *cp) {
    static const unsigned char mark[5] = {0, 0x00, 0xC0, 0xE0, 0xF0}, mask[5] = {0, 0x80, 0xE0, 0xF0, 0xF8};
    if ((s[0] & mask[n]) != mark[n]) return 0;
    uint32_t v = s[0] & (unsigned char)~mask[n];
    for (int k = 1; k < n; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[k] & 0x3F);
    }
    int shortest = v < 0x80 ? 1 : v < 0x800 ? 2 : v < 0x10000 ? 3 : 4;
    if (shortest != n || (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF) return 0;
    *cp = v;
    return 1;
}

static void test_utf8_exhaustive(void **state) {
    (void)state;
    for (uint32_t x = 0; x < (1u << 24); x++) {
        unsigned char s[3] = {(unsigned char)(x >> 16), (unsigned char)(x >> 8), (unsigned char)x};
        for (int n = 1; n <= 3; n++) {
            if (n < 3 && (x & ((1u << (8 * (3 - n))) - 1))) continue; /* each shorter sequence once */
            uint32_t want = 0, got = 0;
            int ok = oracle(s, n, &want);
            int k = lf__utf8_scan(s, (size_t)n, &got, NULL);
            /* valid iff the whole sequence is one character (a shorter valid character at s[0] is
             * fine too: then the oracle of that length said so) */
            if (ok && (k != n || got != want)) fail_msg("%02X %02X %02X (n=%d): scan %d, cp %X want %X", s[0], s[1], s[2], n, k, got, want);
            if (!ok && k == n) fail_msg("%02X %02X %02X (n=%d): accepted as U+%04X", s[0], s[1], s[2], n, got);
        }
    }
    /* every code point: encode, then decode back; surrogates and > U+10FFFF do not encode */
    for (uint32_t cp = 0; cp <= 0x110000; cp++) {
        unsigned char u[4];
        int n = lf__utf8_encode(cp, u);
        if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
            if (n != 0) fail_msg("U+%04X encoded", cp);
            continue;
        }
        uint32_t back = 0, want = 0;
        if (n < 1 || lf__utf8_scan(u, (size_t)n, &back, NULL) != n || back != cp || !oracle(u, n, &want))
            fail_msg("U+%04X does not round-trip", cp);
    }
    /* four-byte sequences: every lead and every second byte, the rest fixed */
    for (unsigned a = 0xF0; a <= 0xFF; a++)
        for (unsigned b = 0; b <= 0xFF; b++) {
            unsigned char s[4] = {(unsigned char)a, (unsigned char)b, 0x80, 0xBF};
            uint32_t want = 0, got = 0;
            int ok = oracle(s, 4, &want), k = lf__utf8_scan(s, 4, &got, NULL);
            if (ok != (k == 4) || (ok && got != want)) fail_msg("%02X %02X 80 BF: scan %d, oracle %d", a, b, k, ok);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_strict),     cmocka_unit_test(test_utf8_scan_subparts),
        cmocka_unit_test(test_utf8_why),        cmocka_unit_test(test_utf8_validators),
        cmocka_unit_test(test_utf8_exhaustive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
