/*
 * Tests of the response builders (src/serve/response.c) and the error
 * objects (src/serve/request.c): golden JSON strings written by hand from
 * OpenAI's API reference (key order as OpenAI sends it), SSE framing, the
 * U+FFFD substitution (expected bytes from Python's
 * bytes.decode('utf-8', 'replace')), and every builder's output read back
 * by cJSON (it must be valid JSON, numbers reading back exactly).
 */
#include "test_util.h"

#include <cjson/cJSON.h>

#include "serve/serve_impl.h"

static const lf__serve_meta k_meta = {.id = "cmpl-1", .model = "tiny", .created = 1700000000};
static const lf__serve_meta k_chat_meta = {.id = "chatcmpl-9", .model = "tiny", .created = 1700000001};

static void golden(char *got, size_t len, const char *want) {
    if (!got) fail_msg("builder returned NULL: %s", lf_last_error());
    if (strcmp(got, want) != 0) {
        size_t i = 0;
        while (got[i] && got[i] == want[i]) i++;
        fail_msg("differs at byte %zu\n--- got:\n%s\n--- want:\n%s", i, got, want);
    }
    assert_int_equal(len, strlen(want));
    /* valid JSON, no raw newline (one SSE line) */
    assert_null(strchr(got, '\n'));
    cJSON *j = cJSON_ParseWithLength(got, len);
    if (!j) fail_msg("not JSON: %s", got);
    cJSON_Delete(j);
    free(got);
}

static void test_completion_json(void **state) {
    (void)state;
    lf__serve_choice c[2] = {
        {.index = 0, .text = "Hello\n\"w\"", .len = 9, .finish = LF__FINISH_LENGTH},
        {.index = 1, .text = "", .len = 0, .finish = LF__FINISH_STOP},
    };
    lf__serve_usage u = {5, 7};
    size_t len;
    char *s = lf__serve_response_json(LF__SERVE_COMPLETIONS, &k_meta, c, 2, &u, &len);
    golden(s, len,
           "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"tiny\","
           "\"choices\":[{\"text\":\"Hello\\n\\\"w\\\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"length\"},"
           "{\"text\":\"\",\"index\":1,\"logprobs\":null,\"finish_reason\":\"stop\"}],"
           "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,\"total_tokens\":12}}");

    /* logprobs: an echoed first token without one (null), a repeated text in a top dict kept once */
    lf__serve_top top1[] = {{" b", 2, -0.25}, {" c", 2, -1.0 / 3}, {" b", 2, -3}};
    lf__serve_token_lp lp[] = {
        {.token = " a", .len = 2, .logprob = NAN, .text_offset = 0},
        {.token = " b", .len = 2, .logprob = -0.25, .text_offset = 2, .top = top1, .n_top = 3},
        {.token = "\xe4\xbd", .len = 2, .logprob = -2.5e-8, .text_offset = 4, .top = NULL, .n_top = 0},
    };
    lf__serve_choice c1 = {.index = 0, .text = " a b\xe4\xbd\xa0", .len = 7, .finish = LF__FINISH_STOP, .lp = lp,
                           .n_lp = 3};
    s = lf__serve_response_json(LF__SERVE_COMPLETIONS, &k_meta, &c1, 1, &u, &len);
    golden(s, len,
           "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"tiny\","
           "\"choices\":[{\"text\":\" a b\xe4\xbd\xa0\",\"index\":0,\"logprobs\":{\"tokens\":[\" a\",\" b\",\"\xef\xbf\xbd\"],"
           "\"token_logprobs\":[null,-0.25,-2.5e-08],\"top_logprobs\":[null,{\" b\":-0.25,\" c\":-0.3333333333333333},{}],"
           "\"text_offset\":[0,2,4]},\"finish_reason\":\"stop\"}],"
           "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,\"total_tokens\":12}}");
    /* numbers read back as the doubles given */
    s = lf__serve_response_json(LF__SERVE_COMPLETIONS, &k_meta, &c1, 1, &u, &len);
    cJSON *j = cJSON_Parse(s);
    cJSON *tl = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0),
                                                        "logprobs"),
                                    "top_logprobs");
    double third = strtod(strstr(s, "\" c\":") + 5, NULL);
    assert_true(third == -1.0 / 3);
    assert_true(cJSON_IsNull(cJSON_GetArrayItem(tl, 0)));
    cJSON_Delete(j);
    free(s);
}

