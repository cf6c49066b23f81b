/*
 * Which files of an input directory are data, and which split each one is
 * (lf__dataset_dir_expand; contract in data_impl.h, user guide in
 * docs/data.md "Directories and Hugging Face datasets"). The layouts, tried
 * in this order at the directory's top:
 *
 *   dataset_dict.json   `datasets` DatasetDict.save_to_disk: {"splits": [...]}
 *                       and one Dataset directory per split
 *   state.json          `datasets` Dataset.save_to_disk: "_data_files"
 *                       (Arrow IPC stream files) and "_split"
 *   README.md with a    a hub repository: the files the config's data_files
 *   configs: header     patterns match (hub_configs.c reads the header)
 *   anything else       every file of the tree, the split read off its path
 *                       (train-00000-of-00002.parquet, data/validation/x.jsonl)
 *
 * Patterns are matched as the hub matches them: relative to the repository
 * (or the config's data_dir), '*' and '?' within one path component, '**'
 * across components (fnmatch without FNM_PATHNAME then).
 *
 * Invariants: the tree is walked in byte-wise name order per directory,
 * following symbolic links (a hub cache's snapshot directory is links into
 * its blob store) down to LF_DATASET_DIR_MAX_DEPTH levels and at most
 * LF_DATASET_DIR_MAX_FILES entries; every entry left out is logged exactly
 * once with its reason; nothing here opens a data file except to look for a
 * NUL byte in a text file (a binary beside texts).
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "data_impl.h"

#define LF_DATASET_DIR_MAX_DEPTH 32
#define LF_DATASET_DIR_MAX_FILES ((size_t)1 << 20)
#define META_MAX_BYTES ((size_t)16 << 20)

typedef struct entry {
    char *rel, *path;
    const char *why; /* NULL: a candidate; else why it is left out */
    int split;
    char *split_name;
    int picked;
} entry;

typedef struct tree {
    const char *dir;
    entry *e;
    size_t n, cap;
    /* the directories being walked, root first: a link back to one of them is a cycle */
    dev_t up_dev[LF_DATASET_DIR_MAX_DEPTH + 1];
    ino_t up_ino[LF_DATASET_DIR_MAX_DEPTH + 1];
} tree;

/* ---------------------------------------------------------------- split names */
static int word_eq(const char *w, size_t n, const char *name) { return strlen(name) == n && !strncasecmp(w, name, n); }

int lf__split_of_name(const char *w, size_t n) {
    static const char *const names[3][4] = {{"train", "training", NULL, NULL},
                                            {"validation", "valid", "val", "dev"},
                                            {"test", "testing", "eval", "evaluation"}};
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 4 && names[s][k]; k++)
            if (word_eq(w, n, names[s][k])) return s;
    return LF__SPLIT_NONE;
}

