/*
 * llmforge data: synthetic data sets and their quick evaluation.
 *
 *   llmforge data arithmetic --n N --out FILE.jsonl [--digits D] [--seed S] [--ops +,-,*]
 *                            [--exclude FILE.jsonl ...] [--unique]
 *       writes N lines {"prompt": "23+58=", "response": "81"} (docs/data.md);
 *   llmforge data arithmetic-eval --ckpt DIR --input FILE.jsonl [--limit N]
 *                            [--max-new-tokens N] [--show N] [--threads N]
 *       greedy exact match of a checkpoint on such a file.
 *
 * Generation is a pure function of (seed, candidate index): candidate i has
 * op = u(i,0) mod |ops|, a = u(i,1) mod 10^D, b = u(i,2) mod 10^D with
 * u(i,k) = lf_rng_u64(seed, LF_RNG_DATA, lf_rng_mix(i, k)); for '-' the
 * operands are ordered so the result is never negative. Candidates whose
 * prompt is in an --exclude file (or, with --unique, already written) are
 * passed over, so the output stays deterministic in the seed and an eval set
 * made with another seed never overlaps the training set it excludes.
 *
 * The evaluator is the small exact-match loop the arithmetic example needs
 * now; the general harness is `llmforge eval` (src/eval). Each prompt is
 * given alone, as a model trained with data.sampling "records" sees every
 * example at the start of a window; --eot-prefix puts one end-of-text token
 * (lf_tokenizer_eot: "\n" for character vocabularies) before it, which is
 * what a model trained on random windows sees (every example follows the
 * previous one's end-of-text). Decoded greedily until the end-of-text id; the
 * text before it must equal the response exactly.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmforge/backend.h"
#include "llmforge/checkpoint.h"
#include "llmforge/data.h"
#include "llmforge/infer.h"
#include "llmforge/model.h"
#include "cli_util.h"
#include "commands.h"

#define MAX_EXCLUDES 16

/* ---------------------------------------------------------------- a set of strings */
typedef struct str_set {
    char **slot; /* (mask+1), NULL = empty */
    size_t mask, n;
} str_set;

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int set_has(const str_set *s, const char *k) {
    if (!s->slot) return 0;
    for (size_t i = fnv1a(k) & s->mask;; i = (i + 1) & s->mask) {
        if (!s->slot[i]) return 0;
        if (!strcmp(s->slot[i], k)) return 1;
    }
}

/* 0 on success (also when present), -1 out of memory. */
static int set_add(str_set *s, const char *k) {
    if (set_has(s, k)) return 0;
    if (!s->slot || (s->n + 1) * 2 > s->mask + 1) {
        size_t cap = s->slot ? 2 * (s->mask + 1) : 1024;
        char **ns = calloc(cap, sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; s->slot && i <= s->mask; i++) {
            if (!s->slot[i]) continue;
            size_t j = fnv1a(s->slot[i]) & (cap - 1);
            while (ns[j]) j = (j + 1) & (cap - 1);
            ns[j] = s->slot[i];
        }
        free(s->slot);
        s->slot = ns;
        s->mask = cap - 1;
    }
    size_t i = fnv1a(k) & s->mask;
    while (s->slot[i]) i = (i + 1) & s->mask;
    if (!(s->slot[i] = malloc(strlen(k) + 1))) return -1;
    strcpy(s->slot[i], k);
    s->n++;
    return 0;
}

static void set_free(str_set *s) {
    for (size_t i = 0; s->slot && i <= s->mask; i++) free(s->slot[i]);
    free(s->slot);
    memset(s, 0, sizeof *s);
}

