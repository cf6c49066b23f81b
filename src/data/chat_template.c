/*
 * Chat templates (API in chat_template.h; the file format in
 * docs/serving.md): the built-in ChatML, templates read from a checkpoint's
 * or a dataset's chat_template.json, rendering a conversation into the
 * prompt text (the chat endpoint) or a fine-tuning pair into prompt and
 * response parts (`llmforge prepare --chat-template`), and writing a
 * template back as chat_template.json (what prepare puts beside the shards
 * and the trainer copies into every checkpoint).
 *
 * Two kinds of template. A Hugging Face checkpoint carries a Jinja
 * template (a program: loops, conditions, string methods); it is rendered
 * by the bounded interpreter of jinja*.c (chat_jinja.c loads it from
 * tokenizer_config.json or chat_template.jinja) and lives in the `jinja`
 * field, byte for byte what transformers renders. llmforge's own format
 * (chat_template.json with roles) stays: fixed text around each message by
 * role plus the text that opens the assistant's turn, rendered by
 * concatenation, linear in the output, with nothing to evaluate; it is
 * what a template without loops needs and what the built-in ChatML is. A
 * Jinja template is written back as chat_template.json too (the "jinja"
 * kind: the source and its special tokens), so prepare's copy goes into
 * checkpoints and the server renders what training saw. The same template
 * serves the SFT data path: a training pair renders as the prompt (the
 * conversation, then generation_prompt) and the response (the assistant's
 * content, then suffix[assistant]), so a model fine-tuned with it answers
 * through the server exactly as it was trained; with a Jinja template
 * pairs and `messages` records go through chat_messages.c instead (the
 * assistant turns found by rendering prefixes). (It is in src/data, not
 * src/serve, so that both can use it: data depends only on core.)
 *
 * Invariants: every template string is valid UTF-8 without U+0000 and at
 * most 4096 bytes; the render's spans cover its output exactly, in order,
 * with no empty span, and tell template text from message content.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "data_impl.h"

#define TEMPLATE_STR_MAX 4096
#define TEMPLATE_FILE_MAX (1u << 20)

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p) memcpy(p, s, n + 1);
    return p;
}

void lf__chat_template_free(lf__chat_template *t) {
    if (!t) return;
    free(t->bos);
    for (int r = 0; r < LF__ROLE_COUNT; r++) {
        free(t->prefix[r]);
        free(t->suffix[r]);
    }
    free(t->generation_prompt);
    for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
    free(t->default_system);
    free(t->source);
    if (t->jinja) {
        lf__chat_jinja_free(t->jinja);
        free(t->jinja);
    }
    memset(t, 0, sizeof *t);
}

lf_status lf__chat_template_chatml(lf__chat_template *t) {
    if (!t) return lf_fail(LF_ERR_INVALID_ARG, "chat template: NULL template");
    memset(t, 0, sizeof *t);
    static const char *const prefix[LF__ROLE_COUNT] = {"<|im_start|>system\n", "<|im_start|>user\n",
                                                       "<|im_start|>assistant\n"};
    t->bos = dup_str("");
    int ok = t->bos != NULL;
    for (int r = 0; r < LF__ROLE_COUNT; r++) {
        t->prefix[r] = dup_str(prefix[r]);
        t->suffix[r] = dup_str("<|im_end|>\n");
        ok = ok && t->prefix[r] && t->suffix[r];
    }
    t->generation_prompt = dup_str("<|im_start|>assistant\n");
    t->stop[0] = dup_str("<|im_end|>");
    t->n_stop = 1;
    t->source = dup_str("built-in ChatML");
    if (!ok || !t->generation_prompt || !t->stop[0] || !t->source) {
        lf__chat_template_free(t);
        return lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- chat_template.json */