static int is_alnum(unsigned char c) { return (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z'); }

/* The first word of s[0, n) that names a split. */
static int split_of_words(const char *s, size_t n, const char **word, size_t *wlen) {
    size_t i = 0;
    while (i < n) {
        while (i < n && !is_alnum((unsigned char)s[i])) i++;
        size_t j = i;
        while (j < n && is_alnum((unsigned char)s[j])) j++;
        int sp = j > i ? lf__split_of_name(s + i, j - i) : LF__SPLIT_NONE;
        if (sp != LF__SPLIT_NONE) {
            if (word) *word = s + i;
            if (wlen) *wlen = j - i;
            return sp;
        }
        i = j;
    }
    return LF__SPLIT_NONE;
}

int lf__split_of_path(const char *rel, int dirs_too, const char **word, size_t *wlen) {
    const char *base = strrchr(rel, '/');
    base = base ? base + 1 : rel;
    const char *dot = strchr(base, '.'); /* the extensions name no split */
    int s = split_of_words(base, dot && dot != base ? (size_t)(dot - base) : strlen(base), word, wlen);
    if (s != LF__SPLIT_NONE || !dirs_too) return s;
    for (const char *end = base; end > rel;) { /* the nearest directory first */
        const char *stop = end - 1, *start = stop;
        while (start > rel && start[-1] != '/') start--;
        if ((s = split_of_words(start, (size_t)(stop - start), word, wlen)) != LF__SPLIT_NONE) return s;
        end = start;
    }
    return LF__SPLIT_NONE;
}

/* ---------------------------------------------------------------- the tree */
static lf_status add_entry(tree *t, const char *rel, const char *why) {
    if (t->n == LF_DATASET_DIR_MAX_FILES)
        return lf_fail(LF_ERR_RANGE, "input directory '%s' holds more than %zu entries", t->dir,
                       LF_DATASET_DIR_MAX_FILES);
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        entry *ne = realloc(t->e, cap * sizeof *ne);
        if (!ne) return lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", t->dir);
        t->e = ne;
        t->cap = cap;
    }
    entry *e = &t->e[t->n];
    memset(e, 0, sizeof *e);
    e->split = LF__SPLIT_NONE;
    e->why = why;
    e->rel = malloc(strlen(rel) + 1);
    e->path = lf__path_join(t->dir, rel);
    if (!e->rel || !e->path) {
        free(e->rel);
        free(e->path);
        return lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", t->dir);
    }
    strcpy(e->rel, rel);
    t->n++;
    return LF_OK;
}

static int on_path(const tree *t, int depth, const struct stat *sb) {
    for (int d = 0; d <= depth; d++)
        if (t->up_dev[d] == sb->st_dev && t->up_ino[d] == sb->st_ino) return 1;
    return 0;
}

/* The entries under prefix (depth levels below the root, whose directories
 * are t->up_*[0..depth]). */
static lf_status walk(tree *t, const char *prefix, int depth) {
    char *abs = prefix[0] ? lf__path_join(t->dir, prefix) : lf__path_join(NULL, t->dir);
    char **names = NULL;
    size_t n = 0;
    if (!abs) return lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", t->dir);
    lf_status st = lf__list_dir_sorted(abs, 0, &names, &n);
    for (size_t i = 0; i < n && st == LF_OK; i++) {
        char *rel = prefix[0] ? lf__path_join(prefix, names[i]) : lf__path_join(NULL, names[i]);
        char *path = rel ? lf__path_join(t->dir, rel) : NULL;
        struct stat sb;
        if (!rel || !path) st = lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", t->dir);
        else if (names[i][0] == '.') st = add_entry(t, rel, "a hidden name");
        else if (stat(path, &sb) != 0) st = add_entry(t, rel, "cannot stat it (a broken link?)");
        else if (S_ISDIR(sb.st_mode) && on_path(t, depth, &sb))
            st = add_entry(t, rel, "a link back to a directory it is inside (a cycle)");
        else if (S_ISDIR(sb.st_mode) && depth + 1 >= LF_DATASET_DIR_MAX_DEPTH)
            st = add_entry(t, rel, "a directory nested too deep");
        else if (S_ISDIR(sb.st_mode)) {
            t->up_dev[depth + 1] = sb.st_dev;
            t->up_ino[depth + 1] = sb.st_ino;
            st = walk(t, rel, depth + 1);
        } else if (!S_ISREG(sb.st_mode)) st = add_entry(t, rel, "not a regular file");
        else st = add_entry(t, rel, NULL);
        free(rel);
        free(path);
    }
    lf__free_names(names, n);
    free(abs);
    return st;
}

static entry *find_rel(tree *t, const char *rel) {
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->e[i].rel, rel)) return &t->e[i];
    return NULL;
}

static lf_status pick(tree *t, entry *e, int split, const char *split_name) {
    e->picked = 1;
    e->split = split;
    if (split_name && !(e->split_name = malloc(strlen(split_name) + 1)))
        return lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", t->dir);
    if (split_name) strcpy(e->split_name, split_name);
    return LF_OK;
}

/* ---------------------------------------------------------------- save_to_disk */
static lf_status read_json(tree *t, const char *rel, cJSON **out) {
    char *path = lf__path_join(t->dir, rel), *text = NULL;
    size_t len = 0;
    if (!path) return lf_fail(LF_ERR_NOMEM, "out of memory");
    lf_status st = lf_file_read_all(path, META_MAX_BYTES, &text, &len);
    if (st == LF_OK && !(*out = cJSON_ParseWithLength(text, len)))
        st = lf_fail(LF_ERR_FORMAT, "%s: not valid JSON", path);
    lf_free(text);
    free(path);
    return st;
}

