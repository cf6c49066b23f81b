/*
 * Tests of the stop-string matcher (src/serve/stop.c).
 *
 * The oracle is a brute-force reading of the rule on the whole text: find
 * the first end position e (1..|T|) at which some stop string ends; the
 * answer is T[0, e - L) with L the longest stop string ending at e, or all
 * of T when none ends anywhere. The matcher must give exactly that for
 * every way of cutting T into pieces (random cuts, empty pieces, one byte at
 * a time, all at once), and after every push it must hold back exactly the
 * longest tail of the text so far that is a proper prefix of a stop string
 * (so it never releases too early, and never waits longer than it must).
 * Texts and stop strings are drawn from a 3-letter alphabet so that partial
 * and overlapping matches are frequent.
 */
#include "test_util.h"

#include "serve/serve_impl.h"

typedef struct oracle {
    size_t out_len;
    int stopped;
} oracle;

static oracle reference(const char *t, size_t n, const char *const *s, const size_t *l, int k) {
    for (size_t e = 1; e <= n; e++) {
        size_t best = 0;
        for (int i = 0; i < k; i++)
            if (l[i] <= e && memcmp(t + e - l[i], s[i], l[i]) == 0 && l[i] > best) best = l[i];
        if (best) return (oracle){e - best, 1};
    }
    return (oracle){n, 0};
}

