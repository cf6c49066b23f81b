/*
 * Hugging Face chat templates (API in chat_template.h): the Jinja
 * "chat_template" of a model directory (tokenizer_config.json, or a
 * chat_template.jinja file beside it, which newer transformers writes and
 * prefers), rendered by the interpreter in jinja*.c with the variables
 * transformers' apply_chat_template passes: messages, add_generation_prompt,
 * tools and documents (none), and the special tokens of
 * tokenizer_config.json (bos_token, eos_token, ...: every "*_token" key
 * whose value is a string or an AddedToken object with "content").
 *
 * The assistant mask (lf__chat_jinja_turns): a template is a program, so
 * which bytes are the assistant's turn is found by rendering prefixes of the
 * conversation. For assistant message i: P = render(m[:i], generation
 * prompt), R = render(m[:i+1]), G = render(m[:i+1], generation prompt), F =
 * render(m). R, G and F must start with P; else the template has no
 * assistant mask (it moves earlier text when a turn is added: Mistral's
 * system message goes into the last user turn) and the call fails naming
 * message i. With E = R[len(P):], the turn is the longest common prefix of
 * E, F[len(P):] and G[len(P):]; when shorter than E (what follows a turn
 * differs with the context: Phi-3 adds eos_token at the very end only), it
 * is cut back to just after its last '\n', '>' or ']'; trailing ' ', '\t',
 * '\r', '\n' are dropped. So the turn holds the content and the
 * end-of-turn marker (<|im_end|>, <|eot_id|>, </s>, <end_of_turn>,
 * <|end|>), not the newline after it. tools/reference/
 * make_chat_template_fixtures.py applies the same rule in Python and checks
 * it against transformers' {% generation %} indices.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "data_impl.h"
#include "jinja.h"

#define CONFIG_MAX ((size_t)16 << 20)

void lf__chat_jinja_free(lf__chat_jinja *j) {
    if (!j) return;
    lf__jinja_free(j->tpl);
    cJSON_Delete(j->vars);
    free(j->text);
    free(j->source);
    memset(j, 0, sizeof *j);
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* The special tokens of a parsed tokenizer_config.json into vars. */
static lf_status special_tokens(const cJSON *cfg, cJSON *vars, const char *what) {
    for (const cJSON *e = cfg ? cfg->child : NULL; e; e = e->next) {
        size_t n = strlen(e->string);
        if (n < 6 || strcmp(e->string + n - 6, "_token") != 0) continue;
        const char *s = NULL;
        if (cJSON_IsString(e)) s = e->valuestring;
        else if (cJSON_IsObject(e)) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
            if (cJSON_IsString(c)) s = c->valuestring;
        }
        if (s && !cJSON_AddStringToObject(vars, e->string, s))
            return lf_fail(LF_ERR_NOMEM, "chat template '%s': out of memory", what);
    }
    return LF_OK;
}

/* The "chat_template" of a tokenizer_config.json: a string, or a list of
 * {name, template} from which transformers takes "default". */
static lf_status config_template(const cJSON *cfg, const char *what, const char **text) {
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    *text = NULL;
    if (!ct || cJSON_IsNull(ct)) return LF_OK;
    if (cJSON_IsString(ct)) {
        *text = ct->valuestring;
        return LF_OK;
    }
    if (cJSON_IsArray(ct)) {
        for (const cJSON *e = ct->child; e; e = e->next) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *tp = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default") && cJSON_IsString(tp)) {
                *text = tp->valuestring;
                return LF_OK;
            }
        }
        return lf_fail(LF_ERR_FORMAT, "'%s': 'chat_template' is a list without a \"default\" template", what);
    }
    return lf_fail(LF_ERR_FORMAT, "'%s': 'chat_template' must be a string or a list of {name, template}", what);
}

lf_status lf__chat_jinja_from_text(const char *text, size_t len, const char *what, const cJSON *special,
                                   lf__chat_jinja *j) {
    memset(j, 0, sizeof *j);
    lf_status st = LF_OK;
    if (!(j->vars = special ? cJSON_Duplicate(special, 1) : cJSON_CreateObject()) || !(j->source = strdup(what)) ||
        !(j->text = malloc(len + 1))) {
        lf__chat_jinja_free(j);
        return lf_fail(LF_ERR_NOMEM, "chat template '%s': out of memory", what);
    }
    memcpy(j->text, text, len);
    j->text[len] = 0;
    if ((st = lf__jinja_compile(text, len, what, &j->tpl)) != LF_OK) lf__chat_jinja_free(j);
    return st;
}