/* A template string at key `key` (path for messages): required or not. */
static lf_status tstring(const cJSON *obj, const char *key, const char *path, const char *what, int required,
                         char **out) {
    *out = NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || (cJSON_IsNull(v) && !required)) {
        if (required) return lf_fail(LF_ERR_FORMAT, "chat template '%s': '%s' is missing", what, path);
        return LF_OK;
    }
    if (!cJSON_IsString(v)) return lf_fail(LF_ERR_FORMAT, "chat template '%s': '%s' must be a string", what, path);
    size_t n = strlen(v->valuestring);
    if (n > TEMPLATE_STR_MAX)
        return lf_fail(LF_ERR_CONFIG, "chat template '%s': '%s' is %zu bytes, more than %d", what, path, n,
                       TEMPLATE_STR_MAX);
    *out = dup_str(v->valuestring);
    if (!*out) return lf_fail(LF_ERR_NOMEM, "chat template '%s': out of memory", what);
    return LF_OK;
}

/* Every key of obj must be in keys[] (NULL-terminated) and appear once. */
static lf_status known_keys(const cJSON *obj, const char *const *keys, const char *path, const char *what) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        int known = 0;
        for (int k = 0; keys[k] && !known; k++) known = strcmp(it->string, keys[k]) == 0;
        if (!known)
            return lf_fail(LF_ERR_CONFIG, "chat template '%s': unknown key '%s%s%s'", what, path, path[0] ? "." : "",
                           it->string);
        for (const cJSON *j = it->next; j; j = j->next)
            if (strcmp(j->string, it->string) == 0)
                return lf_fail(LF_ERR_FORMAT, "chat template '%s': key '%s%s%s' appears twice", what, path,
                               path[0] ? "." : "", it->string);
    }
    return LF_OK;
}

