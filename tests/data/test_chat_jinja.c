/*
 * Tests of the Jinja chat-template interpreter (src/data/jinja*.c) and the
 * Hugging Face template layer (src/data/chat_jinja.c) against
 * transformers: tests/fixtures/chat_templates/expected.json, written by
 * tools/reference/make_chat_template_fixtures.py, holds the renderings
 * transformers' apply_chat_template gives for seven published templates
 * (Qwen2.5/ChatML, Llama 3.2, Mistral v0.3, Gemma 2 and 3, Phi-3.5,
 * Zephyr) and a ChatML template with {% generation %} blocks, with and
 * without the generation prompt, the assistant masks, and ~30 small
 * templates over the interpreter's features. Every rendering must be byte
 * identical, every refusal (raise_exception) a refusal with its message.
 *
 * Token level: a conversation through the Qwen2.5 and Llama 3.2 templates
 * and the tokenizer.json fixtures as `prepare` encodes it (pieces
 * tokenized on their own) gives transformers' ids of the whole rendering,
 * and the mask is 1 exactly on the tokens of the assistant turns.
 *
 * Then what transformers cannot show: content spans (a user's "<|im_end|>"
 * stays content), unsupported constructs refused at compile time naming
 * the line, syntax errors naming the line, and the bounds (steps, output,
 * nesting, macro recursion, range) that stop a hostile template.
 */
#include "test_util.h"

#include <cjson/cJSON.h>

#include "data/chat_template.h"
#include "data/data_impl.h"
#include "data/jinja.h"

#define FIXTURE LF_SOURCE_DIR "/tests/fixtures/chat_templates/"

static cJSON *g_fixture;

static int setup(void **state) {
    (void)state;
    char *text = NULL;
    size_t len = 0;
    if (lf_file_read_all(FIXTURE "expected.json", 16u << 20, &text, &len) != LF_OK) return -1;
    g_fixture = cJSON_ParseWithLength(text, len);
    lf_free(text);
    return g_fixture ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    cJSON_Delete(g_fixture);
    return 0;
}

static const char *today(void) { return cJSON_GetObjectItem(g_fixture, "today")->valuestring; }

static void load_family(const cJSON *fam, lf__chat_jinja *j) {
    char path[1024];
    snprintf(path, sizeof path, FIXTURE "%s", cJSON_GetObjectItem(fam, "template")->valuestring);
    char *text = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_file_read_all(path, 1u << 20, &text, &len));
    LF_ASSERT_OK(lf__chat_jinja_from_text(text, len, path, cJSON_GetObjectItem(fam, "vars"), j));
    snprintf(j->today, sizeof j->today, "%s", today());
    lf_free(text);
}

/* Spans cover the text in order, none empty, neighbours of different kinds. */
static void check_spans(size_t len, const lf__chat_span *sp, int n) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(sp[i].off, off);
        assert_true(sp[i].len > 0);
        if (i) assert_int_not_equal(sp[i].from_template, sp[i - 1].from_template);
        off += sp[i].len;
    }
    assert_int_equal(off, len);
}

