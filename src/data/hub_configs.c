/*
 * The `configs:` list of a Hugging Face dataset card (the YAML header of a
 * hub repository's README.md, between a first line "---" and the next
 * "---"), as the hub and `datasets` read it:
 *
 *   configs:
 *   - config_name: default            # the name `load_dataset(repo, name)` takes
 *     default: true                   # optional: the one loaded without a name
 *     data_dir: data                  # optional: patterns are relative to it
 *     data_files:                     # a pattern, a list of them (all "train"),
 *     - split: train                  # or a list of {split, path} where path is
 *       path: data/train-*            # a pattern or a list of patterns
 *     - split: test
 *       path: [data/test-0.parquet, data/test-1.parquet]
 *
 * (data_files may also be a mapping split -> pattern(s).) Any other key of a
 * config (builder options such as `sep`, `field`, `features`) is refused by
 * its name: reading the files without it would read them differently from
 * `datasets`.
 *
 * Why libyaml (Debian's libyaml-dev, 0.2.5) rather than a reader of a YAML
 * subset: the header is written by people and by huggingface_hub, and the
 * rest of it (dataset_info, features, task lists, multi-line descriptions)
 * uses whatever YAML allows: block and flow collections, three quoting
 * styles, comments, block scalars, anchors. A subset reader would have to
 * find where `configs:` ends inside YAML it does not understand, and would
 * refuse or misread valid cards. libyaml parses the whole header into a
 * node tree; this file only walks it.
 *
 * Invariants: nothing here touches the data files; every error names the
 * README.md, and the YAML line where libyaml gives one. The header is read
 * up to LF_HUB_README_MAX_BYTES.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "data_impl.h"

#define LF_HUB_README_MAX_BYTES ((size_t)16 << 20)

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

void lf__hub_configs_free(lf__hub_config *c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(c[i].name);
        free(c[i].data_dir);
        for (size_t k = 0; k < c[i].n_files; k++) {
            free(c[i].files[k].split);
            lf__free_names(c[i].files[k].patterns, c[i].files[k].n_patterns);
        }
        free(c[i].files);
    }
    free(c);
}

/* ---------------------------------------------------------------- node helpers */
typedef struct walk {
    yaml_document_t *doc;
    const char *path;
} walk;

static const char *scalar(const walk *w, yaml_node_t *n, size_t *len) {
    (void)w;
    if (!n || n->type != YAML_SCALAR_NODE) return NULL;
    if (len) *len = n->data.scalar.length;
    return (const char *)n->data.scalar.value;
}

static unsigned long line_of(const yaml_node_t *n) { return n ? (unsigned long)n->start_mark.line + 1 : 0; }

static lf_status bad(const walk *w, const yaml_node_t *n, const char *fmt, const char *a, const char *b) {
    char what[512];
    snprintf(what, sizeof what, fmt, a ? a : "", b ? b : "");
    return lf_fail(LF_ERR_FORMAT, "%s:%lu: configs: header: %s", w->path, line_of(n) + 1, what);
}

