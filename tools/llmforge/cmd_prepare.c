/*
 * llmforge prepare: turn text and records into token shards.
 *
 *   llmforge prepare --char INPUT --out DIR
 *       nanoGPT shakespeare_char (lf_prepare_char), unchanged.
 *   llmforge prepare --input PATH [--input PATH ...] [--format auto|text|jsonl|json|csv|parquet|wds|arrow]
 *                    [--mode pretrain|sft|dpo] --tokenizer SPEC [--split 0.9,0.1,0 | 7:2:1 | none] [--keep-splits]
 *                    [--split-method hash|shuffle] [--split-seed N] [--subset NAME] [--field KEY]
 *                    [--text-field F] [--prompt-field F --response-field F]
 *                    [--chosen-field F] [--rejected-field F]
 *                    [--chat-template chatml|FILE|DIR|MODEL_DIR] [--skip-bad-records] [--max-record-bytes N] [--shard-tokens N] [--threads N]
 *                    --out DIR
 *       records through lf_prepare (docs/data.md).
 *
 * Human-facing parts live here: option parsing, the progress bar on stderr
 * when stderr is a terminal (bytes read of the input, records, tokens,
 * MB/s; nothing otherwise), the skipped-record warnings (the first few, then
 * a count), and the summary per split.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "llmforge/data.h"
#include "cli_util.h"
#include "commands.h"

#define MAX_SKIP_WARNINGS 10

static const char *const g_split_names[LF_PREPARE_N_SPLITS] = {"train", "val", "test"};

static void usage(FILE *f) {
    fprintf(f,
            "usage: llmforge prepare --input PATH [--input PATH ...] --tokenizer SPEC --out DIR\n"
            "                        [--format auto|text|jsonl|json|csv|parquet|wds|arrow] [--mode pretrain|sft|dpo]\n"
            "                        [--split TRAIN,VAL[,TEST] | TRAIN:VAL[:TEST] | none] [--keep-splits]\n"
            "                        [--split-method hash|shuffle] [--split-seed N]\n"
            "                        [--subset NAME] [--field KEY] [--skip-bad-records]\n"
            "                        [--text-field F] [--prompt-field F --response-field F]\n"
            "                        [--chosen-field F] [--rejected-field F]\n"
            "                        [--chat-template chatml|FILE|DIR|MODEL_DIR]\n"
            "                        [--max-record-bytes N] [--shard-tokens N] [--threads N]\n"
            "       llmforge prepare --char INPUT --out DIR\n"
            "\n"
            "  --input PATH       a file, or a directory: its files, subdirectories too, in name order;\n"
            "                     a Hugging Face hub dataset repository (README.md configs: header,\n"
            "                     data/train-00000-of-00001.parquet, ...) or a datasets save_to_disk\n"
            "                     directory reads its data files only (each file left out is named);\n"
            "                     repeatable\n"
            "  --subset NAME      a hub repository's config (configs: config_name) to read (default:\n"
            "                     its default one)\n"
            "  --field KEY        JSON: the records are the list under KEY of the file's object\n"
            "                     ({\"data\": [...]}); without it an object's one list is read\n"
            "  --format           auto (default: .jsonl/.ndjson -> jsonl, .json -> JSON array or jsonl,\n"
            "                     .txt/.md/no extension -> text), text (a file is one document),\n"
            "                     jsonl (one object per line), json (an array of objects), csv,\n"
            "                     parquet, wds (WebDataset tar, plain or gzip; docs/readers.md), arrow\n"
            "                     (Arrow IPC stream or file, as datasets' save_to_disk writes)\n"
            "  --mode pretrain    documents: field 'text' (or --text-field), each followed by end-of-text\n"
            "  --mode sft         pairs 'prompt'/'response' or 'input_text'/'target_text' (or\n"
            "                     --prompt-field/--response-field, or Alpaca's instruction/input/output);\n"
            "                     loss only on response + end-of-text; or 'messages' conversations (with\n"
            "                     --chat-template): loss on the assistant turns and their end-of-turn markers\n"
            "  --mode dpo         preference triples 'prompt'/'chosen'/'rejected' (or --prompt-field,\n"
            "                     --chosen-field, --rejected-field; JSONL, JSON or Parquet), each kept\n"
            "                     as two rows (prompt + chosen, prompt + rejected) for train.objective dpo\n"
            "  --chat-template T  sft: render each pair as `llmforge serve`'s chat endpoint renders\n"
            "                     [user: prompt] (prompt part, no loss) then response + the assistant's\n"
            "                     suffix (loss); T is chatml, a chat_template.json, or a directory with\n"
            "                     one; or a Hugging Face model directory, its tokenizer_config.json or\n"
            "                     chat_template.jinja (Jinja, rendered as transformers does; pairs and\n"
            "                     'messages' become conversations); written to DIR/chat_template.json,\n"
            "                     which training copies into every checkpoint\n"
            "  --tokenizer SPEC   char (a vocabulary built from the data, written to DIR/vocab.json),\n"
            "                     char:FILE, gpt2:DIR, tiktoken:FILE, bpe:FILE\n"
            "  --split W,W[,W]    train,val,test weights by content hash, or W:W[:W] (7:2:1); default\n"
            "                     0.9,0.1,0: a model is chosen on val, and a test split is asked for by\n"
            "                     name (docs/data.md); none: everything in train\n"
            "  --split-method M   hash (default): each record's split by a hash of its content (stable\n"
            "                     when data is appended); shuffle: exact proportions, as datasets'\n"
            "                     train_test_split(shuffle=True, seed=N) (the inputs are read twice)\n"
            "  --split-seed N     the shuffle's seed, 0 .. 2^53 (default 0)\n"
            "  --keep-splits      keep the dataset's own train/validation/test files as the splits (their\n"
            "                     names, a configs: header, save_to_disk) instead of the content hash\n"
            "  --skip-bad-records skip and count records that are not JSON, lack a field, ...\n"
            "                     (default: the first one is an error naming FILE:LINE and the field)\n"
            "  --max-record-bytes longest JSON line or array element (default 64 MiB)\n"
            "  --shard-tokens N   tokens per shard file, 1 .. 2^40 (default 100000000); memory does not\n"
            "                     grow with it: shards are streamed to disk\n"
            "  --threads N        tokenizing threads, 0 .. 1024 (default 0: the CPUs granted: affinity\n"
            "                     mask, cgroup CPU limit); the output is the same for every N\n"
            "  --char INPUT       character-level dataset exactly as nanoGPT's shakespeare_char:\n"
            "                     vocabulary = sorted unique characters, first 90%% train, last 10%% val\n");
}

static int prepare_char(const char *input, const char *out) {
    lf_prepare_stats stats;
    double t0 = lf_time_now();
    lf_status st = lf_prepare_char(input, out, &stats);
    if (st != LF_OK) {
        die_status(st, "prepare");
        return 1;
    }
    printf("prepared '%s' -> %s: %zu characters, vocabulary %d, train %zu tokens, val %zu tokens (%.2f s)\n", input,
           out, stats.n_chars, stats.vocab_size, stats.train_tokens, stats.val_tokens, lf_time_now() - t0);
    return 0;
}

/* "0.9,0.1,0", "7,2,1", "7:2:1", "0.95,0.05" or "none" (one separator,
 * ',' or ':', throughout). */