lf_status lf__chat_jinja_load(const char *path, lf__chat_jinja *j) {
    if (!path || !j) return lf_fail(LF_ERR_INVALID_ARG, "chat template: NULL path");
    memset(j, 0, sizeof *j);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "chat template '%s': %s", path, strerror(errno));
    char cfg_path[4096] = "", jinja_path[4096] = "";
    size_t pl = strlen(path);
    if (S_ISDIR(sb.st_mode)) {
        snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", path);
        snprintf(jinja_path, sizeof jinja_path, "%s/chat_template.jinja", path);
        if (!exists(cfg_path)) cfg_path[0] = 0;
        if (!exists(jinja_path)) jinja_path[0] = 0;
    } else if (pl >= 6 && !strcmp(path + pl - 6, ".jinja")) {
        snprintf(jinja_path, sizeof jinja_path, "%s", path);
        const char *slash = strrchr(path, '/');
        snprintf(cfg_path, sizeof cfg_path, "%.*stokenizer_config.json", slash ? (int)(slash - path + 1) : 0, path);
        if (!exists(cfg_path)) cfg_path[0] = 0;
    } else snprintf(cfg_path, sizeof cfg_path, "%s", path);
    cJSON *cfg = NULL, *special = cJSON_CreateObject();
    char *text = NULL;
    size_t len = 0;
    lf_status st = special ? LF_OK : lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
    if (st == LF_OK && cfg_path[0]) {
        if ((st = lf_file_read_all(cfg_path, CONFIG_MAX, &text, &len)) != LF_OK) goto done;
        if (!(cfg = cJSON_ParseWithLength(text, len)) || !cJSON_IsObject(cfg)) {
            st = lf_fail(LF_ERR_FORMAT, "'%s': not a JSON object", cfg_path);
            goto done;
        }
        if ((st = special_tokens(cfg, special, cfg_path)) != LF_OK) goto done;
    }
    if (jinja_path[0]) {
        lf_free(text);
        text = NULL;
        if ((st = lf_file_read_all(jinja_path, LF__JINJA_SOURCE_MAX, &text, &len)) != LF_OK) goto done;
        st = lf__chat_jinja_from_text(text, len, jinja_path, special, j);
        goto done;
    }
    const char *tt = NULL;
    if (cfg && (st = config_template(cfg, cfg_path, &tt)) != LF_OK) goto done;
    if (!tt) {
        st = lf_fail(LF_ERR_NOT_FOUND,
                     "'%s' has no chat template (no chat_template.jinja, no 'chat_template' in "
                     "tokenizer_config.json)",
                     path);
        goto done;
    }
    char what[4200];
    snprintf(what, sizeof what, "%s:chat_template", cfg_path);
    st = lf__chat_jinja_from_text(tt, strlen(tt), what, special, j);
done:
    lf_free(text);
    cJSON_Delete(cfg);
    cJSON_Delete(special);
    return st;
}

/* vars + messages (referenced, not copied) + the fixed variables. */
static lf_status render_k(const lf__chat_jinja *j, const cJSON *messages, int k, int add_gen, char **out, size_t *len,
                          lf__chat_span **spans, int *n_spans) {
    cJSON *vars = cJSON_Duplicate(j->vars, 1), *arr = cJSON_CreateArray();
    lf_status st = LF_OK;
    if (!vars || !arr) st = lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
    int i = 0;
    for (const cJSON *m = messages ? messages->child : NULL; m && i < k && st == LF_OK; m = m->next, i++)
        if (!cJSON_AddItemReferenceToArray(arr, (cJSON *)m)) st = lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
    if (st == LF_OK) {
        cJSON_AddItemToObject(vars, "messages", arr);
        arr = NULL;
        if (!cJSON_AddBoolToObject(vars, "add_generation_prompt", add_gen) || !cJSON_AddNullToObject(vars, "tools") ||
            !cJSON_AddNullToObject(vars, "documents"))
            st = lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
    }
    lf__jinja_limits lim = lf__jinja_limits_default();
    if (st == LF_OK) st = lf__jinja_render(j->tpl, vars, j->today[0] ? j->today : NULL, &lim, out, len, spans, n_spans);
    cJSON_Delete(arr);
    cJSON_Delete(vars);
    return st;
}

