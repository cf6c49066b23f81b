/*
 * A bounded interpreter for the subset of Jinja that Hugging Face chat
 * templates use (tokenizer_config.json's "chat_template", or a
 * chat_template.jinja file). Private to src/data (and src/serve, through
 * chat_template.h); the user guide is docs/data.md and docs/serving.md.
 *
 * Semantics follow jinja2 as transformers configures it
 * (transformers/utils/chat_template_utils.py, _compile_jinja_template):
 * trim_blocks and lstrip_blocks on, one trailing newline of the source
 * dropped (keep_trailing_newline off), loop controls (break, continue), the
 * `generation` tag, the globals raise_exception, strftime_now, namespace,
 * range and dict, and a tojson that is json.dumps(x, ensure_ascii=False,
 * indent=...). Values are Python's: none, bool, int, float, str (UTF-8,
 * indexed by code point), list, dict (in insertion order), namespace,
 * macro; the undefined value prints as "" and fails on attribute access.
 *
 * Files: jinja_lex.c (source -> tokens, whitespace control), jinja_parse.c
 * (tokens -> tree; every filter, test, method, global, tag and loop
 * attribute is checked here, so an unsupported construct is refused at
 * compile time naming its line, never rendered wrongly), jinja_value.c
 * (values, the arena, printing, tojson), jinja_eval.c (statements and
 * expressions), jinja_builtins.c (filters, tests, methods, globals).
 *
 * Bounds (a template is untrusted code): the source is at most
 * LF__JINJA_SOURCE_MAX bytes and nests at most LF__JINJA_DEPTH_MAX deep;
 * a render evaluates at most limits.max_steps nodes, calls macros at most
 * LF__JINJA_DEPTH_MAX deep, allocates at most limits.max_memory bytes and
 * writes at most limits.max_output bytes; past any of them it fails with
 * LF_ERR_RANGE naming the bound. Nothing grows without a cap.
 *
 * Content spans: every string value knows which of its bytes came from the
 * `messages` input (content) and which from the template or the other
 * variables (template text); the render reports the output as spans, so a
 * tokenizer reads special tokens in template text only and a message that
 * types "<|im_end|>" cannot forge a turn.
 *
 * Errors: LF_ERR_FORMAT (a syntax error), LF_ERR_UNSUPPORTED (a construct
 * outside the subset), each "WHAT:LINE: ..." at compile time;
 * LF_ERR_INVALID_ARG (raise_exception's message, a type error at render
 * time, "WHAT:LINE: ..."), LF_ERR_RANGE (a bound), LF_ERR_NOMEM.
 */
#ifndef LF_DATA_JINJA_H
#define LF_DATA_JINJA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "chat_template.h"
#include "llmforge/core.h"

#define LF__JINJA_SOURCE_MAX (1u << 20)
#define LF__JINJA_DEPTH_MAX 64

typedef struct lf__jinja lf__jinja;

typedef struct lf__jinja_limits {
    size_t max_output; /* bytes of rendered text */
    size_t max_memory; /* bytes of values the render may allocate */
    long max_steps;    /* nodes evaluated */
} lf__jinja_limits;

/* 16 MiB of output, 256 MiB of values, 10 million steps. */
lf__jinja_limits lf__jinja_limits_default(void);

/* Compile src[0, len) (UTF-8); `what` names it in messages (a file path).
 * *out owns a copy of everything it needs. */
lf_status lf__jinja_compile(const char *src, size_t len, const char *what, lf__jinja **out);
void lf__jinja_free(lf__jinja *t);
/* 1 when the template contains a {% generation %} block. */
int lf__jinja_has_generation(const lf__jinja *t);

/* Render with the variables of `vars` (a JSON object: each key a global;
 * strings under "messages" count as content, everything else as template
 * text). `today` ("YYYY-MM-DD HH:MM:SS", NULL: the current UTC time) is
 * what strftime_now formats, so tests are deterministic. *out malloc'd,
 * NUL-terminated; *spans malloc'd (may be NULL when not wanted), in order,
 * covering *out, no empty span. */
lf_status lf__jinja_render(const lf__jinja *t, const cJSON *vars, const char *today, const lf__jinja_limits *lim,
                           char **out, size_t *len, lf__chat_span **spans, int *n_spans);

#endif
