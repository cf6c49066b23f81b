/*
 * Hugging Face model directories (include/llmforge/hf.h): config.json plus
 * model.safetensors, or shards listed by model.safetensors.index.json.
 *
 * Why ourselves: transformers is the only reader of these directories and it
 * is Python; the format is small (two JSON files and safetensors, whose
 * reader is src/core/safetensors.c), and llmforge has no Python at run time.
 *
 * What config.json means is each architecture's (lf__hf_family in its
 * table, model_impl.h): the model_type values it reads, its keys as a table
 * of fields, its refusals, its tensor-name prefix and ignored buffers. This
 * file is the driver: it finds the family by model_type, reads the keys,
 * runs the family's check, and matches tensors by name; it names no family.
 *
 * References: transformers' modeling_utils.py (save_pretrained: shard names
 * model-%05d-of-%05d.safetensors, SAFE_WEIGHTS_INDEX_NAME with
 * {"metadata": {"total_size": ...}, "weight_map": {tensor: shard}}), and
 * modeling_rope_utils.py (4.x writes rope_theta and rope_scaling at the top
 * level, 5.x writes rope_parameters {rope_type, rope_theta, the type's
 * keys}; lf__hf_rope reads both, rope.c computes the tables); each family's
 * configuration class is cited in its file.
 *
 * Invariants:
 *   - after lf_hf_open, e[0 .. n) holds every tensor of every shard, sorted by
 *     name with no name twice, and every weight_map entry names the shard its
 *     tensor is in; lookups are binary searches over e;
 *   - shard names come from a possibly hostile index: each is one plain file
 *     name (no '/', not "." or ".."), so nothing outside the directory is
 *     opened; the number of shards and of index entries is capped;
 *   - tensor data stays in the read-only mappings of src/core/safetensors.c
 *     and may be unaligned: every read goes through memcpy;
 *   - the handle is never written after open, so readers need no lock.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "llmforge/hf.h"
#include "llmforge/safetensors.h"
#include "model/model_impl.h"

#define HF_CONFIG_CAP (16u << 20)
#define HF_INDEX_CAP (64u << 20)
#define HF_MAX_SHARDS 65536
#define HF_MAX_INDEX_ENTRIES (1 << 22)
#define HF_SIZE_MAX (1 << 30) /* any size field of a config */
#define HF_CONFIG_NAME "config.json"
#define HF_SINGLE_NAME "model.safetensors"
#define HF_INDEX_NAME "model.safetensors.index.json"

typedef struct hf_entry {
    const char *name; /* into the shard's tensor table */
    int shard;
    const lf_st_tensor *t;
} hf_entry;

struct lf_hf_model {
    char *dir;
    char *config_text;
    cJSON *config;
    const char *model_type; /* into config */
    int n_shards;
    char **shard_names;
    lf_safetensors **shards;
    int n;
    hf_entry *e; /* sorted by name */
};

/* dir + "/" + name, lf_alloc'd; NULL (NOMEM recorded) on failure. */
static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = lf_alloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static char *str_dup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = lf_alloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* *exists = 1 when a regular file is at path, 0 when nothing is; anything
 * else there (a directory, a FIFO) or a failing stat is an error. */
static lf_status file_exists(const char *path, int *exists) {
    struct stat st;
    *exists = 0;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR) return LF_OK;
        return lf_fail(LF_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) return lf_fail(LF_ERR_FORMAT, "'%s' is not a regular file", path);
    *exists = 1;
    return LF_OK;
}

/* Read and parse a JSON object file. what names it in messages. */
static lf_status read_json(const char *path, size_t cap, char **text_out, cJSON **json_out) {
    char *text = NULL;
    size_t len = 0;
    *json_out = NULL;
    if (text_out) *text_out = NULL;
    lf_status s = lf_file_read_all(path, cap, &text, &len);
    if (s != LF_OK) return s;
    if (strlen(text) != len) {
        lf_free(text);
        return lf_fail(LF_ERR_FORMAT, "'%s': contains a NUL byte", path);
    }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
    if (!j) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        lf_free(text);
        return lf_fail(LF_ERR_FORMAT, "'%s': not valid JSON (near byte %zu)", path, at);
    }
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        lf_free(text);
        return lf_fail(LF_ERR_FORMAT, "'%s': not a JSON object", path);
    }
    *json_out = j;
    if (text_out) *text_out = text;
    else lf_free(text);
    return LF_OK;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const hf_entry *)a)->name, ((const hf_entry *)b)->name);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const hf_entry *find_entry(const lf_hf_model *h, const char *name) {
    if (!h || !name) return NULL;
    hf_entry key = {.name = name};
    return bsearch(&key, h->e, (size_t)h->n, sizeof *h->e, cmp_entry);
}

static int find_shard(const lf_hf_model *h, const char *name) {
    const char *const *hit = bsearch(&name, h->shard_names, (size_t)h->n_shards, sizeof *h->shard_names, cmp_str_ptr);
    return hit ? (int)(hit - (const char *const *)h->shard_names) : -1;
}

static int plain_file_name(const char *s) {
    return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0 && strlen(s) < 4096;
}

/* The shard list of an index: unique names, sorted. Each weight_map value is
 * checked here. */
