/*
 * The shared text buffer (src/core/strbuf.c), which replaced per-file
 * copies that cut a formatted piece at a fixed stack buffer (512 bytes in
 * the server's /metrics page, 128 in the safetensors header writer).
 * Checked: a printf piece far longer than any internal staging buffer
 * arrives whole; put/puts/printf interleave in order and p stays
 * NUL-terminated; the byte limit fails the buffer and every later append is
 * ignored (the content before the failure stays, `failed` stays set); the
 * JSON and HTML escapes; lf__sb_free leaves a zeroed buffer.
 */
#include <string.h>
#include "test_util.h"
#include "core/strbuf.h"

static void test_long_printf(void **state) {
    (void)state;
    char big[20001];
    for (int i = 0; i < 20000; i++) big[i] = (char)('a' + i % 26);
    big[20000] = '\0';
    lf__sb b = {0};
    lf__sb_puts(&b, "<");
    lf__sb_printf(&b, "%s|%d", big, 42);
    lf__sb_put(&b, ">", 1);
    assert_false(b.failed);
    assert_int_equal(b.len, 1 + 20000 + 3 + 1);
    assert_int_equal(strlen(b.p), b.len);
    assert_int_equal(b.p[0], '<');
    assert_memory_equal(b.p + 1, big, 20000);
    assert_string_equal(b.p + 20001, "|42>");
    lf__sb_free(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
}

static void test_limit(void **state) {
    (void)state;
    lf__sb b = {.limit = 100};
    lf__sb_puts(&b, "0123456789");
    char chunk[200];
    memset(chunk, 'x', sizeof chunk);
    lf__sb_put(&b, chunk, sizeof chunk); /* over the limit: fails, ignored */
    assert_true(b.failed);
    lf__sb_puts(&b, "more");
    assert_int_equal(b.len, 10);
    assert_string_equal(b.p, "0123456789");
    lf__sb_free(&b);
}

static void test_escapes(void **state) {
    (void)state;
    lf__sb b = {0};
    lf__sb_json_str(&b, "a\"b\\c\n\x01");
    assert_string_equal(b.p, "a\\\"b\\\\c\\u000a\\u0001");
    lf__sb_free(&b);
    lf__sb_html(&b, "<a href='x'>&\"</a>");
    assert_string_equal(b.p, "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;");
    lf__sb_free(&b);
    lf__sb_json_num(&b, 0.1);
    lf__sb_puts(&b, ",");
    lf__sb_json_num(&b, 1.0 / 0.0);
    assert_string_equal(b.p, "0.1,null");
    lf__sb_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_printf),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_escapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
