/*
 * Chat templates (internal API of src/data, used by src/serve too): the
 * text a conversation is rendered into, for the chat endpoint of
 * `llmforge serve` and for the SFT data path of `llmforge prepare
 * --chat-template`, so both see exactly the same prompt text and a model
 * fine-tuned on rendered pairs answers through the endpoint as trained.
 *
 * Two kinds: llmforge's format (chat_template.json, docs/serving.md):
 * fixed text around each message by role, text once at the start, and the
 * text that opens the assistant's turn, rendered by concatenation only;
 * and a Hugging Face Jinja template (tokenizer_config.json's
 * "chat_template" or chat_template.jinja), rendered by the bounded
 * interpreter of jinja.h exactly as transformers renders it.
 *
 * It lives in src/data because data depends only on core and serve
 * depends on data: both can use it without a cycle. Nothing here touches a
 * tokenizer; the spans tell the caller which bytes came from the template
 * (special tokens allowed) and which from content (never).
 */
#ifndef LF_DATA_CHAT_TEMPLATE_H
#define LF_DATA_CHAT_TEMPLATE_H

#include <stddef.h>

#include "llmforge/core.h"

typedef enum lf__chat_role {
    LF__ROLE_SYSTEM = 0,
    LF__ROLE_USER = 1,
    LF__ROLE_ASSISTANT = 2,
    LF__ROLE_COUNT = 3,
} lf__chat_role;

typedef struct lf__chat_message {
    lf__chat_role role;
    const char *content; /* content[0, len) */
    size_t len;
} lf__chat_message;

/* A span of rendered text and whether the template wrote it (1) or it is a
 * message's content (0): the tokenizer may read special tokens in template
 * spans only, so content cannot forge a turn ("<|im_end|>" typed by a user
 * stays text). */
typedef struct lf__chat_span {
    size_t off, len;
    int from_template;
} lf__chat_span;

/* ---------------------------------------------------------------- Hugging Face (Jinja) templates
 * chat_jinja.c; the interpreter is jinja.h. */
struct lf__jinja;
struct cJSON;
typedef struct lf__chat_jinja {
    struct lf__jinja *tpl;
    struct cJSON *vars; /* the special tokens: {"bos_token": "<s>", ...} */
    char *text;         /* the template's source */
    char *source;       /* where it came from, for messages */
    char today[32];     /* what strftime_now formats ("YYYY-MM-DD HH:MM:SS"); "" for the current UTC time */
} lf__chat_jinja;

/* path: a model directory (its chat_template.jinja, else tokenizer_config.json's
 * "chat_template"; the special tokens from tokenizer_config.json), a
 * tokenizer_config.json, or a .jinja file (special tokens from a
 * tokenizer_config.json beside it, if any). Errors: LF_ERR_NOT_FOUND (no
 * such path, or no template there), LF_ERR_IO, LF_ERR_FORMAT (bad JSON, a
 * syntax error "FILE:LINE: ..."), LF_ERR_UNSUPPORTED (a construct outside
 * the subset, "FILE:LINE: ..."), LF_ERR_NOMEM. */
lf_status lf__chat_jinja_load(const char *path, lf__chat_jinja *j);
/* Compile text[0, len) named `what`, with the special tokens of `special`
 * (a JSON object of strings, may be NULL). Errors as lf__chat_jinja_load. */
lf_status lf__chat_jinja_from_text(const char *text, size_t len, const char *what, const struct cJSON *special,
                                   lf__chat_jinja *j);
void lf__chat_jinja_free(lf__chat_jinja *j);
/* Render messages (a JSON list of message objects, as transformers takes
 * them) as apply_chat_template(..., tokenize=False) does. Spans as
 * lf__chat_template_render's: message text (every string under
 * "messages") is content, the rest template text. Errors: the
 * interpreter's (raise_exception: LF_ERR_INVALID_ARG with its message). */
lf_status lf__chat_jinja_render(const lf__chat_jinja *j, const struct cJSON *messages, int add_generation_prompt,
                                char **out, size_t *len, lf__chat_span **spans, int *n_spans);
/* The assistant turns of full (the rendering of messages without the
 * generation prompt) as *n_turns (offset, length) pairs in *turns
 * (malloc'd), one per assistant message, each with its end-of-turn marker
 * (the rule at the top of chat_jinja.c). LF_ERR_UNSUPPORTED naming the
 * message index when the template has no prefix-stable rendering. */
lf_status lf__chat_jinja_turns(const lf__chat_jinja *j, const struct cJSON *messages, const char *full, size_t full_len,
                               size_t **turns, int *n_turns);


/* A chat template: per-role text around each message's content, text once
 * at the start, and the generation prompt that opens the assistant's turn. */
typedef struct lf__chat_template {
    char *bos; /* before everything ("" for none) */
    char *prefix[LF__ROLE_COUNT];
    char *suffix[LF__ROLE_COUNT];
    char *generation_prompt;
    char *stop[4]; /* stop strings the template implies (e.g. "<|im_end|>") */
    int n_stop;
    char *default_system; /* a system message added when the chat has none; NULL: none */
    char *source;         /* "built-in ChatML" or the file's path */
    /* A Hugging Face (Jinja) template, or NULL. When set, it renders every
     * conversation and the fields above other than stop and source are
     * unused (NULL). */
    lf__chat_jinja *jinja;
} lf__chat_template;

