/*
 * Parsing and validation of OpenAI requests (POST /v1/completions and
 * POST /v1/chat/completions) and OpenAI-shaped errors; API in serve_impl.h.
 *
 * Order of checks, so each bad body gets the most useful answer:
 *   1. size (413) before anything is read;
 *   2. a byte-level scan of the whole body: a NUL byte, ill-formed UTF-8
 *      (RFC 8259 section 8.1: JSON text is UTF-8), a raw control character
 *      inside a string, a "\u0000" escape, or a number outside RFC 8259's
 *      grammar ("02", "1.", "1.e5") is refused with the byte offset (cJSON
 *      accepts the last three, and would cut a string at U+0000; a stricter
 *      reader in front of the server would refuse the numbers);
 *      lone surrogate escapes are left to cJSON, which refuses them;
 *   3. JSON syntax (cJSON; the error offset is its parse end), trailing
 *      bytes after the value, a root that is not an object;
 *   4. "model" (404 when it names another model), then each field: its
 *      type, then its range, then caps on lists and lengths; the message
 *      names the field (param, a path like "messages[2].content[0].text")
 *      and the value or size that is wrong.
 * Unknown fields are ignored (clients send extras); null counts as absent;
 * a known field twice in one object is refused.
 *
 * Storage: the parsed request points into the cJSON tree (strings are
 * cJSON's, NUL-terminated, and U+0000-free after step 2) and into blocks
 * allocated on a list, all released by lf__serve_request_free.
 *
 * Numbers: cJSON reads every number as a double. Integer fields require an
 * integral value within the field's range (so 2.5 and 1e30 are refused, and
 * 3.0 is 3); seeds are limited to |seed| < 2^53 so that the double is the
 * integer the client wrote.
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/utf8.h"
#include "serve_impl.h"

/* ---------------------------------------------------------------- limits */

lf__serve_limits lf__serve_limits_default(void) {
    lf__serve_limits l = {
        .model_name = NULL,
        .max_body = 1u << 20,
        .max_context = 1024,
        .max_tokens = 1024,
        .default_max_tokens = 16,
        .max_n = 8,
        .max_prompts = 64,
        .max_stop = 4,
        .max_stop_len = 256,
        .max_logprobs = 5,
        .max_top_logprobs = 20,
        .max_messages = 256,
        .vocab_size = 0,
        .max_sequences = 0,
    };
    return l;
}

/* ---------------------------------------------------------------- errors */

void lf__serve_error_set(lf__serve_error *e, int status, const char *type, const char *code, const char *param,
                         const char *fmt, ...) {
    if (!e) return;
    e->status = status;
    e->type = type ? type : "invalid_request_error";
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->retry_after = 0;
}

void lf__serve_error_unauthorized(lf__serve_error *e) {
    lf__serve_error_set(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                        "Incorrect or missing API key: send it as 'Authorization: Bearer <key>'.");
}

void lf__serve_error_not_found(lf__serve_error *e, const char *method, const char *path) {
    lf__serve_error_set(e, 404, "invalid_request_error", NULL, NULL, "Invalid URL (%s %s)", method ? method : "?",
                        path ? path : "?");
}

void lf__serve_error_method(lf__serve_error *e, const char *method, const char *path) {
    lf__serve_error_set(e, 405, "invalid_request_error", NULL, NULL, "Method %s is not allowed on %s",
                        method ? method : "?", path ? path : "?");
}

void lf__serve_error_too_large(lf__serve_error *e, size_t limit) {
    lf__serve_error_set(e, 413, "invalid_request_error", "request_too_large", NULL,
                        "The request body is larger than the %zu-byte limit.", limit);
}

void lf__serve_error_overloaded(lf__serve_error *e, int status, int retry_after_s, const char *why) {
    if (status == 429)
        lf__serve_error_set(e, 429, "rate_limit_error", "rate_limit_exceeded", NULL, "%s",
                            why ? why : "Too many requests are waiting; retry later.");
    else
        lf__serve_error_set(e, 503, "server_error", "overloaded", NULL, "%s",
                            why ? why : "The server is overloaded or shutting down; retry later.");
    e->retry_after = retry_after_s > 0 ? retry_after_s : 1;
}

void lf__serve_error_internal(lf__serve_error *e, const char *what) {
    lf__serve_error_set(e, 500, "server_error", NULL, NULL, "Internal error: %s", what ? what : "unknown");
}