static int parse_split(const char *s, double w[LF_PREPARE_N_SPLITS]) {
    if (!strcmp(s, "none")) {
        w[0] = 1;
        w[1] = w[2] = 0;
        return 0;
    }
    int n = 0;
    const char *p = s;
    const char sep = strchr(s, ':') ? ':' : ',';
    w[0] = w[1] = w[2] = 0;
    for (;;) {
        char *end = NULL;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !isfinite(v) || v < 0 || n == LF_PREPARE_N_SPLITS) break;
        w[n++] = v;
        if (*end == 0) {
            if (n >= 2 && w[0] > 0) return 0;
            break;
        }
        if (*end != sep) break;
        p = end + 1;
    }
    fprintf(stderr,
            "llmforge prepare: --split expects TRAIN,VAL[,TEST] or TRAIN:VAL[:TEST] weights >= 0 with TRAIN > 0 "
            "(e.g. 0.9,0.1,0 or 7:2:1) or 'none', got '%s'\n",
            s);
    return -1;
}

typedef struct skip_ctx {
    unsigned long long n;
} skip_ctx;

static void on_skip(const char *msg, void *user) {
    skip_ctx *c = user;
    c->n++;
    if (c->n <= MAX_SKIP_WARNINGS) fprintf(stderr, "llmforge: prepare: skipped record: %s\n", msg);
    else if (c->n == MAX_SKIP_WARNINGS + 1) fprintf(stderr, "llmforge: prepare: more records skipped; counting them\n");
}