/* One Dataset directory (prefix "" or a split's subdirectory): the files
 * its state.json lists, with its _split (or split_name). */
static lf_status read_state(tree *t, const char *prefix, const char *split_name) {
    char *rel = prefix[0] ? lf__path_join(prefix, "state.json") : lf__path_join(NULL, "state.json");
    cJSON *root = NULL;
    lf_status st = rel ? read_json(t, rel, &root) : lf_fail(LF_ERR_NOMEM, "out of memory");
    if (st != LF_OK) goto done;
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "_data_files"),
                *sp = cJSON_GetObjectItemCaseSensitive(root, "_split");
    if (!split_name && cJSON_IsString(sp)) split_name = sp->valuestring;
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) == 0) {
        st = lf_fail(LF_ERR_FORMAT, "%s/%s: \"_data_files\" is not a non-empty list of {\"filename\": ...}", t->dir,
                     rel);
        goto done;
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(f, "filename");
        if (!cJSON_IsString(fn) || !fn->valuestring[0] || strstr(fn->valuestring, "..") || fn->valuestring[0] == '/') {
            st = lf_fail(LF_ERR_FORMAT, "%s/%s: a \"_data_files\" entry has no plain \"filename\"", t->dir, rel);
            break;
        }
        char *frel = prefix[0] ? lf__path_join(prefix, fn->valuestring) : lf__path_join(NULL, fn->valuestring);
        entry *e = frel ? find_rel(t, frel) : NULL;
        if (!frel) st = lf_fail(LF_ERR_NOMEM, "out of memory");
        else if (!e || e->why)
            st = lf_fail(LF_ERR_NOT_FOUND, "%s/%s names the data file '%s', which %s", t->dir, rel, frel,
                         e ? e->why : "does not exist");
        else
            st = pick(t, e, split_name ? lf__split_of_name(split_name, strlen(split_name)) : LF__SPLIT_NONE,
                      split_name);
        free(frel);
        if (st != LF_OK) break;
    }
done:
    cJSON_Delete(root);
    free(rel);
    return st;
}

static lf_status read_dataset_dict(tree *t) {
    cJSON *root = NULL;
    lf_status st = read_json(t, "dataset_dict.json", &root);
    if (st != LF_OK) return st;
    const cJSON *splits = cJSON_GetObjectItemCaseSensitive(root, "splits"), *s;
    if (!cJSON_IsArray(splits) || cJSON_GetArraySize(splits) == 0)
        st = lf_fail(LF_ERR_FORMAT, "%s/dataset_dict.json: \"splits\" is not a non-empty list of names", t->dir);
    else cJSON_ArrayForEach(s, splits) {
            if (!cJSON_IsString(s) || !s->valuestring[0] || strchr(s->valuestring, '/') || s->valuestring[0] == '.') {
                st = lf_fail(LF_ERR_FORMAT, "%s/dataset_dict.json: a split name is not a plain directory name", t->dir);
                break;
            }
            if ((st = read_state(t, s->valuestring, s->valuestring)) != LF_OK) break;
        }
    cJSON_Delete(root);
    return st;
}

