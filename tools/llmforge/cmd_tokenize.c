/*
 * llmforge tokenize | detokenize | tokenizer: the tokenizers from the shell.
 *
 *   llmforge tokenize --tokenizer SPEC [--allow-special] [--invalid-utf8 error|bytes]
 *                     [--jsonl] [--threads N] [--bench REPEATS]
 *       stdin (all of it, as bytes) -> one line of space-separated ids.
 *       --jsonl: each stdin line {"text": ...} -> one line {"ids": [...]}.
 *       --bench R: encode stdin R times with N threads, print one JSON line of
 *       timings instead of the ids (bench/tokenizer.sh).
 *   llmforge detokenize --tokenizer SPEC [--jsonl]
 *       stdin ids (separated by spaces/newlines) -> the exact bytes they stand
 *       for, written only when every line decodes; --jsonl (streamed): each line {"ids": [...]} -> {"text": ...} (the text
 *       must be valid UTF-8 to be JSON: ids cut inside a character are an
 *       error naming the line).
 *   llmforge tokenizer train --input FILE [--input FILE ...] --vocab-size N --out FILE
 *                            [--min-frequency K]
 *   llmforge tokenizer info --tokenizer SPEC
 *       {"spec", "vocab_size", "endoftext" (when the kind has it), "eot"}.
 *
 * Every input error names the line (JSON that does not parse, a missing or
 * non-string "text", a token that is not an id, an id outside the
 * vocabulary). Exit status: 0 success, 1 bad data or a failed call, 2 bad
 * usage. Output goes through one buffered stream; ids are formatted by hand
 * (printf per id is the bottleneck at tens of millions of ids).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmforge/data.h"
#include "cli_util.h" /* opt_value */
#include "commands.h"

#define STDIN_MAX_BYTES ((size_t)2 << 30)
#define LINE_MAX_BYTES ((size_t)1 << 30)

static int fail_st(const char *cmd, lf_status st) {
    fprintf(stderr, "llmforge %s: %s\n", cmd, lf_last_error()[0] ? lf_last_error() : lf_status_str(st));
    return 1;
}

/* parse_long (cli_util.h) with the command named in the message */
static int cmd_parse_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "llmforge %s: %s expects an integer in [%ld, %ld], got '%s'\n", cmd, opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int read_stdin(const char *cmd, char **out, size_t *len) {
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) goto nomem;
    for (;;) {
        if (n == cap) {
            if (cap >= STDIN_MAX_BYTES) {
                fprintf(stderr, "llmforge %s: stdin holds more than %zu bytes (use llmforge prepare for corpora)\n",
                        cmd, STDIN_MAX_BYTES);
                free(buf);
                return -1;
            }
            cap *= 2;
            char *b = realloc(buf, cap + 1);
            if (!b) goto nomem;
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) break;
    }
    if (ferror(stdin)) {
        fprintf(stderr, "llmforge %s: error reading stdin: %s\n", cmd, strerror(errno));
        free(buf);
        return -1;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
nomem:
    free(buf);
    fprintf(stderr, "llmforge %s: out of memory reading stdin\n", cmd);
    return -1;
}

/* ---------------------------------------------------------------- output helpers */
static void put_u32(FILE *f, uint32_t v) {
    char b[12];
    int i = 12;
    do {
        b[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    fwrite(b + i, 1, (size_t)(12 - i), f);
}

static void put_ids(FILE *f, const uint32_t *ids, size_t n, const char *sep) {
    for (size_t i = 0; i < n; i++) {
        if (i) fputs(sep, f);
        put_u32(f, ids[i]);
    }
}

/* A JSON string of s[0, len) (valid UTF-8, may hold NUL). */
static void put_json_string(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        }
        if (!esc) continue;
        fwrite(s + run, 1, i - run, f);
        fputs(esc, f);
        run = i + 1;
    }
    fwrite(s + run, 1, len - run, f);
    fputc('"', f);
}