char *lf__serve_error_json(const lf__serve_error *e, size_t *len) {
    if (len) *len = 0;
    if (!e) return NULL;
    cJSON *root = cJSON_CreateObject();
    cJSON *o = root ? cJSON_AddObjectToObject(root, "error") : NULL;
    char *s = NULL;
    /* The message and param are ours, made of valid UTF-8 pieces; a cut at
     * the buffer end could split a character, so sanitise. */
    char *msg = lf__serve_utf8_sanitize(e->message, strlen(e->message), NULL);
    char *param = e->param[0] ? lf__serve_utf8_sanitize(e->param, strlen(e->param), NULL) : NULL;
    if (o && msg && (!e->param[0] || param) && cJSON_AddStringToObject(o, "message", msg) &&
        cJSON_AddStringToObject(o, "type", e->type ? e->type : "invalid_request_error") &&
        (param ? cJSON_AddStringToObject(o, "param", param) != NULL : cJSON_AddNullToObject(o, "param") != NULL) &&
        (e->code ? cJSON_AddStringToObject(o, "code", e->code) != NULL : cJSON_AddNullToObject(o, "code") != NULL))
        s = cJSON_PrintUnformatted(root);
    free(msg);
    free(param);
    cJSON_Delete(root);
    if (!s) {
        lf_fail(LF_ERR_NOMEM, "serve: out of memory writing an error");
        return NULL;
    }
    /* cJSON's allocator is malloc here; hand out a plain malloc'd copy anyway */
    size_t n = strlen(s);
    char *out = malloc(n + 1);
    if (out) memcpy(out, s, n + 1);
    cJSON_free(s);
    if (!out) lf_fail(LF_ERR_NOMEM, "serve: out of memory writing an error");
    else if (len) *len = n;
    return out;
}

const char *lf__serve_role_name(lf__serve_role r) {
    switch (r) {
    case LF__ROLE_SYSTEM: return "system";
    case LF__ROLE_USER: return "user";
    case LF__ROLE_ASSISTANT: return "assistant";
    default: return NULL;
    }
}

/* ---------------------------------------------------------------- storage */

typedef struct req_store {
    cJSON *root;
    void **blocks;
    int n_blocks, cap_blocks;
} req_store;

static void *store_alloc(req_store *st, size_t bytes) {
    if (st->n_blocks == st->cap_blocks) {
        int cap = st->cap_blocks ? 2 * st->cap_blocks : 8;
        void **b = realloc(st->blocks, (size_t)cap * sizeof *b);
        if (!b) return NULL;
        st->blocks = b;
        st->cap_blocks = cap;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) st->blocks[st->n_blocks++] = p;
    return p;
}

void lf__serve_request_free(lf__serve_request *r) {
    if (!r) return;
    req_store *st = r->impl_;
    if (st) {
        for (int i = 0; i < st->n_blocks; i++) free(st->blocks[i]);
        free(st->blocks);
        cJSON_Delete(st->root);
        free(st);
    }
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------- the parse context */

typedef struct pctx {
    const lf__serve_limits *lim;
    lf__serve_error *err;
    req_store *st;
    lf__serve_api api;
} pctx;

/* A 400 naming the field; the status is LF_ERR_FORMAT for a wrong type or
 * syntax, LF_ERR_RANGE for a value out of bounds. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static lf_status
bad(pctx *c, lf_status st, const char *param, const char *fmt, ...) {
    c->err->status = 400;
    c->err->type = "invalid_request_error";
    c->err->code = NULL;
    c->err->retry_after = 0;
    snprintf(c->err->param, sizeof c->err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err->message, sizeof c->err->message, fmt, ap);
    va_end(ap);
    return lf_fail(st, "serve: %s", c->err->message);
}

static lf_status oom(pctx *c) {
    lf__serve_error_internal(c->err, "out of memory parsing the request");
    return lf_fail(LF_ERR_NOMEM, "serve: out of memory parsing the request");
}

static const char *type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsNull(v)) return "null";
    return "an unknown value";
}

/* The number as the client could have written it (for messages). */
static const char *num_text(double v, char buf[LF_JSON_NUMBER_MAX]) {
    if (isnan(v)) return "NaN";
    if (isinf(v)) return v > 0 ? "a number too large for a double" : "a number too negative for a double";
    lf_json_number(buf, LF_JSON_NUMBER_MAX, v);
    return buf;
}

/* The member `name` of obj, NULL when absent or null; refuses a duplicate. */
static lf_status member(pctx *c, const cJSON *obj, const char *name, const char *param, const cJSON **out) {
    *out = NULL;
    const cJSON *found = NULL;
    for (const cJSON *it = obj->child; it; it = it->next) {
        if (!it->string || strcmp(it->string, name) != 0) continue;
        if (found) return bad(c, LF_ERR_FORMAT, param, "'%s' is given more than once", param);
        found = it;
    }
    if (found && !cJSON_IsNull(found)) *out = found;
    return LF_OK;
}

static lf_status get_bool(pctx *c, const cJSON *obj, const char *name, const char *param, int *out) {
    const cJSON *v;
    lf_status st = member(c, obj, name, param, &v);
    if (st != LF_OK || !v) return st;
    if (!cJSON_IsBool(v)) return bad(c, LF_ERR_FORMAT, param, "'%s' must be a boolean, got %s", param, type_name(v));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return LF_OK;
}

/* An integral number in [lo, hi]. *given set to 1 when present. */
static lf_status get_int(pctx *c, const cJSON *obj, const char *name, const char *param, double lo, double hi,
                         int64_t *out, int *given) {
    const cJSON *v;
    lf_status st = member(c, obj, name, param, &v);
    if (st != LF_OK || !v) return st;
    char b1[LF_JSON_NUMBER_MAX], b2[LF_JSON_NUMBER_MAX], b3[LF_JSON_NUMBER_MAX];
    if (!cJSON_IsNumber(v)) return bad(c, LF_ERR_FORMAT, param, "'%s' must be an integer, got %s", param, type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return bad(c, LF_ERR_FORMAT, param, "'%s' must be an integer, got %s", param, num_text(d, b1));
    if (d < lo || d > hi)
        return bad(c, LF_ERR_RANGE, param, "'%s' must be an integer in [%s, %s], got %s", param, num_text(lo, b2),
                   num_text(hi, b3), num_text(d, b1));
    *out = (int64_t)d;
    if (given) *given = 1;
    return LF_OK;
}

static lf_status get_number(pctx *c, const cJSON *obj, const char *name, const char *param, double lo, double hi,
                            double *out) {
    const cJSON *v;
    lf_status st = member(c, obj, name, param, &v);
    if (st != LF_OK || !v) return st;
    char b1[LF_JSON_NUMBER_MAX], b2[LF_JSON_NUMBER_MAX], b3[LF_JSON_NUMBER_MAX];
    if (!cJSON_IsNumber(v)) return bad(c, LF_ERR_FORMAT, param, "'%s' must be a number, got %s", param, type_name(v));
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi)) /* NaN and infinities fail too */
        return bad(c, LF_ERR_RANGE, param, "'%s' must be a number in [%s, %s], got %s", param, num_text(lo, b2),
                   num_text(hi, b3), num_text(d, b1));
    *out = d;
    return LF_OK;
}

