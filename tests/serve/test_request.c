/*
 * Tests of the OpenAI request parser (src/serve/request.c): every honoured
 * field read back, null and unknown fields, and a table of bad bodies each
 * with the HTTP status, the param OpenAI's error object must name, and a
 * piece of the message (which must name the field and the value or size).
 * Then the context check that follows tokenization.
 *
 * The expected values are written out by hand from the OpenAI API
 * reference, not taken from a run of the parser.
 */
#include "test_util.h"

#include "llmforge/infer.h"
#include "serve/serve_impl.h"

static lf__serve_limits lim_for_tests(void) {
    lf__serve_limits l = lf__serve_limits_default();
    l.model_name = "tiny";
    l.vocab_size = 50257;
    return l;
}

static void parse_ok(lf__serve_api api, const char *body, lf__serve_request *r) {
    lf__serve_limits lim = lim_for_tests();
    lf__serve_error e;
    lf_status st = lf__serve_request_parse(api, body, strlen(body), &lim, r, &e);
    if (st != LF_OK) fail_msg("body %s: %s (status %d, param '%s')", body, e.message, e.status, e.param);
}

static void test_defaults(void **state) {
    (void)state;
    lf__serve_limits d = lf__serve_limits_default();
    assert_int_equal(d.max_body, 1u << 20);
    assert_int_equal(d.default_max_tokens, 16);
    assert_int_equal(d.max_stop, 4);
    assert_int_equal(d.max_logprobs, 5);
    assert_int_equal(d.max_top_logprobs, 20);
    assert_null(d.model_name);

    lf__serve_request r;
    parse_ok(LF__SERVE_COMPLETIONS, "{\"prompt\":\"Hello\"}", &r);
    assert_int_equal(r.api, LF__SERVE_COMPLETIONS);
    assert_null(r.model);
    assert_null(r.user);
    assert_int_equal(r.n_prompts, 1);
    assert_string_equal(r.prompts[0].text, "Hello");
    assert_int_equal(r.prompts[0].len, 5);
    assert_null(r.prompts[0].tokens);
    assert_int_equal(r.max_tokens, -1);
    assert_true(r.temperature == 1.0);
    assert_true(r.top_p == 1.0);
    assert_int_equal(r.top_k, 0);
    assert_int_equal(r.has_seed, 0);
    assert_int_equal(r.n_stop, 0);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.echo, 0);
    assert_int_equal(r.logprobs, 0);
    assert_int_equal(r.top_logprobs, 0);
    assert_int_equal(r.stream, 0);
    assert_int_equal(r.include_usage, 0);
    assert_int_equal(r.ignore_eos, 0);
    lf__serve_request_free(&r);
    lf__serve_request_free(&r); /* twice: harmless */
    lf__serve_request_free(NULL);
}

static void test_completions_all_fields(void **state) {
    (void)state;
    lf__serve_request r;
    parse_ok(LF__SERVE_COMPLETIONS,
             "{\"model\":\"tiny\",\"prompt\":[\"a\",\"b\\u00e9\\ud83d\\ude00\"],\"max_tokens\":7,"
             "\"temperature\":0.25,\"top_p\":0.5,\"top_k\":40,\"seed\":-12345,\"stop\":[\"\\n\",\"END\"],"
             "\"n\":3,\"echo\":true,\"logprobs\":2,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
             "\"user\":\"u-1\",\"presence_penalty\":0.5,\"frequency_penalty\":-1.5,\"ignore_eos\":true}",
             &r);
    assert_string_equal(r.model, "tiny");
    assert_string_equal(r.user, "u-1");
    assert_int_equal(r.n_prompts, 2);
    assert_string_equal(r.prompts[0].text, "a");
    assert_string_equal(r.prompts[1].text, "b\xc3\xa9\xf0\x9f\x98\x80");
    assert_int_equal(r.prompts[1].len, 7);
    assert_int_equal(r.max_tokens, 7);
    assert_true(r.temperature == 0.25);
    assert_true(r.top_p == 0.5);
    assert_int_equal(r.top_k, 40);
    assert_int_equal(r.has_seed, 1);
    assert_true(r.seed == -12345);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[0], "\n");
    assert_int_equal(r.stop_len[0], 1);
    assert_string_equal(r.stop[1], "END");
    assert_int_equal(r.n, 3);
    assert_int_equal(r.echo, 1);
    assert_int_equal(r.logprobs, 1);
    assert_int_equal(r.top_logprobs, 2);
    assert_int_equal(r.stream, 1);
    assert_int_equal(r.include_usage, 1);
    assert_true(r.presence_penalty == 0.5);
    assert_true(r.frequency_penalty == -1.5);
    assert_int_equal(r.ignore_eos, 1);
    lf__serve_request_free(&r);

    /* token ids, one prompt; a single stop string; logprobs 0 still asks for them */
    parse_ok(LF__SERVE_COMPLETIONS, "{\"prompt\":[50256,0,3.0],\"stop\":\"x\",\"logprobs\":0,\"max_tokens\":0}", &r);
    assert_int_equal(r.n_prompts, 1);
    assert_null(r.prompts[0].text);
    assert_int_equal(r.prompts[0].n_tokens, 3);
    assert_int_equal(r.prompts[0].tokens[0], 50256);
    assert_int_equal(r.prompts[0].tokens[1], 0);
    assert_int_equal(r.prompts[0].tokens[2], 3);
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "x");
    assert_int_equal(r.logprobs, 1);
    assert_int_equal(r.top_logprobs, 0);
    assert_int_equal(r.max_tokens, 0); /* allowed for completions: echo scoring */
    lf__serve_request_free(&r);

    /* lists of token-id lists */
    parse_ok(LF__SERVE_COMPLETIONS, "{\"prompt\":[[1,2],[3]],\"top_k\":-1,\"seed\":9007199254740991}", &r);
    assert_int_equal(r.n_prompts, 2);
    assert_int_equal(r.prompts[0].n_tokens, 2);
    assert_int_equal(r.prompts[1].n_tokens, 1);
    assert_int_equal(r.prompts[1].tokens[0], 3);
    assert_int_equal(r.top_k, 0); /* -1 = off, as vLLM */
    assert_true(r.seed == 9007199254740991LL);
    lf__serve_request_free(&r);
}