typedef struct progress_ctx {
    double last;
    int width; /* characters of the line last drawn, 0 when none */
} progress_ctx;

/* "12.3k", "4.56M", "7.89G" */
static void human(char *buf, size_t size, double v) {
    if (v < 1e3) snprintf(buf, size, "%.0f", v);
    else if (v < 1e6) snprintf(buf, size, "%.1fk", v / 1e3);
    else if (v < 1e9) snprintf(buf, size, "%.2fM", v / 1e6);
    else snprintf(buf, size, "%.2fG", v / 1e9);
}

/* One line on stderr (a terminal), redrawn at most 5 times a second:
 *   [##########..............]  41.7%  41.7/100.0 MB  231k records  10.5M tokens  24.3 MB/s */
static void on_progress(const lf_prepare_progress *g, void *user) {
    progress_ctx *c = user;
    double now = lf_time_now();
    if (now - c->last < 0.2 && !g->done) return;
    c->last = now;
    double f = g->bytes_total ? (double)g->bytes_done / (double)g->bytes_total : 1.0;
    int filled = (int)(f * 24);
    char bar[25], rec[16], tok[16], line[200];
    for (int i = 0; i < 24; i++) bar[i] = i < filled ? '#' : '.';
    bar[24] = 0;
    human(rec, sizeof rec, (double)g->records);
    human(tok, sizeof tok, (double)g->tokens);
    double mbs = g->seconds > 0 ? (double)g->bytes_done / 1e6 / g->seconds : 0;
    int n = snprintf(line, sizeof line, "[%s] %5.1f%%  %.1f/%.1f MB  %s records  %s tokens  %.1f MB/s", bar, 100 * f,
                     (double)g->bytes_done / 1e6, (double)g->bytes_total / 1e6, rec, tok, mbs);
    if (g->passes > 1 && n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n, "  (pass %d/%d%s)", g->pass, g->passes,
                 g->pass == 1 ? ": vocabulary" : "");
    n = (int)strlen(line);
    fprintf(stderr, "\r%s%*s", line, c->width > n ? c->width - n : 0, "");
    fflush(stderr);
    c->width = n;
}

