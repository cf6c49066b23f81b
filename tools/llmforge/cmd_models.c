/*
 * llmforge models: the model registry from the command line.
 *
 *   llmforge models [--registry FILE] list [--json] [--where COND ...] [--tag T] [--all]
 *   llmforge models show ID|PATH [--json]
 *   llmforge models lineage ID|PATH [--json]
 *   llmforge models diff A B [--json]
 *   llmforge models tag ID NAME [--move]        llmforge models untag ID NAME
 *   llmforge models gc --keep-best K [--keep-tagged] [--metric M] [--higher-is-better] [--dry-run] [--json]
 *   llmforge models relink DIR [--json]
 *   llmforge models eval ID --suite DIR [--json] [--batch B] [--threads N]
 *   llmforge models compare A B [--suite DIR] [--json]
 *   llmforge models promote ID --tag NAME --require COND [--require COND ...]
 *
 * The library (include/llmforge/registry.h) does the work and answers in
 * JSON; this file parses options, resolves references, loads checkpoints for
 * `eval`, and prints tables (or the JSON itself with --json). Unlike
 * training, which only warns, an unusable registry here is an error. Exit
 * status: 0 done; 1 an error, or a promotion whose requirements do not all
 * hold (each failing one named on stderr); 2 usage.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "llmforge/checkpoint.h"
#include "llmforge/data.h"
#include "llmforge/eval.h"
#include "llmforge/model.h"
#include "llmforge/registry.h"
#include "cli_util.h"
#include "commands.h"

#define MAX_CONDS 64

static void models_usage(FILE *f) {
    fprintf(f,
            "usage: llmforge models [--registry FILE] <command> [options]\n"
            "  The model registry: every training run and checkpoint, their metrics and lineage.\n"
            "  FILE: --registry, else $LLMFORGE_REGISTRY, else ~/.local/share/llmforge/registry.db.\n"
            "  ID: c<N> (a checkpoint), r<N> (a run: its newest checkpoint), a checkpoint or run\n"
            "  directory, or a tag carried by one checkpoint.\n\n"
            "commands:\n"
            "  list [--json] [--where COND ...] [--tag T] [--all]\n"
            "                         checkpoints on disk (--all: removed ones too); COND: METRIC OP VALUE,\n"
            "                         OP one of < <= > >= == != (e.g. --where 'val_loss<2.5')\n"
            "  show ID [--json]       everything recorded about a checkpoint and its run\n"
            "  lineage ID [--json]    the chain back to a run from scratch or an imported model\n"
            "  diff A B [--json]      configuration keys and data that differ between their runs\n"
            "  tag ID NAME [--move]   tag a checkpoint (--move: take the tag off every other one)\n"
            "  untag ID NAME\n"
            "  gc --keep-best K [--keep-tagged] [--metric M] [--higher-is-better] [--dry-run] [--json]\n"
            "                         remove checkpoint directories beyond the K best by M (default val_loss)\n"
            "                         of each run directory; tagged checkpoints, each run's newest and each\n"
            "                         run directory's latest are always kept\n"
            "  relink DIR [--json]    find moved checkpoints under DIR by their model's hash\n"
            "  eval ID --suite DIR [--json] [--batch B] [--threads N]\n"
            "                         run every task file (*.jsonl) of DIR on the checkpoint and record the metrics\n"
            "  compare A B [--suite DIR] [--json]\n"
            "                         recorded metrics side by side with B - A (--suite: evaluate both first)\n"
            "  promote ID --tag NAME --require COND [--require COND ...]\n"
            "                         move tag NAME to the checkpoint only when every requirement holds on\n"
            "                         its recorded metrics; otherwise exit 1 naming the failing ones\n");
}

/* ---------------------------------------------------------------- helpers */

static const char *g_registry; /* --registry */