static lf_status get_string(pctx *c, const cJSON *obj, const char *name, const char *param, size_t max_len,
                            const char **out) {
    const cJSON *v;
    lf_status st = member(c, obj, name, param, &v);
    if (st != LF_OK || !v) return st;
    if (!cJSON_IsString(v)) return bad(c, LF_ERR_FORMAT, param, "'%s' must be a string, got %s", param, type_name(v));
    size_t n = strlen(v->valuestring);
    if (n > max_len)
        return bad(c, LF_ERR_RANGE, param, "'%s' is %zu bytes long, more than the limit of %zu", param, n, max_len);
    *out = v->valuestring;
    return LF_OK;
}

/* ---------------------------------------------------------------- step 2: the byte scan */

static int is_digit(unsigned char ch) { return ch >= '0' && ch <= '9'; }

/* The length of the JSON number at b (RFC 8259 section 6:
 * -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), or 0 when the characters a
 * number is made of there do not form one. */
static size_t json_number_len(const unsigned char *b, size_t len) {
    size_t i = b[0] == '-';
    if (i >= len || !is_digit(b[i])) return 0;
    if (b[i] == '0') i++;
    else
        while (i < len && is_digit(b[i])) i++;
    if (i < len && b[i] == '.') {
        size_t d = ++i;
        while (i < len && is_digit(b[i])) i++;
        if (i == d) return 0;
    }
    if (i < len && (b[i] == 'e' || b[i] == 'E')) {
        i++;
        if (i < len && (b[i] == '+' || b[i] == '-')) i++;
        size_t d = i;
        while (i < len && is_digit(b[i])) i++;
        if (i == d) return 0;
    }
    if (i < len && (is_digit(b[i]) || b[i] == '.' || b[i] == 'e' || b[i] == 'E' || b[i] == '+' || b[i] == '-'))
        return 0;
    return i;
}