static void test_null_and_unknown(void **state) {
    (void)state;
    lf__serve_request r;
    /* null is absent; unknown fields (with any content) are ignored */
    parse_ok(LF__SERVE_COMPLETIONS,
             "{\"prompt\":\"\",\"max_tokens\":null,\"stop\":null,\"seed\":null,\"n\":null,\"temperature\":null,"
             "\"logprobs\":null,\"stream_options\":null,\"model\":null,\"user\":null,"
             "\"logit_bias\":{\"50256\":-100},\"best_of\":3,\"suffix\":\"x\",\"foo\":{\"bar\":[1,{\"\\u00ff\":2}]},"
             "\"tools\":[{\"type\":\"function\"}]}",
             &r);
    assert_int_equal(r.n_prompts, 1);
    assert_string_equal(r.prompts[0].text, "");
    assert_int_equal(r.max_tokens, -1);
    assert_int_equal(r.n_stop, 0);
    assert_int_equal(r.has_seed, 0);
    assert_int_equal(r.n, 1);
    assert_true(r.temperature == 1.0);
    assert_int_equal(r.logprobs, 0);
    lf__serve_request_free(&r);
    /* an empty stop list is no stop; whitespace around the value is fine */
    parse_ok(LF__SERVE_COMPLETIONS, " \r\n\t{\"prompt\":\"a\",\"stop\":[]} \n", &r);
    assert_int_equal(r.n_stop, 0);
    lf__serve_request_free(&r);
    /* fields of the other API are unknown there: ignored */
    parse_ok(LF__SERVE_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"echo\":\"not checked\","
             "\"prompt\":5}",
             &r);
    assert_int_equal(r.echo, 0);
    lf__serve_request_free(&r);
    /* every form of RFC 8259's number grammar, in known and unknown fields, still reads */
    parse_ok(LF__SERVE_COMPLETIONS,
             "{\"prompt\":[0,10],\"max_tokens\":1E1,\"seed\":-0,\"top_p\":0.5e-0,\"temperature\":1.0E+0,"
             "\"foo\":[-0.0,-12.5e-3,0e0,1e+2,[7]]}",
             &r);
    assert_int_equal(r.max_tokens, 10);
    assert_true(r.top_p == 0.5 && r.temperature == 1.0);
    lf__serve_request_free(&r);
}

static void test_chat_fields(void **state) {
    (void)state;
    lf__serve_request r;
    parse_ok(
        LF__SERVE_CHAT,
        "{\"model\":\"tiny\",\"messages\":["
        "{\"role\":\"developer\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"one\"},{\"type\":\"text\",\"text\":\"two\"}],"
        "\"name\":\"bob\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]},"
        "{\"role\":\"system\",\"content\":\"\"},"
        "{\"role\":\"user\",\"content\":[]}],"
        "\"max_tokens\":5,\"max_completion_tokens\":9,\"logprobs\":true,\"top_logprobs\":3,"
        "\"stream\":true,\"stream_options\":{\"include_usage\":false},\"n\":2,\"seed\":7}",
        &r);
    assert_int_equal(r.api, LF__SERVE_CHAT);
    assert_int_equal(r.n_messages, 5);
    assert_int_equal(r.messages[0].role, LF__ROLE_SYSTEM);
    assert_string_equal(r.messages[0].content, "Be brief.");
    assert_int_equal(r.messages[1].role, LF__ROLE_USER);
    assert_string_equal(r.messages[1].content, "one\ntwo");
    assert_int_equal(r.messages[1].len, 7);
    assert_int_equal(r.messages[2].role, LF__ROLE_ASSISTANT);
    assert_string_equal(r.messages[2].content, "");
    assert_int_equal(r.messages[3].role, LF__ROLE_SYSTEM);
    assert_int_equal(r.messages[3].len, 0);
    assert_string_equal(r.messages[4].content, "");
    assert_int_equal(r.max_tokens, 9); /* max_completion_tokens wins */
    assert_int_equal(r.logprobs, 1);
    assert_int_equal(r.top_logprobs, 3);
    assert_int_equal(r.stream, 1);
    assert_int_equal(r.include_usage, 0);
    assert_int_equal(r.n, 2);
    assert_true(r.seed == 7);
    assert_string_equal(lf__serve_role_name(r.messages[4].role), "user");
    assert_null(lf__serve_role_name(LF__ROLE_COUNT));
    lf__serve_request_free(&r);
}