static lf_status index_shards(lf_hf_model *h, const char *ipath, const cJSON *wm) {
    int count = cJSON_GetArraySize(wm);
    if (count <= 0) return lf_fail(LF_ERR_FORMAT, "'%s': weight_map is empty", ipath);
    if (count > HF_MAX_INDEX_ENTRIES)
        return lf_fail(LF_ERR_RANGE, "'%s': weight_map has %d entries, more than the %d allowed", ipath, count,
                       HF_MAX_INDEX_ENTRIES);
    const char **names = lf_alloc((size_t)count * sizeof *names);
    if (!names) return LF_ERR_NOMEM;
    int k = 0;
    lf_status s = LF_OK;
    for (const cJSON *it = wm->child; it; it = it->next) {
        if (!it->string || !it->string[0]) {
            s = lf_fail(LF_ERR_FORMAT, "'%s': weight_map has an empty tensor name", ipath);
            goto done;
        }
        if (!cJSON_IsString(it) || !it->valuestring) {
            s = lf_fail(LF_ERR_FORMAT, "'%s': weight_map['%.200s'] is not a string", ipath, it->string);
            goto done;
        }
        if (!plain_file_name(it->valuestring)) {
            s = lf_fail(LF_ERR_FORMAT, "'%s': weight_map['%.200s'] = '%.200s' is not a file name inside the directory",
                        ipath, it->string, it->valuestring);
            goto done;
        }
        names[k++] = it->valuestring;
    }
    qsort(names, (size_t)k, sizeof *names, cmp_str_ptr);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (u == 0 || strcmp(names[u - 1], names[i]) != 0) names[u++] = names[i];
    if (u > HF_MAX_SHARDS) {
        s = lf_fail(LF_ERR_RANGE, "'%s': %d shards, more than the %d allowed", ipath, u, HF_MAX_SHARDS);
        goto done;
    }
    h->shard_names = lf_calloc((size_t)u * sizeof *h->shard_names);
    h->shards = lf_calloc((size_t)u * sizeof *h->shards);
    if (!h->shard_names || !h->shards) {
        s = LF_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < u; i++) {
        if (!(h->shard_names[i] = str_dup(names[i]))) {
            s = LF_ERR_NOMEM;
            goto done;
        }
        h->n_shards = i + 1;
    }
done:
    lf_free(names);
    return s;
}

/* Open every shard; from_index says whether the index named them. */
static lf_status open_shards(lf_hf_model *h, int from_index) {
    for (int i = 0; i < h->n_shards; i++) {
        char *p = path_join(h->dir, h->shard_names[i]);
        if (!p) return LF_ERR_NOMEM;
        int ex = 0;
        lf_status s = file_exists(p, &ex);
        if (s != LF_OK || !ex) {
            if (s != LF_OK) lf_error_prefix("hf model '%s'", h->dir);
            else if (from_index)
                s = lf_fail(LF_ERR_NOT_FOUND, "hf model '%s': %s names shard '%s', which does not exist", h->dir,
                            HF_INDEX_NAME, h->shard_names[i]);
            else s = lf_fail(LF_ERR_NOT_FOUND, "hf model '%s': '%s' does not exist", h->dir, h->shard_names[i]);
            lf_free(p);
            return s;
        }
        s = lf_safetensors_open(&h->shards[i], p);
        lf_free(p);
        if (s != LF_OK) {
            lf_error_prefix("hf model '%s': shard '%s'", h->dir, h->shard_names[i]);
            return s;
        }
    }
    return LF_OK;
}

/* The sorted tensor table over all shards; a name in two shards is refused. */
static lf_status build_table(lf_hf_model *h) {
    size_t total = 0;
    for (int i = 0; i < h->n_shards; i++) total += (size_t)lf_safetensors_count(h->shards[i]);
    if (total > (size_t)HF_MAX_INDEX_ENTRIES)
        return lf_fail(LF_ERR_RANGE, "hf model '%s': %zu tensors, more than the %d allowed", h->dir, total,
                       HF_MAX_INDEX_ENTRIES);
    h->e = lf_alloc((total ? total : 1) * sizeof *h->e);
    if (!h->e) return LF_ERR_NOMEM;
    size_t k = 0;
    for (int i = 0; i < h->n_shards; i++)
        for (int j = 0; j < lf_safetensors_count(h->shards[i]); j++) {
            const lf_st_tensor *t = lf_safetensors_at(h->shards[i], j);
            h->e[k++] = (hf_entry){.name = t->name, .shard = i, .t = t};
        }
    qsort(h->e, k, sizeof *h->e, cmp_entry);
    for (size_t i = 1; i < k; i++)
        if (strcmp(h->e[i - 1].name, h->e[i].name) == 0) {
            int a = h->e[i - 1].shard, b = h->e[i].shard;
            if (a > b) {
                int tmp = a;
                a = b;
                b = tmp;
            }
            return lf_fail(LF_ERR_MISMATCH, "hf model '%s': tensor '%.200s' is in two shards, '%s' and '%s'", h->dir,
                           h->e[i].name, h->shard_names[a], h->shard_names[b]);
        }
    h->n = (int)k;
    return LF_OK;
}

/* Every weight_map entry must name the shard that holds its tensor. */
static lf_status check_index(const lf_hf_model *h, const cJSON *wm) {
    for (const cJSON *it = wm->child; it; it = it->next) {
        int sh = find_shard(h, it->valuestring);
        const hf_entry *e = find_entry(h, it->string);
        if (sh < 0) return lf_fail(LF_ERR_INTERNAL, "hf model '%s': shard '%s' lost", h->dir, it->valuestring);
        if (!e)
            return lf_fail(LF_ERR_MISMATCH, "hf model '%s': %s puts tensor '%.200s' in '%s', which does not hold it",
                           h->dir, HF_INDEX_NAME, it->string, it->valuestring);
        if (e->shard != sh)
            return lf_fail(LF_ERR_MISMATCH, "hf model '%s': %s puts tensor '%.200s' in '%s', but '%s' holds it", h->dir,
                           HF_INDEX_NAME, it->string, it->valuestring, h->shard_names[e->shard]);
    }
    return LF_OK;
}