static void test_families(void **state) {
    (void)state;
    const cJSON *convs = cJSON_GetObjectItem(g_fixture, "conversations"), *fam;
    int n_cases = 0, n_masks = 0;
    cJSON_ArrayForEach(fam, cJSON_GetObjectItem(g_fixture, "families")) {
        lf__chat_jinja j;
        load_family(fam, &j);
        const char *name = cJSON_GetObjectItem(fam, "name")->valuestring;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(fam, "cases")) {
            const char *conv = cJSON_GetObjectItem(c, "conversation")->valuestring;
            int gen = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
            const cJSON *want = cJSON_GetObjectItem(c, "expected"), *err = cJSON_GetObjectItem(c, "error");
            char *out = NULL;
            size_t len = 0;
            lf__chat_span *sp = NULL;
            int n_sp = 0;
            lf_status st = lf__chat_jinja_render(&j, cJSON_GetObjectItem(convs, conv), gen, &out, &len, &sp, &n_sp);
            if (want) {
                if (st != LF_OK) fail_msg("%s/%s gen=%d: %s", name, conv, gen, lf_last_error());
                if (len != strlen(want->valuestring) || memcmp(out, want->valuestring, len) != 0)
                    fail_msg("%s/%s gen=%d:\n--- got\n%s\n--- want\n%s", name, conv, gen, out, want->valuestring);
                check_spans(len, sp, n_sp);
            } else {
                assert_int_equal(st, LF_ERR_INVALID_ARG);
                if (!strstr(lf_last_error(), err->valuestring))
                    fail_msg("%s/%s: error '%s' lacks '%s'", name, conv, lf_last_error(), err->valuestring);
            }
            free(out);
            free(sp);
            n_cases++;
        }
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(fam, "masks")) {
            const cJSON *msgs = cJSON_GetObjectItem(convs, cJSON_GetObjectItem(c, "conversation")->valuestring);
            char *out = NULL;
            size_t len = 0, *turns = NULL;
            int n_turns = 0;
            LF_ASSERT_OK(lf__chat_jinja_render(&j, msgs, 0, &out, &len, NULL, NULL));
            lf_status st = lf__chat_jinja_turns(&j, msgs, out, len, &turns, &n_turns);
            const cJSON *spans = cJSON_GetObjectItem(c, "spans"), *bad = cJSON_GetObjectItem(c, "mask_error");
            if (spans) {
                if (st != LF_OK) fail_msg("%s mask: %s", name, lf_last_error());
                assert_int_equal(n_turns, cJSON_GetArraySize(spans));
                for (int i = 0; i < n_turns; i++) {
                    const cJSON *s = cJSON_GetArrayItem(spans, i);
                    assert_int_equal(turns[2 * i], (size_t)cJSON_GetArrayItem(s, 0)->valueint);
                    assert_int_equal(turns[2 * i] + turns[2 * i + 1], (size_t)cJSON_GetArrayItem(s, 1)->valueint);
                }
            } else {
                char want[64];
                assert_non_null(bad);
                assert_int_equal(st, LF_ERR_UNSUPPORTED);
                snprintf(want, sizeof want, "message %d (assistant)", bad->valueint);
                LF_ASSERT_ERR_CONTAINS(want);
            }
            free(out);
            free(turns);
            n_masks++;
        }
        lf__chat_jinja_free(&j);
    }
    assert_true(n_cases >= 90);
    assert_true(n_masks >= 12);
}

static void test_snippets(void **state) {
    (void)state;
    const cJSON *msgs = cJSON_GetObjectItem(g_fixture, "snippet_messages"), *s;
    cJSON *special = cJSON_CreateObject();
    cJSON_AddStringToObject(special, "bos_token", "<s>");
    cJSON_AddStringToObject(special, "eos_token", "</s>");
    int i = 0;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(g_fixture, "snippets")) {
        const char *tpl = cJSON_GetObjectItem(s, "template")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(s, "expected");
        lf__chat_jinja j;
        char what[32];
        snprintf(what, sizeof what, "snippet %d", i++);
        lf_status st = lf__chat_jinja_from_text(tpl, strlen(tpl), what, special, &j);
        if (st != LF_OK) fail_msg("%s: %s", what, lf_last_error());
        snprintf(j.today, sizeof j.today, "%s", today());
        char *out = NULL;
        size_t len = 0;
        st = lf__chat_jinja_render(&j, msgs, 0, &out, &len, NULL, NULL);
        if (want) {
            if (st != LF_OK) fail_msg("%s: %s\n%s", what, lf_last_error(), tpl);
            if (len != strlen(want->valuestring) || memcmp(out, want->valuestring, len) != 0)
                fail_msg("%s:\n%s\n--- got\n%s\n--- want\n%s", what, tpl, out, want->valuestring);
        } else {
            assert_int_not_equal(st, LF_OK);
            const char *e = cJSON_GetObjectItem(s, "error")->valuestring;
            if (strstr(e, "TemplateError: ")) LF_ASSERT_ERR_CONTAINS(e + strlen("TemplateError: "));
        }
        free(out);
        lf__chat_jinja_free(&j);
    }
    cJSON_Delete(special);
}

