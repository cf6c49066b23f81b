/*
 * Fuzz harness: the OpenAI request parser, the chat template reader and
 * renderer, the response/SSE writers and the stop-string matcher
 * (src/serve/request.c, response.c, stop.c; src/data/chat_template.c).
 *
 * Input: one selector byte, then the payload.
 *   sel & 3 == 0  the payload is a POST /v1/completions body;
 *   sel & 3 == 1  a POST /v1/chat/completions body;
 *   sel & 3 == 2  a chat_template.json;
 *   sel & 3 == 3  a chat_template.json, a NUL, then a chat body.
 * The parser's limits are small (16 KiB bodies, context 64, 3 stop strings
 * of at most 8 bytes, vocabulary 1000, 8 messages) so caps are reached.
 *
 * Checks (FUZZ_CHECK traps on a failure):
 *   1. A refused body has a status in {400, 404, 413}, a message, and an
 *      error object that cJSON reads back with error.message a string and
 *      error.param null or the param given; the request is left empty.
 *   2. An accepted body: every string (model, user, prompts, messages, stop
 *      strings) is valid UTF-8, NUL-free, of the length given; numbers are
 *      within the limits; token ids below the vocabulary.
 *   3. Each accepted prompt text, used as a completion's text and as a token
 *      of its logprobs, and each message's content, gives response and chunk
 *      JSON that cJSON parses, with no raw CR/LF, and an SSE event that is
 *      "data: " + JSON + "\n\n".
 *   4. The stop strings of an accepted completions body, run over its first
 *      prompt's text cut in 1-, 3- and 7-byte pieces and whole, release the
 *      same text and stop at the same place every time, and the released
 *      text is a prefix of the input that does not contain a stop string.
 *   5. An accepted template renders a fixed conversation and the accepted
 *      chat's messages: the spans cover the output in order, content spans
 *      hold exactly the messages' contents, and (the SFT property) a
 *      conversation ending with an assistant turn renders as the prompt for
 *      the turns before it, then the content, then the assistant suffix,
 *      whenever the template's generation prompt is its assistant prefix.
 *   6. max_tokens resolution for prompt lengths 0, 1, 63, 64, 65: an answer
 *      fits the context, a refusal is 400 context_length_exceeded.
 */
#include <math.h>

#include <cjson/cJSON.h>

#include "fuzz_util.h"
#include "data/data_impl.h"
#include "serve/serve_impl.h"

#define BODY_MAX (16u << 10)

static int utf8_ok(const char *s, size_t n) {
    return lf__utf8_valid_prefix((const unsigned char *)s, n) == n && !memchr(s, '\0', n);
}

static void check_str(const char *s, size_t n) {
    FUZZ_CHECK(s != NULL);
    FUZZ_CHECK(strlen(s) == n);
    FUZZ_CHECK(utf8_ok(s, n));
}

static lf__serve_limits limits(void) {
    lf__serve_limits l = lf__serve_limits_default();
    l.model_name = "tiny";
    l.max_body = BODY_MAX;
    l.max_context = 64;
    l.max_tokens = 48;
    l.max_n = 4;
    l.max_prompts = 4;
    l.max_stop = 3;
    l.max_stop_len = 8;
    l.max_logprobs = 5;
    l.max_top_logprobs = 5;
    l.max_messages = 8;
    l.vocab_size = 1000;
    return l;
}

static void check_json(char *s, size_t len) {
    FUZZ_CHECK(s != NULL);
    FUZZ_CHECK(strlen(s) == len);
    FUZZ_CHECK(!memchr(s, '\n', len) && !memchr(s, '\r', len));
    FUZZ_CHECK(utf8_ok(s, len));
    cJSON *j = cJSON_ParseWithLength(s, len);
    FUZZ_CHECK(j != NULL);
    cJSON_Delete(j);
    size_t el;
    char *ev = lf__serve_sse_event(s, len, &el);
    FUZZ_CHECK(ev && el == len + 8 && memcmp(ev, "data: ", 6) == 0 && memcmp(ev + 6 + len, "\n\n", 2) == 0);
    free(ev);
    free(s);
}