typedef struct bad_case {
    lf__serve_api api;
    const char *body;
    int status;
    const char *param; /* "" = null */
    const char *msg;   /* a piece of the message */
} bad_case;

#define C LF__SERVE_COMPLETIONS
#define H LF__SERVE_CHAT
#define U "{\"role\":\"user\",\"content\":\"x\"}"

static const bad_case k_bad[] = {
    /* the body as a whole */
    {C, "", 400, "", "empty"},
    {C, "{", 400, "", "Invalid JSON"},
    {C, "{\"prompt\":\"a\",}", 400, "", "Invalid JSON"},
    {C, "{\"prompt\":'a'}", 400, "", "Invalid JSON"},
    {C, "[]", 400, "", "must be a JSON object, got an array"},
    {C, "\"prompt\"", 400, "", "got a string"},
    {C, "{\"prompt\":\"a\"} {}", 400, "", "unexpected data after the value (at byte 15)"},
    {C, "{\"prompt\":\"\xff\"}", 400, "", "not valid UTF-8 (at byte 11)"},
    {C, "{\"prompt\":\"\xc0\xaf\"}", 400, "", "not valid UTF-8 (at byte 11)"},     /* overlong '/' */
    {C, "{\"prompt\":\"\xed\xa0\x80\"}", 400, "", "not valid UTF-8 (at byte 11)"}, /* a raw surrogate */
    {C, "{\"prompt\":\"ab\xe2\x82\"}", 400, "", "not valid UTF-8 (at byte 13)"},   /* truncated */
    {C, "{\"prompt\":\"\\ud800\"}", 400, "", "Invalid JSON"},                      /* a lone surrogate escape */
    {C, "{\"prompt\":\"\\udc00\\ud800\"}", 400, "", "Invalid JSON"},
    {C, "{\"prompt\":\"a\\u0000b\"}", 400, "", "U+0000"},
    {C, "{\"prompt\":\"a\x01\"}", 400, "", "control character 0x01"},
    {C, "{\"prompt\":\"a\nb\"}", 400, "", "control character 0x0a"},
    /* numbers cJSON reads but RFC 8259 does not allow */
    {C, "{\"prompt\":\"a\",\"max_tokens\":02}", 400, "", "malformed number (at byte 27)"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":-01}", 400, "", "malformed number (at byte 27)"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":2.}", 400, "", "malformed number (at byte 27)"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":2.e1}", 400, "", "malformed number (at byte 27)"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":2e}", 400, "", "malformed number (at byte 27)"},
    {C, "{\"prompt\":[00]}", 400, "", "malformed number (at byte 11)"},
    /* model */
    {C, "{\"model\":\"gpt-4\",\"prompt\":\"a\"}", 404, "model", "'gpt-4' does not exist"},
    {C, "{\"model\":5,\"prompt\":\"a\"}", 400, "model", "'model' must be a string, got a number"},
    /* prompt */
    {C, "{}", 400, "prompt", "'prompt' is required"},
    {C, "{\"prompt\":5}", 400, "prompt", "got a number"},
    {C, "{\"prompt\":{}}", 400, "prompt", "got an object"},
    {C, "{\"prompt\":[]}", 400, "prompt", "empty list"},
    {C, "{\"prompt\":[\"a\",1]}", 400, "prompt[1]", "must be a string"},
    {C, "{\"prompt\":[1,\"a\"]}", 400, "prompt[1]", "token id (an integer), got a string"},
    {C, "{\"prompt\":[1,2.5]}", 400, "prompt[1]", "got 2.5"},
    {C, "{\"prompt\":[-1]}", 400, "prompt[0]", "= -1 is not a token id (0..50256)"},
    {C, "{\"prompt\":[50257]}", 400, "prompt[0]", "= 50257 is not a token id"},
    {C, "{\"prompt\":[1e300]}", 400, "prompt[0]", "is not a token id"},
    {C, "{\"prompt\":[[1],[]]}", 400, "prompt[1]", "empty list of token ids"},
    {C, "{\"prompt\":[[1],2]}", 400, "prompt[1]", "must be a list of token ids"},
    {C, "{\"prompt\":[true]}", 400, "prompt[0]", "got a boolean"},
    {C, "{\"prompt\":[null]}", 400, "prompt[0]", "got null"},
    /* sampling fields */
    {C, "{\"prompt\":\"a\",\"max_tokens\":\"5\"}", 400, "max_tokens", "must be an integer, got a string"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":2.5}", 400, "max_tokens", "must be an integer, got 2.5"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":-1}", 400, "max_tokens", "in [0, 1024], got -1"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":1025}", 400, "max_tokens", "in [0, 1024], got 1025"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":1e999}", 400, "max_tokens", "too large"},
    {H, "{\"messages\":[" U "],\"max_tokens\":0}", 400, "max_tokens", "in [1, 1024], got 0"},
    {H, "{\"messages\":[" U "],\"max_completion_tokens\":4096}", 400, "max_completion_tokens", "got 4096"},
    {C, "{\"prompt\":\"a\",\"temperature\":-0.1}", 400, "temperature", "in [0, 2], got -0.1"},
    {C, "{\"prompt\":\"a\",\"temperature\":2.5}", 400, "temperature", "got 2.5"},
    {C, "{\"prompt\":\"a\",\"temperature\":\"1\"}", 400, "temperature", "must be a number, got a string"},
    {C, "{\"prompt\":\"a\",\"temperature\":true}", 400, "temperature", "got a boolean"},
    {C, "{\"prompt\":\"a\",\"top_p\":1.5}", 400, "top_p", "in [0, 1], got 1.5"},
    {C, "{\"prompt\":\"a\",\"top_k\":-2}", 400, "top_k", "got -2"},
    {C, "{\"prompt\":\"a\",\"top_k\":1.5}", 400, "top_k", "must be an integer"},
    {C, "{\"prompt\":\"a\",\"seed\":1.5}", 400, "seed", "must be an integer"},
    {C, "{\"prompt\":\"a\",\"seed\":9007199254740992}", 400, "seed", "got 9007199254740992"},
    {C, "{\"prompt\":\"a\",\"seed\":\"1\"}", 400, "seed", "got a string"},
    {C, "{\"prompt\":\"a\",\"n\":0}", 400, "n", "in [1, 8], got 0"},
    {C, "{\"prompt\":\"a\",\"n\":9}", 400, "n", "got 9"},
    {C, "{\"prompt\":\"a\",\"stop\":5}", 400, "stop", "string or a list of strings, got a number"},
    {C, "{\"prompt\":\"a\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", 400, "stop",
     "5 strings, more than the limit of 4"},
    {C, "{\"prompt\":\"a\",\"stop\":[\"\"]}", 400, "stop[0]", "empty string"},
    {C, "{\"prompt\":\"a\",\"stop\":\"\"}", 400, "stop", "empty string"},
    {C, "{\"prompt\":\"a\",\"stop\":[\"ok\",3]}", 400, "stop[1]", "got a number"},
    {C, "{\"prompt\":\"a\",\"echo\":\"yes\"}", 400, "echo", "must be a boolean, got a string"},
    {C, "{\"prompt\":\"a\",\"ignore_eos\":1}", 400, "ignore_eos", "must be a boolean, got a number"},
    {C, "{\"prompt\":\"a\",\"logprobs\":6}", 400, "logprobs", "in [0, 5], got 6"},
    {C, "{\"prompt\":\"a\",\"logprobs\":true}", 400, "logprobs", "must be an integer, got a boolean"},
    {H, "{\"messages\":[" U "],\"logprobs\":1}", 400, "logprobs", "must be a boolean, got a number"},
    {H, "{\"messages\":[" U "],\"logprobs\":true,\"top_logprobs\":21}", 400, "top_logprobs", "in [0, 20], got 21"},
    {H, "{\"messages\":[" U "],\"top_logprobs\":2}", 400, "top_logprobs", "needs 'logprobs': true"},
    {C, "{\"prompt\":\"a\",\"stream\":\"true\"}", 400, "stream", "must be a boolean"},
    {C, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", 400, "stream_options",
     "only allowed when 'stream' is true"},
    {C, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":5}", 400, "stream_options", "must be an object"},
    {C, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}", 400,
     "stream_options.include_usage", "must be a boolean, got a number"},
    {C, "{\"prompt\":\"a\",\"presence_penalty\":3}", 400, "presence_penalty", "in [-2, 2], got 3"},
    {C, "{\"prompt\":\"a\",\"frequency_penalty\":\"x\"}", 400, "frequency_penalty", "got a string"},
    {C, "{\"prompt\":\"a\",\"user\":5}", 400, "user", "must be a string"},
    {C, "{\"prompt\":\"a\",\"max_tokens\":5,\"max_tokens\":6}", 400, "max_tokens", "given more than once"},
    {C, "{\"prompt\":\"a\",\"prompt\":\"b\"}", 400, "prompt", "given more than once"},
    /* messages */
    {H, "{}", 400, "messages", "'messages' is required"},
    {H, "{\"messages\":{}}", 400, "messages", "must be a list, got an object"},
    {H, "{\"messages\":[]}", 400, "messages", "empty list"},
    {H, "{\"messages\":[5]}", 400, "messages[0]", "must be an object, got a number"},
    {H, "{\"messages\":[" U ",{\"content\":\"x\"}]}", 400, "messages[1].role", "is required"},
    {H, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400, "messages[0].role", "is 'tool'"},
    {H, "{\"messages\":[{\"role\":7,\"content\":\"x\"}]}", 400, "messages[0].role", "must be a string"},
    {H, "{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content", "is required"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", 400, "messages[0].content", "is required"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content",
     "string or a list of content parts, got a number"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}", 400,
     "messages[0].content[0].type", "is 'image_url'; only text content parts"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", 400, "messages[0].content[0].text",
     "is required"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"a\"}]}]}", 400, "messages[0].content[0].type",
     "is required"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[5]}]}", 400, "messages[0].content[0]",
     "must be a content part object"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":3}]}]}", 400,
     "messages[0].content[0].text", "must be a string"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"name\":5}]}", 400, "messages[0].name",
     "must be a string"},
    {H, "{\"messages\":[{\"role\":\"user\",\"role\":\"system\",\"content\":\"a\"}]}", 400, "messages[0].role",
     "more than once"},
};

