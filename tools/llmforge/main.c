/*
 * llmforge: the command-line front end. Subcommands parse their options,
 * call the library, and turn statuses into messages and exit codes. This is
 * the only layer that prints or exits.
 *
 *   llmforge prepare --char INPUT --out DIR
 *   llmforge train CONFIG.json [--key.path=value ...] [--resume [auto]] [--init-from FILE]
 *                  [--deepspeed_config FILE | --deepspeed FILE] [--print-config]
 *   llmforge sample --ckpt DIR [--prompt TEXT] [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]
 *   llmforge bench (--preset NAME | --config CFG) [--micro-batch B] [--seq T] [--steps N] [--warmup W]
 *                  [--peak-gflops G] [--recompute none|selective|full] [--bf16] [--json]
 *
 * sample, bench and the dispatch live here; train (its signals and exit
 * statuses) in cmd_train.c, the other subcommands in cmd_*.c (commands.h).
 */
#include <errno.h>
#include <limits.h>
#include <float.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "llmforge/backend.h"
#include "llmforge/checkpoint.h"
#include "llmforge/comm.h"
#include "llmforge/data.h"
#include "llmforge/infer.h"
#include "llmforge/model.h"
#include "llmforge/train.h"
#include "llmforge/backend_cpu.h"
#include "llmforge/backend_cuda.h"
#include "llmforge/comm_nccl.h"
#include "cli_util.h"
#include "commands.h"

#define LF_VERSION "0.1.0"


static void log_to_stderr(lf_log_level level, const char *msg, void *user) {
    (void)user;
    static const char *names[] = {"debug", "info", "warning", "error"};
    fprintf(stderr, "[%s] %s\n", names[level], msg);
}


/* ---------------------------------------------------------------- sample */
typedef struct stream_ctx {
    lf_detok_stream *ds;    /* whole UTF-8 characters only (NULL: --ids without a tokenizer) */
    int quiet;              /* --json: no text on stdout */
    double t_first, t_last; /* when the first and the latest token came */
    size_t n;
    int32_t eos[16]; /* the model directory's end-of-sequence ids: generation stops there */
    int n_eos;
} stream_ctx;

static int print_token(uint32_t token, void *user) {
    stream_ctx *s = user;
    const double now = lf_time_now();
    if (s->n++ == 0) s->t_first = now;
    s->t_last = now;
    for (int i = 0; i < s->n_eos; i++)
        if ((int32_t)token == s->eos[i])
            return 1; /* kept in the ids, not printed (transformers' skip_special_tokens) */
    if (s->quiet || !s->ds) return 0;
    char *text = NULL;
    size_t len = 0;
    if (lf_detok_stream_push(s->ds, token, &text, &len) == LF_OK && len) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    lf_free(text);
    return 0;
}

/* "1,2,3" or "1 2 3" into ids (lf_alloc'd). */
static int parse_ids(const char *s, uint32_t **ids, size_t *n) {
    size_t cap = strlen(s) / 2 + 2;
    *ids = lf_alloc(cap * sizeof **ids);
    *n = 0;
    if (!*ids) return 1;
    const char *p = s;
    while (*p) {
        while (*p == ',' || *p == ' ') p++;
        if (!*p) break;
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || v > 0x7fffffffUL) {
            fprintf(stderr, "llmforge sample: --ids: '%s' is not a list of token ids\n", s);
            return 1;
        }
        (*ids)[(*n)++] = (uint32_t)v;
        p = end;
    }
    return 0;
}

/* sample --chat FILE: the messages rendered by the checkpoint's chat
 * template (chat_template.json, else its Hugging Face template, else the
 * built-in ChatML as serve takes it) with the generation prompt, tokenized
 * as serve tokenizes a chat. */
static lf_status sample_chat_prompt(const char *dir, const lf_tokenizer *tok, const char *file, uint32_t **ids,
                                    size_t *n, char **text) {
    lf_chat_template *t = NULL;
    char *json = NULL;
    size_t len = 0;
    int builtin = 0;
    lf_status st = lf_chat_template_open(dir, &t);
    if (st == LF_ERR_NOT_FOUND) {
        builtin = 1;
        st = lf_chat_template_open("chatml", &t);
    }
    if (st == LF_OK) st = lf_file_read_all(file, (size_t)64 << 20, &json, &len);
    if (st == LF_OK) st = lf_chat_template_encode(t, tok, json, len, ids, n, text);
    if (st != LF_OK && builtin)
        fprintf(stderr,
                "llmforge: sample: '%s' has no chat template and the built-in ChatML does not fit its "
                "tokenizer: %s\n  give the model one: `llmforge prepare --mode sft --chat-template ...` "
                "before training, or a chat_template.json / chat_template.jinja in the directory\n",
                dir, lf_last_error());
    else if (st != LF_OK) die_status(st, "sample: --chat");
    else fprintf(stderr, "llmforge sample: chat template: %s\n", lf_chat_template_source(t));
    lf_free(json);
    lf_chat_template_free(t);
    return st;
}