static void test_chat_json(void **state) {
    (void)state;
    lf__serve_top top[] = {{"H\xc3", 2, -0.5}, {"Hi", 2, -2}};
    lf__serve_token_lp lp[] = {{.token = "H\xc3", .len = 2, .logprob = -0.5, .top = top, .n_top = 2}};
    lf__serve_choice c = {.index = 0, .text = "H\xc3\xa9", .len = 3, .finish = LF__FINISH_STOP, .lp = lp, .n_lp = 1};
    lf__serve_usage u = {9, 12};
    size_t len;
    char *s = lf__serve_response_json(LF__SERVE_CHAT, &k_chat_meta, &c, 1, &u, &len);
    golden(s, len,
           "{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion\",\"created\":1700000001,\"model\":\"tiny\","
           "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"H\xc3\xa9\"},"
           "\"logprobs\":{\"content\":[{\"token\":\"H\xef\xbf\xbd\",\"logprob\":-0.5,\"bytes\":[72,195],"
           "\"top_logprobs\":[{\"token\":\"H\xef\xbf\xbd\",\"logprob\":-0.5,\"bytes\":[72,195]},"
           "{\"token\":\"Hi\",\"logprob\":-2,\"bytes\":[72,105]}]}]},"
           "\"finish_reason\":\"stop\"}],"
           "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}");
    lf__serve_choice c2 = {.index = 1, .text = "ok", .len = 2, .finish = LF__FINISH_LENGTH};
    s = lf__serve_response_json(LF__SERVE_CHAT, &k_chat_meta, &c2, 1, &u, &len);
    golden(s, len,
           "{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion\",\"created\":1700000001,\"model\":\"tiny\","
           "\"choices\":[{\"index\":1,\"message\":{\"role\":\"assistant\",\"content\":\"ok\"},\"logprobs\":null,"
           "\"finish_reason\":\"length\"}],"
           "\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}");
}

static void test_chunks(void **state) {
    (void)state;
    size_t len;
    /* chat: the first chunk carries the role, then content deltas, then an empty delta with the finish */
    lf__serve_choice first = {.index = 0, .text = "", .len = 0, .first = 1};
    char *s = lf__serve_chunk_json(LF__SERVE_CHAT, &k_chat_meta, &first, 1, 0, NULL, &len);
    golden(s, len,
           "{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1700000001,\"model\":\"tiny\","
           "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
           "\"finish_reason\":null}]}");
    lf__serve_choice mid = {.index = 0, .text = "Hel", .len = 3};
    s = lf__serve_chunk_json(LF__SERVE_CHAT, &k_chat_meta, &mid, 1, 1, NULL, &len);
    golden(s, len,
           "{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1700000001,\"model\":\"tiny\","
           "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"logprobs\":null,\"finish_reason\":null}],"
           "\"usage\":null}");
    lf__serve_choice last = {.index = 0, .text = NULL, .len = 0, .finish = LF__FINISH_STOP};
    s = lf__serve_chunk_json(LF__SERVE_CHAT, &k_chat_meta, &last, 1, 1, NULL, &len);
    golden(s, len,
           "{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1700000001,\"model\":\"tiny\","
           "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}");
    /* the usage chunk: no choices */
    lf__serve_usage u = {3, 4};
    s = lf__serve_chunk_json(LF__SERVE_CHAT, &k_chat_meta, NULL, 0, 1, &u, &len);
    golden(s, len,
           "{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1700000001,\"model\":\"tiny\","
           "\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}");
    /* chat chunk with logprobs of its tokens */
    lf__serve_token_lp lp[] = {{.token = "Hel", .len = 3, .logprob = -0.125}};
    lf__serve_choice mlp = {.index = 2, .text = "Hel", .len = 3, .lp = lp, .n_lp = 1};
    s = lf__serve_chunk_json(LF__SERVE_CHAT, &k_chat_meta, &mlp, 1, 0, NULL, &len);
    golden(s, len,
           "{\"id\":\"chatcmpl-9\",\"object\":\"chat.completion.chunk\",\"created\":1700000001,\"model\":\"tiny\","
           "\"choices\":[{\"index\":2,\"delta\":{\"content\":\"Hel\"},\"logprobs\":{\"content\":[{\"token\":\"Hel\","
           "\"logprob\":-0.125,\"bytes\":[72,101,108],\"top_logprobs\":[]}]},\"finish_reason\":null}]}");

    /* completions chunks: text deltas; two choices interleaved in one chunk */
    lf__serve_choice cc[2] = {{.index = 0, .text = " wor", .len = 4}, {.index = 1, .text = "", .finish = LF__FINISH_LENGTH}};
    s = lf__serve_chunk_json(LF__SERVE_COMPLETIONS, &k_meta, cc, 2, 0, NULL, &len);
    golden(s, len,
           "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"tiny\","
           "\"choices\":[{\"text\":\" wor\",\"index\":0,\"logprobs\":null,\"finish_reason\":null},"
           "{\"text\":\"\",\"index\":1,\"logprobs\":null,\"finish_reason\":\"length\"}]}");
    s = lf__serve_chunk_json(LF__SERVE_COMPLETIONS, &k_meta, NULL, 0, 1, &u, &len);
    golden(s, len,
           "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"tiny\","
           "\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}");

    /* bad arguments */
    assert_null(lf__serve_chunk_json(LF__SERVE_CHAT, &k_chat_meta, &mid, 1, 1, &u, &len)); /* usage with choices */
    assert_null(lf__serve_chunk_json(LF__SERVE_CHAT, NULL, &mid, 1, 0, NULL, &len));
    lf__serve_choice broken = {.text = NULL, .len = 3};
    assert_null(lf__serve_response_json(LF__SERVE_CHAT, &k_chat_meta, &broken, 1, &u, &len));
    assert_null(lf__serve_response_json(LF__SERVE_CHAT, &k_chat_meta, &mid, 1, NULL, &len));
    assert_null(lf__serve_response_json((lf__serve_api)9, &k_chat_meta, &mid, 1, &u, &len));
}