static void test_bad_requests(void **state) {
    (void)state;
    lf__serve_limits lim = lim_for_tests();
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        const bad_case *b = &k_bad[i];
        lf__serve_request r;
        lf__serve_error e;
        memset(&r, 0x5a, sizeof r);
        lf_status st = lf__serve_request_parse(b->api, b->body, strlen(b->body), &lim, &r, &e);
        if (st == LF_OK) fail_msg("case %zu (%s): accepted", i, b->body);
        if (e.status != b->status || strcmp(e.param, b->param) != 0 || !strstr(e.message, b->msg))
            fail_msg("case %zu (%s): got %d param '%s' message '%s'; want %d param '%s' message with '%s'", i, b->body,
                     e.status, e.param, e.message, b->status, b->param, b->msg);
        assert_string_equal(e.type, "invalid_request_error");
        if (b->status == 404) {
            assert_int_equal(st, LF_ERR_NOT_FOUND);
            assert_string_equal(e.code, "model_not_found");
        } else {
            assert_true(st == LF_ERR_FORMAT || st == LF_ERR_RANGE);
            assert_null(e.code);
        }
        /* lf_last_error carries the same message */
        LF_ASSERT_ERR_CONTAINS(b->msg);
        /* the request is left empty (and freeing it is harmless) */
        assert_null(r.impl_);
        assert_null(r.prompts);
        lf__serve_request_free(&r);
    }
}