static int open_registry(lf_registry **r) {
    char path[4096];
    lf_status st = lf_registry_path_resolve(g_registry, path, sizeof path);
    if (st == LF_OK) st = lf_registry_open(r, path, 0);
    if (st != LF_OK) {
        die_status(st, "models");
        if (st == LF_ERR_NOT_FOUND)
            fprintf(stderr, "hint: `llmforge train` records into it; point --registry or %s at another file\n",
                    LF_REGISTRY_ENV);
        else if (st == LF_ERR_FORMAT)
            fprintf(stderr, "hint: move the damaged file aside; the next training run creates a new registry\n");
        return 1;
    }
    return 0;
}

static int find_ref(lf_registry *r, const char *ref, int64_t *id) {
    lf_status st = lf_registry_find(r, ref, id);
    if (st != LF_OK) {
        die_status(st, "models");
        return 1;
    }
    return 0;
}

static cJSON *parse_owned(char *json) {
    cJSON *o = cJSON_Parse(json);
    lf_free(json);
    if (!o) fprintf(stderr, "llmforge: models: out of memory reading the registry's answer\n");
    return o;
}

static const cJSON *get(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = get(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = get(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void fmt_time(double t, char *buf, size_t cap) {
    if (!isfinite(t) || t <= 0) {
        snprintf(buf, cap, "-");
        return;
    }
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void fmt_num(const cJSON *v, char *buf, size_t cap) {
    if (cJSON_IsNumber(v)) snprintf(buf, cap, "%.6g", v->valuedouble);
    else if (cJSON_IsString(v)) snprintf(buf, cap, "%s", v->valuestring[0] ? v->valuestring : "\"\"");
    else if (cJSON_IsBool(v)) snprintf(buf, cap, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (!v || cJSON_IsNull(v)) snprintf(buf, cap, "-");
    else {
        char *p = cJSON_PrintUnformatted(v);
        snprintf(buf, cap, "%s", p ? p : "?");
        free(p);
    }
}

static void print_json(char *json) {
    printf("%s\n", json);
    lf_free(json);
}

/* "latest,best,removed(gc)" */
static void flags(const cJSON *c, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    if (cJSON_IsTrue(get(c, "latest"))) at += (size_t)snprintf(buf + at, cap - at, "latest");
    if (cJSON_IsTrue(get(c, "best"))) at += (size_t)snprintf(buf + at, cap - at, "%sbest", at ? "," : "");
    const cJSON *rm = get(c, "removed");
    if (cJSON_IsObject(rm)) at += (size_t)snprintf(buf + at, cap - at, "%sremoved(%s)", at ? "," : "", str(rm, "by"));
    if (!buf[0]) snprintf(buf, cap, "-");
}

static void tags_str(const cJSON *c, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, get(c, "tags")) {
        if (cJSON_IsString(t) && at < cap)
            at += (size_t)snprintf(buf + at, cap - at, "%s%s", at ? "," : "", t->valuestring);
    }
    if (!buf[0]) snprintf(buf, cap, "-");
}

/* Options shared by the subcommands: --json, --registry handled before. */
typedef struct opts {
    int json, all, move, dry_run, higher, keep_tagged;
    long keep_best, batch, threads;
    const char *tag, *suite, *metric;
    lf_registry_cond conds[MAX_CONDS];
    int n_conds;
    const char *pos[4];
    int n_pos;
} opts;

/* The registry's answer to one call: printed as it is with --json (0,
 * *root NULL), else parsed into *root (0); 1 when the call failed or the
 * answer cannot be read (reported, naming `what`). */
static int answer(lf_status st, char *json, const opts *o, const char *what, cJSON **root) {
    *root = NULL;
    if (st != LF_OK) {
        die_status(st, what);
        return 1;
    }
    if (o->json) {
        print_json(json);
        return 0;
    }
    *root = parse_owned(json);
    return *root ? 0 : 1;
}

/* Parse argv of a subcommand; `allowed` lists the options it takes. */
static int parse_opts(const char *cmd, int argc, char **argv, const char *allowed, int max_pos, opts *o) {
    memset(o, 0, sizeof *o);
    o->keep_best = -1;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v;
        const char *a = argv[i];
#define ALLOWED(name) (strstr(allowed, name " ") != NULL)
        if (ALLOWED("--where") && (v = opt_value(argc, argv, &i, "--where", &missing))) {
            if (o->n_conds == MAX_CONDS) {
                fprintf(stderr, "llmforge models %s: at most %d conditions\n", cmd, MAX_CONDS);
                return 2;
            }
            if (lf_registry_cond_parse(v, &o->conds[o->n_conds]) != LF_OK) {
                fprintf(stderr, "llmforge models %s: --where: %s\n", cmd, lf_last_error());
                return 2;
            }
            o->n_conds++;
        } else if (ALLOWED("--require") && (v = opt_value(argc, argv, &i, "--require", &missing))) {
            if (o->n_conds == MAX_CONDS) {
                fprintf(stderr, "llmforge models %s: at most %d requirements\n", cmd, MAX_CONDS);
                return 2;
            }
            if (lf_registry_cond_parse(v, &o->conds[o->n_conds]) != LF_OK) {
                fprintf(stderr, "llmforge models %s: --require: %s\n", cmd, lf_last_error());
                return 2;
            }
            o->n_conds++;
        } else if (ALLOWED("--tag") && (v = opt_value(argc, argv, &i, "--tag", &missing))) {
            o->tag = v;
        } else if (ALLOWED("--suite") && (v = opt_value(argc, argv, &i, "--suite", &missing))) {
            o->suite = v;
        } else if (ALLOWED("--metric") && (v = opt_value(argc, argv, &i, "--metric", &missing))) {
            o->metric = v;
        } else if (ALLOWED("--keep-best") && (v = opt_value(argc, argv, &i, "--keep-best", &missing))) {
            if (parse_long("--keep-best", v, 0, 1000000, &o->keep_best)) return 2;
        } else if (ALLOWED("--batch") && (v = opt_value(argc, argv, &i, "--batch", &missing))) {
            if (parse_long("--batch", v, 1, 65536, &o->batch)) return 2;
        } else if (ALLOWED("--threads") && (v = opt_value(argc, argv, &i, "--threads", &missing))) {
            if (parse_long("--threads", v, 0, 4096, &o->threads)) return 2;
        } else if (missing) {
            return 2;
        } else if (ALLOWED("--json") && !strcmp(a, "--json")) {
            o->json = 1;
        } else if (ALLOWED("--all") && !strcmp(a, "--all")) {
            o->all = 1;
        } else if (ALLOWED("--move") && !strcmp(a, "--move")) {
            o->move = 1;
        } else if (ALLOWED("--dry-run") && !strcmp(a, "--dry-run")) {
            o->dry_run = 1;
        } else if (ALLOWED("--higher-is-better") && !strcmp(a, "--higher-is-better")) {
            o->higher = 1;
        } else if (ALLOWED("--keep-tagged") && !strcmp(a, "--keep-tagged")) {
            o->keep_tagged = 1; /* always so: a tagged checkpoint is never removed */
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            models_usage(stdout);
            return -1;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "llmforge models %s: unknown option '%s' (see llmforge models --help)\n", cmd, a);
            return 2;
        } else if (o->n_pos < max_pos) {
            o->pos[o->n_pos++] = a;
        } else {
            fprintf(stderr, "llmforge models %s: unexpected argument '%s' (see llmforge models --help)\n", cmd, a);
            return 2;
        }
#undef ALLOWED
    }
    return 0;
}

static int need_pos(const char *cmd, const opts *o, int n, const char *what) {
    if (o->n_pos == n) return 0;
    fprintf(stderr, "llmforge models %s: expects %s (see llmforge models --help)\n", cmd, what);
    return 2;
}

/* ---------------------------------------------------------------- list */

static int models_list(lf_registry *r, const opts *o) {
    lf_registry_filter f = {.tag = o->tag, .where = o->conds, .n_where = o->n_conds, .include_removed = o->all};
    char *json = NULL;
    cJSON *arr = NULL;
    const lf_status st = lf_registry_list_json(r, &f, &json);
    const int rc = answer(st, json, o, "models list", &arr);
    if (rc || !arr) return rc;
    /* the metric column: the first --where metric, else val_loss */
    const char *mname = o->n_conds ? o->conds[0].metric : "val_loss";
    printf("%-6s %-5s %8s  %-9s  %-22s %12s  %-16s %s\n", "ID", "RUN", "STEP", "STATUS", "FLAGS", mname, "TAGS",
           "PATH");
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, arr) {
        char fl[64], tg[256], mv[64];
        flags(c, fl, sizeof fl);
        tags_str(c, tg, sizeof tg);
        fmt_num(get(get(c, "metrics"), mname), mv, sizeof mv);
        printf("%-6s %-5s %8.0f  %-9s  %-22s %12s  %-16s %s\n", str(c, "id"), str(c, "run"), num(c, "step"),
               str(c, "run_status"), fl, mv, tg, str(c, "path"));
        n++;
    }
    if (!n) printf("(no checkpoint%s)\n", o->tag || o->n_conds ? " matches" : " recorded");
    cJSON_Delete(arr);
    return 0;
}

/* ---------------------------------------------------------------- show */

static void print_edge(const cJSON *e) {
    const cJSON *par = get(e, "parent");
    if (cJSON_IsString(par)) printf("%s %s (%s)", str(e, "kind"), par->valuestring, str(e, "path"));
    else
        printf("%s %s %s (not in the registry; sha256 %.16s...)", str(e, "kind"),
               cJSON_IsString(get(e, "external")) ? str(e, "external") : "checkpoint", str(e, "path"),
               str(e, "sha256"));
}

static int models_show(lf_registry *r, const opts *o) {
    int64_t id;
    if (find_ref(r, o->pos[0], &id)) return 1;
    char *json = NULL;
    cJSON *c = NULL;
    const lf_status st = lf_registry_show_json(r, id, &json);
    const int rc = answer(st, json, o, "models show", &c);
    if (rc || !c) return rc;
    const cJSON *run = get(c, "run_record");
    char fl[64], tg[256], t0[32], t1[32], tc[32];
    flags(c, fl, sizeof fl);
    tags_str(c, tg, sizeof tg);
    fmt_time(num(c, "created"), tc, sizeof tc);
    printf("checkpoint %s: step %.0f of run %s, saved %s\n", str(c, "id"), num(c, "step"), str(c, "run"), tc);
    printf("  path          %s%s\n", str(c, "path"), cJSON_IsObject(get(c, "removed")) ? " (removed)" : "");
    printf("  flags         %s\n  tags          %s\n", fl, tg);
    printf("  sha256        %s (of its file list)\n  model sha256  %s\n", str(c, "sha256"), str(c, "model_sha256"));
    const cJSON *m;
    printf("  metrics      ");
    int any = 0;
    cJSON_ArrayForEach(m, get(c, "metrics")) {
        char v[64];
        fmt_num(m, v, sizeof v);
        printf("%s %s %s (%s)", any ? "," : "", m->string, v, str(get(c, "metric_sources"), m->string));
        any = 1;
    }
    printf("%s\n", any ? "" : " none recorded");
    const cJSON *f;
    cJSON_ArrayForEach(f, get(c, "files"))
        printf("  file          %s  %.0f bytes  sha256 %s\n", f->string, num(f, "bytes"), str(f, "sha256"));
    fmt_time(num(run, "started"), t0, sizeof t0);
    fmt_time(num(run, "ended"), t1, sizeof t1);
    printf("run %s: %s%s%s\n", str(run, "id"), str(run, "status"), str(run, "message")[0] ? ": " : "",
           str(run, "message"));
    printf("  started       %s, ended %s\n", t0, t1);
    printf("  out_dir       %s\n", str(run, "out_dir"));
    printf("  host          %s (pid %.0f), world size %.0f\n", str(run, "host"), num(run, "pid"),
           num(run, "world_size"));
    printf("  code version  %s\n", str(run, "code_version"));
    printf("  config sha256 %s\n", str(run, "config_hash"));
    printf("  dataset       %s (sha256 %s)\n", str(run, "dataset"), str(run, "dataset_hash"));
    printf("  tokenizer     %s (sha256 %s)\n", str(run, "tokenizer"), str(run, "tokenizer_hash"));
    printf("  parent        ");
    if (cJSON_IsObject(get(run, "parent"))) print_edge(get(run, "parent"));
    else printf("none (trained from scratch)");
    printf("\n  checkpoints  ");
    const cJSON *k;
    cJSON_ArrayForEach(k, get(run, "checkpoints")) printf(" %s", cJSON_IsString(k) ? k->valuestring : "?");
    printf("\n");
    cJSON_Delete(c);
    return 0;
}

/* ---------------------------------------------------------------- lineage */

static int models_lineage(lf_registry *r, const opts *o) {
    int64_t id;
    if (find_ref(r, o->pos[0], &id)) return 1;
    char *json = NULL;
    cJSON *root = NULL;
    const lf_status st = lf_registry_lineage_json(r, id, &json);
    const int rc = answer(st, json, o, "models lineage", &root);
    if (rc || !root) return rc;
    const cJSON *e;
    cJSON_ArrayForEach(e, get(root, "chain")) {
        printf("%-6s run %-5s step %-8.0f %s%s\n", str(e, "id"), str(e, "run"), num(e, "step"), str(e, "path"),
               cJSON_IsTrue(get(e, "removed")) ? " (removed)" : "");
        const cJSON *edge = get(e, "edge");
        printf("  <- ");
        if (cJSON_IsObject(edge)) print_edge(edge);
        else printf("from scratch");
        printf("\n");
    }
    printf("origin: %s\n", str(root, "origin"));
    cJSON_Delete(root);
    return 0;
}

/* ---------------------------------------------------------------- diff, compare */

static int models_diff(lf_registry *r, const opts *o) {
    int64_t a, b;
    if (find_ref(r, o->pos[0], &a) || find_ref(r, o->pos[1], &b)) return 1;
    char *json = NULL;
    cJSON *root = NULL;
    const lf_status st = lf_registry_diff_json(r, a, b, &json);
    const int rc = answer(st, json, o, "models diff", &root);
    if (rc || !root) return rc;
    printf("diff %s %s\n", str(root, "a"), str(root, "b"));
    static const char *const sections[] = {"config", "data"};
    int total = 0;
    for (int s = 0; s < 2; s++) {
        const cJSON *arr = get(root, sections[s]), *e;
        if (!cJSON_GetArraySize(arr)) continue;
        printf("%s:\n", sections[s]);
        cJSON_ArrayForEach(e, arr) {
            char va[1024], vb[1024];
            fmt_num(get(e, "a"), va, sizeof va);
            fmt_num(get(e, "b"), vb, sizeof vb);
            printf("  %-40s %s -> %s\n", str(e, "key"), va, vb);
            total++;
        }
    }
    if (!total) printf("no differences in configuration or data\n");
    cJSON_Delete(root);
    return 0;
}

static int run_suite(lf_registry *r, int64_t id, const char *suite, const opts *o, int quiet);

static int models_compare(lf_registry *r, const opts *o) {
    int64_t a, b;
    if (find_ref(r, o->pos[0], &a) || find_ref(r, o->pos[1], &b)) return 1;
    if (o->suite && cli_backend_setup("models compare", o->threads, 1)) return 2;
    if (o->suite && (run_suite(r, a, o->suite, o, 1) || run_suite(r, b, o->suite, o, 1))) return 1;
    char *json = NULL;
    cJSON *root = NULL;
    const lf_status st = lf_registry_compare_json(r, a, b, &json);
    const int rc = answer(st, json, o, "models compare", &root);
    if (rc || !root) return rc;
    printf("%-40s %14s %14s %14s\n", "metric", str(root, "a"), str(root, "b"), "delta (b - a)");
    const cJSON *e;
    cJSON_ArrayForEach(e, get(root, "metrics")) {
        char va[64], vb[64], vd[64];
        fmt_num(get(e, "a"), va, sizeof va);
        fmt_num(get(e, "b"), vb, sizeof vb);
        if (cJSON_IsNumber(get(e, "delta"))) snprintf(vd, sizeof vd, "%+.6g", num(e, "delta"));
        else snprintf(vd, sizeof vd, "-");
        printf("%-40s %14s %14s %14s\n", str(e, "name"), va, vb, vd);
    }
    if (!cJSON_GetArraySize(get(root, "metrics"))) printf("(neither has recorded metrics)\n");
    cJSON_Delete(root);
    return 0;
}

/* ---------------------------------------------------------------- tag, promote */

static int models_tag(lf_registry *r, const opts *o, int untag) {
    int64_t id;
    if (find_ref(r, o->pos[0], &id)) return 1;
    lf_status st = untag ? lf_registry_untag(r, id, o->pos[1]) : lf_registry_tag(r, id, o->pos[1], o->move);
    if (st != LF_OK) {
        die_status(st, untag ? "models untag" : "models tag");
        return 1;
    }
    printf("%s c%lld '%s'\n", untag ? "untagged" : "tagged", (long long)id, o->pos[1]);
    return 0;
}

static int models_promote(lf_registry *r, const opts *o) {
    if (!o->tag) {
        fprintf(stderr, "llmforge models promote: --tag NAME is required\n");
        return 2;
    }
    if (!o->n_conds) {
        fprintf(stderr, "llmforge models promote: give at least one --require 'METRIC OP VALUE'\n");
        return 2;
    }
    int64_t id;
    if (find_ref(r, o->pos[0], &id)) return 1;
    double seen[MAX_CONDS];
    int held[MAX_CONDS];
    lf_status st = lf_registry_promote(r, id, o->tag, o->conds, o->n_conds, seen, held);
    if (st != LF_OK && st != LF_ERR_RANGE) {
        die_status(st, "models promote");
        return 1;
    }
    for (int i = 0; i < o->n_conds; i++) {
        char v[64];
        if (isnan(seen[i])) snprintf(v, sizeof v, "not recorded");
        else snprintf(v, sizeof v, "%.9g", seen[i]);
        printf("  %-4s %s %s %.9g (recorded: %s)\n", held[i] ? "ok" : "FAIL", o->conds[i].metric,
               lf_registry_op_name(o->conds[i].op), o->conds[i].value, v);
    }
    if (st == LF_ERR_RANGE) {
        fprintf(stderr, "llmforge: models promote: %s\n", lf_last_error());
        return 1;
    }
    printf("promoted c%lld to '%s'\n", (long long)id, o->tag);
    return 0;
}

/* ---------------------------------------------------------------- gc, relink */

static void print_entries(const char *title, const cJSON *arr, const char *key) {
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) printf("%-8s %-6s %s\n", title, str(e, "id"), str(e, key));
}

