/*
 * `llmforge serve --ckpt DIR [options]`: the OpenAI-compatible server
 * (include/llmforge/serve.h, docs/serving.md). Prints the URL, serves until
 * SIGTERM or SIGINT, then drains for --drain-s seconds (in-flight requests
 * finish or are cancelled, new ones get 503) and exits 0. Exit 2 on usage
 * errors, 1 when the server cannot start (the message names the file,
 * option or address).
 * Signals: SIGTERM and SIGINT are blocked before any thread exists (every
 * thread inherits the mask) and taken by the main thread with sigwait, so
 * no signal frame is ever pushed on a thread that computes: oneDNN's JIT
 * sgemm points rsp into the heap while it runs, and a handler run there
 * corrupts the heap (oneDNN issue #4845; see tools/llmforge/main.c, where
 * train does the same).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "llmforge/backend.h"
#include "llmforge/serve.h"
#include "commands.h"
#include "cli_util.h"

/* The key: the file's first line (trailing whitespace dropped). */
static int read_key(const char *path, char *key, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "llmforge serve: --api-key-file '%s': %s\n", path, strerror(errno));
        return -1;
    }
    if (!fgets(key, (int)cap, f)) key[0] = 0;
    fclose(f);
    size_t n = strlen(key);
    while (n && (key[n - 1] == '\n' || key[n - 1] == '\r' || key[n - 1] == ' ' || key[n - 1] == '\t')) key[--n] = 0;
    if (!n) {
        fprintf(stderr, "llmforge serve: --api-key-file '%s' is empty\n", path);
        return -1;
    }
    return 0;
}

#define MAX_LORA 32

/* One NAME=DIR of --lora / --lora-modules into the lists; 2 on bad input. */
static int add_lora(const char *v, char **names, const char **dirs, int *n) {
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1]) {
        fprintf(stderr, "llmforge serve: --lora '%s': expected NAME=ADAPTER_DIR\n", v);
        return 2;
    }
    if (*n >= MAX_LORA) {
        fprintf(stderr, "llmforge serve: more than %d --lora adapters\n", MAX_LORA);
        return 2;
    }
    names[*n] = strndup(v, (size_t)(eq - v));
    dirs[*n] = eq + 1;
    if (!names[*n]) return 2;
    (*n)++;
    return 0;
}