lf_status lf_hf_open(lf_hf_model **out, const char *dir) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_hf_open: out is NULL");
    *out = NULL;
    if (!dir || !dir[0]) return lf_fail(LF_ERR_INVALID_ARG, "lf_hf_open: no directory given");
    lf_status s = LF_OK;
    char *cpath = NULL, *ipath = NULL, *spath = NULL;
    cJSON *index = NULL;
    lf_hf_model *h = lf_calloc(sizeof *h);
    if (!h) return LF_ERR_NOMEM;
    if (!(h->dir = str_dup(dir)) || !(cpath = path_join(dir, HF_CONFIG_NAME)) ||
        !(ipath = path_join(dir, HF_INDEX_NAME)) || !(spath = path_join(dir, HF_SINGLE_NAME))) {
        s = LF_ERR_NOMEM;
        goto fail;
    }

    struct stat dst;
    if (stat(dir, &dst) != 0 || !S_ISDIR(dst.st_mode)) {
        s = lf_fail(LF_ERR_NOT_FOUND, "hf model '%s': not a directory", dir);
        goto fail;
    }
    int ex = 0;
    if ((s = file_exists(cpath, &ex)) != LF_OK) goto fail_prefix;
    if (!ex) {
        s = lf_fail(LF_ERR_NOT_FOUND, "hf model '%s': %s missing", dir, HF_CONFIG_NAME);
        goto fail;
    }
    if ((s = read_json(cpath, HF_CONFIG_CAP, &h->config_text, &h->config)) != LF_OK) goto fail_prefix;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(h->config, "model_type");
    if (!cJSON_IsString(mt) || !mt->valuestring || !mt->valuestring[0]) {
        s = lf_fail(LF_ERR_FORMAT, "'%s': 'model_type' missing or not a non-empty string", cpath);
        goto fail;
    }
    h->model_type = mt->valuestring;

    int has_index = 0;
    if ((s = file_exists(ipath, &has_index)) != LF_OK) goto fail_prefix;
    if (has_index) {
        if ((s = read_json(ipath, HF_INDEX_CAP, NULL, &index)) != LF_OK) goto fail;
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
        if (!cJSON_IsObject(wm)) {
            s = lf_fail(LF_ERR_FORMAT, "'%s': 'weight_map' missing or not an object", ipath);
            goto fail;
        }
        if ((s = index_shards(h, ipath, wm)) != LF_OK) goto fail;
        if ((s = open_shards(h, 1)) != LF_OK) goto fail;
        if ((s = build_table(h)) != LF_OK) goto fail;
        if ((s = check_index(h, wm)) != LF_OK) goto fail;
    } else {
        int single = 0;
        if ((s = file_exists(spath, &single)) != LF_OK) goto fail_prefix;
        if (!single) {
            s = lf_fail(LF_ERR_NOT_FOUND, "hf model '%s': neither %s nor %s", dir, HF_SINGLE_NAME, HF_INDEX_NAME);
            goto fail;
        }
        h->shard_names = lf_calloc(sizeof *h->shard_names);
        h->shards = lf_calloc(sizeof *h->shards);
        if (!h->shard_names || !h->shards || !(h->shard_names[0] = str_dup(HF_SINGLE_NAME))) {
            s = LF_ERR_NOMEM;
            goto fail;
        }
        h->n_shards = 1;
        if ((s = open_shards(h, 0)) != LF_OK) goto fail;
        if ((s = build_table(h)) != LF_OK) goto fail;
    }
    cJSON_Delete(index);
    lf_free(cpath);
    lf_free(ipath);
    lf_free(spath);
    *out = h;
    return LF_OK;

fail_prefix:
    lf_error_prefix("hf model '%s'", dir);
fail:
    cJSON_Delete(index);
    lf_free(cpath);
    lf_free(ipath);
    lf_free(spath);
    lf_hf_close(h);
    if (s == LF_OK) s = LF_ERR_INTERNAL;
    return s;
}

void lf_hf_close(lf_hf_model *h) {
    if (!h) return;
    for (int i = 0; i < h->n_shards; i++) {
        if (h->shards) lf_safetensors_close(h->shards[i]);
        if (h->shard_names) lf_free(h->shard_names[i]);
    }
    lf_free(h->shards);
    lf_free(h->shard_names);
    lf_free(h->e);
    cJSON_Delete(h->config);
    lf_free(h->config_text);
    lf_free(h->dir);
    lf_free(h);
}

const char *lf_hf_model_type(const lf_hf_model *h) { return h ? h->model_type : NULL; }
const char *lf_hf_config_text(const lf_hf_model *h) { return h ? h->config_text : NULL; }
const char *lf_hf_dir(const lf_hf_model *h) { return h ? h->dir : NULL; }
int lf_hf_num_tensors(const lf_hf_model *h) { return h ? h->n : 0; }

const char *lf_hf_tensor_name(const lf_hf_model *h, int i) {
    if (!h || i < 0 || i >= h->n) return NULL;
    return h->e[i].name;
}

const char *lf_hf_tensor_file(const lf_hf_model *h, const char *name) {
    const hf_entry *e = find_entry(h, name);
    return e ? h->shard_names[e->shard] : NULL;
}

/* ================================================================ config.json */

struct lf__hf_config_reader {
    const cJSON *root;
    char where[600]; /* "'DIR/config.json'" for messages */
};
typedef lf__hf_cfg cfg_ctx;

const char *lf__hf_where(const lf__hf_cfg *c) { return c->where; }

/* NULL for a key that is absent or null. */
static const cJSON *cfg_get(const cJSON *obj, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    return (!j || cJSON_IsNull(j)) ? NULL : j;
}