#define LF__CHAT_TEMPLATE_FILE "chat_template.json"
#define LF__CHAT_TEMPLATE_FORMAT "llmforge.chat_template.v1"

/* The built-in template, ChatML: "<|im_start|>{role}\n{content}<|im_end|>\n"
 * per message, then "<|im_start|>assistant\n"; stop "<|im_end|>". */
lf_status lf__chat_template_chatml(lf__chat_template *t);
/* A template from the JSON text of a chat_template.json (docs/serving.md):
 *   {"format": "llmforge.chat_template.v1",
 *    "bos": "", "default_system": null,
 *    "roles": {"system": {"prefix": "...", "suffix": "..."}, "user": {...}, "assistant": {...}},
 *    "generation_prompt": "...", "stop": ["..."]}
 * Every role is required; bos, default_system, stop and description (a
 * note for people) are optional, and null counts as absent for them.
 * Errors: LF_ERR_FORMAT (not JSON, a wrong type, invalid UTF-8, a Jinja
 * template from Hugging Face: "chat_template" key), LF_ERR_CONFIG (unknown
 * key, wrong format, a string over 4096 bytes, more than 4 stop strings),
 * each naming `what` (the file) and the key. */
lf_status lf__chat_template_parse(const char *json, size_t len, const char *what, lf__chat_template *t);
/* DIR/chat_template.json if it exists (*from_file = 1), else ChatML. */
lf_status lf__chat_template_load_dir(const char *dir, lf__chat_template *t, int *from_file);
/* What `llmforge prepare --chat-template SPEC` names: "chatml" (the
 * built-in), a chat_template.json file, or a directory holding one (a
 * checkpoint's, say). Errors: LF_ERR_NOT_FOUND (no such file, or a
 * directory without chat_template.json), the parser's, LF_ERR_IO. */
lf_status lf__chat_template_load(const char *spec, lf__chat_template *t);
void lf__chat_template_free(lf__chat_template *t);
/* t as chat_template.json text (one JSON object with every key, a newline
 * at the end) that lf__chat_template_parse reads back as the same template.
 * *out malloc'd, NUL-terminated. LF_ERR_NOMEM. */
lf_status lf__chat_template_json(const lf__chat_template *t, char **out, size_t *len);


/* bos, [default system], then for each message prefix[role] + content +
 * suffix[role], then generation_prompt when add_generation_prompt. *out
 * (malloc'd, NUL-terminated, *len bytes); *spans (malloc'd, may be NULL
 * when not wanted) lists the pieces in order, empty ones left out. Errors:
 * LF_ERR_INVALID_ARG, LF_ERR_RANGE (a role out of range), LF_ERR_NOMEM. */
lf_status lf__chat_template_render(const lf__chat_template *t, const lf__chat_message *m, int n,
                                   int add_generation_prompt, char **out, size_t *len, lf__chat_span **spans,
                                   int *n_spans);

/* A fine-tuning pair as the template renders it: the prompt part is the
 * conversation [user: prompt] rendered with its generation prompt, exactly
 * what the chat endpoint sends the model for that one user message; the
 * response part is the response followed by suffix[assistant], so the
 * model learns to end its turn. *out holds both (prompt part first,
 * *prompt_len bytes of it); the spans cover it in order, and none crosses
 * *prompt_len. Errors as lf__chat_template_render. */
lf_status lf__chat_template_render_pair(const lf__chat_template *t, const char *prompt, size_t prompt_len_in,
                                        const char *response, size_t response_len, char **out, size_t *len,
                                        size_t *prompt_len, lf__chat_span **spans, int *n_spans);

/* ---------------------------------------------------------------- conversations as JSON (chat_messages.c) */
/* A template of either kind from a Hugging Face template: its stop strings
 * are eos_token and the end-of-turn markers its text writes. Takes *j. */
lf_status lf__chat_template_from_jinja(lf__chat_jinja *j, lf__chat_template *t);
/* The jinja kind of chat_template.json ("jinja", "special_tokens", "stop",
 * "description"), called by lf__chat_template_parse. */
lf_status lf__chat_template_parse_jinja(const struct cJSON *root, const char *what, lf__chat_template *t);
/* Render the first k messages (k < 0: all) of a JSON list of {role,
 * content} objects. The llmforge kind takes the roles system, user and
 * assistant with string content and refuses others naming the message;
 * the Jinja kind takes what its template reads. */
lf_status lf__chat_template_render_json(const lf__chat_template *t, const struct cJSON *messages, int k,
                                        int add_generation_prompt, char **out, size_t *len, lf__chat_span **spans,
                                        int *n_spans);
/* The assistant turns of full (the rendering of all messages without the
 * generation prompt), by the rule at the top of chat_jinja.c, for either
 * kind. */
lf_status lf__chat_template_turns(const lf__chat_template *t, const struct cJSON *messages, const char *full,
                                  size_t full_len, size_t **turns, int *n_turns);
/* The generic rule: render(ctx, messages, k, add_generation_prompt) renders a prefix. */
typedef lf_status (*lf__chat_render_fn)(const void *ctx, const struct cJSON *messages, int k, int add_gen, char **out,
                                        size_t *len);
lf_status lf__chat_turns_by_prefix(lf__chat_render_fn render, const void *ctx, const char *what,
                                   const struct cJSON *messages, const char *full, size_t full_len, size_t **turns,
                                   int *n_turns);

#endif