/* Check 3 on one text. */
static void check_writers(lf__serve_api api, const char *text, size_t len) {
    static const lf__serve_meta meta = {.id = "cmpl-f", .model = "tiny", .created = 1};
    lf__serve_top top[2] = {{text, len, -0.5}, {text, len / 2, -1.5}};
    lf__serve_token_lp lp[2] = {{text, len, NAN, 0, NULL, 0}, {text, len, -0.25, (int)len, top, 2}};
    lf__serve_choice c[2] = {{.index = 0, .text = text, .len = len, .finish = LF__FINISH_STOP, .lp = lp, .n_lp = 2},
                             {.index = 1, .text = text, .len = len / 3, .first = 1}};
    lf__serve_usage u = {3, 4};
    size_t n;
    char *s = lf__serve_response_json(api, &meta, c, 2, &u, &n);
    check_json(s, n);
    s = lf__serve_chunk_json(api, &meta, c, 2, 1, NULL, &n);
    check_json(s, n);
    s = lf__serve_chunk_json(api, &meta, NULL, 0, 1, &u, &n);
    check_json(s, n);
}

/* Check 4. */
static void check_stops(const lf__serve_request *r) {
    if (r->n_prompts < 1 || !r->prompts[0].text) return;
    const char *t = r->prompts[0].text;
    size_t n = r->prompts[0].len;
    size_t first_len = 0;
    int first_stopped = -1;
    char *first = NULL;
    static const size_t steps[] = {1, 3, 7, (size_t)-1};
    for (size_t w = 0; w < sizeof steps / sizeof steps[0]; w++) {
        lf__stop_matcher *m = NULL;
        lf_status st = lf__stop_matcher_create(r->stop, r->stop_len, r->n_stop, &m);
        FUZZ_CHECK(st == LF_OK);
        char *got = malloc(n + 1);
        FUZZ_CHECK(got != NULL);
        size_t out = 0, pos = 0;
        int stopped = 0;
        while (pos < n && !stopped) {
            size_t k = steps[w] < n - pos ? steps[w] : n - pos;
            const char *o;
            size_t ol;
            FUZZ_CHECK(lf__stop_matcher_push(m, t + pos, k, &o, &ol, &stopped) == LF_OK);
            memcpy(got + out, o, ol);
            out += ol;
            pos += k;
        }
        if (!stopped) {
            const char *o;
            size_t ol;
            FUZZ_CHECK(lf__stop_matcher_flush(m, &o, &ol) == LF_OK);
            memcpy(got + out, o, ol);
            out += ol;
            FUZZ_CHECK(out == n);
        }
        FUZZ_CHECK(out <= n && memcmp(got, t, out) == 0);
        for (int i = 0; i < r->n_stop; i++) /* nothing released contains a stop string */
            for (size_t p = 0; p + r->stop_len[i] <= out; p++) FUZZ_CHECK(memcmp(got + p, r->stop[i], r->stop_len[i]) != 0);
        if (first_stopped < 0) {
            first = got;
            first_len = out;
            first_stopped = stopped;
        } else {
            FUZZ_CHECK(stopped == first_stopped && out == first_len && memcmp(got, first, out) == 0);
            free(got);
        }
        lf__stop_matcher_free(m);
    }
    free(first);
}