/* An integer in [1, HF_SIZE_MAX]; absent or null: dflt when !required. */
lf_status lf__hf_int(const lf__hf_cfg *c, const char *key, int required, int dflt, int *out) {
    const int lo = 1, hi = HF_SIZE_MAX;
    const cJSON *j = cfg_get(c->root, key);
    if (!j) {
        if (required) return lf_fail(LF_ERR_CONFIG, "%s: '%s' missing", c->where, key);
        *out = dflt;
        return LF_OK;
    }
    if (!cJSON_IsNumber(j)) return lf_fail(LF_ERR_CONFIG, "%s: '%s' is not a number", c->where, key);
    double d = j->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d))
        return lf_fail(LF_ERR_CONFIG, "%s: '%s' = %.17g is not an integer in [%d, %d]", c->where, key, d, lo, hi);
    *out = (int)d;
    return LF_OK;
}

/* A finite number in (lo, hi]; absent or null: dflt. */
static lf_status cfg_num_in(const cfg_ctx *c, const cJSON *obj, const char *key, const char *shown, double dflt,
                            double lo, double hi, double *out) {
    const cJSON *j = cfg_get(obj, key);
    if (!j) {
        *out = dflt;
        return LF_OK;
    }
    if (!cJSON_IsNumber(j)) return lf_fail(LF_ERR_CONFIG, "%s: '%s' is not a number", c->where, shown);
    double d = j->valuedouble;
    if (!(d > lo && d <= hi))
        return lf_fail(LF_ERR_CONFIG, "%s: '%s' = %.17g is out of range (%g, %g]", c->where, shown, d, lo, hi);
    *out = d;
    return LF_OK;
}

lf_status lf__hf_num(const lf__hf_cfg *c, const char *key, double dflt, double *out) {
    return cfg_num_in(c, c->root, key, key, dflt, 0, 1, out);
}

lf_status lf__hf_bool(const lf__hf_cfg *c, const char *key, int dflt, int *out) {
    const cJSON *j = cfg_get(c->root, key);
    if (!j) {
        *out = dflt;
        return LF_OK;
    }
    if (!cJSON_IsBool(j)) return lf_fail(LF_ERR_CONFIG, "%s: '%s' is not true or false", c->where, key);
    *out = cJSON_IsTrue(j) ? 1 : 0;
    return LF_OK;
}

lf_status lf__hf_zero(const lf__hf_cfg *c, const char *key, const char *why) {
    const cJSON *j = cfg_get(c->root, key);
    if (!j) return LF_OK;
    if (!cJSON_IsNumber(j)) return lf_fail(LF_ERR_CONFIG, "%s: '%s' is not a number", c->where, key);
    if (j->valuedouble != 0)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: '%s' is %g; %s", c->where, key, j->valuedouble, why);
    return LF_OK;
}

lf_status lf__hf_all_str(const lf__hf_cfg *c, const char *key, const char *value, const char *why) {
    const cJSON *j = cfg_get(c->root, key);
    if (!j) return LF_OK;
    if (!cJSON_IsArray(j)) return lf_fail(LF_ERR_CONFIG, "%s: '%s' is not a list", c->where, key);
    int i = 0;
    for (const cJSON *it = j->child; it; it = it->next, i++) {
        if (!cJSON_IsString(it) || !it->valuestring)
            return lf_fail(LF_ERR_CONFIG, "%s: '%s[%d]' is not a string", c->where, key, i);
        if (strcmp(it->valuestring, value) != 0)
            return lf_fail(LF_ERR_UNSUPPORTED, "%s: '%s[%d]' is '%.100s'; %s", c->where, key, i, it->valuestring, why);
    }
    return LF_OK;
}

/* A string value, or dflt when absent or null. */
lf_status lf__hf_str(const lf__hf_cfg *c, const char *key, const char *dflt, const char **out) {
    const cJSON *j = cfg_get(c->root, key);
    if (!j) {
        *out = dflt;
        return LF_OK;
    }
    if (!cJSON_IsString(j) || !j->valuestring) return lf_fail(LF_ERR_CONFIG, "%s: '%s' is not a string", c->where, key);
    *out = j->valuestring;
    return LF_OK;
}

#define CFG_TRY(expr) \
    do { \
        lf_status s_ = (expr); \
        if (s_ != LF_OK) return s_; \
    } while (0)

/* One key of a RoPE object: which lf_rope_scaling field it fills and which
 * types read it (a bit per lf_rope_type). */
typedef struct rope_key {
    const char *name;
    int kind; /* 0 number (> 0), 1 integer, 2 bool */
    size_t off;
    unsigned types;
} rope_key;
#define RT(t) (1u << (t))
#define RO(f) offsetof(lf_rope_scaling, f)
static const rope_key k_rope_keys[] = {
    {"factor", 0, RO(factor), RT(LF_ROPE_LINEAR) | RT(LF_ROPE_DYNAMIC) | RT(LF_ROPE_YARN) | RT(LF_ROPE_LLAMA3)},
    {"low_freq_factor", 0, RO(low_freq_factor), RT(LF_ROPE_LLAMA3)},
    {"high_freq_factor", 0, RO(high_freq_factor), RT(LF_ROPE_LLAMA3)},
    /* read by llama3 and yarn; transformers 4.x wrote it for others too, where it has no effect */
    {"original_max_position_embeddings", 1, RO(original_max_position_embeddings), ~0u},
    {"attention_factor", 0, RO(attention_factor), RT(LF_ROPE_YARN)},
    {"beta_fast", 0, RO(beta_fast), RT(LF_ROPE_YARN)},
    {"beta_slow", 0, RO(beta_slow), RT(LF_ROPE_YARN)},
    {"mscale", 0, RO(mscale), RT(LF_ROPE_YARN)},
    {"mscale_all_dim", 0, RO(mscale_all_dim), RT(LF_ROPE_YARN)},
    {"truncate", 2, RO(no_truncate), RT(LF_ROPE_YARN)},
};
#undef RO

