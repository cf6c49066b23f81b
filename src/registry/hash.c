/*
 * Identities of the files a run is made of (datasets, tokenizers, models,
 * checkpoints) as SHA-256 digests, and the small file-system helpers the
 * registry needs (a checkpoint's recorded file list, removing a directory
 * tree, reading ckpt/latest).
 *
 * Invariants:
 *  - A checkpoint's hashes are the ones its trainer_state.json records
 *    ("files": {name: {"sha256", "bytes"}}, written by lf_checkpoint_commit
 *    and verified by every load): nothing large is hashed again when a
 *    checkpoint is recorded. Its combined hash is the SHA-256 of the sorted
 *    "name sha256\n" lines, so it names the whole file set.
 *  - A model's identity is the SHA-256 of its weights file, so a checkpoint's
 *    model.safetensors, the same file copied elsewhere, and that checkpoint
 *    directory given to --init-from all hash the same.
 *  - Directory walks never follow symlinks and are depth-limited.
 *
 * Reference: FIPS 180-4 (SHA-256, through lf_sha256_*).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "registry/registry_impl.h"

#define STATE_CAP ((size_t)256 << 20)

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted names of the regular files in dir ending in `suffix` (at most cap). */
static lf_status list_files(const char *dir, const char *suffix, char ***names, int *n, int cap) {
    *names = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "cannot open directory '%s': %s", dir,
                       strerror(errno));
    char **v = calloc((size_t)cap, sizeof *v);
    if (!v) {
        closedir(d);
        return lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", dir);
    }
    size_t ls = strlen(suffix);
    struct dirent *de;
    lf_status st = LF_OK;
    while ((de = readdir(d)) != NULL) {
        size_t ln = strlen(de->d_name);
        if (ln < ls || strcmp(de->d_name + ln - ls, suffix) != 0 || de->d_name[0] == '.') continue;
        char p[REG_PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (!is_file(p)) continue;
        if (*n == cap) {
            st = lf_fail(LF_ERR_RANGE, "directory '%s' holds more than %d *%s files", dir, cap, suffix);
            break;
        }
        if (!(v[*n] = strdup(de->d_name))) {
            st = lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", dir);
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (st != LF_OK) {
        for (int i = 0; i < *n; i++) free(v[i]);
        free(v);
        *n = 0;
        return st;
    }
    qsort(v, (size_t)*n, sizeof *v, cmp_str);
    *names = v;
    return LF_OK;
}

static void free_names(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* SHA-256 over "name <x>\n" lines, x = the file's SHA-256 (hash_files) or
 * its size. */
static lf_status hash_listing(const char *dir, char **names, int n, int by_size, char hex[65]) {
    size_t cap = (size_t)n * (256 + 80) + 1, at = 0;
    char *buf = malloc(cap);
    if (!buf) return lf_fail(LF_ERR_NOMEM, "out of memory hashing '%s'", dir);
    lf_status st = LF_OK;
    for (int i = 0; i < n && st == LF_OK; i++) {
        char p[REG_PATH_MAX], x[65];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (by_size) {
            struct stat sb;
            if (stat(p, &sb) != 0) st = lf_fail(LF_ERR_IO, "cannot stat '%s': %s", p, strerror(errno));
            else snprintf(x, sizeof x, "%lld", (long long)sb.st_size);
        } else {
            st = lf_sha256_file_hex(p, x);
        }
        if (st == LF_OK) at += (size_t)snprintf(buf + at, cap - at, "%.255s %s\n", names[i], x);
    }
    if (st == LF_OK) lf_sha256_hex(buf, at, hex);
    free(buf);
    return st;
}

lf_status lf_registry_hash_dataset(const char *dir, char hex[65]) {
    if (!dir || !hex) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_hash_dataset: NULL argument");
    char p[REG_PATH_MAX];
    snprintf(p, sizeof p, "%s/dataset.json", dir);
    if (is_file(p)) return lf_sha256_file_hex(p, hex);
    char **names;
    int n;
    lf_status st = list_files(dir, ".bin", &names, &n, 100000);
    if (st != LF_OK) return st;
    if (n == 0) st = lf_fail(LF_ERR_NOT_FOUND, "dataset '%s' holds neither dataset.json nor .bin files", dir);
    else st = hash_listing(dir, names, n, 1, hex);
    free_names(names, n);
    return st;
}

lf_status lf_registry_hash_tokenizer(const char *spec, char hex[65]) {
    if (!spec || !hex) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_hash_tokenizer: NULL argument");
    static const char *const file_kinds[] = {"char:", "tiktoken:", "bpe:", "hf:"};
    for (size_t i = 0; i < sizeof file_kinds / sizeof file_kinds[0]; i++)
        if (!strncmp(spec, file_kinds[i], strlen(file_kinds[i]))) {
            lf_status st = lf_sha256_file_hex(spec + strlen(file_kinds[i]), hex);
            if (st != LF_OK) lf_error_prefix("tokenizer '%s'", spec);
            return st;
        }
    if (!strncmp(spec, "gpt2:", 5)) {
        char *names[2] = {"encoder.json", "vocab.bpe"};
        lf_status st = hash_listing(spec + 5, names, 2, 0, hex);
        if (st != LF_OK) lf_error_prefix("tokenizer '%s'", spec);
        return st;
    }
    return lf_fail(LF_ERR_INVALID_ARG, "tokenizer spec '%s' has no known kind (char:, gpt2:, tiktoken:, bpe:, hf:)",
                   spec);
}

int lf__reg_is_hf_dir(const char *path) {
    char a[REG_PATH_MAX], b[REG_PATH_MAX];
    snprintf(a, sizeof a, "%s/config.json", path);
    snprintf(b, sizeof b, "%s/trainer_state.json", path);
    return is_dir(path) && is_file(a) && !is_file(b);
}

lf_status lf_registry_hash_model(const char *path, char hex[65], int *is_hf) {
    if (!path || !hex) return lf_fail(LF_ERR_INVALID_ARG, "lf_registry_hash_model: NULL argument");
    if (is_hf) *is_hf = 0;
    if (is_file(path)) return lf_sha256_file_hex(path, hex);
    if (!is_dir(path)) return lf_fail(LF_ERR_NOT_FOUND, "model '%s' is neither a file nor a directory", path);
    if (is_hf) *is_hf = lf__reg_is_hf_dir(path);
    char p[REG_PATH_MAX];
    snprintf(p, sizeof p, "%s/model.safetensors", path);
    if (is_file(p)) return lf_sha256_file_hex(p, hex);
    char **names;
    int n;
    lf_status st = list_files(path, ".safetensors", &names, &n, 100000);
    if (st != LF_OK) return st;
    if (n == 0) st = lf_fail(LF_ERR_NOT_FOUND, "model directory '%s' holds no .safetensors file", path);
    else st = hash_listing(path, names, n, 0, hex);
    free_names(names, n);
    return st;
}

/* ---------------------------------------------------------------- checkpoints */

lf_status lf__reg_ckpt_files(const char *dir, char sha[65], char model_sha[65], char **files_json) {
    if (files_json) *files_json = NULL;
    char p[REG_PATH_MAX];
    snprintf(p, sizeof p, "%s/trainer_state.json", dir);
    char *text = NULL;
    lf_status st = lf_file_read_all(p, STATE_CAP, &text, NULL);
    if (st != LF_OK) {
        lf_error_prefix("checkpoint '%s'", dir);
        return st;
    }
    cJSON *o = cJSON_Parse(text);
    lf_free(text);
    cJSON *files = o ? cJSON_GetObjectItemCaseSensitive(o, "files") : NULL;
    if (!cJSON_IsObject(files) || !files->child) {
        cJSON_Delete(o);
        return lf_fail(LF_ERR_FORMAT, "checkpoint '%s': trainer_state.json is not JSON or lists no \"files\"", dir);
    }
    int n = cJSON_GetArraySize(files);
    char **lines = calloc((size_t)n, sizeof *lines);
    if (!lines) {
        cJSON_Delete(o);
        return lf_fail(LF_ERR_NOMEM, "out of memory reading checkpoint '%s'", dir);
    }
    int k = 0;
    model_sha[0] = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(f, "sha256");
        if (!cJSON_IsString(h) || strlen(h->valuestring) != 64 || strlen(f->string) > 255) {
            st = lf_fail(LF_ERR_FORMAT, "checkpoint '%s': trainer_state.json: bad \"files\" entry '%.200s'", dir,
                         f->string);
            break;
        }
        if (!strcmp(f->string, "model.safetensors")) snprintf(model_sha, 65, "%s", h->valuestring);
        char *line = malloc(strlen(f->string) + 67);
        if (!line) {
            st = lf_fail(LF_ERR_NOMEM, "out of memory reading checkpoint '%s'", dir);
            break;
        }
        sprintf(line, "%s %s\n", f->string, h->valuestring);
        lines[k++] = line;
    }
    if (st == LF_OK && !model_sha[0])
        st = lf_fail(LF_ERR_FORMAT, "checkpoint '%s': trainer_state.json records no model.safetensors", dir);
    if (st == LF_OK) {
        qsort(lines, (size_t)k, sizeof *lines, cmp_str);
        size_t len = 0;
        for (int i = 0; i < k; i++) len += strlen(lines[i]);
        char *buf = malloc(len + 1);
        if (!buf) {
            st = lf_fail(LF_ERR_NOMEM, "out of memory reading checkpoint '%s'", dir);
        } else {
            size_t at = 0;
            for (int i = 0; i < k; i++) {
                size_t l = strlen(lines[i]);
                memcpy(buf + at, lines[i], l);
                at += l;
            }
            lf_sha256_hex(buf, at, sha);
            free(buf);
        }
    }
    if (st == LF_OK && files_json) st = lf__reg_print(files, files_json);
    for (int i = 0; i < k; i++) free(lines[i]);
    free(lines);
    cJSON_Delete(o);
    return st;
}

lf_status lf__reg_print(cJSON *item, char **out) {
    char *s = lf_json_print(item, 0);
    if (!s) return lf_fail(LF_ERR_NOMEM, "out of memory printing JSON");
    size_t n = strlen(s) + 1;
    *out = lf_alloc(n);
    if (*out) memcpy(*out, s, n);
    cJSON_free(s);
    return *out ? LF_OK : lf_fail(LF_ERR_NOMEM, "out of memory printing JSON");
}

void lf__reg_latest_name(const char *ckpt_root, char *out, size_t cap) {
    out[0] = 0;
    char p[REG_PATH_MAX];
    snprintf(p, sizeof p, "%s/latest", ckpt_root);
    char *text = NULL;
    size_t len = 0;
    if (lf_file_read_all(p, 4096, &text, &len) != LF_OK) return;
    size_t b = 0, e = len;
    while (b < e && (text[b] == ' ' || text[b] == '\n' || text[b] == '\r' || text[b] == '\t')) b++;
    while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\n' || text[e - 1] == '\r' || text[e - 1] == '\t')) e--;
    if (e > b && e - b < cap && !memchr(text + b, '/', e - b)) {
        memcpy(out, text + b, e - b);
        out[e - b] = 0;
    }
    lf_free(text);
}