/* Check 5 for messages m[0..n). */
static void check_render(const lf__chat_template *t, const lf__serve_message *m, int n) {
    char *out = NULL;
    size_t len = 0;
    lf__chat_span *sp = NULL;
    int n_sp = 0;
    FUZZ_CHECK(lf__chat_template_render(t, m, n, 1, &out, &len, &sp, &n_sp) == LF_OK);
    FUZZ_CHECK(strlen(out) == len && utf8_ok(out, len));
    /* the content spans, in order, are the messages' contents (two contents
     * with only empty template text between them share one span) */
    size_t total = 0;
    for (int i = 0; i < n; i++) total += m[i].len;
    char *contents = malloc(total + 1), *spanned = malloc(total + 1);
    FUZZ_CHECK(contents && spanned);
    size_t c = 0, off = 0, sc = 0;
    for (int i = 0; i < n; i++) {
        memcpy(contents + c, m[i].content, m[i].len);
        c += m[i].len;
    }
    for (int i = 0; i < n_sp; i++) {
        FUZZ_CHECK(sp[i].off == off && sp[i].len > 0);
        if (i > 0) FUZZ_CHECK(sp[i].from_template != sp[i - 1].from_template);
        if (!sp[i].from_template) {
            FUZZ_CHECK(sc + sp[i].len <= total);
            memcpy(spanned + sc, out + sp[i].off, sp[i].len);
            sc += sp[i].len;
        }
        off += sp[i].len;
    }
    FUZZ_CHECK(off == len && sc == total && memcmp(spanned, contents, total) == 0);
    free(contents);
    free(spanned);
    free(out);
    free(sp);
    if (n >= 1 && m[n - 1].role == LF__ROLE_ASSISTANT &&
        strcmp(t->generation_prompt, t->prefix[LF__ROLE_ASSISTANT]) == 0) {
        char *train, *prompt;
        size_t tl, pl;
        FUZZ_CHECK(lf__chat_template_render(t, m, n, 0, &train, &tl, NULL, NULL) == LF_OK);
        FUZZ_CHECK(lf__chat_template_render(t, m, n - 1, 1, &prompt, &pl, NULL, NULL) == LF_OK);
        size_t sl = strlen(t->suffix[LF__ROLE_ASSISTANT]);
        FUZZ_CHECK(tl == pl + m[n - 1].len + sl);
        FUZZ_CHECK(memcmp(train, prompt, pl) == 0);
        FUZZ_CHECK(memcmp(train + pl, m[n - 1].content, m[n - 1].len) == 0);
        FUZZ_CHECK(memcmp(train + pl + m[n - 1].len, t->suffix[LF__ROLE_ASSISTANT], sl) == 0);
        free(train);
        free(prompt);
    }
}

static void check_template(const lf__chat_template *t) {
    FUZZ_CHECK(t->bos && t->generation_prompt && t->source);
    for (int r = 0; r < LF__ROLE_COUNT; r++) check_str(t->prefix[r], strlen(t->prefix[r]));
    FUZZ_CHECK(t->n_stop >= 0 && t->n_stop <= 4);
    static const lf__serve_message conv[] = {
        {LF__ROLE_SYSTEM, "sys", 3}, {LF__ROLE_USER, "", 0}, {LF__ROLE_USER, "q", 1}, {LF__ROLE_ASSISTANT, "a", 1}};
    check_render(t, conv, 4);
    check_render(t, conv, 3);
    check_render(t, conv + 1, 3);
}