/* partial_rotary_factor: Llama-family attention rotates whole heads. */
static lf_status rope_partial(const cfg_ctx *c, const cJSON *obj, const char *shown) {
    double f = 1;
    CFG_TRY(cfg_num_in(c, obj, "partial_rotary_factor", shown, 1, 0, 1, &f));
    if (f != 1)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "%s: '%s' is %g; partial rotary embeddings are not supported (this family rotates whole heads)",
                       c->where, shown, f);
    return LF_OK;
}

/* The keys of the RoPE object `o` (spelled `name` in messages) into *r and
 * *theta (its rope_theta, 0 when absent). */
static lf_status rope_object(const cfg_ctx *c, const cJSON *o, const char *name, lf_rope_scaling *r, double *theta) {
    char shown[160];
    const cJSON *ty = cfg_get(o, "rope_type");
    if (!ty) ty = cfg_get(o, "type"); /* transformers 4.x's older spelling */
    if (ty) {
        if (!cJSON_IsString(ty) || !ty->valuestring)
            return lf_fail(LF_ERR_CONFIG, "%s: '%s.%s' is not a string", c->where, name, ty->string);
        if (!lf__rope_type_parse(ty->valuestring, &r->type))
            return lf_fail(LF_ERR_UNSUPPORTED,
                           "%s: '%s.%s' is '%.100s'; llmforge implements RoPE types default, linear, dynamic, "
                           "yarn and llama3",
                           c->where, name, ty->string, ty->valuestring);
    }
    for (const cJSON *it = o->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        snprintf(shown, sizeof shown, "%s.%.100s", name, k);
        if (!strcmp(k, "rope_type") || !strcmp(k, "type") || cJSON_IsNull(it)) continue;
        if (!strcmp(k, "rope_theta")) {
            CFG_TRY(cfg_num_in(c, o, k, shown, 0, 0, 1e30, theta));
            continue;
        }
        if (!strcmp(k, "partial_rotary_factor")) {
            CFG_TRY(rope_partial(c, o, shown));
            continue;
        }
        const rope_key *rk = NULL;
        for (size_t i = 0; i < sizeof k_rope_keys / sizeof k_rope_keys[0]; i++)
            if (!strcmp(k, k_rope_keys[i].name)) rk = &k_rope_keys[i];
        if (!rk || !(rk->types & RT(r->type)))
            return lf_fail(LF_ERR_UNSUPPORTED, "%s: '%s' is not a key of RoPE type '%s' that llmforge implements",
                           c->where, shown, lf__rope_type_name(r->type));
        void *field = (unsigned char *)r + rk->off;
        if (rk->kind == 0) {
            CFG_TRY(cfg_num_in(c, o, k, shown, 0, 0, 1e30, (double *)field));
        } else if (rk->kind == 1) {
            double d = 0;
            CFG_TRY(cfg_num_in(c, o, k, shown, 0, 0, HF_SIZE_MAX, &d));
            if (d != floor(d)) return lf_fail(LF_ERR_CONFIG, "%s: '%s' = %.17g is not an integer", c->where, shown, d);
            *(int *)field = (int)d;
        } else {
            if (!cJSON_IsBool(it)) return lf_fail(LF_ERR_CONFIG, "%s: '%s' is not true or false", c->where, shown);
            *(int *)field = cJSON_IsFalse(it); /* no_truncate */
        }
    }
    return LF_OK;
}

/* What the type needs (transformers raises KeyError without it). */
static lf_status rope_required(const cfg_ctx *c, const char *name, const lf_rope_scaling *r) {
    const char *miss = NULL;
    if (r->type != LF_ROPE_DEFAULT && r->type != LF_ROPE_YARN && r->factor == 0) miss = "factor";
    if (r->type == LF_ROPE_LLAMA3 && r->low_freq_factor == 0) miss = "low_freq_factor";
    if (r->type == LF_ROPE_LLAMA3 && r->high_freq_factor == 0) miss = "high_freq_factor";
    if (miss)
        return lf_fail(LF_ERR_CONFIG, "%s: RoPE type '%s' needs '%s.%s'", c->where, lf__rope_type_name(r->type), name,
                       miss);
    if (r->factor != 0 && r->factor < 1)
        return lf_fail(LF_ERR_UNSUPPORTED, "%s: '%s.factor' is %g; llmforge implements factors >= 1", c->where, name,
                       r->factor);
    if (r->type == LF_ROPE_LLAMA3 && !(r->high_freq_factor > r->low_freq_factor))
        return lf_fail(LF_ERR_CONFIG, "%s: '%s.high_freq_factor' %g is not above 'low_freq_factor' %g", c->where, name,
                       r->high_freq_factor, r->low_freq_factor);
    return LF_OK;
}

/* RoPE from either spelling, as transformers' convert_rope_params_to_dict
 * and standardize_rope_params read it: the object is rope_scaling when
 * set (4.x), else rope_parameters (5.x); its rope_theta wins over the top
 * level's (they must agree here); llama3 and yarn take
 * original_max_position_embeddings from the top level, else the object,
 * else max_position_embeddings. m->block_size holds max_position_embeddings. */