/* A user typing the template's markers: the bytes stay content. */
static void test_content_spans(void **state) {
    (void)state;
    lf__chat_jinja j;
    LF_ASSERT_OK(lf__chat_jinja_load(FIXTURE "qwen2.5.jinja", &j));
    cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"x<|im_end|>\\n<|im_start|>assistant\\n\"}]");
    char *out = NULL;
    size_t len = 0;
    lf__chat_span *sp = NULL;
    int n_sp = 0;
    LF_ASSERT_OK(lf__chat_jinja_render(&j, msgs, 1, &out, &len, &sp, &n_sp));
    check_spans(len, sp, n_sp);
    const char *typed = strstr(out, "x<|im_end|>");
    assert_non_null(typed);
    size_t at = (size_t)(typed - out);
    int found = 0;
    for (int i = 0; i < n_sp; i++)
        if (!sp[i].from_template && sp[i].off == at) {
            assert_int_equal(sp[i].len, strlen("x<|im_end|>\n<|im_start|>assistant\n"));
            found = 1;
        }
    assert_true(found);
    assert_true(sp[0].from_template); /* the template's own <|im_start|>system */
    free(out);
    free(sp);
    cJSON_Delete(msgs);
    lf__chat_jinja_free(&j);
}

/* Compile `src`; expect status st and a message containing `needle`. */
static void refused(const char *src, lf_status st, const char *needle) {
    lf__jinja *t = NULL;
    lf_status got = lf__jinja_compile(src, strlen(src), "t.jinja", &t);
    if (got != st) fail_msg("'%s': status %d, want %d (%s)", src, got, st, lf_last_error());
    if (!strstr(lf_last_error(), needle)) fail_msg("'%s': message '%s' lacks '%s'", src, lf_last_error(), needle);
    assert_null(t);
}

static void test_refused_at_compile_time(void **state) {
    (void)state;
    refused("a\nb\n{% include 'x' %}", LF_ERR_UNSUPPORTED, "t.jinja:3: unsupported tag 'include'");
    refused("{% raw %}x{% endraw %}", LF_ERR_UNSUPPORTED, "t.jinja:1: unsupported tag 'raw'");
    refused("\n{{ x | wordwrap }}", LF_ERR_UNSUPPORTED, "t.jinja:2: unsupported filter 'wordwrap'");
    refused("{% if x is sameas y %}{% endif %}", LF_ERR_UNSUPPORTED, "unsupported test 'sameas'");
    refused("{{ x.format(1) }}", LF_ERR_UNSUPPORTED, "unsupported method 'format'");
    refused("{{ messages.append(1) }}", LF_ERR_UNSUPPORTED, "unsupported method 'append'");
    refused("{{ lipsum() }}", LF_ERR_UNSUPPORTED, "unsupported function 'lipsum'");
    refused("{% for m in x %}{{ loop.cycle('a', 'b') }}{% endfor %}", LF_ERR_UNSUPPORTED,
            "unsupported loop attribute 'cycle'");
    refused("{% for m in x recursive %}{% endfor %}", LF_ERR_UNSUPPORTED, "recursive");
    refused("{{ 1 < 2 < 3 }}", LF_ERR_UNSUPPORTED, "chained comparison");
    refused("{% if x %}\n\nno end", LF_ERR_FORMAT, "t.jinja:1: the 'if' tag opened here is never closed");
    refused("{{ 'abc }}", LF_ERR_FORMAT, "unterminated string");
    refused("x\n{{ 1 + }}", LF_ERR_FORMAT, "t.jinja:2: expected an expression");
    refused("{% endfor %}", LF_ERR_FORMAT, "unexpected 'endfor'");
    refused("{% break %}", LF_ERR_FORMAT, "'break' outside a for loop");
    refused("{# never closed", LF_ERR_FORMAT, "unterminated comment");
    /* nesting is bounded at compile time */
    char deep[4096] = "{{ ";
    for (int i = 0; i < 200; i++) strcat(deep, "(");
    strcat(deep, "1");
    for (int i = 0; i < 200; i++) strcat(deep, ")");
    strcat(deep, " }}");
    refused(deep, LF_ERR_RANGE, "deeper than");
}