lf_status lf__chat_template_parse(const char *json, size_t len, const char *what, lf__chat_template *t) {
    if (!t) return lf_fail(LF_ERR_INVALID_ARG, "chat template: NULL template");
    memset(t, 0, sizeof *t);
    if (!what) what = "(text)";
    if (!json && len) return lf_fail(LF_ERR_INVALID_ARG, "chat template '%s': NULL text", what);
    if (len > TEMPLATE_FILE_MAX)
        return lf_fail(LF_ERR_CONFIG, "chat template '%s': %zu bytes, more than %u", what, len, TEMPLATE_FILE_MAX);
    size_t ok = lf__utf8_valid_prefix((const unsigned char *)json, len);
    if (ok < len) return lf_fail(LF_ERR_FORMAT, "chat template '%s': not valid UTF-8 (at byte %zu)", what, ok);
    if (memchr(json, '\0', len)) return lf_fail(LF_ERR_FORMAT, "chat template '%s': holds a NUL byte", what);
    size_t nul = lf_json_find_nul_escape(json, len); /* U+0000 would cut a string short */
    if (nul < len) return lf_fail(LF_ERR_FORMAT, "chat template '%s': a string holds \\u0000 (at byte %zu)", what, nul);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        return lf_fail(LF_ERR_FORMAT, "chat template '%s': invalid JSON near byte %zu", what, at);
    }
    lf_status st = LF_OK;
    static const char *const top_keys[] = {"format",      "bos", "default_system", "roles", "generation_prompt", "stop",
                                           "description", NULL};
    static const char *const role_keys[] = {"prefix", "suffix", NULL};
    if (!cJSON_IsObject(root)) {
        st = lf_fail(LF_ERR_FORMAT, "chat template '%s': must be a JSON object", what);
        goto done;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "chat_template")) {
        st = lf_fail(LF_ERR_FORMAT,
                     "chat template '%s': this is a Hugging Face (Jinja) template in a tokenizer_config.json, not "
                     "a chat_template.json ('format': '%s'); name the file tokenizer_config.json or give its "
                     "directory",
                     what, LF__CHAT_TEMPLATE_FORMAT);
        goto done;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "jinja")) { /* the Jinja kind (chat_messages.c) */
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
        if (!cJSON_IsString(f) || strcmp(f->valuestring, LF__CHAT_TEMPLATE_FORMAT) != 0)
            st = lf_fail(LF_ERR_CONFIG, "chat template '%s': 'format' must be \"%s\"", what, LF__CHAT_TEMPLATE_FORMAT);
        else st = lf__chat_template_parse_jinja(root, what, t);
        cJSON_Delete(root);
        return st;
    }
    if ((st = known_keys(root, top_keys, "", what)) != LF_OK) goto done;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, LF__CHAT_TEMPLATE_FORMAT) != 0) {
        st = lf_fail(LF_ERR_CONFIG, "chat template '%s': 'format' must be \"%s\"", what, LF__CHAT_TEMPLATE_FORMAT);
        goto done;
    }
    const cJSON *desc = cJSON_GetObjectItemCaseSensitive(root, "description");
    if (desc && !cJSON_IsString(desc)) {
        st = lf_fail(LF_ERR_FORMAT, "chat template '%s': 'description' must be a string", what);
        goto done;
    }
    if ((st = tstring(root, "bos", "bos", what, 0, &t->bos)) != LF_OK) goto done;
    if (!t->bos && !(t->bos = dup_str(""))) {
        st = lf_fail(LF_ERR_NOMEM, "chat template '%s': out of memory", what);
        goto done;
    }
    if ((st = tstring(root, "default_system", "default_system", what, 0, &t->default_system)) != LF_OK) goto done;
    if ((st = tstring(root, "generation_prompt", "generation_prompt", what, 1, &t->generation_prompt)) != LF_OK)
        goto done;
    const cJSON *roles = cJSON_GetObjectItemCaseSensitive(root, "roles");
    if (!cJSON_IsObject(roles)) {
        st = lf_fail(LF_ERR_FORMAT, "chat template '%s': 'roles' must be an object with system, user and assistant",
                     what);
        goto done;
    }
    static const char *const role_names[LF__ROLE_COUNT] = {"system", "user", "assistant"};
    static const char *const all_roles[] = {"system", "user", "assistant", NULL};
    if ((st = known_keys(roles, all_roles, "roles", what)) != LF_OK) goto done;
    for (int r = 0; r < LF__ROLE_COUNT; r++) {
        char path[64];
        const cJSON *ro = cJSON_GetObjectItemCaseSensitive(roles, role_names[r]);
        if (!cJSON_IsObject(ro)) {
            st = lf_fail(LF_ERR_FORMAT, "chat template '%s': 'roles.%s' must be an object {prefix, suffix}", what,
                         role_names[r]);
            goto done;
        }
        snprintf(path, sizeof path, "roles.%s", role_names[r]);
        if ((st = known_keys(ro, role_keys, path, what)) != LF_OK) goto done;
        snprintf(path, sizeof path, "roles.%s.prefix", role_names[r]);
        if ((st = tstring(ro, "prefix", path, what, 1, &t->prefix[r])) != LF_OK) goto done;
        snprintf(path, sizeof path, "roles.%s.suffix", role_names[r]);
        if ((st = tstring(ro, "suffix", path, what, 1, &t->suffix[r])) != LF_OK) goto done;
    }
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (stop && !cJSON_IsNull(stop)) {
        if (!cJSON_IsArray(stop)) {
            st = lf_fail(LF_ERR_FORMAT, "chat template '%s': 'stop' must be a list of strings", what);
            goto done;
        }
        int n = cJSON_GetArraySize(stop);
        if (n > 4) {
            st = lf_fail(LF_ERR_CONFIG, "chat template '%s': 'stop' has %d strings, more than 4", what, n);
            goto done;
        }
        int i = 0;
        for (const cJSON *it = stop->child; it; it = it->next, i++) {
            char path[32];
            snprintf(path, sizeof path, "stop[%d]", i);
            if (!cJSON_IsString(it) || it->valuestring[0] == '\0') {
                st = lf_fail(LF_ERR_FORMAT, "chat template '%s': '%s' must be a non-empty string", what, path);
                goto done;
            }
            if (strlen(it->valuestring) > 256) {
                st = lf_fail(LF_ERR_CONFIG, "chat template '%s': '%s' is longer than 256 bytes", what, path);
                goto done;
            }
            if (!(t->stop[i] = dup_str(it->valuestring))) {
                st = lf_fail(LF_ERR_NOMEM, "chat template '%s': out of memory", what);
                goto done;
            }
            t->n_stop = i + 1;
        }
    }
    if (!(t->source = dup_str(what))) st = lf_fail(LF_ERR_NOMEM, "chat template '%s': out of memory", what);