/* The longest proper prefix of any stop string that is a suffix of t[0, n). */
static size_t reference_hold(const char *t, size_t n, const char *const *s, const size_t *l, int k) {
    size_t best = 0;
    for (int i = 0; i < k; i++)
        for (size_t h = l[i] - 1; h > best; h--)
            if (h <= n && memcmp(t + n - h, s[i], h) == 0) {
                best = h;
                break;
            }
    return best;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

/* Push t in the pieces cut[], checking the hold after each; returns what was released. */
static void run_pieces(lf__stop_matcher *m, const char *t, size_t n, const size_t *cuts, int n_cuts,
                       const char *const *s, const size_t *l, int k, char *got, size_t *got_len, int *stopped) {
    size_t pos = 0, out = 0;
    int st = 0;
    for (int c = 0; c <= n_cuts; c++) {
        size_t end = c < n_cuts ? cuts[c] : n;
        const char *o;
        size_t ol;
        LF_ASSERT_OK(lf__stop_matcher_push(m, t + pos, end - pos, &o, &ol, &st));
        memcpy(got + out, o, ol);
        out += ol;
        pos = end;
        if (st) break;
        /* not stopped: released + held = the text so far, and the hold is the minimum */
        size_t hold = pos - out;
        size_t want = reference_hold(t, pos, s, l, k);
        if (hold != want) fail_msg("after %zu bytes of '%.*s': holding %zu, should hold %zu", pos, (int)n, t, hold, want);
        assert_memory_equal(got, t, out);
    }
    if (!st) {
        const char *o;
        size_t ol;
        LF_ASSERT_OK(lf__stop_matcher_flush(m, &o, &ol));
        memcpy(got + out, o, ol);
        out += ol;
    }
    *got_len = out;
    *stopped = st;
}

static void test_random_against_reference(void **state) {
    (void)state;
    char text[64], got[128], sbuf[4][8];
    const char *s[4];
    size_t l[4], cuts[64];
    long checks = 0;
    for (int trial = 0; trial < 4000; trial++) {
        int k = (int)rnd(5); /* 0..4 stop strings */
        for (int i = 0; i < k; i++) {
            l[i] = 1 + rnd(5);
            for (size_t j = 0; j < l[i]; j++) sbuf[i][j] = (char)('a' + rnd(3));
            s[i] = sbuf[i];
        }
        size_t n = rnd(40);
        for (size_t j = 0; j < n; j++) text[j] = (char)('a' + rnd(3));
        oracle want = reference(text, n, s, l, k);
        lf__stop_matcher *m = NULL;
        LF_ASSERT_OK(lf__stop_matcher_create(s, l, k, &m));
        for (int way = 0; way < 4; way++) {
            int n_cuts = 0;
            if (way == 1) { /* a byte at a time */
                for (size_t j = 1; j < n; j++) cuts[n_cuts++] = j;
            } else if (way >= 2) { /* random cuts, empty pieces allowed */
                size_t p = 0;
                while (p < n && n_cuts < 60) {
                    p += rnd(4);
                    if (p > n) p = n;
                    cuts[n_cuts++] = p;
                }
            }
            size_t got_len;
            int stopped;
            lf__stop_matcher_reset(m);
            run_pieces(m, text, n, cuts, n_cuts, s, l, k, got, &got_len, &stopped);
            if (stopped != want.stopped || got_len != want.out_len || memcmp(got, text, got_len) != 0)
                fail_msg("trial %d way %d text '%.*s': got '%.*s' stopped %d, want %zu bytes stopped %d", trial, way,
                         (int)n, text, (int)got_len, got, stopped, want.out_len, want.stopped);
            checks++;
        }
        lf__stop_matcher_free(m);
    }
    assert_int_equal(checks, 16000);
}

static void push_all(lf__stop_matcher *m, const char *const *pieces, int n, char *got, size_t *len, int *stopped) {
    size_t out = 0;
    *stopped = 0;
    for (int i = 0; i < n && !*stopped; i++) {
        const char *o;
        size_t ol;
        LF_ASSERT_OK(lf__stop_matcher_push(m, pieces[i], strlen(pieces[i]), &o, &ol, stopped));
        memcpy(got + out, o, ol);
        out += ol;
    }
    if (!*stopped) {
        const char *o;
        size_t ol;
        LF_ASSERT_OK(lf__stop_matcher_flush(m, &o, &ol));
        memcpy(got + out, o, ol);
        out += ol;
    }
    got[out] = '\0';
    *len = out;
}

static void test_cases(void **state) {
    (void)state;
    char got[256];
    size_t len;
    int stopped;
    lf__stop_matcher *m;
    /* a stop string split over tokens, then junk that must not appear */
    const char *s1[] = {"<|im_end|>"};
    size_t l1[] = {10};
    LF_ASSERT_OK(lf__stop_matcher_create(s1, l1, 1, &m));
    const char *p1[] = {"Hel", "lo<|im", "_e", "nd|>jun", "k"};
    push_all(m, p1, 5, got, &len, &stopped);
    assert_int_equal(stopped, 1);
    assert_string_equal(got, "Hello");
    /* after the stop nothing more comes out */
    const char *o;
    size_t ol;
    int st;
    LF_ASSERT_OK(lf__stop_matcher_push(m, "more", 4, &o, &ol, &st));
    assert_int_equal(ol, 0);
    assert_int_equal(st, 1);
    LF_ASSERT_OK(lf__stop_matcher_flush(m, &o, &ol));
    assert_int_equal(ol, 0);
    /* a near miss is released in the end */
    lf__stop_matcher_reset(m);
    const char *p2[] = {"a<|im_", "start|>b"};
    push_all(m, p2, 2, got, &len, &stopped);
    assert_int_equal(stopped, 0);
    assert_string_equal(got, "a<|im_start|>b");
    /* what is held back while a match is possible, and released when it is not */
    lf__stop_matcher_reset(m);
    LF_ASSERT_OK(lf__stop_matcher_push(m, "ab<|i", 5, &o, &ol, &st));
    assert_int_equal(ol, 2);
    assert_memory_equal(o, "ab", 2);
    LF_ASSERT_OK(lf__stop_matcher_push(m, "x", 1, &o, &ol, &st));
    assert_int_equal(ol, 4);
    assert_memory_equal(o, "<|ix", 4);
    lf__stop_matcher_free(m);

    /* the first stop string to end wins, cut at the longest one ending there */
    const char *s2[] = {"abcd", "bc"};
    size_t l2[] = {4, 2};
    LF_ASSERT_OK(lf__stop_matcher_create(s2, l2, 2, &m));
    const char *p3[] = {"xabcd"};
    push_all(m, p3, 1, got, &len, &stopped);
    assert_int_equal(stopped, 1);
    assert_string_equal(got, "xa"); /* "bc" ends first */
    lf__stop_matcher_free(m);
    const char *s3[] = {"bc", "abc"};
    size_t l3[] = {2, 3};
    LF_ASSERT_OK(lf__stop_matcher_create(s3, l3, 2, &m));
    const char *p4[] = {"x", "ab", "c", "d"};
    push_all(m, p4, 4, got, &len, &stopped);
    assert_int_equal(stopped, 1);
    assert_string_equal(got, "x"); /* both end at 'c': the longer one is cut */
    lf__stop_matcher_free(m);

    /* self-overlapping stop strings (KMP's failure links) */
    const char *s4[] = {"aab"};
    size_t l4[] = {3};
    LF_ASSERT_OK(lf__stop_matcher_create(s4, l4, 1, &m));
    const char *p5[] = {"a", "a", "a", "a", "b", "z"};
    push_all(m, p5, 6, got, &len, &stopped);
    assert_int_equal(stopped, 1);
    assert_string_equal(got, "aa");
    lf__stop_matcher_free(m);

    /* multi-byte UTF-8: the release never splits a character */
    const char *s5[] = {"\xc3\xa9t\xc3\xa9"}; /* "été" */
    size_t l5[] = {5};
    LF_ASSERT_OK(lf__stop_matcher_create(s5, l5, 1, &m));
    LF_ASSERT_OK(lf__stop_matcher_push(m, "l'\xc3\xa9t", 5, &o, &ol, &st));
    assert_int_equal(ol, 2); /* "l'" out, "ét" held */
    LF_ASSERT_OK(lf__stop_matcher_push(m, "\xc3\xa9!", 3, &o, &ol, &st));
    assert_int_equal(st, 1);
    assert_int_equal(ol, 0);
    lf__stop_matcher_free(m);

    /* no stop strings: everything at once */
    LF_ASSERT_OK(lf__stop_matcher_create(NULL, NULL, 0, &m));
    LF_ASSERT_OK(lf__stop_matcher_push(m, "abc", 3, &o, &ol, &st));
    assert_int_equal(ol, 3);
    assert_int_equal(st, 0);
    LF_ASSERT_OK(lf__stop_matcher_push(m, "", 0, &o, &ol, &st));
    assert_int_equal(ol, 0);
    lf__stop_matcher_free(m);
    lf__stop_matcher_free(NULL);
}

static void test_errors(void **state) {
    (void)state;
    lf__stop_matcher *m = (lf__stop_matcher *)0x1;
    const char *s[] = {"a", ""};
    size_t l[] = {1, 0};
    assert_int_equal(lf__stop_matcher_create(s, l, 2, &m), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("stop string 1 is 0 bytes");
    assert_null(m);
    assert_int_equal(lf__stop_matcher_create(s, l, 65, &m), LF_ERR_RANGE);
    assert_int_equal(lf__stop_matcher_create(s, l, -1, &m), LF_ERR_RANGE);
    assert_int_equal(lf__stop_matcher_create(NULL, l, 1, &m), LF_ERR_INVALID_ARG);
    const char *sn[] = {NULL};
    assert_int_equal(lf__stop_matcher_create(sn, l, 1, &m), LF_ERR_INVALID_ARG);
    assert_int_equal(lf__stop_matcher_create(s, l, 1, NULL), LF_ERR_INVALID_ARG);
    size_t big[] = {65537};
    assert_int_equal(lf__stop_matcher_create(s, big, 1, &m), LF_ERR_RANGE);
    LF_ASSERT_OK(lf__stop_matcher_create(s, l, 1, &m));
    const char *o;
    size_t ol;
    int st;
    assert_int_equal(lf__stop_matcher_push(m, NULL, 3, &o, &ol, &st), LF_ERR_INVALID_ARG);
    assert_int_equal(lf__stop_matcher_push(m, "x", 1, NULL, &ol, &st), LF_ERR_INVALID_ARG);
    assert_int_equal(lf__stop_matcher_flush(NULL, &o, &ol), LF_ERR_INVALID_ARG);
    lf__stop_matcher_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_against_reference),
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