/* Checks 1, 2, 3, 4, 6; renders through t when the body is a chat. */
static void run_body(lf__serve_api api, const char *body, size_t len, const lf__chat_template *t) {
    lf__serve_limits lim = limits();
    lf__serve_request r;
    lf__serve_error e;
    lf_status st = lf__serve_request_parse(api, body, len, &lim, &r, &e);
    fuzz_note("parse", st);
    if (st != LF_OK) {
        FUZZ_CHECK(e.status == 400 || e.status == 404 || e.status == 413);
        FUZZ_CHECK(e.message[0] != '\0' && lf_last_error()[0] != '\0');
        FUZZ_CHECK(r.impl_ == NULL && r.prompts == NULL && r.messages == NULL);
        size_t el;
        char *ej = lf__serve_error_json(&e, &el);
        FUZZ_CHECK(ej != NULL);
        cJSON *j = cJSON_ParseWithLength(ej, el);
        FUZZ_CHECK(j != NULL);
        const cJSON *eo = cJSON_GetObjectItemCaseSensitive(j, "error");
        FUZZ_CHECK(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(eo, "message")));
        const cJSON *pa = cJSON_GetObjectItemCaseSensitive(eo, "param");
        FUZZ_CHECK(e.param[0] ? cJSON_IsString(pa) : cJSON_IsNull(pa));
        cJSON_Delete(j);
        free(ej);
        return;
    }
    /* check 2 */
    if (r.model) check_str(r.model, strlen(r.model));
    if (r.user) check_str(r.user, strlen(r.user));
    FUZZ_CHECK(r.n >= 1 && r.n <= lim.max_n);
    FUZZ_CHECK(r.max_tokens >= -1 && r.max_tokens <= lim.max_tokens);
    FUZZ_CHECK(r.temperature >= 0 && r.temperature <= 2 && r.top_p >= 0 && r.top_p <= 1 && r.top_k >= 0);
    FUZZ_CHECK(r.n_stop >= 0 && r.n_stop <= lim.max_stop);
    for (int i = 0; i < r.n_stop; i++) {
        check_str(r.stop[i], r.stop_len[i]);
        FUZZ_CHECK(r.stop_len[i] >= 1 && r.stop_len[i] <= (size_t)lim.max_stop_len);
    }
    FUZZ_CHECK(!r.include_usage || r.stream);
    FUZZ_CHECK(r.top_logprobs >= 0 && (r.top_logprobs == 0 || r.logprobs));
    if (api == LF__SERVE_COMPLETIONS) {
        FUZZ_CHECK(r.n_prompts >= 1 && r.n_prompts <= lim.max_prompts && r.n_messages == 0);
        for (int i = 0; i < r.n_prompts; i++) {
            if (r.prompts[i].text) {
                check_str(r.prompts[i].text, r.prompts[i].len);
                check_writers(api, r.prompts[i].text, r.prompts[i].len);
            } else {
                FUZZ_CHECK(r.prompts[i].n_tokens >= 1 && r.prompts[i].n_tokens <= lim.max_context);
                for (int k = 0; k < r.prompts[i].n_tokens; k++)
                    FUZZ_CHECK(r.prompts[i].tokens[k] >= 0 && r.prompts[i].tokens[k] < lim.vocab_size);
            }
        }
        check_stops(&r);
    } else {
        FUZZ_CHECK(r.n_messages >= 1 && r.n_messages <= lim.max_messages && r.n_prompts == 0);
        for (int i = 0; i < r.n_messages; i++) {
            FUZZ_CHECK(r.messages[i].role >= LF__ROLE_SYSTEM && r.messages[i].role < LF__ROLE_COUNT);
            check_str(r.messages[i].content, r.messages[i].len);
            check_writers(api, r.messages[i].content, r.messages[i].len);
        }
        if (t) check_render(t, r.messages, r.n_messages);
    }
    /* check 6 */
    static const int plens[] = {0, 1, 63, 64, 65};
    for (size_t i = 0; i < sizeof plens / sizeof plens[0]; i++) {
        int mt = -5;
        lf__serve_error e2;
        st = lf__serve_resolve_max_tokens(&r, &lim, plens[i], &mt, &e2);
        if (st == LF_OK) FUZZ_CHECK(mt >= 0 && plens[i] + mt <= lim.max_context && mt <= lim.max_tokens);
        else FUZZ_CHECK(e2.status == 400 && e2.code && strcmp(e2.code, "context_length_exceeded") == 0);
    }
    lf__serve_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int sel = data[0] & 3;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    if (n > BODY_MAX + 64) n = BODY_MAX + 64; /* a little over the cap: the 413 path */
    if (sel == 0 || sel == 1) {
        run_body(sel == 0 ? LF__SERVE_COMPLETIONS : LF__SERVE_CHAT, p, n, NULL);
        return 0;
    }
    size_t tl = n;
    const char *nul = sel == 3 ? memchr(p, '\0', n) : NULL;
    if (nul) tl = (size_t)(nul - p);
    lf__chat_template t;
    lf_status st = lf__chat_template_parse(p, tl, "fuzz.json", &t);
    fuzz_note("template", st);
    if (st != LF_OK) {
        FUZZ_CHECK(lf_last_error()[0] != '\0');
        FUZZ_CHECK(t.bos == NULL && t.source == NULL);
        return 0;
    }
    check_template(&t);
    if (nul) run_body(LF__SERVE_CHAT, nul + 1, n - tl - 1, &t);
    lf__chat_template_free(&t);
    return 0;
}