done:
    cJSON_Delete(root);
    if (st != LF_OK) lf__chat_template_free(t);
    return st;
}

/* A Hugging Face template at path (a directory, a tokenizer_config.json,
 * a .jinja file) into t. */
static lf_status load_hf(const char *path, lf__chat_template *t) {
    lf__chat_jinja j;
    lf_status st = lf__chat_jinja_load(path, &j);
    return st == LF_OK ? lf__chat_template_from_jinja(&j, t) : st;
}

static int is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* dir holds a Hugging Face template: chat_template.jinja, or a
 * tokenizer_config.json with "chat_template". */
static int has_hf_template(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (is_file(path)) return 1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    char *text = NULL;
    size_t len = 0;
    if (!is_file(path) || lf_file_read_all(path, (size_t)16 << 20, &text, &len) != LF_OK) return 0;
    cJSON *o = cJSON_ParseWithLength(text, len);
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(o, "chat_template");
    int has = ct && !cJSON_IsNull(ct);
    cJSON_Delete(o);
    lf_free(text);
    return has;
}

static lf_status load_json_file(const char *path, lf__chat_template *t) {
    char *text = NULL;
    size_t len = 0;
    lf_status st = lf_file_read_all(path, TEMPLATE_FILE_MAX, &text, &len);
    if (st != LF_OK) return st;
    st = lf__chat_template_parse(text, len, path, t);
    lf_free(text);
    return st;
}

lf_status lf__chat_template_load_dir(const char *dir, lf__chat_template *t, int *from_file) {
    if (from_file) *from_file = 0;
    if (!dir || !t) return lf_fail(LF_ERR_INVALID_ARG, "chat template: NULL directory or template");
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s", dir, LF__CHAT_TEMPLATE_FILE);
    if (n < 0 || (size_t)n >= sizeof path)
        return lf_fail(LF_ERR_INVALID_ARG, "chat template: path too long in '%s'", dir);
    struct stat sb;
    lf_status st;
    if (stat(path, &sb) != 0) {
        if (errno != ENOENT) return lf_fail(LF_ERR_IO, "chat template '%s': %s", path, strerror(errno));
        if (!has_hf_template(dir)) return lf__chat_template_chatml(t);
        st = load_hf(dir, t);
    } else st = load_json_file(path, t);
    if (st == LF_OK && from_file) *from_file = 1;
    return st;
}

lf_status lf__chat_template_load(const char *spec, lf__chat_template *t) {
    if (!spec || !*spec || !t) return lf_fail(LF_ERR_INVALID_ARG, "chat template: empty name");
    if (strcmp(spec, "chatml") == 0) return lf__chat_template_chatml(t);
    struct stat sb;
    if (stat(spec, &sb) != 0)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "chat template '%s': %s", spec, strerror(errno));
    char path[4096];
    if (S_ISDIR(sb.st_mode)) {
        int n = snprintf(path, sizeof path, "%s/%s", spec, LF__CHAT_TEMPLATE_FILE);
        if (n < 0 || (size_t)n >= sizeof path)
            return lf_fail(LF_ERR_INVALID_ARG, "chat template: path too long in '%s'", spec);
        if (stat(path, &sb) == 0) return load_json_file(path, t);
        if (has_hf_template(spec)) return load_hf(spec, t);
        return lf_fail(LF_ERR_NOT_FOUND,
                       "chat template: directory '%s' has no %s and no Hugging Face template (chat_template.jinja, "
                       "tokenizer_config.json's chat_template)",
                       spec, LF__CHAT_TEMPLATE_FILE);
    }
    size_t sl = strlen(spec);
    const char *base = strrchr(spec, '/');
    base = base ? base + 1 : spec;
    if ((sl >= 6 && !strcmp(spec + sl - 6, ".jinja")) || !strcmp(base, "tokenizer_config.json"))
        return load_hf(spec, t);
    return load_json_file(spec, t);
}