lf_status lf__hf_rope(const lf__hf_cfg *c, lf_model_config *m) {
    lf_rope_scaling r;
    memset(&r, 0, sizeof r);
    const cJSON *scaling = cfg_get(c->root, "rope_scaling"), *params = cfg_get(c->root, "rope_parameters");
    if (scaling && !cJSON_IsObject(scaling))
        return lf_fail(LF_ERR_CONFIG, "%s: 'rope_scaling' is not an object", c->where);
    if (params && !cJSON_IsObject(params))
        return lf_fail(LF_ERR_CONFIG, "%s: 'rope_parameters' is not an object", c->where);
    const int use_scaling = scaling && scaling->child; /* an empty object is no scaling */
    const cJSON *o = use_scaling ? scaling : params;
    const char *name = use_scaling ? "rope_scaling" : "rope_parameters";
    double top = 0, nested = 0;
    CFG_TRY(cfg_num_in(c, c->root, "rope_theta", "rope_theta", 0, 0, 1e30, &top));
    CFG_TRY(rope_partial(c, c->root, "partial_rotary_factor"));
    if (o) CFG_TRY(rope_object(c, o, name, &r, &nested));
    if (top > 0 && nested > 0 && top != nested)
        return lf_fail(LF_ERR_CONFIG, "%s: 'rope_theta' (%.17g) and '%s.rope_theta' (%.17g) disagree", c->where, top,
                       name, nested);
    CFG_TRY(rope_required(c, name, &r));
    if (r.type == LF_ROPE_LLAMA3 || r.type == LF_ROPE_YARN) {
        int top_orig = 0;
        CFG_TRY(lf__hf_int(c, "original_max_position_embeddings", 0, 0, &top_orig));
        if (top_orig) r.original_max_position_embeddings = top_orig;
        if (!r.original_max_position_embeddings) r.original_max_position_embeddings = m->block_size;
    } else {
        r.original_max_position_embeddings = 0; /* read by no other type */
    }
    if (r.type == LF_ROPE_DYNAMIC || r.type == LF_ROPE_YARN) r.max_position_embeddings = m->block_size;
    const double theta = nested > 0 ? nested : top > 0 ? top : 10000.0;
    if (!((float)theta > 1.0f && isfinite((float)theta)))
        return lf_fail(LF_ERR_CONFIG, "%s: 'rope_theta' %.17g must be a finite number > 1 (as a float)", c->where,
                       theta);
    m->rope_theta = (float)theta;
    m->rope = r;
    return LF_OK;
}

int lf_model_config_extras_default(const lf_model_config *c) {
    return c->head_dim == 0 && !c->out_bias && !c->mlp_bias && !c->qk_norm && !c->fused_proj &&
           c->rope.type == LF_ROPE_DEFAULT;
}

int lf_model_config_extras_json(const lf_model_config *c, char *buf, size_t cap) {
    char rope[512];
    lf__rope_hf_json(c, rope, sizeof rope);
    const int maxpos = c->rope.max_position_embeddings > 0 ? c->rope.max_position_embeddings : c->block_size;
    char hd[24] = "null"; /* 0: n_embd / n_head */
    if (c->head_dim > 0) snprintf(hd, sizeof hd, "%d", c->head_dim);
    /* the Qwen3 and Phi-3 flags only when set: older extras stay byte for byte */
    return snprintf(buf, cap,
                    "{\"head_dim\": %s, \"out_bias\": %s, \"mlp_bias\": %s, %s%s\"rope_theta\": %.9g, "
                    "\"max_position_embeddings\": %d, \"rope_scaling\": %s}",
                    hd, c->out_bias ? "true" : "false", c->mlp_bias ? "true" : "false",
                    c->qk_norm ? "\"qk_norm\": true, " : "", c->fused_proj ? "\"fused_proj\": true, " : "",
                    (double)c->rope_theta, maxpos, rope);
}

lf_status lf_model_config_extras_parse(const char *json, const char *where, lf_model_config *out) {
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lf_fail(LF_ERR_CONFIG, "%s: the model's extra fields are not a JSON object", where);
    }
    cfg_ctx c = {.root = root};
    snprintf(c.where, sizeof c.where, "%s", where);
    lf_model_config m = *out;
    int hd = 0;
    lf_status st = lf__hf_int(&c, "head_dim", 0, 0, &hd);
    if (st == LF_OK) st = lf__hf_bool(&c, "out_bias", 0, &m.out_bias);
    if (st == LF_OK) st = lf__hf_bool(&c, "mlp_bias", 0, &m.mlp_bias);
    if (st == LF_OK) st = lf__hf_bool(&c, "qk_norm", 0, &m.qk_norm);
    if (st == LF_OK) st = lf__hf_bool(&c, "fused_proj", 0, &m.fused_proj);
    if (st == LF_OK) st = lf__hf_int(&c, "max_position_embeddings", 0, out->block_size, &m.block_size);
    if (st == LF_OK) st = lf__hf_rope(&c, &m); /* reads max_position_embeddings from m.block_size */
    cJSON_Delete(root);
    if (st != LF_OK) return st;
    out->head_dim = hd;
    out->out_bias = m.out_bias;
    out->mlp_bias = m.mlp_bias;
    out->qk_norm = m.qk_norm;
    out->fused_proj = m.fused_proj;
    out->rope_theta = m.rope_theta;
    out->rope = m.rope;
    return LF_OK;
}