/* Parse one JSON Lines line into an object; NULL with a message when it is not one. */
static cJSON *parse_line(const char *cmd, char *line, size_t len, size_t line_no) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(line, len, &end, 0);
    if (!j) {
        const char *e = cJSON_GetErrorPtr();
        size_t col = e && e >= line && e <= line + len ? (size_t)(e - line) + 1 : 1;
        fprintf(stderr, "llmforge %s: stdin line %zu: not valid JSON (near column %zu)\n", cmd, line_no, col);
        return NULL;
    }
    for (const char *p = end; p && p < line + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            fprintf(stderr, "llmforge %s: stdin line %zu: text after the JSON value (column %zu)\n", cmd, line_no,
                    (size_t)(p - line) + 1);
            cJSON_Delete(j);
            return NULL;
        }
    if (!cJSON_IsObject(j)) {
        fprintf(stderr, "llmforge %s: stdin line %zu: expected a JSON object\n", cmd, line_no);
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

/* ---------------------------------------------------------------- tokenize */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int tokenize_bench(lf_tokenizer *t, const char *text, size_t len, const lf_encode_opts *o, int threads,
                          int repeats) {
    double *secs = calloc((size_t)repeats, sizeof *secs);
    if (!secs) return 1;
    size_t n_tokens = 0;
    for (int r = 0; r < repeats; r++) {
        uint32_t *ids = NULL;
        size_t n = 0;
        double t0 = lf_time_now();
        lf_status st = lf_tokenizer_encode_parallel(t, text, len, o, threads, &ids, &n);
        secs[r] = lf_time_now() - t0;
        lf_free(ids);
        if (st != LF_OK) {
            free(secs);
            return fail_st("tokenize", st);
        }
        if (r > 0 && n != n_tokens) {
            fprintf(stderr, "llmforge tokenize: repeat %d gave %zu tokens, repeat 0 gave %zu\n", r, n, n_tokens);
            free(secs);
            return 1;
        }
        n_tokens = n;
    }
    printf("{\"bytes\":%zu,\"tokens\":%zu,\"threads\":%d,\"repeats\":%d,\"seconds\":[", len, n_tokens, threads,
           repeats);
    char num[LF_JSON_NUMBER_MAX], num2[LF_JSON_NUMBER_MAX]; /* numbers that read back exactly */
    for (int r = 0; r < repeats; r++) {
        lf_json_number(num, sizeof num, secs[r]);
        printf("%s%s", r ? "," : "", num);
    }
    qsort(secs, (size_t)repeats, sizeof *secs, cmp_double);
    double med = repeats % 2 ? secs[repeats / 2] : 0.5 * (secs[repeats / 2 - 1] + secs[repeats / 2]);
    lf_json_number(num, sizeof num, med);
    lf_json_number(num2, sizeof num2, med > 0 ? (double)len / med / 1e6 : 0.0);
    printf("],\"median_seconds\":%s,\"mb_per_s\":%s}\n", num, num2);
    free(secs);
    return 0;
}

static int tokenize_jsonl(lf_tokenizer *t, const lf_encode_opts *o) {
    char *line = NULL;
    size_t cap = 0, line_no = 0;
    ssize_t got;
    int rc = 0;
    while ((got = getline(&line, &cap, stdin)) >= 0) {
        line_no++;
        size_t len = (size_t)got;
        if (len > LINE_MAX_BYTES) {
            fprintf(stderr, "llmforge tokenize: stdin line %zu is longer than %zu bytes\n", line_no, LINE_MAX_BYTES);
            rc = 1;
            break;
        }
        cJSON *j = parse_line("tokenize", line, len, line_no);
        if (!j) {
            rc = 1;
            break;
        }
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text");
        if (!cJSON_IsString(text)) {
            fprintf(stderr, "llmforge tokenize: stdin line %zu: field \"text\" is %s\n", line_no,
                    text ? "not a string" : "missing");
            cJSON_Delete(j);
            rc = 1;
            break;
        }
        if (lf_json_find_nul_escape(line, len) < len) { /* cJSON would cut the string there */
            fprintf(stderr,
                    "llmforge tokenize: stdin line %zu: the text holds U+0000 (\\u0000), which --jsonl does not "
                    "support; pipe the raw text to `llmforge tokenize` instead\n",
                    line_no);
            cJSON_Delete(j);
            rc = 1;
            break;
        }
        uint32_t *ids = NULL;
        size_t n = 0;
        lf_status st = lf_tokenizer_encode_opts(t, text->valuestring, strlen(text->valuestring), o, &ids, &n);
        cJSON_Delete(j);
        if (st != LF_OK) {
            fprintf(stderr, "llmforge tokenize: stdin line %zu: %s\n", line_no, lf_last_error());
            rc = 1;
            break;
        }
        fputs("{\"ids\":[", stdout);
        put_ids(stdout, ids, n, ",");
        fputs("]}\n", stdout);
        lf_free(ids);
    }
    free(line);
    if (!rc && ferror(stdin)) {
        fprintf(stderr, "llmforge tokenize: error reading stdin\n");
        rc = 1;
    }
    return rc;
}

static void tokenize_usage(FILE *f) {
    fprintf(f, "usage: llmforge tokenize --tokenizer SPEC [--allow-special] [--invalid-utf8 error|bytes] [--jsonl]\n"
               "                         [--threads N] [--bench REPEATS]\n"
               "  Prints the ids of stdin as one line of space-separated integers.\n"
               "  SPEC: gpt2:DIR (encoder.json + vocab.bpe), tiktoken:FILE, bpe:FILE, char:vocab.json,\n"
               "        hf:FILE (a Hugging Face tokenizer.json, byte-level BPE)\n"
               "  --allow-special   special tokens in the text (<|endoftext|>; for hf: every added token marked\n"
               "                    special, e.g. <|im_start|>) become their ids (else they are ordinary text)\n"
               "  --invalid-utf8    error (default): invalid UTF-8 is an error naming the byte offset;\n"
               "                    bytes: each invalid byte becomes its single-byte token\n"
               "  --jsonl           each line {\"text\": ...} -> a line {\"ids\": [...]}\n"
               "  --threads N       encode with N threads (same ids)\n"
               "  --bench R         encode R times and print timings as JSON instead of the ids\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *spec = NULL;
    int jsonl = 0;
    long threads = 1, repeats = 0;
    lf_encode_opts o = lf_encode_opts_default();
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--tokenizer", &missing))) spec = v;
        else if ((v = opt_value(argc, argv, &i, "--threads", &missing))) {
            if (cmd_parse_long("tokenize", "--threads", v, 1, 1024, &threads)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--bench", &missing))) {
            if (cmd_parse_long("tokenize", "--bench", v, 1, 1000, &repeats)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--invalid-utf8", &missing))) {
            if (!strcmp(v, "error")) o.invalid_utf8 = LF_UTF8_STRICT;
            else if (!strcmp(v, "bytes")) o.invalid_utf8 = LF_UTF8_BYTES;
            else {
                fprintf(stderr, "llmforge tokenize: --invalid-utf8 expects 'error' or 'bytes', got '%s'\n", v);
                return 2;
            }
        } else if (missing) return 2;
        else if (!strcmp(argv[i], "--allow-special")) o.allow_special = 1;
        else if (!strcmp(argv[i], "--jsonl")) jsonl = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            tokenize_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "llmforge tokenize: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!spec) {
        fprintf(stderr, "llmforge tokenize: --tokenizer SPEC is required (see --help)\n");
        return 2;
    }
    if (jsonl && (repeats || threads > 1)) {
        fprintf(stderr, "llmforge tokenize: --%s applies to plain stdin, not --jsonl\n", repeats ? "bench" : "threads");
        return 2;
    }
    lf_tokenizer *t = NULL;
    lf_status st = lf_tokenizer_open(&t, spec, NULL);
    if (st != LF_OK) return fail_st("tokenize", st);
    int rc;
    if (jsonl) {
        rc = tokenize_jsonl(t, &o);
    } else {
        char *text = NULL;
        size_t len = 0;
        if (read_stdin("tokenize", &text, &len)) {
            lf_tokenizer_free(t);
            return 1;
        }
        if (repeats) {
            rc = tokenize_bench(t, text, len, &o, (int)threads, (int)repeats);
        } else {
            uint32_t *ids = NULL;
            size_t n = 0;
            st = lf_tokenizer_encode_parallel(t, text, len, &o, (int)threads, &ids, &n);
            if (st != LF_OK) {
                rc = fail_st("tokenize", st);
            } else {
                put_ids(stdout, ids, n, " ");
                fputc('\n', stdout);
                rc = 0;
            }
            lf_free(ids);
        }
        free(text);
    }
    lf_tokenizer_free(t);
    if (fflush(stdout) != 0 && !rc) {
        fprintf(stderr, "llmforge tokenize: error writing stdout: %s\n", strerror(errno));
        rc = 1;
    }
    return rc;
}

/* ---------------------------------------------------------------- detokenize */

/* Decode one sequence and write it (jsonl), or append it to *acc (plain:
 * written only once every line has decoded); 0 on success. */
typedef struct bytes_acc {
    char *p;
    size_t n, cap;
} bytes_acc;

static int decode_write(lf_tokenizer *t, const uint32_t *ids, size_t n, size_t line_no, int jsonl, bytes_acc *acc) {
    char *text = NULL;
    size_t len = 0;
    lf_status st = lf_tokenizer_decode(t, ids, n, &text, &len);
    if (st != LF_OK) {
        fprintf(stderr, "llmforge detokenize: stdin line %zu: %s\n", line_no, lf_last_error());
        return 1;
    }
    int rc = 0;
    if (!jsonl) {
        if (acc->cap - acc->n < len) {
            size_t cap = acc->cap ? acc->cap : 1 << 16;
            while (cap - acc->n < len) cap *= 2;
            char *p = realloc(acc->p, cap);
            if (!p) {
                fprintf(stderr, "llmforge detokenize: out of memory\n");
                lf_free(text);
                return 1;
            }
            acc->p = p;
            acc->cap = cap;
        }
        memcpy(acc->p + acc->n, text, len);
        acc->n += len;
    } else {
        size_t bad = len;
        if (lf_utf8_validate(text, len, "text", &bad) != LF_OK) {
            fprintf(stderr,
                    "llmforge detokenize: stdin line %zu: the ids decode to invalid UTF-8 at byte %zu (ids cut inside "
                    "a character?); JSON cannot hold it, plain detokenize writes the raw bytes\n",
                    line_no, bad);
            rc = 1;
        } else {
            fputs("{\"text\":", stdout);
            put_json_string(stdout, text, len);
            fputs("}\n", stdout);
        }
    }
    lf_free(text);
    return rc;
}

static int detokenize_plain(lf_tokenizer *t) {
    char *buf = NULL;
    size_t len = 0;
    if (read_stdin("detokenize", &buf, &len)) return 1;
    uint32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
    if (!ids) {
        free(buf);
        fprintf(stderr, "llmforge detokenize: out of memory\n");
        return 1;
    }
    int vocab = lf_tokenizer_vocab_size(t);
    size_t line_no = 1, n = 0, i = 0;
    int rc = 0;
    bytes_acc acc = {0};
    while (i <= len && !rc) {
        if (i == len || buf[i] == '\n') { /* one line at a time: errors name the line */
            rc = decode_write(t, ids, n, line_no, 0, &acc);
            n = 0;
            line_no++;
            i++;
            continue;
        }
        if (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r') {
            i++;
            continue;
        }
        size_t s = i;
        uint64_t v = 0;
        int ok = 1;
        while (i < len && buf[i] != ' ' && buf[i] != '\t' && buf[i] != '\r' && buf[i] != '\n') {
            if (buf[i] < '0' || buf[i] > '9') ok = 0;
            else if (v <= UINT32_MAX) v = v * 10 + (uint64_t)(buf[i] - '0');
            i++;
        }
        if (!ok || v >= (uint64_t)vocab) {
            fprintf(stderr, "llmforge detokenize: stdin line %zu: '%.*s' is not a token id (%s)\n", line_no,
                    (int)(i - s > 40 ? 40 : i - s), buf + s,
                    ok ? "not below the vocabulary size" : "expected non-negative integers separated by spaces");
            rc = 1;
            break;
        }
        ids[n++] = (uint32_t)v;
    }
    if (!rc && acc.n) fwrite(acc.p, 1, acc.n, stdout);
    free(acc.p);
    free(ids);
    free(buf);
    return rc;
}

static int detokenize_jsonl(lf_tokenizer *t) {
    char *line = NULL;
    size_t cap = 0, line_no = 0;
    ssize_t got;
    int rc = 0, vocab = lf_tokenizer_vocab_size(t);
    uint32_t *ids = NULL;
    while (!rc && (got = getline(&line, &cap, stdin)) >= 0) {
        line_no++;
        cJSON *j = parse_line("detokenize", line, (size_t)got, line_no);
        if (!j) {
            rc = 1;
            break;
        }
        const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "ids");
        if (!cJSON_IsArray(arr)) {
            fprintf(stderr, "llmforge detokenize: stdin line %zu: field \"ids\" is %s\n", line_no,
                    arr ? "not an array" : "missing");
            cJSON_Delete(j);
            rc = 1;
            break;
        }
        size_t n = (size_t)cJSON_GetArraySize(arr), k = 0;
        free(ids);
        ids = malloc((n + 1) * sizeof *ids);
        if (!ids) {
            fprintf(stderr, "llmforge detokenize: out of memory\n");
            cJSON_Delete(j);
            rc = 1;
            break;
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, arr) {
            double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
            if (!(d >= 0 && d < vocab && d == (double)(uint32_t)d)) {
                fprintf(stderr, "llmforge detokenize: stdin line %zu: ids[%zu] is not a token id in [0, %d)\n", line_no,
                        k, vocab);
                rc = 1;
                break;
            }
            ids[k++] = (uint32_t)d;
        }
        cJSON_Delete(j);
        if (!rc) rc = decode_write(t, ids, k, line_no, 1, NULL);
    }
    free(ids);
    free(line);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    const char *spec = NULL;
    int jsonl = 0;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--tokenizer", &missing))) spec = v;
        else if (missing) return 2;
        else if (!strcmp(argv[i], "--jsonl")) jsonl = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: llmforge detokenize --tokenizer SPEC [--jsonl]\n"
                   "  Writes the bytes the ids on stdin stand for (ids separated by spaces or newlines).\n"
                   "  --jsonl: each line {\"ids\": [...]} -> a line {\"text\": ...}\n");
            return 0;
        } else {
            fprintf(stderr, "llmforge detokenize: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!spec) {
        fprintf(stderr, "llmforge detokenize: --tokenizer SPEC is required (see --help)\n");
        return 2;
    }
    lf_tokenizer *t = NULL;
    lf_status st = lf_tokenizer_open(&t, spec, NULL);
    if (st != LF_OK) return fail_st("detokenize", st);
    int rc = jsonl ? detokenize_jsonl(t) : detokenize_plain(t);
    lf_tokenizer_free(t);
    if (fflush(stdout) != 0 && !rc) {
        fprintf(stderr, "llmforge detokenize: error writing stdout: %s\n", strerror(errno));
        rc = 1;
    }
    return rc;
}

/* ---------------------------------------------------------------- tokenizer train / info */
static int tokenizer_train(int argc, char **argv) {
    const char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    size_t n_inputs = 0;
    const char *out = NULL;
    lf_bpe_train_opts o = lf_bpe_train_opts_default();
    int have_vocab = 0, rc = 2;
    if (!inputs) return 1;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        long x;
        if ((v = opt_value(argc, argv, &i, "--input", &missing))) inputs[n_inputs++] = v;
        else if ((v = opt_value(argc, argv, &i, "--out", &missing))) out = v;
        else if ((v = opt_value(argc, argv, &i, "--vocab-size", &missing))) {
            if (cmd_parse_long("tokenizer train", "--vocab-size", v, 257, 1 << 24, &x)) goto done;
            o.vocab_size = (uint32_t)x;
            have_vocab = 1;
        } else if ((v = opt_value(argc, argv, &i, "--min-frequency", &missing))) {
            if (cmd_parse_long("tokenizer train", "--min-frequency", v, 1, LONG_MAX, &x)) goto done;
            o.min_frequency = (uint64_t)x;
        } else if (missing) goto done;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: llmforge tokenizer train --input FILE [--input FILE ...] --vocab-size N --out FILE\n"
                   "                                [--min-frequency K]\n"
                   "  Trains a byte-level BPE with GPT-2's pre-tokeniser on UTF-8 text files and writes a\n"
                   "  tiktoken rank file; use it as --tokenizer bpe:FILE. N counts every id, <|endoftext|>\n"
                   "  (the last id) included: 256 bytes + merges + 1, at least 257. Pairs seen fewer than\n"
                   "  K times (default 2) are never merged, so the vocabulary may come out smaller.\n");
            rc = 0;
            goto done;
        } else {
            fprintf(stderr, "llmforge tokenizer train: unknown argument '%s' (see --help)\n", argv[i]);
            goto done;
        }
    }
    if (!n_inputs || !out || !have_vocab) {
        fprintf(stderr, "llmforge tokenizer train: --input FILE, --vocab-size N and --out FILE are required\n");
        goto done;
    }
    lf_bpe_train_stats s;
    double t0 = lf_time_now();
    lf_status st = lf_bpe_train(inputs, n_inputs, &o, out, &s);
    if (st != LF_OK) {
        rc = fail_st("tokenizer train", st);
        goto done;
    }
    printf("trained a byte-level BPE on %llu bytes (%llu pieces, %llu distinct) in %.2f s: %u merges, vocab size %u "
           "(<|endoftext|> = %u)\nwrote %s; use it as --tokenizer bpe:%s\n",
           (unsigned long long)s.input_bytes, (unsigned long long)s.pieces, (unsigned long long)s.unique_pieces,
           lf_time_now() - t0, (unsigned)s.merges, (unsigned)s.vocab_size, (unsigned)s.vocab_size - 1, out, out);
    if (s.vocab_size < o.vocab_size)
        printf("note: stopped at %u of the %u ids asked for: no pair occurs %llu times or more\n",
               (unsigned)s.vocab_size, (unsigned)o.vocab_size, (unsigned long long)o.min_frequency);
    rc = 0;