static int cmd_sample(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = "\n", *ids_arg = NULL, *chat = NULL;
    long max_new = 200, top_k = 0, threads = 0;
    double temperature = 1.0, top_p = 1.0;
    uint64_t seed = 1337;
    int json = 0, no_cache = 0, invariant = 0, ignore_eos = 0;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--ckpt", &missing)) || (v = opt_value(argc, argv, &i, "--model", &missing)))
            ckpt = v;
        else if ((v = opt_value(argc, argv, &i, "--prompt", &missing))) prompt = v;
        else if ((v = opt_value(argc, argv, &i, "--ids", &missing))) ids_arg = v;
        else if ((v = opt_value(argc, argv, &i, "--chat", &missing))) chat = v;
        else if ((v = opt_value(argc, argv, &i, "--max-new-tokens", &missing))) {
            if (parse_long("--max-new-tokens", v, 0, 1L << 24, &max_new)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--temperature", &missing))) {
            if (parse_double("--temperature", v, 0, 100, &temperature)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--top-k", &missing))) {
            if (parse_long("--top-k", v, 0, INT_MAX, &top_k)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--top-p", &missing))) {
            if (parse_double("--top-p", v, 0, 1, &top_p)) return 2;
            if (top_p <= 0) {
                fprintf(stderr, "llmforge sample: --top-p %g must be in (0, 1]\n", top_p);
                return 2;
            }
        } else if ((v = opt_value(argc, argv, &i, "--seed", &missing))) {
            if (parse_u64("--seed", v, &seed)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--threads", &missing))) {
            if (parse_long("--threads", v, 0, 4096, &threads)) return 2;
        } else if (missing) return 2;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--no-cache")) no_cache = 1;
        else if (!strcmp(argv[i], "--batch-invariant")) invariant = 1;
        else if (!strcmp(argv[i], "--ignore-eos")) ignore_eos = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: llmforge sample --ckpt DIR [--prompt TEXT | --ids 1,2,3 | --chat MESSAGES.json]\n"
                   "                       [--max-new-tokens N]\n"
                   "                       [--temperature T] [--top-k K] [--top-p P] [--seed S] [--no-cache]\n"
                   "                       [--json] [--threads N] [--batch-invariant] [--ignore-eos]\n"
                   "  DIR (--ckpt or --model): a checkpoint step directory, a run's ckpt/ or ckpt/latest, the\n"
                   "  run's out_dir, or a Hugging Face model directory (config.json, safetensors, its own\n"
                   "  tokenizer.json). Generation stops at the end-of-sequence ids the directory names\n"
                   "  (generation_config.json, else an HF config.json), as transformers' generate does;\n"
                   "  --ignore-eos runs on to --max-new-tokens.\n"
                   "  --temperature 0 is greedy decoding; --top-p keeps the smallest set of tokens whose\n"
                   "  probability reaches P. Decoding uses a KV cache; --no-cache runs a forward over the\n"
                   "  whole context for every token (the reference path: same tokens when greedy, but for\n"
                   "  dynamic-NTK RoPE, whose table follows the context length: docs/models.md).\n"
                   "  --chat: a JSON list of {role, content} messages, rendered with the generation prompt by\n"
                   "  the model's chat template as `llmforge serve` renders a chat (docs/cli.md).\n"
                   "  --ids: the prompt as token ids. --json: one JSON object (prompt ids, generated ids,\n"
                   "  the logits of the last prompt position, prefill and decode timing) instead of text.\n"
                   "  --batch-invariant: the products `llmforge serve` uses by default, so a greedy sample\n"
                   "  equals the server's completion bit for bit (the prompt's forward is slower).\n");
            return 0;
        } else {
            fprintf(stderr, "llmforge sample: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!ckpt) {
        fprintf(stderr, "llmforge sample: --ckpt DIR (or --model DIR) is required\n");
        return 2;
    }
    if (cli_backend_setup("sample", threads, 1)) return 2;
    char thr[256];
    cli_threads_line(thr, sizeof thr); /* stdout is the sample */
    fprintf(stderr, "llmforge sample: %s\n", thr);
    int rc = 1;
    char *dir = NULL;
    lf_model *m = NULL;
    lf_tokenizer *tok = NULL;
    lf_session *ses = NULL;
    lf_backend *be = NULL;
    uint32_t *ids = NULL, *out = NULL;
    int32_t *ctx = NULL;
    size_t n_ids = 0, n_out = 0;
    char spec[LF_PATH_MAX + 32], *chat_text = NULL;
    lf_status st = LF_OK;
    if (invariant && ((st = lf_backend_open(lf_backend_default_name(), &be)) != LF_OK ||
                      (st = lf_backend_set_batch_invariant(be, 1)) != LF_OK)) {
        die_status(st, "sample");
        goto done;
    }
    st = lf_checkpoint_load_model(ckpt, be, &m, spec, sizeof spec, &dir);
    if (st != LF_OK) {
        die_status(st, "sample");
        goto done;
    }
    if (ids_arg) {
        if (parse_ids(ids_arg, &ids, &n_ids)) {
            rc = 2;
            goto done;
        }
    } else {
        if (!spec[0]) {
            fprintf(stderr, "llmforge: sample: '%s' %s; give the prompt as --ids\n", dir,
                    lf_checkpoint_is_hf_dir(dir) ? "has no tokenizer.json" : "does not name its tokenizer");
            goto done;
        }
        st = lf_checkpoint_open_tokenizer(dir, spec, m, &tok); /* the checkpoint carries its vocabulary */
        if (st != LF_OK) {
            die_status(st, "sample: tokenizer");
            goto done;
        }
        if (chat) {
            st = sample_chat_prompt(dir, tok, chat, &ids, &n_ids, &chat_text);
            if (st != LF_OK) goto done;
            prompt = chat_text;
        } else if ((st = lf_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n_ids)) != LF_OK) {
            die_status(st, "sample: prompt");
            goto done;
        }
    }
    if (n_ids == 0) {
        fprintf(stderr, "llmforge: sample: the prompt is empty; give --prompt TEXT\n");
        goto done;
    }
    /* a positive value whose float is 0 (e.g. --top-p 1e-50) would read as
     * "off" (top_p) or greedy (temperature): the smallest positive float */
    const float tf = temperature > 0 && (float)temperature == 0.0f ? FLT_TRUE_MIN : (float)temperature;
    const float pf = (float)top_p == 0.0f ? FLT_TRUE_MIN : (float)top_p;
    lf_sample_opts so = {.max_new_tokens = (int)max_new,
                         .temperature = tf,
                         .top_k = (int)top_k,
                         .seed = seed,
                         .top_p = pf,
                         .no_cache = no_cache};
    stream_ctx sc = {.quiet = json};
    if (!ignore_eos && (st = lf_checkpoint_eos_ids(dir, sc.eos, 16, &sc.n_eos)) != LF_OK) {
        die_status(st, "sample");
        goto done;
    }
    if (tok && (st = lf_detok_stream_create(&sc.ds, tok)) != LF_OK) {
        die_status(st, "sample");
        goto done;
    }
    if (!json && !ids_arg) fputs(prompt, stdout);
    const double t0 = lf_time_now();
    st = lf_generate(m, ids, n_ids, &so, print_token, &sc, &out, &n_out);
    const double t_end = lf_time_now();
    if (sc.ds && !json) { /* a character the last token left unfinished */
        char *rest = NULL;
        size_t rl = 0;
        if (lf_detok_stream_flush(sc.ds, &rest, &rl) == LF_OK && rl) fwrite(rest, 1, rl, stdout);
        lf_free(rest);
    }
    lf_detok_stream_free(sc.ds);
    if (!json) printf("\n");
    if (st != LF_OK) {
        die_status(st, "sample");
        goto done;
    }
    if (json) {
        /* the logits of the last prompt position, from a forward of the prompt (cropped to block_size) */
        const lf_model_config *mc = lf_model_get_config(m);
        const int T = n_ids > (size_t)mc->block_size ? mc->block_size : (int)n_ids;
        const int Vp = mc->padded_vocab_size > 0 ? mc->padded_vocab_size : mc->vocab_size;
        ctx = lf_alloc(sizeof(int32_t) * (size_t)T);
        if (!ctx) {
            die_status(LF_ERR_NOMEM, "sample");
            goto done;
        }
        for (int i = 0; i < T; i++) ctx[i] = (int32_t)ids[n_ids - (size_t)T + (size_t)i];
        if ((st = lf_session_create(&ses, m, 1, T, 0)) == LF_OK) st = lf_session_forward(ses, ctx, 1, T, 0);
        if (st != LF_OK) {
            die_status(st, "sample");
            goto done;
        }
        float *lg = lf_alloc(sizeof(float) * (size_t)Vp);
        if (!lg) {
            die_status(LF_ERR_NOMEM, "sample");
            goto done;
        }
        if ((st = lf_session_copy_logits(ses, (size_t)(T - 1), 1, lg)) != LF_OK) {
            lf_free(lg);
            die_status(st, "sample");
            goto done;
        }
        printf("{\"prompt\":[");
        for (size_t i = 0; i < n_ids; i++) printf("%s%u", i ? "," : "", ids[i]);
        printf("],\"sampling\":\"%s\",\"cache\":%s,\"generated\":[", temperature == 0 ? "greedy" : "sample",
               no_cache ? "false" : "true");
        for (size_t i = 0; i < n_out; i++) printf("%s%u", i ? "," : "", out[i]);
        if (temperature == 0) { /* the key tools/check_hf_llama.py --compare reads */
            printf("],\"greedy\":[");
            for (size_t i = 0; i < n_out; i++) printf("%s%u", i ? "," : "", out[i]);
        }
        printf("],\"last_logits\":[");
        for (int v = 0; v < mc->vocab_size; v++) {
            char num[LF_JSON_NUMBER_MAX];
            lf_json_number(num, sizeof num, lg[v]);
            printf("%s%s", v ? "," : "", num);
        }
        char a[LF_JSON_NUMBER_MAX], b[LF_JSON_NUMBER_MAX], c[LF_JSON_NUMBER_MAX];
        lf_json_number(a, sizeof a, sc.n ? (sc.t_first - t0) * 1e3 : 0.0); /* prompt forward + first token */
        lf_json_number(b, sizeof b, sc.n > 1 ? (double)(sc.n - 1) / (sc.t_last - sc.t_first) : 0.0);
        lf_json_number(c, sizeof c, (t_end - t0) * 1e3);
        printf("],\"first_token_ms\":%s,\"decode_tokens_per_sec\":%s,\"total_ms\":%s}\n", a, b, c);
        lf_free(lg);
    }
    rc = 0;
done:
    lf_session_free(ses);
    lf_free(ctx);
    lf_free(dir);
    lf_free(ids);
    lf_free(out);
    lf_model_free(m);
    lf_backend_close(be);
    lf_tokenizer_free(tok);
    free(chat_text);
    return rc;
}

/* ---------------------------------------------------------------- bench */
/* s as the inside of a JSON string (quote, backslash and control bytes escaped), cut to fit cap */
static void json_inner(char *dst, size_t cap, const char *s) {
    size_t o = 0;
    for (; *s && o + 7 < cap; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            dst[o++] = '\\';
            dst[o++] = (char)c;
        } else if (c < 0x20) o += (size_t)snprintf(dst + o, cap - o, "\\u%04x", c);
        else dst[o++] = (char)c;
    }
    dst[o] = 0;
}

static int cmd_bench(int argc, char **argv) {
    const char *preset = NULL, *config = NULL;
    long B = 0, T = 0, steps = 10, warmup = 2, threads = 0; /* B, T 0: the config's (presets: 4, block) */
    double peak_gflops = 0;
    int json = 0;
    lf_recompute recompute = LF_RECOMPUTE_NONE;
    int recompute_given = 0;
    int bf16 = 0;
    /* --key.path=value overrides of the --config file, as train takes them,
     * and the --backend override: at most argc + 2 */
    const char **overrides = calloc((size_t)argc + 2, sizeof(char *));
    int n_over = 0, rc = 2;
    if (!overrides) return 1;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--preset", &missing))) preset = v;
        else if ((v = opt_value(argc, argv, &i, "--config", &missing))) config = v;
        else if ((v = opt_value(argc, argv, &i, "--micro-batch", &missing))) {
            if (parse_long("--micro-batch", v, 1, 65536, &B)) goto done;
        } else if ((v = opt_value(argc, argv, &i, "--seq", &missing))) {
            if (parse_long("--seq", v, 1, 1 << 20, &T)) goto done;
        } else if ((v = opt_value(argc, argv, &i, "--steps", &missing))) {
            if (parse_long("--steps", v, 1, 1000000, &steps)) goto done;
        } else if ((v = opt_value(argc, argv, &i, "--warmup", &missing))) {
            if (parse_long("--warmup", v, 0, 1000000, &warmup)) goto done;
        } else if ((v = opt_value(argc, argv, &i, "--peak-gflops", &missing))) {
            if (parse_double("--peak-gflops", v, 1e-3, 1e9, &peak_gflops)) goto done;
        } else if ((v = opt_value(argc, argv, &i, "--threads", &missing))) {
            if (parse_long("--threads", v, 0, 4096, &threads)) goto done;
        } else if ((v = opt_value(argc, argv, &i, "--recompute", &missing))) {
            if (lf_recompute_parse(v, &recompute) != LF_OK) {
                fprintf(stderr, "llmforge bench: --recompute '%s' is not one of none, selective, full\n", v);
                rc = 2;
                goto done;
            }
            recompute_given = 1;
        } else if (missing) goto done;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--bf16")) bf16 = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: llmforge bench (--preset NAME | --config CFG) [--micro-batch B] [--seq T]\n"
                   "                      [--steps N] [--warmup W] [--peak-gflops G] [--threads N]\n"
                   "                      [--recompute none|selective|full] [--bf16] [--json]\n"
                   "  Trains on random tokens from random weights; prints median ms/step, tokens/s,\n"
                   "  model FLOP/s ((6N + 12*L*C*T) per token) and MFU against --peak-gflops or a measured\n"
                   "  FMA peak (CPU backends; on a GPU only a given peak: bench/cuda_peak measures it), and\n"
                   "  the activation memory of the step under the recompute policy\n"
                   "  (default: the config's activation_checkpointing.policy, else none).\n"
                   "  --micro-batch and --seq default to the config's micro-batch and block_size with\n"
                   "  --config, to 4 and the block size with --preset.\n"
                   "  Presets: gpt2-124m (12 layers, 12 heads, 768, vocab 50304, block 1024),\n"
                   "  shakespeare-char-cpu (4, 4, 128, vocab 65, block 64), smollm-135m (llama: 30 layers,\n"
                   "  9 heads / 3 KV heads, 576, ffn 1536, vocab 49152, tied), llama-3.2-1b (16, 32/8, 2048,\n"
                   "  ffn 8192, vocab 128256, tied).\n"
                   "  --bf16: matrix products with bf16 operands and fp32 accumulation (the backend of\n"
                   "  bf16.enabled, also taken from --config); prints which kernel does them.\n"
                   "  --key.path=value: overrides the --config file's keys, as for train (e.g.\n"
                   "  --model.vocab_size=65 for a character-level dataset's vocabulary).\n");
            rc = 0;
            goto done;
        } else if (!strncmp(argv[i], "--", 2) && strchr(argv[i], '=')) {
            overrides[n_over++] = argv[i] + 2;
        } else {
            fprintf(stderr, "llmforge bench: unknown argument '%s' (see --help)\n", argv[i]);
            goto done;
        }
    }
    lf_model_config mc = {0};
    lf_lora_config lora = lf_lora_config_default(); /* --config's lora.* (no targets: full fine-tuning) */
    if (n_over && !config) {
        fprintf(stderr, "llmforge bench: '--%s' overrides a configuration key: it needs --config\n", overrides[0]);
        goto done;
    }
    if (preset && config) {
        fprintf(stderr, "llmforge bench: give --preset or --config, not both\n");
        rc = 2;
        goto done;
    }
    if (preset) {
        lf_status pst = lf_model_preset(preset, &mc);
        if (pst != LF_OK) {
            fprintf(stderr, "llmforge bench: %s\n", lf_last_error());
            rc = 2;
            goto done;
        }
    } else if (config) {
        lf_train_config cfg;
        /* bench reads only the model section; the dataset is never opened */
        overrides[n_over++] = "data.dataset=(unused by bench)";
        if (cli_backend_override()) overrides[n_over++] = cli_backend_override();
        lf_status st = lf_train_config_load(&cfg, config, n_over, overrides);
        if (st != LF_OK) {
            die_status(st, "bench: config");
            rc = 1;
            goto done;
        }
        /* the config's backend for this run (auto: the default, unchanged) */
        if ((st = lf_backend_set_default(cfg.backend)) != LF_OK) {
            die_status(st, "bench: config: key 'backend'");
            rc = 1;
            goto done;
        }
        mc = cfg.model;
        lora = cfg.lora;
        if (mc.vocab_size == 0) mc.vocab_size = 50304;
        if (!recompute_given) recompute = (lf_recompute)cfg.recompute;
        if (cfg.bf16) bf16 = 1;
        if (B == 0) B = cfg.micro_batch;
    } else {
        fprintf(stderr, "llmforge bench: --preset NAME or --config CFG is required\n");
        rc = 2;
        goto done;
    }
    if (B == 0) B = 4;
    if (T == 0) T = mc.block_size;
    if (cli_backend_setup("bench", threads, 1)) goto done;
    lf_bench_result r;
    lf_status st = lf_bench_train_lora(&mc, &lora, (int)B, (int)T, recompute, bf16, (int)steps, (int)warmup,
                                       peak_gflops * 1e9, &r);
    if (st != LF_OK) {
        die_status(st, "bench");
        rc = 1;
        goto done;
    }
    /* what ran the step: the CPU's kernels, or the device's backend (cuBLASLt) */
    lf_backend *rbe = lf_backend_get(lf_backend_precision_name(lf_backend_default_name(), bf16));
    const int on_host = !rbe || !lf_backend_device_name(rbe)[0]; /* the CPU's kernels (cpu-fenced too) */
    const char *bname = rbe ? lf_backend_name(rbe) : lf_backend_default_name();
    const char *fp32_k = on_host ? lf_backend_cpu_fp32_kernel() : "cuBLASLt (CUBLAS_COMPUTE_32F)";
    const char *bf16_k = !bf16 ? "" : on_host ? lf_backend_cpu_bf16_kernel() : "cuBLASLt (bf16, CUBLAS_COMPUTE_32F)";
    char devj[300];
    json_inner(devj, sizeof devj, on_host ? "" : lf_backend_device_name(rbe));
    if (json) {
        /* every number reads back as the double it is (lf_json_number) */
        char n[8][LF_JSON_NUMBER_MAX];
        const double v[8] = {r.ms_per_step, r.tokens_per_sec, r.model_flops_per_sec,
                             r.mfu,         r.peak_flops,     r.flops_per_token,
                             r.ms_min,      r.ms_max};
        for (int k = 0; k < 8; k++) lf_json_number(n[k], sizeof n[k], v[k]);
        printf(
            "{\"impl\":\"llmforge\",\"arch\":\"%s\",\"ms_per_step\":%s,\"tokens_per_sec\":%s,\"model_flops_per_sec\":%s,"
            "\"mfu\":%s,\"peak_flops\":%s,\"flops_per_token\":%s,\"num_params\":%zu,"
            "\"trainable_params\":%zu,\"micro_batch\":%ld,"
            "\"seq\":%ld,\"steps\":%d,\"threads\":%d,\"threads_from\":\"%s\",\"ms_min\":%s,\"ms_max\":%s,"
            "\"recompute\":\"%s\",\"activation_bytes\":%zu,\"bf16\":%s,\"bf16_kernel\":\"%s\",\"fp32_kernel\":\"%s\","
            "\"backend\":\"%s\",\"device\":\"%s\",\"cpu_isa\":\"%s\",\"cpu_isa_source\":\"%s\"}\n",
            lf_arch_name(mc.arch), n[0], n[1], n[2], n[3], n[4], n[5], r.num_params, r.trainable_params, B, T, r.steps,
            lf_backend_cpu_threads(), cli_threads_source(), n[6], n[7], lf_recompute_name(recompute),
            r.activation_bytes, bf16 ? "true" : "false", bf16_k, fp32_k, bname, devj, lf_backend_cpu_isa(),
            lf_backend_cpu_isa_source());
    } else {
        printf("model: %s, %d layers, %d heads (%d KV), %d channels, vocab %d; %zu parameters\n", lf_arch_name(mc.arch),
               mc.n_layer, mc.n_head, mc.n_kv_head ? mc.n_kv_head : mc.n_head, mc.n_embd, mc.vocab_size, r.num_params);
        if (on_host) {
            char thr[256];
            cli_threads_line(thr, sizeof thr);
            printf("batch %ld x %ld, %d timed steps (+%ld warmup), %d threads\n%s\n", B, T, r.steps, warmup,
                   lf_backend_cpu_threads(), thr);
        } else
            printf("batch %ld x %ld, %d timed steps (+%ld warmup), backend %s on %s\n", B, T, r.steps, warmup, bname,
                   lf_backend_device_name(rbe));
        printf("activations: %.1f MB (recompute %s%s)\n", r.activation_bytes / 1e6, lf_recompute_name(recompute),
               bf16 ? ", matmul inputs in bf16" : "");
        printf("precision: %s\n", bf16 ? "bf16 matmuls" : "fp32");
        if (on_host) printf("cpu isa: %s (%s)\n", lf_backend_cpu_isa(), lf_backend_cpu_isa_source());
        printf("fp32 matmul: %s\n", fp32_k);
        if (bf16) printf("bf16 matmul: %s\n", bf16_k);
        printf("median %.2f ms/step (min %.2f, max %.2f)\n", r.ms_per_step, r.ms_min, r.ms_max);
        if (r.peak_flops > 0)
            printf("%.1f tokens/s, %.2f GFLOP/s model, MFU %.1f%% of %.1f GFLOP/s %s\n", r.tokens_per_sec,
                   r.model_flops_per_sec / 1e9, r.mfu * 100, r.peak_flops / 1e9,
                   peak_gflops > 0 ? "(given)" : "(measured FMA peak)");
        else
            printf(
                "%.1f tokens/s, %.2f GFLOP/s model; MFU needs --peak-gflops on a device (bench/cuda_peak measures it)\n",
                r.tokens_per_sec, r.model_flops_per_sec / 1e9);
    }
    rc = 0;