/* ---------------------------------------------------------------- hub configs */
static const lf__hub_config *choose_config(const char *readme, const lf__hub_config *c, size_t n, const char *subset,
                                           lf_status *st) {
    char names[512] = "";
    for (size_t i = 0; i < n; i++) {
        if (subset && !strcmp(c[i].name, subset)) return &c[i];
        size_t at = strlen(names);
        snprintf(names + at, sizeof names - at, "%s'%s'", i ? ", " : "", c[i].name);
    }
    if (subset) {
        *st = lf_fail(LF_ERR_NOT_FOUND, "%s declares no config '%s' (its configs: %s)", readme, subset, names);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (c[i].is_default) return &c[i];
    for (size_t i = 0; i < n; i++)
        if (!strcmp(c[i].name, "default")) return &c[i];
    if (n == 1) return &c[0];
    *st = lf_fail(LF_ERR_INVALID_ARG, "%s declares the configs %s and none is the default: choose one (--subset NAME)",
                  readme, names);
    return NULL;
}

static lf_status apply_config(tree *t, const char *readme, const lf__hub_config *c) {
    for (size_t k = 0; k < c->n_files; k++) {
        const lf__hub_files *f = &c->files[k];
        for (size_t j = 0; j < f->n_patterns; j++) {
            char *pat = c->data_dir ? lf__path_join(c->data_dir, f->patterns[j]) : lf__path_join(NULL, f->patterns[j]);
            if (!pat) return lf_fail(LF_ERR_NOMEM, "out of memory");
            const char *pp = pat[0] == '.' && pat[1] == '/' ? pat + 2 : pat;
            const int flags = strstr(pp, "**") ? 0 : FNM_PATHNAME;
            size_t hits = 0;
            lf_status st = LF_OK;
            for (size_t i = 0; i < t->n && st == LF_OK; i++) {
                entry *e = &t->e[i];
                if (e->why || fnmatch(pp, e->rel, flags) != 0) continue;
                hits++;
                if (!e->picked) st = pick(t, e, lf__split_of_name(f->split, strlen(f->split)), f->split);
            }
            if (st == LF_OK && hits == 0)
                st = lf_fail(LF_ERR_NOT_FOUND,
                             "%s: config '%s', split '%s': data_files path '%s' matches no file in '%s'", readme,
                             c->name, f->split, pat, t->dir);
            free(pat);
            if (st != LF_OK) return st;
        }
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- plain trees */
static int is_metadata(const char *rel) {
    static const char *const meta[] = {"dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json"};
    const char *base = strrchr(rel, '/');
    base = base ? base + 1 : rel;
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++)
        if (!strcmp(base, meta[i])) return 1;
    return 0;
}

static lf_status has_nul(const char *path, int *yes) {
    *yes = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return lf_fail(LF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char buf[1 << 14];
    size_t n;
    while (!*yes && (n = fread(buf, 1, sizeof buf, f)) > 0)
        if (memchr(buf, 0, n)) *yes = 1;
    int err = ferror(f);
    fclose(f);
    return err ? lf_fail(LF_ERR_IO, "%s: read failed", path) : LF_OK;
}

/* JSON and JSON Lines names stand for each other (a .json file of lines). */
static int same_kind(lf_input_format a, lf_input_format b) {
    if (a == LF_INPUT_JSON) a = LF_INPUT_JSONL;
    if (b == LF_INPUT_JSON) b = LF_INPUT_JSONL;
    return a == b;
}

static lf_status pick_plain(tree *t, lf_input_format format, const entry *readme) {
    lf_input_format *fmt = malloc((t->n ? t->n : 1) * sizeof *fmt);
    if (!fmt) return lf_fail(LF_ERR_NOMEM, "out of memory");
    int records = 0, others = 0;
    for (size_t i = 0; i < t->n; i++) {
        entry *e = &t->e[i];
        fmt[i] = format != LF_INPUT_AUTO ? format : lf__input_format_of_name(e->rel);
        if (e != readme && e->rel[0] != '.') others = 1; /* anything beside README.md makes it a card */
        if (e->why) continue;
        if (format == LF_INPUT_AUTO && is_metadata(e->rel)) e->why = "datasets metadata, not records";
        else if (fmt[i] == LF_INPUT_AUTO) e->why = "its name tells no input format";
        else if (e != readme) records |= fmt[i] != LF_INPUT_TEXT;
    }
    const int hub = readme && others; /* a dataset card beside other files */
    lf_status st = LF_OK;
    for (size_t i = 0; i < t->n && st == LF_OK; i++) {
        entry *e = &t->e[i];
        if (e->why) continue;
        if (hub && e == readme) {
            e->why = "the dataset card of the directory";
            continue;
        }
        if (hub && records && fmt[i] == LF_INPUT_TEXT && format == LF_INPUT_AUTO) {
            e->why = "a text file beside record files; give it as an --input of its own to read it";
            continue;
        }
        if (hub && format != LF_INPUT_AUTO && !same_kind(lf__input_format_of_name(e->rel), format)) {
            e->why = "in a dataset directory, its name says it is not of the --format given";
            continue;
        }
        int bin = 0;
        if (fmt[i] == LF_INPUT_TEXT && (st = has_nul(e->path, &bin)) != LF_OK) break;
        if (bin) {
            e->why = "a NUL byte: binary";
            continue;
        }
        const char *w = NULL;
        size_t wl = 0;
        int sp = lf__split_of_path(e->rel, 1, &w, &wl);
        char name[64] = "";
        if (w) snprintf(name, sizeof name, "%.*s", (int)(wl < 63 ? wl : 63), w);
        st = pick(t, e, sp, w ? name : NULL);
    }
    free(fmt);
    return st;
}

/* ---------------------------------------------------------------- entry */
static void tree_free(tree *t) {
    for (size_t i = 0; i < t->n; i++) {
        free(t->e[i].rel);
        free(t->e[i].path);
        free(t->e[i].split_name);
    }
    free(t->e);
}

void lf__input_files_free(lf__input_file *f, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(f[i].path);
        free(f[i].split_name);
    }
    free(f);
}

lf_status lf__dataset_dir_expand(const char *dir, lf_input_format format, const char *subset, lf__input_file **out,
                                 size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    tree t = {.dir = dir};
    lf__hub_config *cfgs = NULL;
    size_t nc = 0;
    const char *mode_why = NULL;
    struct stat root;
    lf_status st = LF_OK;
    if (stat(dir, &root) != 0) {
        st = lf_fail(LF_ERR_IO, "input directory '%s': cannot stat: %s", dir, strerror(errno));
        goto done;
    }
    t.up_dev[0] = root.st_dev;
    t.up_ino[0] = root.st_ino;
    st = walk(&t, "", 0);
    if (st != LF_OK) goto done;
    entry *readme = NULL;
    for (size_t i = 0; i < t.n && !readme; i++)
        if (!t.e[i].why && !strcasecmp(t.e[i].rel, "README.md")) readme = &t.e[i];
    if (find_rel(&t, "dataset_dict.json")) {
        st = read_dataset_dict(&t);
        mode_why = "not a data file its dataset_dict.json and state.json files name";
    } else if (find_rel(&t, "state.json")) {
        st = read_state(&t, "", NULL);
        mode_why = "not a data file its state.json names";
    } else if (readme && (st = lf__hub_configs_read(readme->path, &cfgs, &nc)) == LF_OK && nc > 0) {
        const lf__hub_config *c = choose_config(readme->path, cfgs, nc, subset, &st);
        if (c) st = apply_config(&t, readme->path, c);
        if (c && c->name) lf_log(LF_LOG_INFO, "prepare: '%s': config '%s' of its README.md", dir, c->name);
        mode_why = "not in the data_files of the README.md's config";
    } else if (st == LF_OK) {
        if (subset)
            st = lf_fail(LF_ERR_INVALID_ARG,
                         "input directory '%s': --subset '%s' needs a README.md with a configs: header", dir, subset);
        else st = pick_plain(&t, format, readme);
    }
    if (st != LF_OK) goto done;
    size_t n = 0;
    char left[640] = "";
    size_t n_left = 0;
    for (size_t i = 0; i < t.n; i++) {
        entry *e = &t.e[i];
        if (e->picked) {
            n++;
            continue;
        }
        const char *why = e->why ? e->why : mode_why ? mode_why : "not data";
        if (!strcasecmp(e->rel, "README.md") && mode_why) why = "the dataset card of the directory";
        else if (mode_why && is_metadata(e->rel)) why = "datasets metadata, not records";
        lf_log(LF_LOG_INFO, "prepare: skipping '%s' (%s)", e->path, why);
        size_t at = strlen(left);
        if (n_left++ < 4) snprintf(left + at, sizeof left - at, "%s%s (%s)", at ? ", " : "", e->rel, why);
    }
    if (n == 0) {
        st = lf_fail(LF_ERR_INVALID_ARG, "input directory '%s' holds no input files%s%s%s", dir,
                     n_left ? "; left out: " : "", left, n_left > 4 ? ", ..." : "");
        goto done;
    }
    lf__input_file *f = calloc(n, sizeof *f);
    if (!f) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", dir);
        goto done;
    }
    size_t k = 0;
    for (size_t i = 0; i < t.n; i++) {
        entry *e = &t.e[i];
        if (!e->picked) continue;
        f[k].path = e->path;
        f[k].split = e->split;
        f[k].split_name = e->split_name;
        e->path = e->split_name = NULL;
        k++;
    }
    *out = f;
    *n_out = n;
done:
    lf__hub_configs_free(cfgs, nc);
    tree_free(&t);
    return st;
}