static lf_status scan_body(pctx *c, const unsigned char *b, size_t len) {
    size_t ok = lf__utf8_valid_prefix(b, len);
    if (ok < len) return bad(c, LF_ERR_FORMAT, NULL, "The body is not valid UTF-8 (at byte %zu)", ok);
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = b[i];
        if (ch == 0) return bad(c, LF_ERR_FORMAT, NULL, "The body holds a NUL byte (at byte %zu)", i);
        if (!in_str) {
            if (ch == '"') in_str = 1;
            if (ch == '-' || is_digit(ch)) {
                size_t n = json_number_len(b + i, len - i);
                if (!n) return bad(c, LF_ERR_FORMAT, NULL, "Invalid JSON: a malformed number (at byte %zu)", i);
                i += n - 1;
            }
            continue;
        }
        if (ch == '"') {
            in_str = 0;
        } else if (ch < 0x20) {
            return bad(c, LF_ERR_FORMAT, NULL,
                       "Invalid JSON: an unescaped control character 0x%02x inside a string (at byte %zu)", ch, i);
        } else if (ch == '\\' && i + 1 < len) {
            if (b[i + 1] == 'u' && i + 5 < len && b[i + 2] == '0' && b[i + 3] == '0' && b[i + 4] == '0' &&
                b[i + 5] == '0')
                return bad(c, LF_ERR_FORMAT, NULL, "Strings may not hold U+0000 (\\u0000 at byte %zu)", i);
            i++; /* the escaped character: never a closing quote */
        }
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- fields */

static lf_status parse_stop(pctx *c, const cJSON *root, lf__serve_request *r) {
    const cJSON *v;
    lf_status st = member(c, root, "stop", "stop", &v);
    if (st != LF_OK || !v) return st;
    int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0)
        return bad(c, LF_ERR_FORMAT, "stop", "'stop' must be a string or a list of strings, got %s", type_name(v));
    if (n > c->lim->max_stop)
        return bad(c, LF_ERR_RANGE, "stop", "'stop' has %d strings, more than the limit of %d", n, c->lim->max_stop);
    if (n == 0) return LF_OK;
    const char **s = store_alloc(c->st, (size_t)n * sizeof *s);
    size_t *l = store_alloc(c->st, (size_t)n * sizeof *l);
    if (!s || !l) return oom(c);
    int i = 0;
    for (const cJSON *it = cJSON_IsString(v) ? v : v->child; it && i < n; it = it->next, i++) {
        char param[32];
        if (cJSON_IsString(v)) snprintf(param, sizeof param, "stop");
        else snprintf(param, sizeof param, "stop[%d]", i);
        if (!cJSON_IsString(it))
            return bad(c, LF_ERR_FORMAT, param, "'%s' must be a string, got %s", param, type_name(it));
        size_t len = strlen(it->valuestring);
        if (len == 0) return bad(c, LF_ERR_RANGE, param, "'%s' is an empty string", param);
        if (len > (size_t)c->lim->max_stop_len)
            return bad(c, LF_ERR_RANGE, param, "'%s' is %zu bytes long, more than the limit of %d", param, len,
                       c->lim->max_stop_len);
        s[i] = it->valuestring;
        l[i] = len;
        if (cJSON_IsString(v)) break;
    }
    r->stop = s;
    r->stop_len = l;
    r->n_stop = n;
    return LF_OK;
}

/* A list of token ids (param names the list) into a block. */
static lf_status parse_ids(pctx *c, const cJSON *arr, const char *param, lf__serve_prompt *p) {
    int n = cJSON_GetArraySize(arr);
    if (n == 0) return bad(c, LF_ERR_RANGE, param, "'%s' is an empty list of token ids", param);
    if (n > c->lim->max_context)
        return bad(c, LF_ERR_RANGE, param,
                   "'%s' has %d tokens, more than this model's maximum context length of %d tokens", param, n,
                   c->lim->max_context);
    int32_t *ids = store_alloc(c->st, (size_t)n * sizeof *ids);
    if (!ids) return oom(c);
    double hi = c->lim->vocab_size > 0 ? (double)c->lim->vocab_size - 1 : 2147483647.0;
    int i = 0;
    for (const cJSON *it = arr->child; it; it = it->next, i++) {
        char ip[160], b1[LF_JSON_NUMBER_MAX];
        snprintf(ip, sizeof ip, "%s[%d]", param, i);
        if (!cJSON_IsNumber(it))
            return bad(c, LF_ERR_FORMAT, ip, "'%s' must be a token id (an integer), got %s", ip, type_name(it));
        double d = it->valuedouble;
        if (!isfinite(d) || d != floor(d))
            return bad(c, LF_ERR_FORMAT, ip, "'%s' must be a token id (an integer), got %s", ip, num_text(d, b1));
        if (d < 0 || d > hi)
            return bad(c, LF_ERR_RANGE, ip, "'%s' = %s is not a token id (0..%.0f)", ip, num_text(d, b1), hi);
        ids[i] = (int32_t)d;
    }
    p->tokens = ids;
    p->n_tokens = n;
    return LF_OK;
}