static void test_sse(void **state) {
    (void)state;
    size_t len;
    char *e = lf__serve_sse_event("{\"a\":1}", 7, &len);
    assert_non_null(e);
    assert_string_equal(e, "data: {\"a\":1}\n\n");
    assert_int_equal(len, 15);
    free(e);
    assert_string_equal(LF__SERVE_SSE_DONE, "data: [DONE]\n\n");
    /* a line break would end the data line: refused */
    assert_null(lf__serve_sse_event("{\"a\":\n1}", 8, &len));
    assert_null(lf__serve_sse_event("{\"a\":\r1}", 8, &len));
    assert_null(lf__serve_sse_event(NULL, 0, &len));
    /* a chunk whose text is full of line breaks frames as one event */
    lf__serve_choice c = {.index = 0, .text = "a\nb\r\nc\n\n", .len = 8};
    size_t jl;
    char *j = lf__serve_chunk_json(LF__SERVE_COMPLETIONS, &k_meta, &c, 1, 0, NULL, &jl);
    e = lf__serve_sse_event(j, jl, &len);
    assert_non_null(e);
    assert_int_equal(len, jl + 8);
    assert_memory_equal(e, "data: ", 6);
    assert_memory_equal(e + 6, j, jl);
    assert_memory_equal(e + 6 + jl, "\n\n", 2);
    assert_null(memchr(e, '\n', len - 2));
    assert_non_null(strstr(e, "\"text\":\"a\\nb\\r\\nc\\n\\n\""));
    free(j);
    free(e);
}