done:
    free(overrides);
    return rc;
}

/* ---------------------------------------------------------------- main */

/* The global options --device N (or --device=N): the CUDA device of the
 * "cuda" backend, and --backend NAME (or --backend=NAME): the backend (cpu,
 * cuda, cpu-fenced, auto). Taken out of argv wherever they stand, before or
 * after the command, up to a bare "--" (after which the arguments belong to
 * another program, e.g. launch's), so every command accepts them without its
 * own parser knowing them. --backend becomes the process default
 * (lf_backend_set_default: eval, sample, serve, bench --preset) and, for the
 * commands that read a training config, the override backend=NAME. 0, or 2
 * after printing. */
static int take_global_options(int *argc, char **argv) {
    long device = -1;
    int out = 1, i = 1;
    for (; i < *argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "--")) break;
        if (!strcmp(a, "--backend") || !strncmp(a, "--backend=", 10)) {
            if (a[9] == '=') {
                g_cli_backend = a + 10;
            } else if (i + 1 < *argc) {
                g_cli_backend = argv[++i];
            } else {
                fprintf(stderr, "llmforge: --backend needs a value (auto, cpu, cuda or cpu-fenced)\n");
                return 2;
            }
            if (lf_backend_set_default(g_cli_backend) != LF_OK) {
                fprintf(stderr, "llmforge: --backend %s: %s\n", g_cli_backend, lf_last_error());
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--device")) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "llmforge: --device needs a value (a CUDA device number)\n");
                return 2;
            }
            v = argv[++i];
        } else if (!strncmp(a, "--device=", 9)) {
            v = a + 9;
        } else {
            argv[out++] = argv[i];
            continue;
        }
        if (parse_long("--device", v, 0, 1024, &device)) return 2;
    }
    for (; i < *argc; i++) argv[out++] = argv[i];
    argv[out] = NULL;
    *argc = out;