static lf_status parse_prompt(pctx *c, const cJSON *root, lf__serve_request *r) {
    const cJSON *v;
    lf_status st = member(c, root, "prompt", "prompt", &v);
    if (st != LF_OK) return st;
    if (!v) return bad(c, LF_ERR_FORMAT, "prompt", "'prompt' is required");
    if (cJSON_IsString(v)) {
        lf__serve_prompt *p = store_alloc(c->st, sizeof *p);
        if (!p) return oom(c);
        p->text = v->valuestring;
        p->len = strlen(v->valuestring);
        r->prompts = p;
        r->n_prompts = 1;
        return LF_OK;
    }
    if (!cJSON_IsArray(v))
        return bad(c, LF_ERR_FORMAT, "prompt",
                   "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token "
                   "ids, got %s",
                   type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n == 0) return bad(c, LF_ERR_RANGE, "prompt", "'prompt' is an empty list");
    const cJSON *first = v->child;
    if (cJSON_IsNumber(first)) { /* one prompt of token ids */
        lf__serve_prompt *p = store_alloc(c->st, sizeof *p);
        if (!p) return oom(c);
        st = parse_ids(c, v, "prompt", p);
        if (st != LF_OK) return st;
        r->prompts = p;
        r->n_prompts = 1;
        return LF_OK;
    }
    if (!cJSON_IsString(first) && !cJSON_IsArray(first))
        return bad(c, LF_ERR_FORMAT, "prompt[0]",
                   "'prompt[0]' must be a string, a token id or a list of token ids, got %s", type_name(first));
    if (n > c->lim->max_prompts)
        return bad(c, LF_ERR_RANGE, "prompt",
                   "'prompt' has %d prompts; this server takes at most %d in one request (llmforge serve "
                   "--max-prompts). Send fewer prompts per request.",
                   n, c->lim->max_prompts);
    lf__serve_prompt *p = store_alloc(c->st, (size_t)n * sizeof *p);
    if (!p) return oom(c);
    int i = 0;
    for (const cJSON *it = first; it; it = it->next, i++) {
        char ip[32];
        snprintf(ip, sizeof ip, "prompt[%d]", i);
        if (cJSON_IsString(first)) {
            if (!cJSON_IsString(it))
                return bad(c, LF_ERR_FORMAT, ip, "'%s' must be a string like 'prompt[0]', got %s", ip, type_name(it));
            p[i].text = it->valuestring;
            p[i].len = strlen(it->valuestring);
        } else {
            if (!cJSON_IsArray(it))
                return bad(c, LF_ERR_FORMAT, ip, "'%s' must be a list of token ids like 'prompt[0]', got %s", ip,
                           type_name(it));
            st = parse_ids(c, it, ip, &p[i]);
            if (st != LF_OK) return st;
        }
    }
    r->prompts = p;
    r->n_prompts = n;
    return LF_OK;
}

static lf_status parse_messages(pctx *c, const cJSON *root, lf__serve_request *r) {
    const cJSON *v;
    lf_status st = member(c, root, "messages", "messages", &v);
    if (st != LF_OK) return st;
    if (!v) return bad(c, LF_ERR_FORMAT, "messages", "'messages' is required");
    if (!cJSON_IsArray(v)) return bad(c, LF_ERR_FORMAT, "messages", "'messages' must be a list, got %s", type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n == 0) return bad(c, LF_ERR_RANGE, "messages", "'messages' is an empty list");
    if (n > c->lim->max_messages)
        return bad(c, LF_ERR_RANGE, "messages", "'messages' has %d messages, more than the limit of %d", n,
                   c->lim->max_messages);
    lf__serve_message *m = store_alloc(c->st, (size_t)n * sizeof *m);
    if (!m) return oom(c);
    int i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        char mp[48], fp[96];
        snprintf(mp, sizeof mp, "messages[%d]", i);
        if (!cJSON_IsObject(it)) return bad(c, LF_ERR_FORMAT, mp, "'%s' must be an object, got %s", mp, type_name(it));
        const char *role = NULL;
        snprintf(fp, sizeof fp, "%s.role", mp);
        st = get_string(c, it, "role", fp, 64, &role);
        if (st != LF_OK) return st;
        if (!role) return bad(c, LF_ERR_FORMAT, fp, "'%s' is required", fp);
        if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0) m[i].role = LF__ROLE_SYSTEM;
        else if (strcmp(role, "user") == 0) m[i].role = LF__ROLE_USER;
        else if (strcmp(role, "assistant") == 0) m[i].role = LF__ROLE_ASSISTANT;
        else
            return bad(c, LF_ERR_RANGE, fp, "'%s' is '%s'; supported roles are system, developer, user and assistant",
                       fp, role);
        const char *name = NULL;
        snprintf(fp, sizeof fp, "%s.name", mp);
        st = get_string(c, it, "name", fp, 256, &name); /* checked, not used */
        if (st != LF_OK) return st;
        const cJSON *content;
        snprintf(fp, sizeof fp, "%s.content", mp);
        st = member(c, it, "content", fp, &content);
        if (st != LF_OK) return st;
        if (!content) {
            if (m[i].role != LF__ROLE_ASSISTANT) return bad(c, LF_ERR_FORMAT, fp, "'%s' is required", fp);
            m[i].content = "";
            m[i].len = 0;
            continue;
        }
        if (cJSON_IsString(content)) {
            m[i].content = content->valuestring;
            m[i].len = strlen(content->valuestring);
            continue;
        }
        if (!cJSON_IsArray(content))
            return bad(c, LF_ERR_FORMAT, fp, "'%s' must be a string or a list of content parts, got %s", fp,
                       type_name(content));
        /* text parts, joined with "\n" */
        size_t total = 0;
        int k = 0;
        for (const cJSON *part = content->child; part; part = part->next, k++) {
            char pp[128], tp[140];
            snprintf(pp, sizeof pp, "%s[%d]", fp, k);
            if (!cJSON_IsObject(part))
                return bad(c, LF_ERR_FORMAT, pp, "'%s' must be a content part object, got %s", pp, type_name(part));
            const char *type = NULL, *text = NULL;
            snprintf(tp, sizeof tp, "%s.type", pp);
            st = get_string(c, part, "type", tp, 64, &type);
            if (st != LF_OK) return st;
            if (!type) return bad(c, LF_ERR_FORMAT, tp, "'%s' is required", tp);
            if (strcmp(type, "text") != 0)
                return bad(c, LF_ERR_RANGE, tp, "'%s' is '%s'; only text content parts are supported", tp, type);
            snprintf(tp, sizeof tp, "%s.text", pp);
            st = get_string(c, part, "text", tp, (size_t)-1, &text);
            if (st != LF_OK) return st;
            if (!text) return bad(c, LF_ERR_FORMAT, tp, "'%s' is required", tp);
            total += strlen(text) + (k > 0);
        }
        char *joined = store_alloc(c->st, total + 1);
        if (!joined) return oom(c);
        size_t off = 0;
        k = 0;
        for (const cJSON *part = content->child; part; part = part->next, k++) {
            const char *text = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
            size_t tl = strlen(text);
            if (k > 0) joined[off++] = '\n';
            memcpy(joined + off, text, tl);
            off += tl;
        }
        joined[off] = '\0';
        m[i].content = joined;
        m[i].len = off;
    }
    r->messages = m;
    r->n_messages = n;
    return LF_OK;
}