static void test_bad_bytes_and_sizes(void **state) {
    (void)state;
    lf__serve_limits lim = lim_for_tests();
    lf__serve_request r;
    lf__serve_error e;
    /* a NUL byte (the length says where the body ends) */
    static const char nul[] = "{\"prompt\":\"a\0b\"}";
    assert_int_equal(lf__serve_request_parse(C, nul, sizeof nul - 1, &lim, &r, &e), LF_ERR_FORMAT);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "NUL byte (at byte 12)"));
    /* a body over the limit: 413 before it is read */
    lim.max_body = 20;
    const char *big = "{\"prompt\":\"aaaaaaaaaaaa\"}";
    assert_int_equal(lf__serve_request_parse(C, big, strlen(big), &lim, &r, &e), LF_ERR_RANGE);
    assert_int_equal(e.status, 413);
    assert_string_equal(e.code, "request_too_large");
    assert_non_null(strstr(e.message, "20-byte limit"));
    lim = lim_for_tests();
    /* caps on lists: prompts, messages, stop length, token list vs context */
    char body[40000];
    int o = sprintf(body, "{\"prompt\":[");
    for (int i = 0; i < 65; i++) o += sprintf(body + o, "%s\"p\"", i ? "," : "");
    sprintf(body + o, "]}");
    assert_int_equal(lf__serve_request_parse(C, body, strlen(body), &lim, &r, &e), LF_ERR_RANGE);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "prompt");
    assert_non_null(strstr(e.message, "65 prompts; this server takes at most 64 in one request"));
    assert_non_null(strstr(e.message, "--max-prompts")); /* the option that raises it */
    lim.max_prompts = 100;                               /* serve --max-prompts 100 */
    LF_ASSERT_OK(lf__serve_request_parse(C, body, strlen(body), &lim, &r, &e));
    assert_int_equal(r.n_prompts, 65);
    lf__serve_request_free(&r);
    lim = lim_for_tests();
    o = sprintf(body, "{\"prompt\":[");
    for (int i = 0; i < 64; i++) o += sprintf(body + o, "%s\"p\"", i ? "," : ""); /* the default cap itself */
    sprintf(body + o, "]}");
    LF_ASSERT_OK(lf__serve_request_parse(C, body, strlen(body), &lim, &r, &e));
    assert_int_equal(r.n_prompts, 64);
    lf__serve_request_free(&r);
    o = sprintf(body, "{\"messages\":[");
    for (int i = 0; i < 257; i++) o += sprintf(body + o, "%s" U, i ? "," : "");
    sprintf(body + o, "]}");
    assert_int_equal(lf__serve_request_parse(H, body, strlen(body), &lim, &r, &e), LF_ERR_RANGE);
    assert_string_equal(e.param, "messages");
    assert_non_null(strstr(e.message, "257 messages, more than the limit of 256"));
    o = sprintf(body, "{\"prompt\":\"a\",\"stop\":[\"ok\",\"");
    memset(body + o, 's', 257);
    sprintf(body + o + 257, "\"]}");
    assert_int_equal(lf__serve_request_parse(C, body, strlen(body), &lim, &r, &e), LF_ERR_RANGE);
    assert_string_equal(e.param, "stop[1]");
    assert_non_null(strstr(e.message, "257 bytes long, more than the limit of 256"));
    o = sprintf(body, "{\"prompt\":[");
    for (int i = 0; i < 1025; i++) o += sprintf(body + o, "%s7", i ? "," : "");
    sprintf(body + o, "]}");
    assert_int_equal(lf__serve_request_parse(C, body, strlen(body), &lim, &r, &e), LF_ERR_RANGE);
    assert_string_equal(e.param, "prompt");
    assert_non_null(strstr(e.message, "1025 tokens, more than this model's maximum context length of 1024"));
    /* a stop string exactly at the cap, and 4 of them: fine */
    o = sprintf(body, "{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"");
    memset(body + o, 's', 256);
    sprintf(body + o + 256, "\"]}");
    LF_ASSERT_OK(lf__serve_request_parse(C, body, strlen(body), &lim, &r, &e));
    assert_int_equal(r.n_stop, 4);
    assert_int_equal(r.stop_len[3], 256);
    lf__serve_request_free(&r);
    /* deep nesting in an ignored field: refused as JSON by cJSON's depth cap, not a crash */
    o = sprintf(body, "{\"prompt\":\"a\",\"x\":");
    for (int i = 0; i < 5000; i++) body[o++] = '[';
    for (int i = 0; i < 5000; i++) body[o++] = ']';
    sprintf(body + o, "}");
    assert_int_equal(lf__serve_request_parse(C, body, strlen(body), &lim, &r, &e), LF_ERR_FORMAT);
    assert_int_equal(e.status, 400);
    /* any model name is accepted when the limits name none */
    lim.model_name = NULL;
    LF_ASSERT_OK(lf__serve_request_parse(C, "{\"model\":\"whatever\",\"prompt\":\"a\"}", 33, &lim, &r, &e));
    assert_string_equal(r.model, "whatever");
    lf__serve_request_free(&r);
    /* bad arguments */
    assert_int_equal(lf__serve_request_parse(C, "{}", 2, NULL, &r, &e), LF_ERR_INVALID_ARG);
    assert_int_equal(e.status, 500);
    assert_int_equal(lf__serve_request_parse(C, NULL, 5, &lim, &r, &e), LF_ERR_INVALID_ARG);
    assert_int_equal(lf__serve_request_parse((lf__serve_api)7, "{}", 2, &lim, &r, &e), LF_ERR_INVALID_ARG);
    lf__serve_limits zero = {0};
    assert_int_equal(lf__serve_request_parse(C, "{}", 2, &zero, &r, &e), LF_ERR_INVALID_ARG);
    assert_int_equal(lf__serve_request_parse(C, "{}", 2, &lim, NULL, &e), LF_ERR_INVALID_ARG);
    /* err may be NULL */
    assert_int_equal(lf__serve_request_parse(C, "{", 1, &lim, &r, NULL), LF_ERR_FORMAT);
}