static void test_strings(void **state) {
    (void)state;
    /* control characters and NUL are escaped; '/' and DEL are not */
    static const char raw[] = "a\0b\x01\b\f\n\r\t\"\\/\x7f\x1f";
    lf__serve_choice c = {.index = 0, .text = raw, .len = sizeof raw - 1};
    size_t len;
    char *s = lf__serve_chunk_json(LF__SERVE_COMPLETIONS, &k_meta, &c, 1, 0, NULL, &len);
    assert_non_null(s);
    assert_non_null(strstr(s, "\"text\":\"a\\u0000b\\u0001\\b\\f\\n\\r\\t\\\"\\\\/\x7f\\u001f\""));
    free(s);
    /* ill-formed UTF-8: one U+FFFD per maximal subpart (Python's 'replace') */
    struct {
        const char *in;
        size_t n;
        const char *out;
    } cases[] = {
        {"\xe2\x82", 2, "\xef\xbf\xbd"},
        {"\xff\xfe", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf0\x9f\x98", 3, "\xef\xbf\xbd"},
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
        {"a\xe2\x82\xac" "b\xe2", 6, "a\xe2\x82\xac" "b\xef\xbf\xbd"},
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xe0\x80\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf0\x9f\x98\x80\x80", 5, "\xf0\x9f\x98\x80\xef\xbf\xbd"},
        {"", 0, ""},
        {"plain", 5, "plain"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t ol = 99;
        char *o = lf__serve_utf8_sanitize(cases[i].in, cases[i].n, &ol);
        assert_non_null(o);
        if (ol != strlen(cases[i].out) || memcmp(o, cases[i].out, ol) != 0) fail_msg("sanitize case %zu", i);
        free(o);
        /* and the same inside a JSON string */
        lf__serve_choice cx = {.index = 0, .text = cases[i].in, .len = cases[i].n};
        s = lf__serve_chunk_json(LF__SERVE_COMPLETIONS, &k_meta, &cx, 1, 0, NULL, &len);
        char want[64];
        snprintf(want, sizeof want, "\"text\":\"%s\"", cases[i].out);
        if (!strstr(s, want)) fail_msg("JSON string case %zu: %s", i, s);
        free(s);
    }
}

static void err_golden(const lf__serve_error *e, const char *want) {
    size_t len = 0;
    char *s = lf__serve_error_json(e, &len);
    golden(s, len, want);
}

static void test_error_json(void **state) {
    (void)state;
    lf__serve_error e;
    size_t len;
    lf__serve_error_unauthorized(&e);
    assert_int_equal(e.status, 401);
    err_golden(&e,
           "{\"error\":{\"message\":\"Incorrect or missing API key: send it as 'Authorization: Bearer <key>'.\","
           "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"invalid_api_key\"}}");
    lf__serve_error_not_found(&e, "POST", "/v1/nope");
    assert_int_equal(e.status, 404);
    err_golden(&e,
           "{\"error\":{\"message\":\"Invalid URL (POST /v1/nope)\",\"type\":\"invalid_request_error\",\"param\":null,"
           "\"code\":null}}");
    lf__serve_error_method(&e, "GET", "/v1/completions");
    assert_int_equal(e.status, 405);
    lf__serve_error_too_large(&e, 1048576);
    assert_int_equal(e.status, 413);
    err_golden(&e,
           "{\"error\":{\"message\":\"The request body is larger than the 1048576-byte limit.\","
           "\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"request_too_large\"}}");
    lf__serve_error_overloaded(&e, 429, 3, NULL);
    assert_int_equal(e.status, 429);
    assert_int_equal(e.retry_after, 3);
    err_golden(&e,
           "{\"error\":{\"message\":\"Too many requests are waiting; retry later.\",\"type\":\"rate_limit_error\","
           "\"param\":null,\"code\":\"rate_limit_exceeded\"}}");
    lf__serve_error_overloaded(&e, 503, 0, "draining");
    assert_int_equal(e.status, 503);
    assert_int_equal(e.retry_after, 1);
    err_golden(&e,
           "{\"error\":{\"message\":\"draining\",\"type\":\"server_error\",\"param\":null,\"code\":\"overloaded\"}}");
    lf__serve_error_internal(&e, "engine failed");
    assert_int_equal(e.status, 500);
    err_golden(&e,
           "{\"error\":{\"message\":\"Internal error: engine failed\",\"type\":\"server_error\",\"param\":null,"
           "\"code\":null}}");
    /* from the parser: the param and a quote in the message */
    lf__serve_limits lim = lf__serve_limits_default();
    lf__serve_request r;
    assert_int_equal(lf__serve_request_parse(LF__SERVE_COMPLETIONS, "{\"prompt\":\"a\",\"n\":0}", 20, &lim, &r, &e),
                     LF_ERR_RANGE);
    err_golden(&e,
           "{\"error\":{\"message\":\"'n' must be an integer in [1, 8], got 0\",\"type\":\"invalid_request_error\","
           "\"param\":\"n\",\"code\":null}}");
    lf__serve_error_set(&e, 400, NULL, "c\"x", "p\"q", "say \"%s\"", "hi");
    err_golden(&e,
           "{\"error\":{\"message\":\"say \\\"hi\\\"\",\"type\":\"invalid_request_error\",\"param\":\"p\\\"q\","
           "\"code\":\"c\\\"x\"}}");
    assert_null(lf__serve_error_json(NULL, &len));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_completion_json),
        cmocka_unit_test(test_chat_json),
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_sse),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_error_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