static lf_status parse_fields(pctx *c, const cJSON *root, lf__serve_request *r) {
    const lf__serve_limits *lim = c->lim;
    lf_status st;
    const int chat = c->api == LF__SERVE_CHAT;

    /* model first: an unknown model is a 404 whatever else is wrong */
    if ((st = get_string(c, root, "model", "model", 256, &r->model)) != LF_OK) return st;
    r->adapter = 0;
    for (int i = 0; r->model && i < lim->n_adapters && !r->adapter; i++)
        if (!strcmp(r->model, lim->adapters[i])) r->adapter = i + 1;
    if (r->model && !r->adapter && lim->model_name && strcmp(r->model, lim->model_name) != 0) {
        char names[400];
        size_t used = (size_t)snprintf(names, sizeof names, "'%s'", lim->model_name);
        for (int i = 0; i < lim->n_adapters && used < sizeof names; i++)
            used += (size_t)snprintf(names + used, sizeof names - used, ", '%s'", lim->adapters[i]);
        lf__serve_error_set(c->err, 404, "invalid_request_error", "model_not_found", "model",
                            "The model '%s' does not exist: this server serves %s.", r->model, names);
        return lf_fail(LF_ERR_NOT_FOUND, "serve: %s", c->err->message);
    }
    if ((st = get_string(c, root, "user", "user", 256, &r->user)) != LF_OK) return st;

    if (chat) st = parse_messages(c, root, r);
    else st = parse_prompt(c, root, r);
    if (st != LF_OK) return st;

    int64_t iv;
    int given = 0;
    if ((st = get_int(c, root, "max_tokens", "max_tokens", chat ? 1 : 0, lim->max_tokens, &iv, &given)) != LF_OK)
        return st;
    if (given) r->max_tokens = (int)iv;
    if (chat) {
        given = 0;
        if ((st = get_int(c, root, "max_completion_tokens", "max_completion_tokens", 1, lim->max_tokens, &iv,
                          &given)) != LF_OK)
            return st;
        if (given) r->max_tokens = (int)iv;
    }
    if ((st = get_number(c, root, "temperature", "temperature", 0, 2, &r->temperature)) != LF_OK) return st;
    if ((st = get_number(c, root, "top_p", "top_p", 0, 1, &r->top_p)) != LF_OK) return st;
    given = 0;
    if ((st = get_int(c, root, "top_k", "top_k", -1, 1e9, &iv, &given)) != LF_OK) return st;
    if (given) r->top_k = iv < 0 ? 0 : (int)iv;
    given = 0;
    if ((st = get_int(c, root, "seed", "seed", -9007199254740991.0, 9007199254740991.0, &iv, &given)) != LF_OK)
        return st;
    if (given) {
        r->has_seed = 1;
        r->seed = iv;
    }
    if ((st = parse_stop(c, root, r)) != LF_OK) return st;
    given = 0;
    if ((st = get_int(c, root, "n", "n", 1, lim->max_n, &iv, &given)) != LF_OK) return st;
    if (given) r->n = (int)iv;
    /* more sequences than the engine ever holds would wait for room that
     * never comes: not a 429 (retrying cannot help) but a 400 saying why */
    const int n_seq = (chat ? 1 : r->n_prompts) * r->n;
    if (lim->max_sequences > 0 && n_seq > lim->max_sequences) {
        if (chat)
            return bad(c, LF_ERR_RANGE, "n",
                       "'n' is %d; this server runs at most %d sequences at once (its KV-cache "
                       "slots plus its queue: serve --max-batch + --max-queue), so the request can never run. "
                       "Ask for fewer choices.",
                       r->n, lim->max_sequences);
        return bad(c, LF_ERR_RANGE, "n",
                   "The request asks for %d sequences (%d prompts x n=%d); this server runs at "
                   "most %d at once (its KV-cache slots plus its queue: serve --max-batch + --max-queue), so it can "
                   "never run. Send fewer prompts or a "
                   "smaller 'n'.",
                   n_seq, r->n_prompts, r->n, lim->max_sequences);
    }
    if (!chat && (st = get_bool(c, root, "echo", "echo", &r->echo)) != LF_OK) return st;

    if (chat) {
        if ((st = get_bool(c, root, "logprobs", "logprobs", &r->logprobs)) != LF_OK) return st;
        given = 0;
        if ((st = get_int(c, root, "top_logprobs", "top_logprobs", 0, lim->max_top_logprobs, &iv, &given)) != LF_OK)
            return st;
        if (given) {
            if (!r->logprobs) return bad(c, LF_ERR_RANGE, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
            r->top_logprobs = (int)iv;
        }
    } else {
        given = 0;
        if ((st = get_int(c, root, "logprobs", "logprobs", 0, lim->max_logprobs, &iv, &given)) != LF_OK) return st;
        if (given) {
            r->logprobs = 1;
            r->top_logprobs = (int)iv;
        }
    }

    if ((st = get_bool(c, root, "ignore_eos", "ignore_eos", &r->ignore_eos)) != LF_OK) return st;
    if ((st = get_bool(c, root, "stream", "stream", &r->stream)) != LF_OK) return st;
    const cJSON *so;
    if ((st = member(c, root, "stream_options", "stream_options", &so)) != LF_OK) return st;
    if (so) {
        if (!cJSON_IsObject(so))
            return bad(c, LF_ERR_FORMAT, "stream_options", "'stream_options' must be an object, got %s", type_name(so));
        if (!r->stream)
            return bad(c, LF_ERR_RANGE, "stream_options", "'stream_options' is only allowed when 'stream' is true");
        if ((st = get_bool(c, so, "include_usage", "stream_options.include_usage", &r->include_usage)) != LF_OK)
            return st;
    }
    if ((st = get_number(c, root, "presence_penalty", "presence_penalty", -2, 2, &r->presence_penalty)) != LF_OK)
        return st;
    if ((st = get_number(c, root, "frequency_penalty", "frequency_penalty", -2, 2, &r->frequency_penalty)) != LF_OK)
        return st;
    return LF_OK;
}

static int limits_ok(const lf__serve_limits *l) {
    return l->max_body > 0 && l->max_context > 0 && l->max_tokens > 0 && l->default_max_tokens > 0 && l->max_n > 0 &&
           l->max_prompts > 0 && l->max_stop >= 0 && l->max_stop_len > 0 && l->max_logprobs >= 0 &&
           l->max_top_logprobs >= 0 && l->max_messages > 0 && l->vocab_size >= 0 && l->max_sequences >= 0;
}

lf_status lf__serve_request_parse(lf__serve_api api, const char *body, size_t len, const lf__serve_limits *lim,
                                  lf__serve_request *out, lf__serve_error *err) {
    lf__serve_error scratch;
    if (!err) err = &scratch;
    memset(err, 0, sizeof *err);
    if (out) memset(out, 0, sizeof *out);
    if (!out || !lim || (!body && len > 0) || (api != LF__SERVE_COMPLETIONS && api != LF__SERVE_CHAT) ||
        !limits_ok(lim)) {
        lf__serve_error_internal(err, "bad arguments to the request parser");
        return lf_fail(LF_ERR_INVALID_ARG, "serve: bad arguments to lf__serve_request_parse");
    }
    if (len > lim->max_body) {
        lf__serve_error_too_large(err, lim->max_body);
        return lf_fail(LF_ERR_RANGE, "serve: request body of %zu bytes is larger than the %zu-byte limit", len,
                       lim->max_body);
    }
    req_store *st = calloc(1, sizeof *st);
    if (!st) {
        lf__serve_error_internal(err, "out of memory parsing the request");
        return lf_fail(LF_ERR_NOMEM, "serve: out of memory parsing the request");
    }
    out->impl_ = st;
    out->api = api;
    out->max_tokens = -1;
    out->temperature = 1;
    out->top_p = 1;
    out->n = 1;
    pctx c = {.lim = lim, .err = err, .st = st, .api = api};

    lf_status s = scan_body(&c, (const unsigned char *)body, len);
    if (s != LF_OK) goto fail;
    if (len == 0) {
        s = bad(&c, LF_ERR_FORMAT, NULL, "The body is empty: expected a JSON object");
        goto fail;
    }
    const char *end = NULL;
    st->root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!st->root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        s = bad(&c, LF_ERR_FORMAT, NULL, "Invalid JSON in the body (near byte %zu)", at);
        goto fail;
    }
    size_t at = (size_t)(end - body);
    while (at < len && (body[at] == ' ' || body[at] == '\t' || body[at] == '\n' || body[at] == '\r')) at++;
    if (at < len) {
        s = bad(&c, LF_ERR_FORMAT, NULL, "Invalid JSON: unexpected data after the value (at byte %zu)", at);
        goto fail;
    }
    if (!cJSON_IsObject(st->root)) {
        s = bad(&c, LF_ERR_FORMAT, NULL, "The body must be a JSON object, got %s", type_name(st->root));
        goto fail;
    }
    s = parse_fields(&c, st->root, out);
    if (s != LF_OK) goto fail;
    return LF_OK;
fail:
    lf__serve_request_free(out);
    return s;
}