/* Sampling fields at the edges of their ranges, through the conversion to
 * the engine's floats: no valid value may land on a sentinel (top_p 0.0f =
 * no filter, temperature 0 = greedy), and what is out of range or not a
 * finite number is a 400 naming the field. */
static void sampling_of(const char *body, float *temperature, float *top_p) {
    lf__serve_request r;
    parse_ok(LF__SERVE_COMPLETIONS, body, &r);
    lf__serve_request_sampling(&r, temperature, top_p);
    lf__serve_request_free(&r);
}

static void test_sampling_edges(void **state) {
    (void)state;
    float t, p;
    /* the smallest positive double: a float 0 would switch the filter off */
    sampling_of("{\"prompt\":\"a\",\"top_p\":5e-324,\"temperature\":5e-324}", &t, &p);
    assert_true(p > 0.0f && p < 1e-30f);
    assert_true(t > 0.0f && t < 1e-30f);
    sampling_of("{\"prompt\":\"a\",\"top_p\":1e-50}", &t, &p);
    assert_true(p > 0.0f && p < 1e-30f);
    assert_true(t == 1.0f);
    /* exact 0: the most likely token only (OpenAI), not "off" */
    sampling_of("{\"prompt\":\"a\",\"top_p\":0,\"temperature\":0}", &t, &p);
    assert_true(p > 0.0f && p < 1e-30f);
    assert_true(t == 0.0f);
    /* exact 1 and the default: no filter */
    sampling_of("{\"prompt\":\"a\",\"top_p\":1,\"temperature\":2}", &t, &p);
    assert_true(p == 0.0f);
    assert_true(t == 2.0f);
    sampling_of("{\"prompt\":\"a\"}", &t, &p);
    assert_true(p == 0.0f);
    sampling_of("{\"prompt\":\"a\",\"top_p\":0.5}", &t, &p);
    assert_true(p == 0.5f);
    /* out of range, or a number JSON overflows to infinity: refused */
    static const char *const bad[][2] = {
        {"{\"prompt\":\"a\",\"top_p\":1e999}", "top_p"},
        {"{\"prompt\":\"a\",\"top_p\":-1e999}", "top_p"},
        {"{\"prompt\":\"a\",\"top_p\":-5e-324}", "top_p"},
        {"{\"prompt\":\"a\",\"top_p\":1.0000000000000002}", "top_p"},
        {"{\"prompt\":\"a\",\"temperature\":1e999}", "temperature"},
        {"{\"prompt\":\"a\",\"temperature\":-5e-324}", "temperature"},
        {"{\"prompt\":\"a\",\"top_k\":1e999}", "top_k"},
        {"{\"prompt\":\"a\",\"seed\":1e999}", "seed"},
        {"{\"prompt\":\"a\",\"presence_penalty\":1e999}", "presence_penalty"},
        {"{\"prompt\":\"a\",\"top_p\":NaN}", NULL},
        {"{\"prompt\":\"a\",\"top_p\":Infinity}", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lf__serve_limits lim = lim_for_tests();
        lf__serve_request r;
        lf__serve_error e;
        lf_status st = lf__serve_request_parse(LF__SERVE_COMPLETIONS, bad[i][0], strlen(bad[i][0]), &lim, &r, &e);
        if (st == LF_OK) fail_msg("accepted %s", bad[i][0]);
        assert_int_equal(e.status, 400);
        if (bad[i][1]) assert_string_equal(e.param, bad[i][1]);
        lf__serve_request_free(&r);
    }
    /* the engine's sampler at the converted values: top_p at the smallest
     * float keeps the argmax alone, whatever the seed and temperature */
    float logits[7] = {0.1f, 2.0f, 1.9f, -1.0f, 1.99f, 0.0f, 1.5f}, work[7];
    int iwork[7];
    sampling_of("{\"prompt\":\"a\",\"top_p\":1e-50,\"temperature\":2}", &t, &p);
    for (uint64_t seed = 0; seed < 64; seed++)
        assert_int_equal(lf_sample_token(logits, 7, t, 0, p, seed, 3, work, iwork), 1);
}

/* A request with more sequences than the engine can ever hold (slots +
 * queue) is a 400 naming 'n' and saying why, not a 429 that no retry can
 * help; exactly the capacity is accepted. */
static void test_more_sequences_than_capacity(void **state) {
    (void)state;
    lf__serve_limits lim = lim_for_tests();
    lim.max_sequences = 72; /* serve's defaults: 8 slots + 64 queued */
    char body[512];
    int o = snprintf(body, sizeof body, "{\"n\":8,\"max_tokens\":2,\"prompt\":[");
    for (int i = 0; i < 16; i++) o += snprintf(body + o, sizeof body - (size_t)o, "%s\"ROMEO:\"", i ? "," : "");
    snprintf(body + o, sizeof body - (size_t)o, "]}");
    lf__serve_request r;
    lf__serve_error e;
    assert_int_equal(lf__serve_request_parse(LF__SERVE_COMPLETIONS, body, strlen(body), &lim, &r, &e), LF_ERR_RANGE);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "n");
    assert_non_null(strstr(e.message, "128 sequences"));
    assert_non_null(strstr(e.message, "at most 72"));
    assert_int_equal(e.retry_after, 0);
    lf__serve_request_free(&r);
    const char *fits = "{\"n\":8,\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]}";
    assert_int_equal(lf__serve_request_parse(LF__SERVE_COMPLETIONS, fits, strlen(fits), &lim, &r, &e), LF_OK);
    lf__serve_request_free(&r);
    lim.max_sequences = 4;
    const char *chat = "{\"n\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    assert_int_equal(lf__serve_request_parse(LF__SERVE_CHAT, chat, strlen(chat), &lim, &r, &e), LF_ERR_RANGE);
    assert_string_equal(e.param, "n");
    lf__serve_request_free(&r);
}