lf_status lf__chat_jinja_render(const lf__chat_jinja *j, const cJSON *messages, int add_gen, char **out, size_t *len,
                                lf__chat_span **spans, int *n_spans) {
    if (!j || !j->tpl || !out || !len) return lf_fail(LF_ERR_INVALID_ARG, "chat template: NULL argument");
    if (!cJSON_IsArray(messages)) return lf_fail(LF_ERR_INVALID_ARG, "chat template: 'messages' must be a list");
    return render_k(j, messages, cJSON_GetArraySize(messages), add_gen, out, len, spans, n_spans);
}

static int is_assistant(const cJSON *m) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
    return cJSON_IsString(r) && !strcmp(r->valuestring, "assistant");
}

static int starts(const char *s, size_t n, const char *p, size_t pn) { return n >= pn && !memcmp(s, p, pn); }

/* The turn inside E = R[len(P):] given F and G after P (the rule above). */
static size_t turn_length(const char *e, size_t el, const char *f, size_t fl, const char *g, size_t gl) {
    size_t L = 0;
    while (L < el && L < fl && L < gl && e[L] == f[L] && e[L] == g[L]) L++;
    if (L < el) {
        size_t cut = 0;
        for (size_t q = L; q > 0 && !cut; q--)
            if (e[q - 1] == '\n' || e[q - 1] == '>' || e[q - 1] == ']') cut = q;
        L = cut;
    }
    while (L > 0 && (e[L - 1] == ' ' || e[L - 1] == '\t' || e[L - 1] == '\r' || e[L - 1] == '\n')) L--;
    return L;
}

lf_status lf__chat_turns_by_prefix(lf__chat_render_fn render, const void *ctx, const char *what, const cJSON *messages,
                                   const char *full, size_t full_len, size_t **turns, int *n_turns) {
    *turns = NULL;
    *n_turns = 0;
    if (!cJSON_IsArray(messages)) return lf_fail(LF_ERR_INVALID_ARG, "chat template: 'messages' must be a list");
    int n = cJSON_GetArraySize(messages), k = 0;
    size_t *t = calloc((size_t)n * 2 + 1, sizeof *t);
    if (!t) return lf_fail(LF_ERR_NOMEM, "chat template: out of memory");
    lf_status st = LF_OK;
    int i = 0;
    for (const cJSON *m = messages->child; m && st == LF_OK; m = m->next, i++) {
        if (!is_assistant(m)) continue;
        char *p = NULL, *r = NULL, *g = NULL;
        size_t pl = 0, rl = 0, gl = 0;
        if ((st = render(ctx, messages, i, 1, &p, &pl)) == LF_OK &&
            (st = render(ctx, messages, i + 1, 0, &r, &rl)) == LF_OK &&
            (st = render(ctx, messages, i + 1, 1, &g, &gl)) == LF_OK) {
            if (!starts(r, rl, p, pl) || !starts(g, gl, p, pl) || !starts(full, full_len, p, pl)) {
                st = lf_fail(LF_ERR_UNSUPPORTED,
                             "chat template '%s': no assistant mask: the rendering up to message %d (assistant) does "
                             "not start with the rendering of the messages before it and the generation prompt",
                             what, i);
            } else {
                t[2 * k] = pl;
                t[2 * k + 1] = turn_length(r + pl, rl - pl, full + pl, full_len - pl, g + pl, gl - pl);
                k++;
            }
        }
        free(p);
        free(r);
        free(g);
    }
    if (st != LF_OK) {
        free(t);
        return st;
    }
    *turns = t;
    *n_turns = k;
    return LF_OK;
}

static lf_status jinja_render_k(const void *ctx, const cJSON *messages, int k, int add_gen, char **out, size_t *len) {
    return render_k(ctx, messages, k, add_gen, out, len, NULL, NULL);
}

lf_status lf__chat_jinja_turns(const lf__chat_jinja *j, const cJSON *messages, const char *full, size_t full_len,
                               size_t **turns, int *n_turns) {
    return lf__chat_turns_by_prefix(jinja_render_k, j, j->source, messages, full, full_len, turns, n_turns);
}