/* ---------------------------------------------------------------- messages */

void lf__serve_client_message(char *dst, size_t cap, const char *msg) {
    if (!dst || cap == 0) return;
    size_t o = 0;
    for (const char *p = msg ? msg : ""; *p && o + 1 < cap;) {
        const char *close = *p == '\'' ? strchr(p + 1, '\'') : NULL;
        const char *slash = NULL;
        for (const char *q = p + 1; close && q < close; q++)
            if (*q == '/') slash = q;
        if (slash) { /* 'dir/.../name' -> 'name' */
            dst[o++] = '\'';
            for (const char *q = slash + 1; q <= close && o + 1 < cap; q++) dst[o++] = *q;
            p = close + 1;
        } else if (close) { /* a quoted span without a path: as it is */
            for (; p <= close && o + 1 < cap; p++) dst[o++] = *p;
        } else {
            dst[o++] = *p++;
        }
    }
    dst[o] = '\0';
}

/* ---------------------------------------------------------------- sampling */

/* A value in (0, FLT_TRUE_MIN / 2] rounds to 0.0f, a sentinel of the
 * engine: it becomes FLT_TRUE_MIN, the float nearest to what was asked. */
static float positive_float(double v) {
    const float f = (float)v;
    return v > 0 && f == 0.0f ? FLT_TRUE_MIN : f;
}