#ifdef LF_HAVE_CUDA
    if (device < 0) {
        /* no --device and no LLMFORGE_CUDA_DEVICE: one GPU per rank of the
         * host, the launcher's local rank (mpirun, srun, torchrun's LOCAL_RANK) */
        const char *e = getenv("LLMFORGE_CUDA_DEVICE");
        lf_comm_env env;
        if ((!e || !*e) && lf_comm_env_detect(&env, NULL, NULL) == LF_OK && env.local_rank > 0) device = env.local_rank;
    }
#endif
    if (device < 0) return 0;
#ifdef LF_HAVE_CUDA
    if (lf_backend_cuda_set_device((int)device) != LF_OK) {
        fprintf(stderr, "llmforge: --device: %s\n", lf_last_error());
        return 2;
    }
    return 0;
#else
    fprintf(stderr, "llmforge: --device %ld: this build has no CUDA backend (configured with LF_CUDA=OFF or no nvcc)\n",
            device);
    return 2;
#endif
}

static void usage(FILE *f) {
    fprintf(
        f,
        "llmforge %s: train GPT-style language models in C\n\n"
        "usage: llmforge <command> [options]\n\n"
        "commands:\n"
        "  prepare     turn text/JSONL into token shards (--char INPUT | --input F --tokenizer SPEC) --out DIR\n"
        "  train       train a model from a JSON config (CONFIG.json [--key=value ...] [--resume])\n"
        "  sample      generate text from a checkpoint (--ckpt DIR --prompt TEXT)\n"
        "  eval        run evaluation tasks on a checkpoint (--ckpt DIR --task FILE.jsonl)\n"
        "  score       BLEU, ROUGE, accuracy/F1, exact match, Hits@N over files, no model\n"
        "  tokenize    text on stdin -> ids (--tokenizer SPEC); detokenize: the inverse\n"
        "  tokenizer   `tokenizer train`: a byte-level BPE on your corpus\n"
        "  chat-template  a conversation as a model's chat template renders it (--model DIR --messages F.json)\n"
        "  data        generated data sets (`data arithmetic`, `data arithmetic-eval`)\n"
        "  bench       training throughput and MFU on random data (--preset NAME | --config CFG)\n"
        "  plan        the memory a training config needs, item by item, and whether it fits\n"
        "  launch      run a command as G ranks per node through mpirun (--nproc-per-node G -- train cfg.json)\n"
        "  serve       an OpenAI-compatible HTTP server over a checkpoint (--ckpt DIR [--port N])\n"
        "  models      the model registry: list, show, lineage, diff, tag, gc, relink, eval, compare, promote\n"
        "  report      a run directory as one self-contained HTML file (RUN_DIR [--out F] [--svg DIR]; A B --compare)\n"
        "  ckpt        `ckpt verify DIR`: re-hash a checkpoint against its trainer_state.json\n"
        "  merge       a PEFT LoRA adapter merged into its base (--adapter DIR [--base DIR] --out DIR)\n"
        "  sweep       hyperparameter sweeps with early stopping (SWEEP.json; status|best DIR)\n"
        "  help      this text; `llmforge <command> --help` for a command's options\n\n"
        "global options (before or after the command):\n"
        "  --backend NAME  auto (default: LLMFORGE_BACKEND, else cuda when a GPU answers, else cpu),\n"
        "                  cpu, cuda or cpu-fenced; for train and plan the config key `backend`\n"
        "  --device N      the CUDA device of the cuda backend (default LLMFORGE_CUDA_DEVICE, else the\n"
        "                  launcher's local rank, else 0)\n",
        LF_VERSION);
}