int cmd_serve(int argc, char **argv) {
    const char *ckpt = NULL, *key_file = NULL;
    lf_server_opts o = {0};
    char *lora_names[MAX_LORA];
    const char *lora_dirs[MAX_LORA];
    int n_lora = 0;
    long port = 8000, threads = 0, v_long;
    double drain = 30;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: llmforge serve --ckpt DIR [--host ADDR] [--port N] [--model-name NAME]\n"
                   "                      [--api-key-file F] [--max-batch N] [--max-context T] [--max-queue Q]\n"
                   "                      [--max-tokens N] [--max-prompts N] [--threads N] [--drain-s S]\n"
                   "                      [--request-timeout-s S] [--batch-variant]\n"
                   "                      [--lora NAME=ADAPTER_DIR ...] (or --lora-modules NAME=DIR [NAME=DIR ...])\n"
                   "  DIR (--ckpt or --model): a checkpoint, a run's out_dir, or a Hugging Face model directory\n"
                   "  used as it is (its tokenizer.json and generation_config.json eos ids; docs/models.md).\n"
                   "  An OpenAI-compatible server: POST /v1/completions, POST /v1/chat/completions (stream or\n"
                   "  not), GET /v1/models, GET /health, GET /metrics (Prometheus). Concurrent requests decode\n"
                   "  together (continuous batching over --max-batch KV-cache slots of --max-context tokens;\n"
                   "  default 8 and the model's block_size, at most 4096); --max-queue more wait (default 64),\n"
                   "  then 429.\n"
                   "  --request-timeout-s: a request's headers and body must arrive within S seconds (default\n"
                   "  10), else 408 and the connection is closed (slow or stalled clients hold no slot).\n"
                   "  --max-prompts caps the prompts of one completions request (a prompt list, as\n"
                   "  lm-evaluation-harness sends batch_size of them; default 64, at most --max-batch +\n"
                   "  --max-queue); more get a 400 naming it.\n"
                   "  --host defaults to 127.0.0.1 (loopback); another address must be asked for. --port 0\n"
                   "  picks a free one. The API key (Authorization: Bearer KEY) is the first line of\n"
                   "  --api-key-file, else $LLMFORGE_API_KEY, else none is required. SIGTERM/SIGINT: new\n"
                   "  requests get 503, in-flight ones finish within --drain-s (default 30), then exit 0.\n"
                   "  Products are batch-invariant: a request gets the same bits alone or batched (with a seed,\n"
                   "  the same text); --batch-variant uses the backend's fastest products instead (oneDNN's,\n"
                   "  whose rows may differ in the last bits with the batch).\n"
                   "  --lora NAME=DIR serves a LoRA adapter (a PEFT adapter directory or a LoRA step directory\n"
                   "  trained on DIR's base) beside the base: a request whose \"model\" is NAME runs on base +\n"
                   "  adapter, batched with requests for the base and the other adapters (docs/serving.md).\n");
            return 0;
        } else if ((v = opt_value(argc, argv, &i, "--ckpt", &missing)) ||
                   (v = opt_value(argc, argv, &i, "--model", &missing))) {
            ckpt = v;
        } else if ((v = opt_value(argc, argv, &i, "--host", &missing))) {
            o.host = v;
        } else if ((v = opt_value(argc, argv, &i, "--port", &missing))) {
            if (parse_long("--port", v, 0, 65535, &port)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--model-name", &missing))) {
            o.model_name = v;
        } else if ((v = opt_value(argc, argv, &i, "--api-key-file", &missing))) {
            key_file = v;
        } else if ((v = opt_value(argc, argv, &i, "--max-batch", &missing))) {
            if (parse_long("--max-batch", v, 1, 4096, &v_long)) return 2;
            o.max_batch = (int)v_long;
        } else if ((v = opt_value(argc, argv, &i, "--max-context", &missing))) {
            if (parse_long("--max-context", v, 2, 1 << 20, &v_long)) return 2;
            o.max_context = (int)v_long;
        } else if ((v = opt_value(argc, argv, &i, "--max-queue", &missing))) {
            if (parse_long("--max-queue", v, 1, 1 << 20, &v_long)) return 2;
            o.max_queue = (int)v_long;
        } else if ((v = opt_value(argc, argv, &i, "--max-tokens", &missing))) {
            if (parse_long("--max-tokens", v, 1, 1 << 20, &v_long)) return 2;
            o.max_tokens = (int)v_long;
        } else if ((v = opt_value(argc, argv, &i, "--max-prompts", &missing))) {
            if (parse_long("--max-prompts", v, 1, 1 << 20, &v_long)) return 2;
            o.max_prompts = (int)v_long;
        } else if ((v = opt_value(argc, argv, &i, "--threads", &missing))) {
            if (parse_long("--threads", v, 0, 4096, &threads)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--drain-s", &missing))) {
            if (parse_double("--drain-s", v, 0, 86400, &drain)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--request-timeout-s", &missing))) {
            if (parse_double("--request-timeout-s", v, 0.1, 3600, &o.request_deadline_s)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--lora", &missing))) {
            if (add_lora(v, lora_names, lora_dirs, &n_lora)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--lora-modules", &missing))) { /* vLLM: one or more */
            if (add_lora(v, lora_names, lora_dirs, &n_lora)) return 2;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 && strchr(argv[i + 1], '='))
                if (add_lora(argv[++i], lora_names, lora_dirs, &n_lora)) return 2;
        } else if (!strcmp(argv[i], "--batch-variant")) {
            o.batch_variant = 1;
        } else if (missing) {
            return 2;
        } else {
            fprintf(stderr, "llmforge serve: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!ckpt) {
        fprintf(stderr, "llmforge serve: --ckpt DIR is required\n");
        return 2;
    }
    char key[512] = "";
    if (key_file) {
        if (read_key(key_file, key, sizeof key)) return 2;
    } else if (getenv("LLMFORGE_API_KEY") && *getenv("LLMFORGE_API_KEY")) {
        snprintf(key, sizeof key, "%s", getenv("LLMFORGE_API_KEY"));
    }
    o.api_key = key[0] ? key : NULL;
    o.port = (int)port;
    o.lora_names = (const char *const *)lora_names;
    o.lora_dirs = lora_dirs;
    o.n_lora = n_lora;
    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_set, NULL); /* before the backend's, the HTTP and the engine's threads */
    signal(SIGPIPE, SIG_IGN);
    if (cli_backend_setup("serve", threads, 1)) return 2;
    lf_server *s = NULL;
    lf_status st = lf_server_start(&s, ckpt, &o);
    if (st != LF_OK) {
        die_status(st, "serve");
        return 1;
    }
    const char *host = o.host ? o.host : "127.0.0.1";
    const int v6 = strchr(host, ':') != NULL && host[0] != '[';
    printf("llmforge serve: model '%s' at http://%s%s%s:%d/v1 (max batch %d, %s)\n", lf_server_model_name(s),
           v6 ? "[" : "", host, v6 ? "]" : "", lf_server_port(s), o.max_batch ? o.max_batch : 8,
           o.api_key ? "API key required" : "no API key");
    printf("llmforge serve: chat template: %s\n", lf_server_chat_template(s));
    fflush(stdout);
    int sig = 0;
    while (sigwait(&stop_set, &sig) != 0) {
    }
    printf("llmforge serve: stopping (draining for up to %g s)\n", drain);
    fflush(stdout);
    lf_server_stop(s, drain);
    for (int i = 0; i < n_lora; i++) free(lora_names[i]);
    printf("llmforge serve: stopped\n");
    return 0;
}