/* The Jinja kind as chat_template.json: format, description, jinja, special_tokens, stop. */
static cJSON *jinja_json(const lf__chat_template *t) {
    cJSON *o = cJSON_CreateObject(), *stop = cJSON_CreateArray();
    char desc[512];
    snprintf(desc, sizeof desc, "written by llmforge from %s (a Hugging Face chat template)", t->source);
    int ok = o && stop && cJSON_AddStringToObject(o, "format", LF__CHAT_TEMPLATE_FORMAT) &&
             cJSON_AddStringToObject(o, "description", desc) && cJSON_AddStringToObject(o, "jinja", t->jinja->text) &&
             cJSON_AddItemToObject(o, "special_tokens", cJSON_Duplicate(t->jinja->vars, 1));
    for (int i = 0; ok && i < t->n_stop; i++) {
        cJSON *s = cJSON_CreateString(t->stop[i]);
        ok = s && cJSON_AddItemToArray(stop, s);
    }
    if (ok && cJSON_AddItemToObject(o, "stop", stop)) return o;
    cJSON_Delete(stop);
    cJSON_Delete(o);
    return NULL;
}
/* txt (cJSON_Print's, freed here; NULL: out of memory) and a newline as
 * *out (malloc'd), *len its length. */
static lf_status json_text_out(char *txt, char **out, size_t *len) {
    size_t n = txt ? strlen(txt) : 0;
    char *p = txt ? malloc(n + 2) : NULL;
    if (p) {
        memcpy(p, txt, n);
        p[n] = '\n';
        p[n + 1] = '\0';
    }
    cJSON_free(txt);
    if (!p) return lf_fail(LF_ERR_NOMEM, "chat template: out of memory writing it as JSON");
    *out = p;
    if (len) *len = n + 1;
    return LF_OK;
}


lf_status lf__chat_template_json(const lf__chat_template *t, char **out, size_t *len) {
    *out = NULL;
    if (len) *len = 0;
    if (t->jinja) {
        cJSON *o = jinja_json(t);
        char *txt = o ? cJSON_Print(o) : NULL;
        cJSON_Delete(o);
        return json_text_out(txt, out, len);
    }
    cJSON *o = cJSON_CreateObject(), *roles = cJSON_CreateObject(), *stop = cJSON_CreateArray();
    static const char *const role_names[LF__ROLE_COUNT] = {"system", "user", "assistant"};
    int ok = o && roles && stop && cJSON_AddStringToObject(o, "format", LF__CHAT_TEMPLATE_FORMAT);
    if (ok && t->source) {
        char desc[512];
        snprintf(desc, sizeof desc, "written by llmforge from %s", t->source);
        ok = cJSON_AddStringToObject(o, "description", desc) != NULL;
    }
    ok = ok && cJSON_AddStringToObject(o, "bos", t->bos ? t->bos : "");
    ok = ok && (t->default_system ? cJSON_AddStringToObject(o, "default_system", t->default_system)
                                  : cJSON_AddNullToObject(o, "default_system"));
    for (int r = 0; ok && r < LF__ROLE_COUNT; r++) {
        cJSON *ro = cJSON_CreateObject();
        ok = ro && cJSON_AddItemToObject(roles, role_names[r], ro) &&
             cJSON_AddStringToObject(ro, "prefix", t->prefix[r]) && cJSON_AddStringToObject(ro, "suffix", t->suffix[r]);
        if (!ok && ro && !cJSON_GetObjectItemCaseSensitive(roles, role_names[r])) cJSON_Delete(ro);
    }
    if (ok) ok = cJSON_AddItemToObject(o, "roles", roles);
    else cJSON_Delete(roles);
    roles = NULL;
    ok = ok && cJSON_AddStringToObject(o, "generation_prompt", t->generation_prompt);
    for (int i = 0; ok && i < t->n_stop; i++) {
        cJSON *s = cJSON_CreateString(t->stop[i]);
        ok = s && cJSON_AddItemToArray(stop, s);
    }
    if (ok) ok = cJSON_AddItemToObject(o, "stop", stop);
    else cJSON_Delete(stop);
    char *txt = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    return json_text_out(txt, out, len);
}