static int models_gc(lf_registry *r, const opts *o) {
    if (o->keep_best < 0) {
        fprintf(stderr, "llmforge models gc: --keep-best K is required (K >= 0: the best checkpoints kept per run "
                        "directory)\n");
        return 2;
    }
    lf_registry_gc_opts go = {.keep_best = (int)o->keep_best,
                              .metric = o->metric,
                              .higher_is_better = o->higher,
                              .dry_run = o->dry_run};
    char *json = NULL;
    cJSON *root = NULL;
    const lf_status st = lf_registry_gc(r, &go, &json);
    const int rc = answer(st, json, o, "models gc", &root);
    if (rc || !root) return rc;
    print_entries(o->dry_run ? "would rm" : "removed", get(root, "removed"), "path");
    print_entries("missing", get(root, "missing"), "path");
    const cJSON *e;
    cJSON_ArrayForEach(e, get(root, "skipped"))
        printf("%-8s %-6s %s: %s\n", "skipped", str(e, "id"), str(e, "path"), str(e, "why"));
    print_entries("kept", get(root, "kept"), "why");
    printf("%d removed%s, %d kept, %d already missing, %d skipped\n", cJSON_GetArraySize(get(root, "removed")),
           o->dry_run ? " (dry run: nothing removed)" : "", cJSON_GetArraySize(get(root, "kept")),
           cJSON_GetArraySize(get(root, "missing")), cJSON_GetArraySize(get(root, "skipped")));
    cJSON_Delete(root);
    return 0;
}