int main(int argc, char **argv) {
    lf_log_set_callback(log_to_stderr, NULL);
#ifdef M_MMAP_THRESHOLD
    /* glibc serves a large malloc with a fresh mmap (its threshold moves
     * with what was last freed), so a buffer that is taken and given back
     * at every call comes back as new pages the kernel must fault in and
     * zero. oneDNN's sgemm takes its packing buffers that way: a run's first
     * forward cost 135 ms against 24 ms for the next ones (Zen 4, 2 threads,
     * configs/default_run.json), and the ETA printed at step 1 was ~2x too
     * long. Fixed thresholds keep buffers under 64 MiB in the heap, reused:
     * step 1's forward 29 ms. Set here, by the program that owns the
     * process, not by the library. */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
#ifdef LF_HAVE_CUDA
    /* "cuda" lives in lf_backend_cuda, above the registry: make it findable */
    if (lf_backend_cuda_register() != LF_OK) {
        fprintf(stderr, "llmforge: %s\n", lf_last_error());
        return 1;
    }
#endif
#ifdef LF_HAVE_NCCL
    /* "nccl" lives in lf_comm_nccl, above the communicator layer: "auto" picks it for the cuda backend */
    if (lf_comm_nccl_register() != LF_OK) {
        fprintf(stderr, "llmforge: %s\n", lf_last_error());
        return 1;
    }
#endif
    if (take_global_options(&argc, argv)) return 2;
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "prepare")) return cmd_prepare(argc - 2, argv + 2);
    if (!strcmp(cmd, "data")) return cmd_data(argc - 2, argv + 2);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "sample")) return cmd_sample(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "score")) return cmd_score(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenizer")) return cmd_tokenizer(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "launch")) return cmd_launch(argc - 2, argv + 2);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 2, argv + 2);
    if (!strcmp(cmd, "models")) return cmd_models(argc - 2, argv + 2);
    if (!strcmp(cmd, "report")) return cmd_report(argc - 2, argv + 2);
    if (!strcmp(cmd, "ckpt")) return cmd_ckpt(argc - 2, argv + 2);
    if (!strcmp(cmd, "merge")) return cmd_merge(argc - 2, argv + 2);
    if (!strcmp(cmd, "sweep")) return cmd_sweep(argc - 2, argv + 2);
    if (!strcmp(cmd, "chat-template")) return cmd_chat_template(argc - 2, argv + 2);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("llmforge %s\n", LF_VERSION);
#ifdef LF_HAVE_CUDA
        printf("backends: cpu, cpu-bf16, cpu-fenced, cuda, cuda-bf16\n");
#else
        printf("backends: cpu, cpu-bf16, cpu-fenced (no cuda: configured with LF_CUDA=OFF or no nvcc)\n");
#endif
        return 0;
    }
    fprintf(stderr, "llmforge: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