/* One table of keys into m (lf__hf_key). */
static lf_status read_keys(const cfg_ctx *c, const lf__hf_family *f, lf_model_config *m) {
    unsigned char *base = (unsigned char *)m;
    for (int i = 0; i < f->n_keys; i++) {
        const lf__hf_key *k = &f->keys[i];
        void *field = base + k->field;
        if (k->type == LF__HF_INT) {
            int dflt = (int)k->dflt;
            if (k->dflt_field != LF__HF_NO_FIELD) memcpy(&dflt, base + k->dflt_field, sizeof dflt);
            CFG_TRY(lf__hf_int(c, k->key, k->required, dflt, (int *)field));
        } else if (k->type == LF__HF_NUM) {
            double d = 0;
            CFG_TRY(lf__hf_num(c, k->key, k->dflt, &d));
            *(float *)field = (float)d;
        } else {
            CFG_TRY(lf__hf_bool(c, k->key, (int)k->dflt, (int *)field));
        }
    }
    m->padded_vocab_size = m->vocab_size;
    return LF_OK;
}

lf_status lf_hf_model_config(const lf_hf_model *h, lf_model_config *out) {
    if (!h || !out) return lf_fail(LF_ERR_INVALID_ARG, "lf_hf_model_config: NULL argument");
    memset(out, 0, sizeof *out);
    cfg_ctx c = {.root = h->config};
    snprintf(c.where, sizeof c.where, "'%s/%s'", h->dir, HF_CONFIG_NAME);
    for (int a = 0; a < lf_arch_count(); a++) {
        const lf__hf_family *f = lf__arch_of((lf_arch)a)->hf;
        for (int v = 0; f && f->model_types[v]; v++)
            if (strcmp(h->model_type, f->model_types[v]) == 0) {
                lf_model_config m;
                memset(&m, 0, sizeof m);
                m.arch = (lf_arch)a;
                lf_status s = read_keys(&c, f, &m);
                if (s == LF_OK) s = f->check(&c, v, &m);
                if (s == LF_OK) *out = m;
                return s;
            }
    }
    /* the supported model_types, the last registered family's first */
    char supported[512] = "";
    size_t at = 0;
    for (int a = lf_arch_count() - 1; a >= 0; a--) {
        const lf__hf_family *f = lf__arch_of((lf_arch)a)->hf;
        for (int v = 0; f && f->model_types[v] && at < sizeof supported; v++)
            at += (size_t)snprintf(supported + at, sizeof supported - at, "%s%s", at ? ", " : "", f->model_types[v]);
    }
    for (int a = 0; a < lf_arch_count(); a++) { /* a kin type a family names, with what it lacks */
        const lf__hf_family *f = lf__arch_of((lf_arch)a)->hf;
        for (int v = 0; f && f->refused && f->refused[v].model_type; v++)
            if (strcmp(h->model_type, f->refused[v].model_type) == 0)
                return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'model_type' '%.100s' is not supported: %s (supported: %s)",
                               c.where, h->model_type, f->refused[v].why, supported);
    }
    return lf_fail(LF_ERR_UNSUPPORTED, "%s: 'model_type' '%.100s' is not supported (supported: %s)", c.where,
                   h->model_type, supported);
}

/* ================================================================ tensors */

lf_status lf_hf_tensor_shape(const lf_hf_model *h, const char *name, int *ndim, int64_t shape[4]) {
    if (!h || !name || !ndim || !shape) return lf_fail(LF_ERR_INVALID_ARG, "lf_hf_tensor_shape: NULL argument");
    const hf_entry *e = find_entry(h, name);
    if (!e) return lf_fail(LF_ERR_NOT_FOUND, "hf model '%s': no tensor '%.200s'", h->dir, name);
    if (e->t->ndim > 4)
        return lf_fail(LF_ERR_UNSUPPORTED, "hf model '%s': tensor '%.200s' in '%s' has %d dimensions (at most 4)",
                       h->dir, name, h->shard_names[e->shard], e->t->ndim);
    *ndim = e->t->ndim;
    for (int d = 0; d < 4; d++) shape[d] = d < e->t->ndim ? e->t->shape[d] : 0;
    return LF_OK;
}

/* IEEE binary16 -> binary32, exact for every input (the 2^11 mantissa fits
 * in 24 bits, the exponent range in 8). */
static uint32_t f16_to_f32_bits(uint16_t x) {
    uint32_t sign = (uint32_t)(x >> 15) << 31;
    uint32_t e = (x >> 10) & 0x1fu, m = x & 0x3ffu;
    if (e == 0x1f) return sign | 0x7f800000u | (m << 13); /* inf, NaN (payload and quiet bit kept) */
    if (e != 0) return sign | ((e + 112u) << 23) | (m << 13);
    if (m == 0) return sign; /* signed zero */
    /* subnormal m * 2^-24: shift the leading one up to bit 10 */
    uint32_t exp = 113;
    while (!(m & 0x400u)) {
        m <<= 1;
        exp--;
    }
    return sign | (exp << 23) | ((m & 0x3ffu) << 13);
}

lf_status lf_hf_read_f32(const lf_hf_model *h, const char *name, float *dst, size_t numel) {
    if (!h || !name || (!dst && numel)) return lf_fail(LF_ERR_INVALID_ARG, "lf_hf_read_f32: NULL argument");
    const hf_entry *e = find_entry(h, name);
    if (!e) return lf_fail(LF_ERR_NOT_FOUND, "hf model '%s': no tensor '%.200s'", h->dir, name);
    const lf_st_tensor *t = e->t;
    const char *file = h->shard_names[e->shard];
    if (t->numel != numel)
        return lf_fail(LF_ERR_MISMATCH,
                       "hf model '%s': tensor '%.200s' in '%s' has %zu elements, the caller expects %zu", h->dir, name,
                       file, t->numel, numel);
    const unsigned char *src = t->data;
    switch (t->dtype) {
    case LF_ST_F32:
        if (numel) memcpy(dst, src, numel * sizeof(float));
        return LF_OK;
    case LF_ST_BF16:
        for (size_t i = 0; i < numel; i++) {
            uint16_t v;
            memcpy(&v, src + 2 * i, 2);
            uint32_t u = (uint32_t)v << 16;
            memcpy(dst + i, &u, 4);
        }
        return LF_OK;
    case LF_ST_F16:
        for (size_t i = 0; i < numel; i++) {
            uint16_t v;
            memcpy(&v, src + 2 * i, 2);
            uint32_t u = f16_to_f32_bits(v);
            memcpy(dst + i, &u, 4);
        }
        return LF_OK;
    default:
        return lf_fail(LF_ERR_UNSUPPORTED, "hf model '%s': tensor '%.200s' in '%s' is %s (F32, BF16 or F16 only)",
                       h->dir, name, file, lf_st_dtype_name(t->dtype));
    }
}