/* ---------------------------------------------------------------- rendering */

typedef struct rbuf {
    char *p;
    size_t len, cap;
    lf__chat_span *sp;
    int n_sp, cap_sp;
    int failed;
    int barrier; /* the next piece starts a span of its own */
} rbuf;

static void rb_add(rbuf *b, const char *s, size_t n, int from_template) {
    if (b->failed || n == 0) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (b->n_sp == b->cap_sp) {
        int cap = b->cap_sp ? 2 * b->cap_sp : 16;
        lf__chat_span *q = realloc(b->sp, (size_t)cap * sizeof *q);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->sp = q;
        b->cap_sp = cap;
    }
    memcpy(b->p + b->len, s, n);
    /* adjacent pieces of the same kind merge into one span */
    if (b->n_sp > 0 && b->sp[b->n_sp - 1].from_template == from_template && !b->barrier) {
        b->sp[b->n_sp - 1].len += n;
    } else {
        b->sp[b->n_sp].off = b->len;
        b->sp[b->n_sp].len = n;
        b->sp[b->n_sp].from_template = from_template;
        b->n_sp++;
    }
    b->len += n;
    b->p[b->len] = '\0';
    b->barrier = 0;
}

static void rb_tmpl(rbuf *b, const char *s) { rb_add(b, s, strlen(s), 1); }

/* Render m[0..n) (and the generation prompt) into b; then, for a pair, the
 * response and suffix[assistant] after a span barrier. */
static lf_status render(const lf__chat_template *t, const lf__chat_message *m, int n, int add_generation_prompt,
                        const char *response, size_t response_len, rbuf *bp, size_t *prompt_len) {
    rbuf b = *bp;
    for (int i = 0; i < n; i++) {
        if ((int)m[i].role < 0 || m[i].role >= LF__ROLE_COUNT)
            return lf_fail(LF_ERR_RANGE, "chat template: message %d has role %d, not one of system/user/assistant", i,
                           (int)m[i].role);
        if (m[i].len > 0 && !m[i].content)
            return lf_fail(LF_ERR_INVALID_ARG, "chat template: message %d has no text", i);
    }
    for (int r = 0; r < LF__ROLE_COUNT; r++)
        if (!t->prefix[r] || !t->suffix[r]) return lf_fail(LF_ERR_INVALID_ARG, "chat template: role %d not set", r);
    rb_tmpl(&b, t->bos);
    int has_system = 0;
    for (int i = 0; i < n; i++) has_system |= m[i].role == LF__ROLE_SYSTEM;
    if (t->default_system && !has_system) {
        rb_tmpl(&b, t->prefix[LF__ROLE_SYSTEM]);
        rb_tmpl(&b, t->default_system); /* the template's own text, not a client's */
        rb_tmpl(&b, t->suffix[LF__ROLE_SYSTEM]);
    }
    for (int i = 0; i < n; i++) {
        rb_tmpl(&b, t->prefix[m[i].role]);
        rb_add(&b, m[i].content, m[i].len, 0);
        rb_tmpl(&b, t->suffix[m[i].role]);
    }
    if (add_generation_prompt) rb_tmpl(&b, t->generation_prompt);
    if (prompt_len) *prompt_len = b.len;
    if (response) {
        b.barrier = 1;
        rb_add(&b, response, response_len, 0);
        rb_tmpl(&b, t->suffix[LF__ROLE_ASSISTANT]);
    }
    *bp = b;
    return LF_OK;
}

static lf_status render_done(rbuf *b, int n, char **out, size_t *len, lf__chat_span **spans, int *n_spans) {
    if (!b->failed && !b->p) { /* nothing at all: an empty string */
        b->p = malloc(1);
        if (b->p) b->p[0] = '\0';
        else b->failed = 1;
    }
    if (b->failed) {
        free(b->p);
        free(b->sp);
        return lf_fail(LF_ERR_NOMEM, "chat template: out of memory rendering %d messages", n);
    }
    *out = b->p;
    if (len) *len = b->len;
    if (spans) *spans = b->sp;
    else free(b->sp);
    if (n_spans) *n_spans = b->n_sp;
    return LF_OK;
}