static int models_relink(lf_registry *r, const opts *o) {
    char *json = NULL;
    cJSON *root = NULL;
    const lf_status st = lf_registry_relink(r, o->pos[0], &json);
    const int rc = answer(st, json, o, "models relink", &root);
    if (rc || !root) return rc;
    const cJSON *e;
    cJSON_ArrayForEach(e, get(root, "relinked"))
        printf("relinked %-6s %s -> %s\n", str(e, "id"), str(e, "from"), str(e, "to"));
    cJSON_ArrayForEach(e, get(root, "unknown"))
        printf("unknown  %s (no registry checkpoint has its model hash)\n", cJSON_IsString(e) ? e->valuestring : "?");
    printf("%.0f checkpoint director%s scanned, %d relinked\n", num(root, "scanned"),
           num(root, "scanned") == 1 ? "y" : "ies", cJSON_GetArraySize(get(root, "relinked")));
    cJSON_Delete(root);
    return 0;
}

/* ---------------------------------------------------------------- eval */

/* Load checkpoint id, run the suite, record every metric (source "suite");
 * print the table unless quiet (or the JSON with --json). */
static int run_suite(lf_registry *r, int64_t id, const char *suite, const opts *o, int quiet) {
    char *show = NULL;
    lf_status st = lf_registry_show_json(r, id, &show);
    if (st != LF_OK) {
        die_status(st, "models eval");
        return 1;
    }
    cJSON *c = parse_owned(show);
    if (!c) return 1;
    if (cJSON_IsObject(get(c, "removed"))) {
        fprintf(stderr, "llmforge: models eval: c%lld was removed from disk (%s); nothing to evaluate\n", (long long)id,
                str(c, "path"));
        cJSON_Delete(c);
        return 1;
    }
    int rc = 1;
    char *dir = NULL, *table = NULL, *rjson = NULL;
    lf_model *m = NULL;
    lf_tokenizer *tok = NULL;
    lf_eval_tasks *ts = NULL;
    lf_eval_results *res = NULL;
    lf_registry_metric *rm = NULL;
    if ((st = lf_eval_suite_load(&ts, suite, NULL)) != LF_OK) {
        die_status(st, "models eval");
        goto done;
    }
    if ((st = lf_checkpoint_load_text_model(str(c, "path"), NULL, &m, &tok, &dir)) != LF_OK) {
        die_status(st, "models eval");
        goto done;
    }
    lf_eval_run_opts ro = lf_eval_run_opts_default();
    ro.batch = (int)o->batch;
    if ((st = lf_eval_results_create(&res)) != LF_OK || (st = lf_eval_tasks_run(ts, m, tok, &ro, res)) != LF_OK) {
        die_status(st, "models eval");
        goto done;
    }
    size_t n = 0;
    const lf_eval_metric *em = lf_eval_results_metrics(res, &n);
    rm = calloc(n ? n : 1, sizeof *rm);
    if (!rm) {
        die_status(LF_ERR_NOMEM, "models eval");
        goto done;
    }
    for (size_t i = 0; i < n; i++) rm[i] = (lf_registry_metric){em[i].name, em[i].value};
    if ((st = lf_registry_metrics_put(r, id, rm, (int)n, "suite")) != LF_OK) {
        die_status(st, "models eval: recording the metrics");
        goto done;
    }
    if (!quiet) {
        if (o->json) {
            if ((st = lf_eval_results_json(res, &rjson)) != LF_OK) {
                die_status(st, "models eval");
                goto done;
            }
            printf("%s\n", rjson);
        } else {
            if ((st = lf_eval_results_table(res, &table)) != LF_OK) {
                die_status(st, "models eval");
                goto done;
            }
            printf("checkpoint c%lld (%s)\n%s", (long long)id, dir, table);
            printf("%zu metric%s recorded in %s\n", n, n == 1 ? "" : "s", lf_registry_file(r));
        }
    }
    rc = 0;
done:
    cJSON_Delete(c);
    free(rm);
    lf_free(table);
    lf_free(rjson);
    lf_free(dir);
    lf_eval_results_free(res);
    lf_eval_tasks_free(ts);
    lf_model_free(m);
    lf_tokenizer_free(tok);
    return rc;
}