int cmd_prepare(int argc, char **argv) {
    const char *input = NULL, *out = NULL;
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    size_t n_inputs = 0;
    lf_prepare_opts o = lf_prepare_opts_default();
    int rc = 2, threads_given = 0, split_given = 0, seed_given = 0;
    const char *chosen_field = NULL; /* --mode dpo: the response_field */
    if (!inputs) return 1;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--char", &missing))) input = v;
        else if ((v = opt_value(argc, argv, &i, "--out", &missing))) out = v;
        else if ((v = opt_value(argc, argv, &i, "--input", &missing))) inputs[n_inputs++] = v;
        else if ((v = opt_value(argc, argv, &i, "--tokenizer", &missing))) o.tokenizer = v;
        else if ((v = opt_value(argc, argv, &i, "--text-field", &missing))) o.text_field = v;
        else if ((v = opt_value(argc, argv, &i, "--prompt-field", &missing))) o.prompt_field = v;
        else if ((v = opt_value(argc, argv, &i, "--response-field", &missing))) o.response_field = v;
        else if ((v = opt_value(argc, argv, &i, "--chosen-field", &missing))) chosen_field = v;
        else if ((v = opt_value(argc, argv, &i, "--rejected-field", &missing))) o.rejected_field = v;
        else if ((v = opt_value(argc, argv, &i, "--subset", &missing))) o.subset = v;
        else if ((v = opt_value(argc, argv, &i, "--field", &missing))) o.json_field = v;
        else if ((v = opt_value(argc, argv, &i, "--format", &missing))) {
            if (!strcmp(v, "auto")) o.format = LF_INPUT_AUTO;
            else if (!strcmp(v, "text")) o.format = LF_INPUT_TEXT;
            else if (!strcmp(v, "jsonl")) o.format = LF_INPUT_JSONL;
            else if (!strcmp(v, "json")) o.format = LF_INPUT_JSON;
            else if (!strcmp(v, "csv")) o.format = LF_INPUT_CSV;
            else if (!strcmp(v, "parquet")) o.format = LF_INPUT_PARQUET;
            else if (!strcmp(v, "wds")) o.format = LF_INPUT_WDS;
            else if (!strcmp(v, "arrow")) o.format = LF_INPUT_ARROW;
            else {
                fprintf(stderr,
                        "llmforge prepare: --format expects auto, text, jsonl, json, csv, parquet, wds or arrow, got "
                        "'%s'\n",
                        v);
                goto done;
            }
        } else if ((v = opt_value(argc, argv, &i, "--mode", &missing))) {
            if (!strcmp(v, "pretrain")) o.mode = LF_RECORD_PRETRAIN;
            else if (!strcmp(v, "sft")) o.mode = LF_RECORD_SFT;
            else if (!strcmp(v, "dpo")) o.mode = LF_RECORD_DPO;
            else {
                fprintf(stderr, "llmforge prepare: --mode expects pretrain, sft or dpo, got '%s'\n", v);
                goto done;
            }
        } else if ((v = opt_value(argc, argv, &i, "--chat-template", &missing))) {
            o.chat_template = v;
        } else if ((v = opt_value(argc, argv, &i, "--split", &missing))) {
            if (parse_split(v, o.split)) goto done;
            split_given = 1;
        } else if ((v = opt_value(argc, argv, &i, "--split-method", &missing))) {
            if (!strcmp(v, "shuffle")) o.split_shuffle = 1;
            else if (!strcmp(v, "hash")) o.split_shuffle = 0;
            else {
                fprintf(stderr, "llmforge prepare: --split-method expects hash or shuffle, got '%s'\n", v);
                goto done;
            }
        } else if ((v = opt_value(argc, argv, &i, "--split-seed", &missing))) {
            long n;
            if (parse_long("--split-seed", v, 0, 1L << 53, &n)) goto done;
            o.split_seed = (uint64_t)n;
            seed_given = 1;
        } else if ((v = opt_value(argc, argv, &i, "--max-record-bytes", &missing))) {
            long n;
            if (parse_long("--max-record-bytes", v, 1, 1L << 40, &n)) goto done;
            o.max_record_bytes = (size_t)n;
        } else if ((v = opt_value(argc, argv, &i, "--shard-tokens", &missing))) {
            long n;
            if (parse_long("--shard-tokens", v, 1, 1L << 40, &n)) goto done;
            o.shard_tokens = (size_t)n;
        } else if ((v = opt_value(argc, argv, &i, "--threads", &missing))) {
            long n;
            if (parse_long("--threads", v, 0, LF_PREPARE_MAX_THREADS, &n)) goto done;
            o.n_threads = (int)n;
            threads_given = 1;
        } else if (missing) {
            goto done;
        } else if (!strcmp(argv[i], "--skip-bad-records")) {
            o.skip_bad_records = 1;
        } else if (!strcmp(argv[i], "--keep-splits")) {
            o.keep_splits = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            rc = 0;
            goto done;
        } else {
            fprintf(stderr, "llmforge prepare: unknown argument '%s' (see --help)\n", argv[i]);
            goto done;
        }
    }
    if (input) {
        if (n_inputs || o.tokenizer) {
            fprintf(stderr,
                    "llmforge prepare: --char INPUT is a shorthand of its own; use it without --input/--tokenizer\n");
            goto done;
        }
        if (o.shard_tokens || threads_given) {
            fprintf(stderr, "llmforge prepare: --char writes one train.bin and one val.bin on one thread; "
                            "--shard-tokens and --threads are for --input\n");
            goto done;
        }
        if (!out) {
            fprintf(stderr, "llmforge prepare: --char INPUT and --out DIR are required\n");
            goto done;
        }
        rc = prepare_char(input, out);
        goto done;
    }
    if (!n_inputs || !out || !o.tokenizer) {
        fprintf(stderr, "llmforge prepare: --input PATH, --tokenizer SPEC (e.g. char) and --out DIR are required "
                        "(or --char INPUT --out DIR); see --help\n");
        goto done;
    }
    if (o.mode == LF_RECORD_DPO) { /* --prompt-field, --chosen-field, --rejected-field, each on its own */
        if (o.response_field) {
            fprintf(stderr, "llmforge prepare: --mode dpo reads --chosen-field and --rejected-field, not "
                            "--response-field\n");
            goto done;
        }
        o.response_field = chosen_field;
    } else if (chosen_field || o.rejected_field) {
        fprintf(stderr, "llmforge prepare: --chosen-field and --rejected-field are for --mode dpo\n");
        goto done;
    }
    if (o.mode != LF_RECORD_DPO && !o.prompt_field != !o.response_field) {
        fprintf(stderr, "llmforge prepare: give --prompt-field and --response-field together\n");
        goto done;
    }
    if (o.chat_template && o.mode == LF_RECORD_PRETRAIN) {
        fprintf(stderr, "llmforge prepare: --chat-template renders fine-tuning pairs: it needs --mode sft or dpo\n");
        goto done;
    }
    if ((o.prompt_field && o.mode == LF_RECORD_PRETRAIN) || (o.text_field && o.mode != LF_RECORD_PRETRAIN)) {
        fprintf(stderr, "llmforge prepare: --text-field is for --mode pretrain, --prompt-field/--response-field for "
                        "--mode sft\n");
        goto done;
    }
    if (seed_given && !o.split_shuffle) {
        fprintf(stderr, "llmforge prepare: --split-seed seeds the shuffle split: give --split-method shuffle too\n");
        goto done;
    }
    if (o.keep_splits && o.split_shuffle) {
        fprintf(stderr, "llmforge prepare: --keep-splits keeps the dataset's own splits; --split-method shuffle makes "
                        "new ones: give one of them\n");
        goto done;
    }
    if (o.keep_splits && split_given) {
        fprintf(stderr,
                "llmforge prepare: --keep-splits keeps the dataset's own splits; --split weights a content-hash "
                "split instead: give one of them\n");
        goto done;
    }
    o.inputs = inputs;
    o.n_inputs = n_inputs;
    skip_ctx sc = {0};
    progress_ctx pc = {0};
    o.on_skip = on_skip;
    o.on_skip_user = &sc;
    if (isatty(STDERR_FILENO)) {
        o.progress = on_progress;
        o.progress_user = &pc;
    }
    lf_prepare_result res;
    double t0 = lf_time_now();
    lf_status st = lf_prepare(&o, out, &res);
    if (pc.width) fprintf(stderr, "\r%*s\r", pc.width, "");
    if (st != LF_OK) {
        die_status(st, "prepare");
        if (st == LF_ERR_FORMAT || st == LF_ERR_RANGE)
            fprintf(stderr, "hint: --skip-bad-records skips and counts such records instead\n");
        rc = 1;
        goto done;
    }
    unsigned long long total = res.records[0] + res.records[1] + res.records[2];
    printf(
        "prepared %llu records from %llu file%s -> %s (%s, tokenizer %s, vocabulary %d, end-of-text id %d; %.2f s)\n",
        total, (unsigned long long)res.sources, res.sources == 1 ? "" : "s", out,
        o.mode == LF_RECORD_DPO   ? "dpo"
        : o.mode == LF_RECORD_SFT ? "sft"
                                  : "pretrain",
        o.tokenizer, res.vocab_size, res.eot, lf_time_now() - t0);
    if (o.keep_splits) printf("  split: the dataset's own files (--keep-splits)\n");
    else if (o.split_shuffle)
        printf(
            "  split: shuffled with seed %llu, exact proportions train/val/test %g/%g/%g%s\n",
            (unsigned long long)o.split_seed, o.split[0], o.split[1], o.split[2],
            split_given
                ? ""
                : " (the default, not 7:2:1: training reads train and val only, so a test split is asked for, e.g. --split 7:2:1)");
    else
        printf(
            "  split: content hash, train/val/test %g/%g/%g%s\n", o.split[0], o.split[1], o.split[2],
            split_given
                ? ""
                : " (the default, not 7:2:1: training reads train and val only, so a test split is asked for, e.g. --split 7:2:1)");
    for (int s = 0; s < LF_PREPARE_N_SPLITS; s++) {
        printf("  %-5s %10llu records %12llu tokens", g_split_names[s], (unsigned long long)res.records[s],
               (unsigned long long)res.tokens[s]);
        if (o.mode != LF_RECORD_PRETRAIN) printf(" (%llu targets)", (unsigned long long)res.target_tokens[s]);
        printf("  %llu shard%s\n", (unsigned long long)res.shards[s], res.shards[s] == 1 ? "" : "s");
    }
    printf("  skipped %llu bad record%s%s%s\n", (unsigned long long)res.skipped, res.skipped == 1 ? "" : "s",
           res.skipped ? "; first: " : "", res.skipped ? res.first_skip : "");
    if (o.chat_template) printf("  chat template %s -> %s/chat_template.json\n", o.chat_template, out);
    rc = 0;
done:
    free(inputs);
    return rc;
}