done:
    free(inputs);
    return rc;
}

static int tokenizer_info(int argc, char **argv) {
    const char *spec = NULL;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--tokenizer", &missing))) spec = v;
        else {
            if (!missing) fprintf(stderr, "llmforge tokenizer info: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!spec) {
        fprintf(stderr, "llmforge tokenizer info: --tokenizer SPEC is required\n");
        return 2;
    }
    lf_tokenizer *t = NULL;
    lf_status st = lf_tokenizer_open(&t, spec, NULL);
    if (st != LF_OK) return fail_st("tokenizer info", st);
    uint32_t eot;
    printf("{\"spec\":");
    put_json_string(stdout, spec, strlen(spec));
    printf(",\"vocab_size\":%d", lf_tokenizer_vocab_size(t));
    if (lf_tokenizer_special_id(t, "<|endoftext|>", &eot) == LF_OK) printf(",\"endoftext\":%u", (unsigned)eot);
    printf(",\"eot\":%d", lf_tokenizer_eot(t)); /* what prepare appends and generation stops at; -1: none */
    printf("}\n");
    lf_tokenizer_free(t);
    return 0;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc >= 1 && !strcmp(argv[0], "train")) return tokenizer_train(argc - 1, argv + 1);
    if (argc >= 1 && !strcmp(argv[0], "info")) return tokenizer_info(argc - 1, argv + 1);
    FILE *f = argc >= 1 && (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) ? stdout : stderr;
    fprintf(f, "usage: llmforge tokenizer train --input FILE [--input FILE ...] --vocab-size N --out FILE "
               "[--min-frequency K]\n"
               "       llmforge tokenizer info --tokenizer SPEC\n");
    return f == stdout ? 0 : 2;
}