/* The prompts of a prompt/response file (any pair the reader detects). */
static int load_prompts(const char *path, str_set *set) {
    lf_reader_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.format = LF_INPUT_JSONL;
    ro.mode = LF_RECORD_SFT;
    lf_reader *r = NULL;
    lf_status st = lf_reader_open(&r, path, &ro);
    while (st == LF_OK) {
        lf_record rec;
        int eof;
        st = lf_reader_next(r, &rec, &eof);
        if (st != LF_OK || eof) break;
        if (set_add(set, rec.prompt)) st = lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    lf_reader_close(r);
    if (st != LF_OK) {
        die_status(st, "data arithmetic: --exclude");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- arithmetic */
static int parse_ops(const char *s, char *ops, int *n) {
    *n = 0;
    for (const char *p = s; *p;) {
        if ((*p != '+' && *p != '-' && *p != '*') || (p[1] && p[1] != ',') || *n == 3 || memchr(ops, *p, (size_t)*n))
            goto bad;
        ops[(*n)++] = *p;
        p += p[1] ? 2 : 1;
    }
    if (*n > 0) return 0;
bad:
    fprintf(stderr,
            "llmforge data arithmetic: --ops expects a comma-separated list of distinct +, -, * (e.g. +,-), "
            "got '%s'\n",
            s);
    return -1;
}

static int cmd_arithmetic(int argc, char **argv) {
    long n = -1, digits = 2;
    uint64_t seed = 1;
    const char *out = NULL, *ops_arg = "+";
    const char *excludes[MAX_EXCLUDES];
    int n_ex = 0, unique = 0, rc = 1;
    char ops[4] = {0};
    int n_ops = 0;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--n", &missing))) {
            if (parse_long("--n", v, 1, 1000000000L, &n)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--digits", &missing))) {
            if (parse_long("--digits", v, 1, 9, &digits)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--seed", &missing))) {
            if (parse_u64("--seed", v, &seed)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--ops", &missing))) {
            ops_arg = v;
        } else if ((v = opt_value(argc, argv, &i, "--out", &missing))) {
            out = v;
        } else if ((v = opt_value(argc, argv, &i, "--exclude", &missing))) {
            if (n_ex == MAX_EXCLUDES) {
                fprintf(stderr, "llmforge data arithmetic: at most %d --exclude files\n", MAX_EXCLUDES);
                return 2;
            }
            excludes[n_ex++] = v;
        } else if (missing) {
            return 2;
        } else if (!strcmp(argv[i], "--unique")) {
            unique = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: llmforge data arithmetic --n N --out FILE.jsonl [--digits D] [--seed S] [--ops +,-,*]\n"
                   "                                [--exclude FILE.jsonl ...] [--unique]\n"
                   "  Writes N lines {\"prompt\": \"23+58=\", \"response\": \"81\"}: operands uniform in\n"
                   "  [0, 10^D) (default D 2), ops drawn uniformly from --ops (default +); for '-' the larger\n"
                   "  operand comes first. Deterministic in --seed (default 1). --exclude skips problems\n"
                   "  whose prompt appears in another set (a held-out eval set); --unique writes each\n"
                   "  problem at most once.\n");
            return 0;
        } else {
            fprintf(stderr, "llmforge data arithmetic: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (n < 0 || !out) {
        fprintf(stderr, "llmforge data arithmetic: --n N and --out FILE.jsonl are required\n");
        return 2;
    }
    if (parse_ops(ops_arg, ops, &n_ops)) return 2;

    str_set ex = {0}, seen = {0};
    char *tmp = NULL;
    FILE *f = NULL;
    for (int k = 0; k < n_ex; k++)
        if (load_prompts(excludes[k], &ex)) goto done;
    uint64_t mod = 1;
    for (long d = 0; d < digits; d++) mod *= 10;
    size_t ol = strlen(out);
    if (!(tmp = malloc(ol + 5))) goto done;
    memcpy(tmp, out, ol);
    memcpy(tmp + ol, ".tmp", 5);
    const char *slash = strrchr(out, '/');
    if (slash && slash != out) { /* create the parent directory, as prepare does its --out */
        char *parent = malloc((size_t)(slash - out) + 1);
        if (!parent) goto done;
        memcpy(parent, out, (size_t)(slash - out));
        parent[slash - out] = 0;
        lf_status st = lf_mkdirs(parent);
        free(parent);
        if (st != LF_OK) {
            die_status(st, "data arithmetic");
            goto done;
        }
    }
    if (!(f = fopen(tmp, "w"))) {
        fprintf(stderr, "llmforge: data arithmetic: cannot create '%s': %s\n", tmp, strerror(errno));
        goto done;
    }
    /* a generous bound on candidates, so an impossible request ends */
    const uint64_t max_cand = (uint64_t)n * 64 + 1000000;
    uint64_t written = 0, passed_over = 0, cand = 0;
    for (; written < (uint64_t)n && cand < max_cand; cand++) {
        char op = ops[lf_rng_u64(seed, LF_RNG_DATA, lf_rng_mix(cand, 0)) % (uint64_t)n_ops];
        uint64_t a = lf_rng_u64(seed, LF_RNG_DATA, lf_rng_mix(cand, 1)) % mod;
        uint64_t b = lf_rng_u64(seed, LF_RNG_DATA, lf_rng_mix(cand, 2)) % mod;
        if (op == '-' && a < b) {
            uint64_t t = a;
            a = b;
            b = t;
        }
        uint64_t r = op == '+' ? a + b : op == '-' ? a - b : a * b;
        char prompt[64];
        snprintf(prompt, sizeof prompt, "%" PRIu64 "%c%" PRIu64 "=", a, op, b);
        if (set_has(&ex, prompt) || (unique && set_has(&seen, prompt))) {
            passed_over++;
            continue;
        }
        if (unique && set_add(&seen, prompt)) {
            fprintf(stderr, "llmforge: data arithmetic: out of memory\n");
            goto done;
        }
        if (fprintf(f, "{\"prompt\": \"%s\", \"response\": \"%" PRIu64 "\"}\n", prompt, r) < 0) {
            fprintf(stderr, "llmforge: data arithmetic: write to '%s' failed: %s\n", tmp, strerror(errno));
            goto done;
        }
        written++;
    }
    if (written < (uint64_t)n) {
        fprintf(stderr,
                "llmforge: data arithmetic: only %" PRIu64 " of %ld problems after %" PRIu64 " candidates: %d-digit "
                "operands with ops '%s' do not hold that many %s problems\n",
                written, n, cand, (int)digits, ops_arg, unique ? "distinct, non-excluded" : "non-excluded");
        goto done;
    }
    int cerr = fclose(f);
    f = NULL;
    if (cerr != 0 || rename(tmp, out) != 0) {
        fprintf(stderr, "llmforge: data arithmetic: cannot write '%s': %s\n", out, strerror(errno));
        goto done;
    }
    printf("wrote %ld problems to %s (%ld-digit operands, ops %s, seed %" PRIu64 "%s; %" PRIu64
           " candidates passed over)\n",
           n, out, digits, ops_arg, seed, unique ? ", unique" : "", passed_over);
    rc = 0;
done:
    if (f) fclose(f);
    if (rc != 0 && tmp) remove(tmp);
    free(tmp);
    set_free(&ex);
    set_free(&seen);
    return rc;
}

/* ---------------------------------------------------------------- arithmetic-eval */
typedef struct stop_ctx {
    uint32_t eot;
} stop_ctx;

static int stop_at_eot(uint32_t token, void *user) { return token == ((stop_ctx *)user)->eot; }

/* Model and tokenizer of a checkpoint (lf_checkpoint_load_text_model). */
static lf_status load_checkpoint(const char *ckpt, lf_model **m, lf_tokenizer **tok, char **dir_out) {
    return lf_checkpoint_load_text_model(ckpt, NULL, m, tok, dir_out);
}

static int cmd_arithmetic_eval(int argc, char **argv) {
    const char *ckpt = NULL, *input = NULL;
    long limit = 0, max_new = 32, show = 5, threads = 0;
    int eot_prefix = 0;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        if ((v = opt_value(argc, argv, &i, "--ckpt", &missing))) ckpt = v;
        else if ((v = opt_value(argc, argv, &i, "--input", &missing))) input = v;
        else if ((v = opt_value(argc, argv, &i, "--limit", &missing))) {
            if (parse_long("--limit", v, 0, 1000000000L, &limit)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--max-new-tokens", &missing))) {
            if (parse_long("--max-new-tokens", v, 1, 1 << 20, &max_new)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--show", &missing))) {
            if (parse_long("--show", v, 0, 1000000000L, &show)) return 2;
        } else if ((v = opt_value(argc, argv, &i, "--threads", &missing))) {
            if (parse_long("--threads", v, 0, 4096, &threads)) return 2;
        } else if (missing) {
            return 2;
        } else if (!strcmp(argv[i], "--no-eot-prefix")) {
            eot_prefix = 0;
        } else if (!strcmp(argv[i], "--eot-prefix")) {
            eot_prefix = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: llmforge data arithmetic-eval --ckpt DIR --input FILE.jsonl [--limit N]\n"
                   "                                     [--max-new-tokens N] [--show N] [--threads N]\n"
                   "                                     [--eot-prefix]\n"
                   "  Greedy-decodes each prompt until the end-of-text token and prints the exact-match\n"
                   "  accuracy against the responses. Prompts are given alone (a model trained with\n"
                   "  data.sampling records); --eot-prefix puts one end-of-text token before each (a model\n"
                   "  trained on random windows). --limit: the first N records (0: all);\n"
                   "  --show: print the first N wrong answers (default 5); --max-new-tokens default 32.\n");
            return 0;
        } else {
            fprintf(stderr, "llmforge data arithmetic-eval: unknown argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!ckpt || !input) {
        fprintf(stderr, "llmforge data arithmetic-eval: --ckpt DIR and --input FILE.jsonl are required\n");
        return 2;
    }
    if (cli_backend_setup("data arithmetic-eval", threads, 1)) return 2;
    int rc = 1;
    char *dir = NULL, *text = NULL;
    lf_model *m = NULL;
    lf_tokenizer *tok = NULL;
    lf_reader *r = NULL;
    uint32_t *ids = NULL, *gen = NULL;
    double t0 = lf_time_now();
    lf_status st = load_checkpoint(ckpt, &m, &tok, &dir);
    if (st != LF_OK) {
        die_status(st, "data arithmetic-eval");
        goto done;
    }
    int eot = lf_tokenizer_eot(tok);
    if (eot < 0) {
        fprintf(stderr, "llmforge: data arithmetic-eval: the checkpoint's tokenizer has no end-of-text token\n");
        goto done;
    }
    lf_reader_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.format = LF_INPUT_JSONL;
    ro.mode = LF_RECORD_SFT;
    if ((st = lf_reader_open(&r, input, &ro)) != LF_OK) {
        die_status(st, "data arithmetic-eval");
        goto done;
    }
    stop_ctx sc = {(uint32_t)eot};
    lf_sample_opts so = {.max_new_tokens = (int)max_new, .temperature = 0.0f, .top_k = 0, .seed = 0};
    unsigned long long total = 0, correct = 0, shown = 0;
    for (;;) {
        lf_record rec;
        int eof;
        if (limit > 0 && total >= (unsigned long long)limit) break;
        if ((st = lf_reader_next(r, &rec, &eof)) != LF_OK) {
            die_status(st, "data arithmetic-eval");
            goto done;
        }
        if (eof) break;
        size_t n_ids = 0, n_gen = 0, len = 0;
        if ((st = lf_tokenizer_encode(tok, rec.prompt, rec.prompt_len, &ids, &n_ids)) != LF_OK) {
            lf_error_prefix("%s:%llu: prompt", input, (unsigned long long)rec.line);
            die_status(st, "data arithmetic-eval");
            goto done;
        }
        if (eot_prefix || n_ids == 0) { /* [eot] + prompt (an empty prompt needs it in any case) */
            uint32_t *p = lf_alloc((n_ids + 1) * sizeof *p);
            if (!p) {
                die_status(LF_ERR_NOMEM, "data arithmetic-eval");
                goto done;
            }
            p[0] = (uint32_t)eot;
            if (n_ids) memcpy(p + 1, ids, n_ids * sizeof *p);
            lf_free(ids);
            ids = p;
            n_ids++;
        }
        if ((st = lf_generate(m, ids, n_ids, &so, stop_at_eot, &sc, &gen, &n_gen)) != LF_OK) {
            die_status(st, "data arithmetic-eval");
            goto done;
        }
        size_t n_ans = n_gen > 0 && gen[n_gen - 1] == (uint32_t)eot ? n_gen - 1 : n_gen;
        if ((st = lf_tokenizer_decode(tok, gen, n_ans, &text, &len)) != LF_OK) {
            die_status(st, "data arithmetic-eval");
            goto done;
        }
        int ok = n_ans < n_gen && len == rec.response_len && memcmp(text, rec.response, len) == 0;
        correct += (unsigned long long)ok;
        total++;
        if (!ok && shown < (unsigned long long)show) {
            shown++;
            printf("wrong: %s%s (expected %s)%s\n", rec.prompt, text, rec.response,
                   n_ans < n_gen ? "" : " [no end-of-text]");
        }
        lf_free(ids);
        lf_free(gen);
        lf_free(text);
        ids = gen = NULL;
        text = NULL;
    }
    if (total == 0) {
        fprintf(stderr, "llmforge: data arithmetic-eval: '%s' holds no problems\n", input);
        goto done;
    }
    printf("exact match: %llu / %llu = %.2f%% (checkpoint %s, greedy, end-of-text id %d%s, %.1f s)\n", correct, total,
           100.0 * (double)correct / (double)total, dir, eot, eot_prefix ? " before each prompt" : "",
           lf_time_now() - t0);
    rc = 0;
done:
    lf_reader_close(r);
    lf_free(ids);
    lf_free(gen);
    lf_free(text);
    lf_free(dir);
    lf_model_free(m);
    lf_tokenizer_free(tok);
    return rc;
}

/* ---------------------------------------------------------------- dispatch */
int cmd_data(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        FILE *f = argc < 1 ? stderr : stdout;
        fprintf(f, "usage: llmforge data <command> [options]\n"
                   "  arithmetic        write a prompt/response arithmetic set (JSON Lines)\n"
                   "  arithmetic-eval   greedy exact match of a checkpoint on such a set\n"
                   "`llmforge data <command> --help` for a command's options\n");
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "arithmetic")) return cmd_arithmetic(argc - 1, argv + 1);
    if (!strcmp(argv[0], "arithmetic-eval")) return cmd_arithmetic_eval(argc - 1, argv + 1);
    fprintf(stderr, "llmforge data: unknown command '%s' (arithmetic, arithmetic-eval)\n", argv[0]);
    return 2;
}