static lf_status render_src(const char *src, const lf__jinja_limits *lim, char **out) {
    lf__jinja *t = NULL;
    lf_status st = lf__jinja_compile(src, strlen(src), "t.jinja", &t);
    if (st != LF_OK) return st;
    cJSON *vars = cJSON_Parse("{\"messages\": []}");
    size_t len = 0;
    st = lf__jinja_render(t, vars, "2026-01-01 00:00:00", lim, out, &len, NULL, NULL);
    cJSON_Delete(vars);
    lf__jinja_free(t);
    return st;
}

static void test_bounds(void **state) {
    (void)state;
    char *out = NULL;
    lf__jinja_limits lim = lf__jinja_limits_default();
    lim.max_steps = 100000;
    /* a runaway loop stops at the step bound, naming the line */
    assert_int_equal(render_src("x\n{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                                &lim, &out),
                     LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("t.jinja:2: the render took more than 100000 steps");
    assert_null(out);
    /* range itself is capped as jinja2's sandbox caps it */
    assert_int_equal(render_src("{{ range(1000000) | length }}", NULL, &out), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("range of more than 100000 items");
    /* output */
    lim = lf__jinja_limits_default();
    lim.max_output = 1000;
    assert_int_equal(render_src("{% for i in range(100) %}0123456789012{% endfor %}", &lim, &out), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("longer than 1000 bytes");
    /* values */
    lim = lf__jinja_limits_default();
    lim.max_memory = 1 << 20;
    assert_int_equal(render_src("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                                "{% endfor %}{{ ns.s | length }}",
                                &lim, &out),
                     LF_ERR_RANGE);
    assert_int_equal(render_src("{{ 'x' * 100000000000 }}", &lim, &out), LF_ERR_RANGE);
    /* recursion */
    assert_int_equal(render_src("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &out), LF_ERR_RANGE);
    LF_ASSERT_ERR_CONTAINS("macro calls nest deeper than");
    /* overflow is an error, not a wrap */
    assert_int_equal(render_src("{{ 9223372036854775807 + 1 }}", NULL, &out), LF_ERR_RANGE);
    assert_int_equal(render_src("{{ 2 ** 64 }}", NULL, &out), LF_ERR_RANGE);
    /* an error at render time names the line */
    assert_int_equal(render_src("a\nb\n{{ undefined_x.y }}", NULL, &out), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("t.jinja:3:");
    assert_int_equal(render_src("{{ raise_exception('no system role') }}", NULL, &out), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("the template refused the conversation: no system role");
    /* case mapping of non-ASCII text is refused, not rendered differently from Python */
    assert_int_equal(render_src("{{ 'é' | upper }}", NULL, &out), LF_ERR_UNSUPPORTED);
    /* and a plain render works */
    LF_ASSERT_OK(render_src("{{ 'ok' }}", NULL, &out));
    assert_string_equal(out, "ok");
    free(out);
}

static void test_load_dir(void **state) {
    (void)state;
    char *dir = lf_test_tmpdir();
    char path[1024];
    /* tokenizer_config.json with the template and AddedToken-style special tokens */
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    const char *cfg = "{\"bos_token\": {\"content\": \"<B>\", \"lstrip\": false}, \"eos_token\": \"<E>\", "
                      "\"model_max_length\": 10, \"chat_template\": \"{{ bos_token }}{% for m in messages %}"
                      "{{ m.content }}{{ eos_token }}{% endfor %}\"}";
    LF_ASSERT_OK(lf_file_write_all(path, cfg, strlen(cfg)));
    lf__chat_jinja j;
    LF_ASSERT_OK(lf__chat_jinja_load(dir, &j));
    cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"hi\"}]");
    char *out = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf__chat_jinja_render(&j, msgs, 0, &out, &len, NULL, NULL));
    assert_string_equal(out, "<B>hi<E>");
    free(out);
    lf__chat_jinja_free(&j);
    /* chat_template.jinja beside it wins, as in transformers */
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    const char *jt = "[{{ messages[0].content }}]{{ eos_token }}\n";
    LF_ASSERT_OK(lf_file_write_all(path, jt, strlen(jt)));
    LF_ASSERT_OK(lf__chat_jinja_load(dir, &j));
    LF_ASSERT_OK(lf__chat_jinja_render(&j, msgs, 0, &out, &len, NULL, NULL));
    assert_string_equal(out, "[hi]<E>");
    free(out);
    lf__chat_jinja_free(&j);
    /* an error in the file names it and the line */
    LF_ASSERT_OK(lf_file_write_all(path, "ok\n{{ x | nope }}", 17));
    assert_int_equal(lf__chat_jinja_load(dir, &j), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("chat_template.jinja:2: unsupported filter 'nope'");
    /* no template at all */
    remove(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    LF_ASSERT_OK(lf_file_write_all(path, "{\"eos_token\": \"<E>\"}", 20));
    assert_int_equal(lf__chat_jinja_load(dir, &j), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("has no chat template");
    cJSON_Delete(msgs);
    lf_test_rmrf(dir);
    free(dir);
}

static void test_token_cases(void **state) {
    (void)state;
    const cJSON *convs = cJSON_GetObjectItem(g_fixture, "conversations"), *tc, *fam;
    int n = 0;
    cJSON_ArrayForEach(tc, cJSON_GetObjectItem(g_fixture, "token_cases")) {
        const char *fname = cJSON_GetObjectItem(tc, "family")->valuestring;
        const cJSON *found = NULL;
        cJSON_ArrayForEach(fam,
                           cJSON_GetObjectItem(g_fixture,
                                               "families")) if (!strcmp(cJSON_GetObjectItem(fam, "name")->valuestring,
                                                                        fname)) found = fam;
        assert_non_null(found);
        lf__chat_jinja j;
        lf__chat_template t;
        load_family(found, &j);
        LF_ASSERT_OK(lf__chat_template_from_jinja(&j, &t));
        char spec[1024];
        snprintf(spec, sizeof spec, "hf:" LF_SOURCE_DIR "/tests/fixtures/%s",
                 cJSON_GetObjectItem(tc, "tokenizer")->valuestring);
        lf_tokenizer *tok = NULL;
        LF_ASSERT_OK(lf_tokenizer_open(&tok, spec, NULL));
        char *json = cJSON_PrintUnformatted(
            cJSON_GetObjectItem(convs, cJSON_GetObjectItem(tc, "conversation")->valuestring));
        uint32_t *ids = NULL;
        uint8_t *mask = NULL;
        size_t m = 0, targets = 0;
        LF_ASSERT_OK(lf__prepare_conversation(&t, tok, json, strlen(json), 7777, 1, &ids, &mask, &m, &targets));
        const cJSON *want = cJSON_GetObjectItem(tc, "ids"), *wmask = cJSON_GetObjectItem(tc, "mask");
        assert_int_equal(m, (size_t)cJSON_GetArraySize(want) + 1);
        size_t wt = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            if (ids[i] != (uint32_t)cJSON_GetArrayItem(want, (int)i)->valueint)
                fail_msg("%s: id %zu is %u, transformers %d", fname, i, ids[i],
                         cJSON_GetArrayItem(want, (int)i)->valueint);
            if (mask[i] != cJSON_GetArrayItem(wmask, (int)i)->valueint)
                fail_msg("%s: mask %zu is %d, want %d", fname, i, mask[i], cJSON_GetArrayItem(wmask, (int)i)->valueint);
            wt += mask[i];
        }
        assert_int_equal(ids[m - 1], 7777); /* the end of text, not trained */
        assert_int_equal(mask[m - 1], 0);
        assert_int_equal(targets, wt);
        assert_true(targets > 0);
        cJSON_free(json);
        lf_free(ids);
        free(mask);
        lf_tokenizer_free(tok);
        lf__chat_template_free(&t);
        n++;
    }
    assert_int_equal(n, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_families),      cmocka_unit_test(test_snippets),
        cmocka_unit_test(test_content_spans), cmocka_unit_test(test_refused_at_compile_time),
        cmocka_unit_test(test_bounds),        cmocka_unit_test(test_load_dir),
        cmocka_unit_test(test_token_cases),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
