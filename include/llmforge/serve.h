/*
 * `llmforge serve`: an OpenAI-compatible HTTP server over a checkpoint
 * (docs/serving.md). POST /v1/completions, POST /v1/chat/completions
 * (streaming or not), GET /v1/models, GET /health, GET /metrics
 * (Prometheus text). Requests are batched by the continuous-batching engine
 * (src/serve/engine.c) and answered from its thread; the HTTP side is
 * src/http/ (deadlines, connection cap, worker pool).
 */
#ifndef LLMFORGE_SERVE_H
#define LLMFORGE_SERVE_H

#include <stddef.h>
#include "llmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lf_server lf_server;

typedef struct lf_server_opts {
    const char *host;          /* NULL: "127.0.0.1" */
    int port;                  /* 0: a free port (lf_server_port) */
    const char *model_name;    /* NULL: the checkpoint directory's name */
    const char *api_key;       /* NULL or "": no key required; else "Authorization: Bearer KEY" */
    int max_batch;             /* sequences decoding together (KV slots); 0: 8 */
    int max_context;           /* prompt + completion tokens per sequence; 0: the model's block_size, at most 4096 */
    int max_queue;             /* requests waiting for a slot before 429; 0: 64 */
    int http_threads;          /* HTTP worker threads; 0: 2 */
    int max_connections;       /* 0: 256 */
    double request_deadline_s; /* headers + body of a request; 0: 10 */
    size_t max_body;           /* request body bytes; 0: 1 MiB */
    int max_tokens;            /* cap on max_tokens; 0: max_context */
    int max_n;                 /* cap on n; 0: 8 */
    /* prompts in one completions request (a list of prompts; lm-evaluation-
     * harness sends batch_size of them); 0: 64, or max_batch + max_queue
     * when that is less. More than max_batch + max_queue is refused at start
     * (such a request could never run). */
    int max_prompts;
    /* 0 (default): the model runs on its own backend instance in batch-
     * invariant mode (lf_backend_set_batch_invariant), so a request gets the
     * same bits (and, with a seed, the same text) alone or among any others;
     * 1: the backend's fastest products, whose rows may differ in the last
     * bits with the batch they ran in. */
    int batch_variant;
    /* LoRA adapters served beside the base (vLLM's --lora-modules): a
     * request whose "model" is lora_names[i] runs on the base + the PEFT
     * adapter directory lora_dirs[i], batched with the others. Each adapter
     * must name this base (its base_model_name_or_path, when a local
     * directory, must be the checkpoint's) and fit its modules. */
    const char *const *lora_names;
    const char *const *lora_dirs;
    int n_lora;
} lf_server_opts;

/* Load the checkpoint (a step directory, a run's ckpt/ or out_dir), its
 * tokenizer and chat template (DIR/chat_template.json, else ChatML), start
 * the engine and listen. Errors name the file, option or address. */
lf_status lf_server_start(lf_server **out, const char *ckpt, const lf_server_opts *opts);
int lf_server_port(const lf_server *s);
const char *lf_server_model_name(const lf_server *s);
/* Where the chat template came from: the checkpoint's chat_template.json
 * (its path) or "built-in ChatML". Valid while the server runs. */
const char *lf_server_chat_template(const lf_server *s);
/* Drain and stop (docs/serving.md, "Shutdown"): requests that begin from
 * now on get 503 with Retry-After; requests already begun (even those whose
 * body is still arriving) are finished and sent whole for up to drain_s
 * seconds; what is left then gets an explicit error (503, or an error event
 * in a stream that already sent its 200), never a cut answer; then the
 * server stops listening and frees everything. NULL: no-op. */
void lf_server_stop(lf_server *s, double drain_s);

#ifdef __cplusplus
}
#endif
#endif
