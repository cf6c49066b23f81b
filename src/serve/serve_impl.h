/*
 * The OpenAI request layer of `llmforge serve` (internal API of src/serve):
 * request parsing and validation for POST /v1/completions and
 * POST /v1/chat/completions, OpenAI-shaped errors, the response and
 * server-sent-event builders, and the incremental stop-string matcher (the
 * chat template is data/chat_template.h, shared with the SFT data path).
 * The engine (src/serve/engine.c) and the HTTP wiring use these; nothing
 * here touches a model, a socket or a thread.
 *
 * Why our own: the wire format is OpenAI's, and what clients (the `openai`
 * Python/JS packages, LangChain, curl scripts) send must be read exactly as
 * OpenAI reads it, with OpenAI's errors; no C library does that. cJSON does
 * the JSON syntax; everything after that (types, ranges, caps, UTF-8, the
 * shapes of the answers) is here.
 *
 * Conventions:
 *   - A parse or check either succeeds (LF_OK) or fills an lf__serve_error
 *     with the HTTP status and OpenAI's error object ({"error": {"message",
 *     "type", "param", "code"}}); its message names the field (param) and
 *     the bad value or size. The lf_status returned is LF_ERR_FORMAT for an
 *     invalid body (400), LF_ERR_RANGE for a value or size out of bounds
 *     (400 or 413), LF_ERR_NOT_FOUND for an unknown model (404),
 *     LF_ERR_NOMEM (500); lf_last_error() holds the same message.
 *   - Strings in a parsed request are valid UTF-8 without U+0000 (the body
 *     must be; "\u0000" is refused too), so they are C strings whose length
 *     is also given.
 *   - Everything is a pure function of its arguments (the caller supplies
 *     ids and timestamps), so the builders have golden tests.
 *
 * References: the OpenAI API reference (Completions, Chat Completions,
 * streaming: https://platform.openai.com/docs/api-reference), RFC 8259
 * (JSON), RFC 3629 (UTF-8), the WHATWG HTML standard 9.2 (event streams).
 */
#ifndef LF_SERVE_IMPL_H
#define LF_SERVE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "llmforge/core.h"
#include "llmforge/model.h"
#include "data/chat_template.h"

/* ---------------------------------------------------------------- limits */

typedef struct lf__serve_limits {
    const char *model_name; /* the served model; another "model" is 404 model_not_found; NULL: any */
    /* the serving adapters' names (serve --lora NAME=DIR): "model" naming
     * adapters[i] selects adapter i + 1 (lf__serve_request.adapter) */
    const char *const *adapters;
    int n_adapters;
    size_t max_body;        /* bytes of a request body (413 beyond) */
    int max_context;        /* prompt + completion tokens */
    int max_tokens;         /* cap on max_tokens / max_completion_tokens */
    int default_max_tokens; /* completions without max_tokens (OpenAI's is 16); chat: what fits */
    int max_n;              /* cap on n */
    int max_prompts;        /* entries of a prompt list (serve --max-prompts) */
    int max_stop;           /* stop strings (OpenAI's cap is 4) */
    int max_stop_len;       /* bytes of one stop string */
    int max_logprobs;       /* completions' logprobs (OpenAI's cap is 5) */
    int max_top_logprobs;   /* chat's top_logprobs (OpenAI's cap is 20) */
    int max_messages;       /* chat messages */
    int vocab_size;         /* token ids in a prompt must be below it; 0: not checked here */
    int max_sequences;      /* prompts x n the engine can ever hold at once (slots + queue); 0: not checked */
} lf__serve_limits;

/* max_body 1 MiB, max_context 1024, max_tokens 1024, default_max_tokens 16,
 * max_n 8, max_prompts 64 (serve --max-prompts), max_stop 4, max_stop_len 256, max_logprobs 5,
 * max_top_logprobs 20, max_messages 256, vocab_size 0, max_sequences 0,
 * model_name NULL. */
lf__serve_limits lf__serve_limits_default(void);

/* ---------------------------------------------------------------- errors */

typedef struct lf__serve_error {
    int status;       /* HTTP status */
    const char *type; /* OpenAI's error type ("invalid_request_error", "server_error", ...) */
    const char *code; /* OpenAI's code ("model_not_found", ...) or NULL (JSON null) */
    char param[128];  /* the field ("messages[1].content"), "" for JSON null */
    char message[640];
    int retry_after; /* > 0: seconds for a Retry-After header (429, 503) */
} lf__serve_error;