/* What a client is told never holds a server path: quoted paths keep their
 * last component, everything else is kept. */
static void test_client_message(void **state) {
    (void)state;
    char m[128];
    lf__serve_client_message(m, sizeof m,
                             "char tokenizer: character 'x' at byte offset 3 is not in the vocabulary "
                             "'/srv/models/run1/step_00000060/vocab.json'");
    assert_string_equal(m, "char tokenizer: character 'x' at byte offset 3 is not in the vocabulary 'vocab.json'");
    lf__serve_client_message(m, sizeof m, "shard 'a/b.bin' and 'c' and 'rel/dir/' then 'x");
    assert_string_equal(m, "shard 'b.bin' and 'c' and '' then 'x");
    lf__serve_client_message(m, 8, "'/a/b/c' long");
    assert_string_equal(m, "'c' lon");
    lf__serve_client_message(m, sizeof m, NULL);
    assert_string_equal(m, "");
}

static void test_resolve_max_tokens(void **state) {
    (void)state;
    lf__serve_limits lim = lim_for_tests(); /* context 1024, cap 1024, default 16 */
    lf__serve_request r;
    lf__serve_error e;
    int mt = -7;
    parse_ok(C, "{\"prompt\":\"a\"}", &r);
    LF_ASSERT_OK(lf__serve_resolve_max_tokens(&r, &lim, 10, &mt, &e));
    assert_int_equal(mt, 16);
    LF_ASSERT_OK(lf__serve_resolve_max_tokens(&r, &lim, 1020, &mt, &e));
    assert_int_equal(mt, 4);
    assert_int_equal(lf__serve_resolve_max_tokens(&r, &lim, 1024, &mt, &e), LF_ERR_RANGE);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "context_length_exceeded");
    assert_string_equal(e.param, "prompt");
    assert_non_null(strstr(e.message, "maximum context length is 1024 tokens, but the prompt alone has 1024 tokens"));
    lf__serve_request_free(&r);

    parse_ok(C, "{\"prompt\":\"a\",\"max_tokens\":100}", &r);
    LF_ASSERT_OK(lf__serve_resolve_max_tokens(&r, &lim, 924, &mt, &e));
    assert_int_equal(mt, 100);
    assert_int_equal(lf__serve_resolve_max_tokens(&r, &lim, 1000, &mt, &e), LF_ERR_RANGE);
    assert_non_null(strstr(e.message, "1100 tokens were requested (1000 in the prompt, 100 for the completion)"));
    lf__serve_request_free(&r);

    parse_ok(C, "{\"prompt\":\"a\",\"max_tokens\":0,\"echo\":true}", &r);
    LF_ASSERT_OK(lf__serve_resolve_max_tokens(&r, &lim, 1024, &mt, &e));
    assert_int_equal(mt, 0);
    lf__serve_request_free(&r);

    parse_ok(H, "{\"messages\":[" U "]}", &r);
    LF_ASSERT_OK(lf__serve_resolve_max_tokens(&r, &lim, 24, &mt, &e));
    assert_int_equal(mt, 1000); /* chat: what fits */
    lim.max_tokens = 512;
    LF_ASSERT_OK(lf__serve_resolve_max_tokens(&r, &lim, 24, &mt, &e));
    assert_int_equal(mt, 512); /* ... up to the cap */
    assert_int_equal(lf__serve_resolve_max_tokens(&r, &lim, 2000, &mt, &e), LF_ERR_RANGE);
    assert_string_equal(e.param, "messages");
    assert_non_null(strstr(e.message, "the messages alone has 2000 tokens"));
    assert_int_equal(lf__serve_resolve_max_tokens(&r, &lim, -1, &mt, &e), LF_ERR_INVALID_ARG);
    assert_int_equal(lf__serve_resolve_max_tokens(NULL, &lim, 1, &mt, &e), LF_ERR_INVALID_ARG);
    lf__serve_request_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_completions_all_fields),
        cmocka_unit_test(test_null_and_unknown),
        cmocka_unit_test(test_chat_fields),
        cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_bad_bytes_and_sizes),
        cmocka_unit_test(test_sampling_edges),
        cmocka_unit_test(test_client_message),
        cmocka_unit_test(test_more_sequences_than_capacity),
        cmocka_unit_test(test_resolve_max_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