/* A pattern or a list of patterns, appended to f->patterns. */
static lf_status add_patterns(const walk *w, yaml_node_t *n, lf__hub_files *f, const char *cfg) {
    yaml_node_t *one[1] = {n};
    yaml_node_t **it = one; /* NULL: the items of the sequence n */
    if (n && n->type == YAML_SEQUENCE_NODE) {
        it = NULL;
    } else if (!n || n->type != YAML_SCALAR_NODE) {
        return bad(w, n, "config '%s': a data_files path must be a string or a list of strings%s", cfg, "");
    }
    size_t count = it ? 1 : (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    char **np = realloc(f->patterns, (f->n_patterns + count + 1) * sizeof *np);
    if (!np) return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", w->path);
    f->patterns = np;
    for (size_t i = 0; i < count; i++) {
        yaml_node_t *e = it ? it[i] : yaml_document_get_node(w->doc, n->data.sequence.items.start[i]);
        size_t len = 0;
        const char *s = scalar(w, e, &len);
        if (!s || len == 0) return bad(w, e, "config '%s': a data_files path must be a non-empty string%s", cfg, "");
        if (!(f->patterns[f->n_patterns] = dup_n(s, len)))
            return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", w->path);
        f->n_patterns++;
    }
    return LF_OK;
}

static lf__hub_files *new_files(lf__hub_config *c, const char *split, size_t len) {
    lf__hub_files *nf = realloc(c->files, (c->n_files + 1) * sizeof *nf);
    if (!nf) return NULL;
    c->files = nf;
    lf__hub_files *f = &c->files[c->n_files];
    memset(f, 0, sizeof *f);
    if (!(f->split = dup_n(split, len))) return NULL;
    c->n_files++;
    return f;
}

/* data_files: a pattern, a list of patterns, a list of {split, path}, or a
 * mapping split -> pattern(s). */
static lf_status read_data_files(const walk *w, yaml_node_t *n, lf__hub_config *c) {
    if (n->type == YAML_MAPPING_NODE) {
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
            size_t len = 0;
            const char *k = scalar(w, yaml_document_get_node(w->doc, p->key), &len);
            if (!k) return bad(w, n, "config '%s': data_files keys must be split names%s", c->name, "");
            lf__hub_files *f = new_files(c, k, len);
            if (!f) return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", w->path);
            lf_status st = add_patterns(w, yaml_document_get_node(w->doc, p->value), f, c->name);
            if (st != LF_OK) return st;
        }
        return LF_OK;
    }
    int listed_pairs = 0;
    if (n->type == YAML_SEQUENCE_NODE) {
        yaml_node_item_t *i0 = n->data.sequence.items.start;
        listed_pairs = i0 < n->data.sequence.items.top &&
                       yaml_document_get_node(w->doc, *i0)->type == YAML_MAPPING_NODE;
    }
    if (!listed_pairs) { /* every pattern is the train split, as datasets reads it */
        lf__hub_files *f = new_files(c, "train", 5);
        if (!f) return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", w->path);
        return add_patterns(w, n, f, c->name);
    }
    for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
        yaml_node_t *e = yaml_document_get_node(w->doc, *i);
        if (e->type != YAML_MAPPING_NODE)
            return bad(w, e, "config '%s': each data_files entry must be a {split, path} mapping%s", c->name, "");
        const char *split = NULL;
        size_t slen = 0;
        yaml_node_t *path = NULL;
        for (yaml_node_pair_t *p = e->data.mapping.pairs.start; p < e->data.mapping.pairs.top; p++) {
            yaml_node_t *kn = yaml_document_get_node(w->doc, p->key), *vn = yaml_document_get_node(w->doc, p->value);
            const char *k = scalar(w, kn, NULL);
            if (k && !strcmp(k, "split")) split = scalar(w, vn, &slen);
            else if (k && !strcmp(k, "path")) path = vn;
            else
                return bad(w, kn, "config '%s': data_files key '%s' is not supported (split and path are)", c->name, k);
        }
        if (!path) return bad(w, e, "config '%s': a data_files entry has no path%s", c->name, "");
        if (!split) split = "train", slen = 5;
        lf__hub_files *f = new_files(c, split, slen);
        if (!f) return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", w->path);
        lf_status st = add_patterns(w, path, f, c->name);
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

static lf_status read_config(const walk *w, yaml_node_t *n, lf__hub_config *c, size_t index) {
    char idx[32];
    snprintf(idx, sizeof idx, "#%zu", index + 1);
    if (n->type != YAML_MAPPING_NODE) return bad(w, n, "configs entry %s is not a mapping%s", idx, "");
    yaml_node_t *files = NULL;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = yaml_document_get_node(w->doc, p->key), *vn = yaml_document_get_node(w->doc, p->value);
        size_t len = 0;
        const char *k = scalar(w, kn, NULL), *v = scalar(w, vn, &len);
        if (!k) return bad(w, kn, "configs entry %s has a key that is not a string%s", idx, "");
        if (!strcmp(k, "config_name")) {
            if (!v) return bad(w, vn, "configs entry %s: config_name must be a string%s", idx, "");
            free(c->name);
            if (!(c->name = dup_n(v, len))) return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", w->path);
        } else if (!strcmp(k, "default")) {
            if (!v || (strcmp(v, "true") && strcmp(v, "false")))
                return bad(w, vn, "configs entry %s: default must be true or false%s", idx, "");
            c->is_default = !strcmp(v, "true");
        } else if (!strcmp(k, "data_dir")) {
            if (!v) return bad(w, vn, "configs entry %s: data_dir must be a string%s", idx, "");
            free(c->data_dir);
            if (!(c->data_dir = dup_n(v, len))) return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", w->path);
        } else if (!strcmp(k, "data_files")) {
            files = vn;
        } else {
            return bad(w, kn,
                       "configs entry %s: key '%s' is not supported (llmforge reads config_name, default, data_dir "
                       "and data_files; reading the files without it would differ from datasets)",
                       idx, k);
        }
    }
    if (!c->name && !(c->name = dup_n("default", 7)))
        return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", w->path);
    if (!files) return bad(w, n, "config '%s' has no data_files%s", c->name, "");
    return read_data_files(w, files, c);
}