/* Fill e (any of the string arguments may be NULL): the message is printf-style. */
void lf__serve_error_set(lf__serve_error *e, int status, const char *type, const char *code, const char *param,
                         const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* The common ones, with OpenAI's types and codes:
 *   401 invalid_request_error / invalid_api_key   (the key is never echoed)
 *   404 invalid_request_error / null              ("Invalid URL (POST /x)")
 *   405 invalid_request_error / null
 *   413 invalid_request_error / request_too_large
 *   429 rate_limit_error / rate_limit_exceeded    (Retry-After)
 *   503 server_error / overloaded                 (Retry-After)
 *   500 server_error / null */
void lf__serve_error_unauthorized(lf__serve_error *e);
void lf__serve_error_not_found(lf__serve_error *e, const char *method, const char *path);
void lf__serve_error_method(lf__serve_error *e, const char *method, const char *path);
void lf__serve_error_too_large(lf__serve_error *e, size_t limit);
void lf__serve_error_overloaded(lf__serve_error *e, int status, int retry_after_s, const char *why);
void lf__serve_error_internal(lf__serve_error *e, const char *what);
/* {"error":{"message":..,"type":..,"param":..,"code":..}}: malloc'd, NUL-
 * terminated, *len bytes; NULL when out of memory. */
char *lf__serve_error_json(const lf__serve_error *e, size_t *len);

/* ---------------------------------------------------------------- requests */

typedef enum lf__serve_api {
    LF__SERVE_COMPLETIONS = 0, /* POST /v1/completions */
    LF__SERVE_CHAT = 1,        /* POST /v1/chat/completions */
} lf__serve_api;

/* Roles and messages are the chat template's (data/chat_template.h):
 * LF__ROLE_SYSTEM ("system", and "developer", OpenAI's newer name for it),
 * LF__ROLE_USER, LF__ROLE_ASSISTANT. */
typedef lf__chat_role lf__serve_role;

/* "system", "user", "assistant"; NULL for a value out of range. */
const char *lf__serve_role_name(lf__serve_role r);

/* One completions prompt: text, or token ids (text NULL). */
typedef struct lf__serve_prompt {
    const char *text;
    size_t len;
    const int32_t *tokens;
    int n_tokens;
} lf__serve_prompt;

/* content: a string content, or the text parts joined with "\n"; "" for null */
typedef lf__chat_message lf__serve_message;

typedef struct lf__serve_request {
    lf__serve_api api;
    const char *model;         /* NULL when absent */
    int adapter;               /* the adapter "model" names (0: the base or absent) */
    const char *user;          /* NULL when absent (recorded, not used) */
    lf__serve_prompt *prompts; /* completions: 1..max_prompts */
    int n_prompts;
    lf__serve_message *messages; /* chat: 1..max_messages */
    int n_messages;
    int max_tokens;     /* -1: not given (see lf__serve_resolve_max_tokens) */
    double temperature; /* [0, 2]; default 1; 0 = greedy */
    double top_p;       /* [0, 1]; default 1; 0 keeps the most likely token only (lf__serve_request_sampling) */
    int top_k;          /* 0 = off (default; -1 is taken as 0) */
    int has_seed;
    int64_t seed;            /* |seed| <= 2^53 - 1, so a JSON double holds it exactly */
    const char *const *stop; /* n_stop strings, 1..max_stop_len bytes each */
    const size_t *stop_len;
    int n_stop;
    int n;            /* choices per prompt, 1..max_n */
    int echo;         /* completions: the prompt is part of the text */
    int logprobs;     /* 1: log-probabilities of the chosen tokens are returned */
    int top_logprobs; /* alternatives per token (completions: its `logprobs` integer) */
    int stream;
    int include_usage;                          /* stream_options.include_usage */
    int ignore_eos;                             /* vLLM's extension: the end-of-text token does not end the text */
    double presence_penalty, frequency_penalty; /* validated ([-2, 2]), not applied */
    void *impl_;                                /* owned storage */
} lf__serve_request;

/* Parse and validate a request body for `api` against `lim`.
 *
 * Honoured fields: model, prompt (a string, a list of strings, a list of
 * token ids, or a list of lists of ids), messages (system/developer/user/
 * assistant; content a string, null for an assistant, or a list of
 * {"type":"text","text":...} parts), max_tokens (chat: also
 * max_completion_tokens, which wins), temperature, top_p, top_k, seed,
 * stop, n, echo, logprobs, top_logprobs, stream, stream_options.include_usage,
 * user, and vLLM's ignore_eos. Checked but not applied: presence_penalty,
 * frequency_penalty.
 * Any other field is ignored, as OpenAI clients send extras; a null value
 * counts as absent. A field given twice is refused (readers disagree on
 * which one wins).
 *
 * Errors (*err filled, *out zeroed): invalid UTF-8 anywhere in the body, a
 * NUL byte or "\u0000", invalid JSON, a body that is not an object (400
 * param null); a wrong type, a number that is not an integer where one is
 * required, a value out of range, a list too long or empty, a missing
 * required field (400 naming the field); a body over lim->max_body (413);
 * a model other than lim->model_name (404 model_not_found); out of memory
 * (500). Free *out with lf__serve_request_free (also after an error). */
lf_status lf__serve_request_parse(lf__serve_api api, const char *body, size_t len, const lf__serve_limits *lim,
                                  lf__serve_request *out, lf__serve_error *err);
void lf__serve_request_free(lf__serve_request *r);

/* A library message fit for an HTTP client: every single-quoted span that
 * names a path (holds a '/') keeps its last component only, so
 * "... not in the vocabulary '/srv/m/step_60/vocab.json'" reads "... not in
 * the vocabulary 'vocab.json'". The server logs the full message; the
 * client learns what was wrong with its request, not where the server keeps
 * its files. Writes at most cap bytes (NUL included). */
void lf__serve_client_message(char *dst, size_t cap, const char *msg);

/* The request's sampling fields as the engine takes them (lf_engine_req,
 * where temperature 0 means greedy and top_p 0 or 1 means no nucleus
 * filter). A JSON double narrowed to float can land on those sentinels:
 * top_p 1e-50 becomes 0.0f, which the engine reads as "off". So a positive
 * value whose float is 0 becomes the smallest positive float (the limit it
 * stands for: top_p keeps the most likely token only, temperature samples
 * among the tied maxima), top_p 0 (OpenAI: the most likely token only) the
 * same, and only top_p >= 1 is "off". */
void lf__serve_request_sampling(const lf__serve_request *r, float *temperature, float *top_p);

/* Once the prompt is tokenized (the longest prompt of the request has
 * n_prompt_tokens tokens): the max_tokens to generate. Given: it must fit,
 * n_prompt_tokens + max_tokens <= max_context. Absent: completions take
 * min(default_max_tokens, what fits), chat takes min(max_tokens cap, what
 * fits). A prompt that leaves no room (or, given max_tokens, too little) is
 * 400 context_length_exceeded with param "prompt"/"messages" and a message
 * giving the context, the prompt and the completion sizes. */
lf_status lf__serve_resolve_max_tokens(const lf__serve_request *r, const lf__serve_limits *lim, int n_prompt_tokens,
                                       int *max_tokens, lf__serve_error *err);

/* ---------------------------------------------------------------- responses */

typedef enum lf__serve_finish {
    LF__FINISH_NONE = 0,   /* still generating (stream chunks): JSON null */
    LF__FINISH_STOP = 1,   /* a stop string or the end-of-text token */
    LF__FINISH_LENGTH = 2, /* max_tokens or the context ran out */
} lf__serve_finish;

typedef struct lf__serve_top {
    const char *token; /* its text (bytes; ill-formed UTF-8 is written as U+FFFD) */
    size_t len;
    double logprob;
} lf__serve_top;

/* One generated (or, with echo, prompt) token with its log-probability. */
typedef struct lf__serve_token_lp {
    const char *token;
    size_t len;
    double logprob;           /* NaN: JSON null (the first echoed prompt token has none) */
    int text_offset;          /* completions: where the token starts in the choice's text */
    const lf__serve_top *top; /* top_logprobs alternatives, most likely first */
    int n_top;
} lf__serve_token_lp;

typedef struct lf__serve_choice {
    int index;
    const char *text; /* the completion / message content (or a stream delta) */
    size_t len;
    lf__serve_finish finish;
    int first;                    /* chat stream: the first chunk of this choice carries the role */
    const lf__serve_token_lp *lp; /* NULL: "logprobs": null */
    int n_lp;
} lf__serve_choice;

typedef struct lf__serve_usage {
    int prompt_tokens;
    int completion_tokens;
} lf__serve_usage;

typedef struct lf__serve_meta {
    const char *id; /* "cmpl-..." / "chatcmpl-...", made by the caller */
    const char *model;
    int64_t created; /* Unix seconds */
} lf__serve_meta;

/* A whole non-streamed answer: "text_completion" (completions: choices with
 * text, index, logprobs {tokens, token_logprobs, top_logprobs, text_offset}
 * or null, finish_reason) or "chat.completion" (choices with index, message
 * {role "assistant", content}, logprobs {content: [{token, logprob, bytes,
 * top_logprobs: [{token, logprob, bytes}]}]} or null, finish_reason), then
 * usage {prompt_tokens, completion_tokens, total_tokens}. Numbers through
 * lf_json_number. malloc'd; NULL (message recorded) when out of memory. */
char *lf__serve_response_json(lf__serve_api api, const lf__serve_meta *m, const lf__serve_choice *c, int n,
                              const lf__serve_usage *u, size_t *len);

/* One streamed chunk, as OpenAI sends them: "text_completion" objects with
 * text, or "chat.completion.chunk" objects whose choices carry a delta
 * ({"role":"assistant","content":""} on a choice's first chunk,
 * {"content":...} after, {} on the chunk with the finish_reason). With
 * include_usage every chunk has "usage": null, and u != NULL makes the
 * final usage chunk (choices [], the usage). Returns the JSON (malloc'd). */
char *lf__serve_chunk_json(lf__serve_api api, const lf__serve_meta *m, const lf__serve_choice *c, int n,
                           int include_usage, const lf__serve_usage *u, size_t *len);

/* "data: <json>\n\n" (malloc'd, *len bytes). json must hold no CR or LF (what
 * the builders make never does); NULL (LF_ERR_INVALID_ARG) if it does. */
char *lf__serve_sse_event(const char *json, size_t json_len, size_t *len);
/* The stream's last event. */
#define LF__SERVE_SSE_DONE "data: [DONE]\n\n"

/* Write text[0, len) as UTF-8 with every ill-formed sequence replaced by
 * U+FFFD (one per maximal subpart, as Python's errors='replace'); malloc'd,
 * NUL-terminated; NULL when out of memory. Used for token texts, which may
 * hold part of a character. */
char *lf__serve_utf8_sanitize(const char *text, size_t len, size_t *out_len);

/* ---------------------------------------------------------------- chat template
 * lf__chat_template, its parser, ChatML and the renderer live in
 * src/data/chat_template.c (data/chat_template.h), shared with the SFT data
 * path of `llmforge prepare`. */

/* ---------------------------------------------------------------- stop strings */

/* Stop strings over a stream of generated text, across token boundaries.
 * The text is pushed in pieces as it is decoded; the matcher releases the
 * text that can no longer be part of a stop string and holds back the
 * longest tail that could still become one (at most the longest stop string
 * less one byte). Generation stops at the first byte where some stop string
 * ends; the released text then ends just before the longest stop string
 * ending there (the earliest-starting one), and excludes it, as OpenAI's.
 * The outcome depends only on the concatenated text, never on how it was
 * cut into pieces. A matcher is used by one thread at a time. */
typedef struct lf__stop_matcher lf__stop_matcher;

/* Stop strings stops[0..n) of lens[i] bytes (1..65536 each; n 0..64).
 * Errors: LF_ERR_INVALID_ARG, LF_ERR_RANGE (an empty or oversized string),
 * LF_ERR_NOMEM. */
lf_status lf__stop_matcher_create(const char *const *stops, const size_t *lens, int n, lf__stop_matcher **out);
/* Push text[0, len): *out / *out_len receive the text released now (a view
 * valid until the next call; may be empty); *stopped becomes 1 when a stop
 * string completed (and stays 1: later pushes release nothing). */
lf_status lf__stop_matcher_push(lf__stop_matcher *m, const char *text, size_t len, const char **out, size_t *out_len,
                                int *stopped);
/* The generation ended without a stop string: release what is held back. */
lf_status lf__stop_matcher_flush(lf__stop_matcher *m, const char **out, size_t *out_len);
/* Start over for a new text with the same stop strings. */
void lf__stop_matcher_reset(lf__stop_matcher *m);
void lf__stop_matcher_free(lf__stop_matcher *m);

/* ---------------------------------------------------------------- adapters (adapters.c) */

struct lf_server_opts;
/* serve --lora: each opts->lora_dirs[i] (a PEFT adapter directory) checked
 * against the base in base_dir (its base_model_name_or_path, when a local
 * directory, must be base_dir; its modules and r must fit), loaded and added
 * to m's bank as adapter i + 1; names must differ from each other and from
 * base_name. *names and *dirs: malloc'd copies (lf__serve_names_free). */
lf_status lf__serve_load_adapters(lf_model *m, const char *base_dir, const char *base_name,
                                  const struct lf_server_opts *opts, char ***names, char ***dirs);
void lf__serve_names_free(char **v, int n);

#endif