static int models_eval(lf_registry *r, const opts *o) {
    if (!o->suite) {
        fprintf(stderr, "llmforge models eval: --suite DIR is required (a directory of task files)\n");
        return 2;
    }
    if (cli_backend_setup("models eval", o->threads, 1)) return 2;
    int64_t id;
    if (find_ref(r, o->pos[0], &id)) return 1;
    return run_suite(r, id, o->suite, o, 0);
}

/* ---------------------------------------------------------------- dispatch */

int cmd_models(int argc, char **argv) {
    /* --registry FILE anywhere; the first other argument is the subcommand */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    if (!rest) return 1;
    int n = 0, rc = 2;
    for (int i = 0; i < argc; i++) {
        int missing = 0;
        const char *v = opt_value(argc, argv, &i, "--registry", &missing);
        if (v) g_registry = v;
        else if (missing) goto done;
        else rest[n++] = argv[i];
    }
    if (n == 0 || !strcmp(rest[0], "-h") || !strcmp(rest[0], "--help") || !strcmp(rest[0], "help")) {
        models_usage(n == 0 ? stderr : stdout);
        rc = n == 0 ? 2 : 0;
        goto done;
    }
    static const struct {
        const char *name, *allowed, *pos_help;
        int n_pos;
    } cmds[] = {
        {"list", "--json --where --tag --all ", "no argument", 0},
        {"show", "--json ", "ID|PATH", 1},
        {"lineage", "--json ", "ID|PATH", 1},
        {"diff", "--json ", "two checkpoints A B", 2},
        {"tag", "--move ", "ID NAME", 2},
        {"untag", "", "ID NAME", 2},
        {"gc", "--keep-best --keep-tagged --metric --higher-is-better --dry-run --json ", "no argument", 0},
        {"relink", "--json ", "a directory DIR", 1},
        {"eval", "--suite --json --batch --threads ", "ID|PATH", 1},
        {"compare", "--suite --json --batch --threads ", "two checkpoints A B", 2},
        {"promote", "--tag --require ", "ID|PATH", 1},
    };
    int k = -1;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(rest[0], cmds[i].name)) k = (int)i;
    if (k < 0) {
        fprintf(stderr, "llmforge models: unknown command '%s' (see llmforge models --help)\n", rest[0]);
        goto done;
    }
    opts o;
    int prc = parse_opts(rest[0], n - 1, rest + 1, cmds[k].allowed, 4, &o);
    if (prc) {
        rc = prc < 0 ? 0 : prc;
        goto done;
    }
    if ((rc = need_pos(rest[0], &o, cmds[k].n_pos, cmds[k].pos_help)) != 0) goto done;
    lf_registry *r = NULL;
    if (open_registry(&r)) {
        rc = 1;
        goto done;
    }
    switch (k) {
    case 0: rc = models_list(r, &o); break;
    case 1: rc = models_show(r, &o); break;
    case 2: rc = models_lineage(r, &o); break;
    case 3: rc = models_diff(r, &o); break;
    case 4: rc = models_tag(r, &o, 0); break;
    case 5: rc = models_tag(r, &o, 1); break;
    case 6: rc = models_gc(r, &o); break;
    case 7: rc = models_relink(r, &o); break;
    case 8: rc = models_eval(r, &o); break;
    case 9: rc = models_compare(r, &o); break;
    default: rc = models_promote(r, &o); break;
    }
    lf_registry_close(r);
done:
    free(rest);
    return rc;
}