/* The YAML between the first line "---" and the next line "---" (or
 * "..."); *yaml NULL when the file does not start with one. */
static lf_status front_matter(const char *path, char **yaml, size_t *len, int *start_line) {
    *yaml = NULL;
    *len = 0;
    *start_line = 2;
    char *text = NULL;
    size_t n = 0;
    lf_status st = lf_file_read_all(path, LF_HUB_README_MAX_BYTES, &text, &n);
    if (st != LF_OK) return st;
    size_t at = 0;
    if (n >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) at = 3;
    if (n - at < 4 || memcmp(text + at, "---", 3) != 0 || (text[at + 3] != '\n' && text[at + 3] != '\r')) {
        lf_free(text);
        return LF_OK;
    }
    size_t body = at + 3;
    while (body < n && text[body] != '\n') body++;
    body++;
    for (size_t p = body; p < n;) {
        size_t e = p;
        while (e < n && text[e] != '\n') e++;
        size_t ll = e - p;
        if (ll && text[p + ll - 1] == '\r') ll--;
        if ((ll == 3 && (!memcmp(text + p, "---", 3) || !memcmp(text + p, "...", 3)))) {
            *yaml = dup_n(text + body, p - body);
            *len = p - body;
            lf_free(text);
            return *yaml ? LF_OK : lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", path);
        }
        p = e + 1;
    }
    lf_free(text);
    return lf_fail(LF_ERR_FORMAT, "%s: the YAML header that starts on line 1 with '---' has no closing '---'", path);
}

lf_status lf__hub_configs_read(const char *path, lf__hub_config **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    char *yaml = NULL;
    size_t len = 0;
    int first = 2;
    lf_status st = front_matter(path, &yaml, &len, &first);
    if (st != LF_OK || !yaml) return st;
    yaml_parser_t parser;
    yaml_document_t doc;
    int have_doc = 0;
    lf__hub_config *cfgs = NULL;
    size_t nc = 0;
    if (!yaml_parser_initialize(&parser)) {
        free(yaml);
        return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", path);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc)) {
        st = lf_fail(LF_ERR_FORMAT, "%s:%lu: the YAML header is not valid YAML: %s", path,
                     (unsigned long)parser.problem_mark.line + (unsigned long)first,
                     parser.problem ? parser.problem : "parse error");
        goto done;
    }
    have_doc = 1;
    walk w = {&doc, path};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) goto done; /* an empty or odd header names no configs */
    yaml_node_t *list = NULL;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        const char *k = scalar(&w, yaml_document_get_node(&doc, p->key), NULL);
        if (k && !strcmp(k, "configs")) list = yaml_document_get_node(&doc, p->value);
    }
    if (!list) goto done;
    if (list->type != YAML_SEQUENCE_NODE) {
        st = bad(&w, list, "configs must be a list of configs%s%s", "", "");
        goto done;
    }
    size_t count = (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
    if (count && !(cfgs = calloc(count, sizeof *cfgs))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", path);
        goto done;
    }
    for (size_t i = 0; i < count && st == LF_OK; i++) {
        nc++;
        st = read_config(&w, yaml_document_get_node(&doc, list->data.sequence.items.start[i]), &cfgs[i], i);
    }
done:
    if (have_doc) yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    free(yaml);
    if (st != LF_OK) {
        lf__hub_configs_free(cfgs, nc);
        return st;
    }
    *out = cfgs;
    *n_out = nc;
    return LF_OK;
}