lf_status lf__chat_template_render_pair(const lf__chat_template *t, const char *prompt, size_t prompt_len_in,
                                        const char *response, size_t response_len, char **out, size_t *len,
                                        size_t *prompt_len, lf__chat_span **spans, int *n_spans) {
    if (out) *out = NULL;
    if (len) *len = 0;
    if (prompt_len) *prompt_len = 0;
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    if (t && t->jinja)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "chat template '%s': a Jinja template renders pairs as conversations "
                       "(lf__chat_template_render_json)",
                       t->source);
    if (!t || !out || !prompt_len || (!prompt && prompt_len_in) || (!response && response_len) || !t->bos ||
        !t->generation_prompt)
        return lf_fail(LF_ERR_INVALID_ARG, "chat template: bad arguments to render a pair");
    lf__chat_message m = {.role = LF__ROLE_USER, .content = prompt ? prompt : "", .len = prompt_len_in};
    rbuf b = {0};
    lf_status st = render(t, &m, 1, 1, response ? response : "", response_len, &b, prompt_len);
    if (st != LF_OK) {
        free(b.p);
        free(b.sp);
        return st;
    }
    return render_done(&b, 1, out, len, spans, n_spans);
}

/* The Jinja kind: the messages as the JSON list transformers takes. */
static lf_status render_jinja(const lf__chat_template *t, const lf__chat_message *m, int n, int add_generation_prompt,
                              char **out, size_t *len, lf__chat_span **spans, int *n_spans) {
    static const char *const role_names[LF__ROLE_COUNT] = {"system", "user", "assistant"};
    cJSON *arr = cJSON_CreateArray();
    lf_status st = arr ? LF_OK : lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
    for (int i = 0; i < n && st == LF_OK; i++) {
        if ((int)m[i].role < 0 || m[i].role >= LF__ROLE_COUNT) {
            st = lf_fail(LF_ERR_RANGE, "chat template: message %d has role %d, not one of system/user/assistant", i,
                         (int)m[i].role);
            break;
        }
        char *c = malloc(m[i].len + 1);
        cJSON *o = cJSON_CreateObject();
        if (c) {
            if (m[i].len) memcpy(c, m[i].content, m[i].len);
            c[m[i].len] = 0;
        }
        if (!c || !o || !cJSON_AddItemToArray(arr, o) || !cJSON_AddStringToObject(o, "role", role_names[m[i].role]) ||
            !cJSON_AddStringToObject(o, "content", c)) {
            if (o && !o->prev) cJSON_Delete(o);
            st = lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
        }
        if (c && memchr(c, 0, m[i].len))
            st = lf_fail(LF_ERR_INVALID_ARG, "chat template: message %d holds a NUL character", i);
        free(c);
    }
    if (st == LF_OK) st = lf__chat_jinja_render(t->jinja, arr, add_generation_prompt, out, len, spans, n_spans);
    cJSON_Delete(arr);
    return st;
}

lf_status lf__chat_template_render(const lf__chat_template *t, const lf__chat_message *m, int n,
                                   int add_generation_prompt, char **out, size_t *len, lf__chat_span **spans,
                                   int *n_spans) {
    if (out) *out = NULL;
    if (len) *len = 0;
    if (spans) *spans = NULL;
    if (n_spans) *n_spans = 0;
    if (t && t->jinja && out && n >= 0 && (n == 0 || m))
        return render_jinja(t, m, n, add_generation_prompt, out, len, spans, n_spans);
    if (!t || !out || n < 0 || (n > 0 && !m) || !t->bos || !t->generation_prompt)
        return lf_fail(LF_ERR_INVALID_ARG, "chat template: bad arguments to render");
    rbuf b = {0};
    lf_status st = render(t, m, n, add_generation_prompt, NULL, 0, &b, NULL);
    if (st != LF_OK) {
        free(b.p);
        free(b.sp);
        return st;
    }
    return render_done(&b, n, out, len, spans, n_spans);
}