/* ---------------------------------------------------------------- into a model's parameters */

/* A tensor the architectures read as nothing (lf__hf_family.ignored, of
 * every architecture: a directory is read by names, whichever family
 * wrote it). */
int lf_hf_tensor_ignored(const char *nm, int ndim) {
    if (!nm) return 0;
    const size_t l = strlen(nm);
    for (int a = 0; a < lf_arch_count(); a++) {
        const lf__hf_family *f = lf__arch_of((lf_arch)a)->hf;
        for (int i = 0; f && f->ignored && f->ignored[i].pattern; i++) {
            const char *pat = f->ignored[i].pattern;
            if (ndim >= 0 && f->ignored[i].ndim && f->ignored[i].ndim != ndim) continue;
            if (pat[0] == '*') {
                const size_t n = strlen(pat + 1);
                if (l > n && !strcmp(nm + l - n, pat + 1)) return 1;
            } else if (strstr(nm, pat)) {
                return 1;
            }
        }
    }
    return 0;
}

const char *lf_hf_tensor_unprefixed(const char *nm) {
    if (!nm) return nm;
    for (int a = 0; a < lf_arch_count(); a++) {
        const lf__hf_family *f = lf__arch_of((lf_arch)a)->hf;
        if (f && f->tensor_prefix && f->tensor_prefix[0] && !strncmp(nm, f->tensor_prefix, strlen(f->tensor_prefix)))
            return nm + strlen(f->tensor_prefix);
    }
    return nm;
}

/* The weights of an HF directory into host params by name (or under an
 * architecture's tensor_prefix, GPT-2's "transformer."), converted to fp32;
 * every missing tensor, shape mismatch and unexpected tensor is listed.
 * Ignored: a tied model's lm_head.weight and the architectures' ignored
 * buffers. */
lf_status lf_hf_load_params(const lf_hf_model *hf, const lf_param_info *table, int count, int tied, float *params) {
    int nt = lf_hf_num_tensors(hf);
    unsigned char *used = calloc((size_t)nt + 1, 1);
    if (!used) return lf_fail(LF_ERR_NOMEM, "out of memory");
    char bad[4096] = "";
    size_t len = 0;
    int n_bad = 0;
    lf_status st = LF_OK;
    for (int i = 0; i < count && st == LF_OK; i++) {
        const lf_param_info *p = &table[i];
        char name[LF_PARAM_NAME_MAX + 16];
        int ndim;
        int64_t shape[4];
        snprintf(name, sizeof name, "%s", p->name);
        int found = lf_hf_tensor_shape(hf, name, &ndim, shape) == LF_OK;
        for (int a = 0; !found && a < lf_arch_count(); a++) {
            const lf__hf_family *f = lf__arch_of((lf_arch)a)->hf;
            if (!f || !f->tensor_prefix) continue;
            snprintf(name, sizeof name, "%s%s", f->tensor_prefix, p->name);
            found = lf_hf_tensor_shape(hf, name, &ndim, shape) == LF_OK;
        }
        if (!found) {
            if (len < sizeof bad)
                len += (size_t)snprintf(bad + len, sizeof bad - len, "%smissing %s", n_bad ? "; " : "", p->name);
            n_bad++;
            continue;
        }
        for (int k = 0; k < nt; k++)
            if (!strcmp(lf_hf_tensor_name(hf, k), name)) used[k] = 1;
        int ok = ndim == p->ndim;
        for (int d = 0; ok && d < ndim; d++) ok = shape[d] == p->shape[d];
        if (!ok) {
            if (len < sizeof bad)
                len += (size_t)snprintf(bad + len, sizeof bad - len,
                                        "%s%s has shape [%lld, %lld], the model [%lld, %lld]", n_bad ? "; " : "", name,
                                        (long long)shape[0], (long long)(ndim > 1 ? shape[1] : 0),
                                        (long long)p->shape[0], (long long)p->shape[1]);
            n_bad++;
            continue;
        }
        st = lf_hf_read_f32(hf, name, params + p->offset, p->numel);
    }
    for (int k = 0; k < nt && st == LF_OK; k++) {
        const char *nm = lf_hf_tensor_name(hf, k);
        if (used[k] || lf_hf_tensor_ignored(nm, -1) || (tied && !strcmp(nm, "lm_head.weight"))) continue;
        if (len < sizeof bad)
            len += (size_t)snprintf(bad + len, sizeof bad - len, "%sunexpected %s", n_bad ? "; " : "", nm);
        n_bad++;
    }
    free(used);
    if (st != LF_OK) return st;
    if (n_bad)
        return lf_fail(LF_ERR_MISMATCH, "'%s': %d tensor%s do not match the model: %s", lf_hf_dir(hf), n_bad,
                       n_bad == 1 ? "" : "s", bad);
    return LF_OK;
}