void lf__serve_request_sampling(const lf__serve_request *r, float *temperature, float *top_p) {
    *temperature = positive_float(r->temperature);
    if (r->top_p >= 1.0) *top_p = 0.0f;              /* off */
    else if (r->top_p <= 0.0) *top_p = FLT_TRUE_MIN; /* 0: the most likely token only */
    else {
        const float f = positive_float(r->top_p);
        *top_p = f >= 1.0f ? 0.0f : f; /* 1 - 2^-25 rounds to 1.0f: no filter, as asked within a float */
    }
}

/* ---------------------------------------------------------------- context */

lf_status lf__serve_resolve_max_tokens(const lf__serve_request *r, const lf__serve_limits *lim, int n_prompt_tokens,
                                       int *max_tokens, lf__serve_error *err) {
    lf__serve_error scratch;
    if (!err) err = &scratch;
    if (!r || !lim || !max_tokens || n_prompt_tokens < 0) {
        lf__serve_error_internal(err, "bad arguments to lf__serve_resolve_max_tokens");
        return lf_fail(LF_ERR_INVALID_ARG, "serve: bad arguments to lf__serve_resolve_max_tokens");
    }
    const int chat = r->api == LF__SERVE_CHAT;
    const char *what = chat ? "messages" : "prompt";
    const long ctx = lim->max_context, p = n_prompt_tokens;
    if (r->max_tokens >= 0) {
        if (p + r->max_tokens > ctx) {
            lf__serve_error_set(err, 400, "invalid_request_error", "context_length_exceeded", what,
                                "This model's maximum context length is %ld tokens, but %ld tokens were requested "
                                "(%ld in the %s, %d for the completion). Reduce the %s or max_tokens.",
                                ctx, p + r->max_tokens, p, what, r->max_tokens, what);
            return lf_fail(LF_ERR_RANGE, "serve: %s", err->message);
        }
        *max_tokens = r->max_tokens;
        return LF_OK;
    }
    long room = ctx - p;
    if (room <= 0) {
        lf__serve_error_set(err, 400, "invalid_request_error", "context_length_exceeded", what,
                            "This model's maximum context length is %ld tokens, but the %s alone has %ld tokens, "
                            "leaving no room for the completion. Reduce the %s.",
                            ctx, what, p, what);
        return lf_fail(LF_ERR_RANGE, "serve: %s", err->message);
    }
    long cap = chat ? lim->max_tokens : lim->default_max_tokens;
    *max_tokens = (int)(room < cap ? room : cap);
    return LF_OK;
}
