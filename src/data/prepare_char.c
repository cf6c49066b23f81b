/*
 * Character-level preparation, with the semantics of nanoGPT's
 * data/shakespeare_char/prepare.py:
 *
 *   chars = sorted(list(set(data)))      vocabulary: unique code points, ascending
 *   n = len(data)                        in code points, not bytes
 *   train = data[:int(n*0.9)]            int() truncates a float64 product
 *   val   = data[int(n*0.9):]
 *
 * Tiny Shakespeare gives vocab 65, train 1,003,854 and val 111,540 tokens.
 *
 * Input is a file, or a directory whose regular files (lstat: symlinks,
 * subdirectories and other kinds are skipped) are concatenated in sorted
 * byte-wise name order. In a directory a file holding a NUL byte is taken
 * for binary and skipped (e.g. the .dat index files next to the fortune
 * texts); a single input file holding one is an error. Every text must be
 * valid UTF-8; the error names the file and the byte offset.
 *
 * Output, in this order so a dataset.json on disk always describes complete
 * files: vocab.json, train.bin, val.bin, dataset.json (each written to a
 * temporary name, fsynced and renamed).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "data_impl.h"

/* Hard cap on the concatenated input: ids take 4 bytes per character. */
#define PREPARE_CHAR_MAX_BYTES ((size_t)1 << 30)
#define N_CODE_POINTS 0x110000u

typedef struct source {
    char *path;
    size_t bytes;
    char sha256[65];
} source;

typedef struct prep {
    const char *input;
    char *text; /* concatenation of every source */
    size_t len, cap;
    size_t n_chars;
    uint8_t *seen; /* (N_CODE_POINTS / 8) bitmap */
    source *src;
    size_t n_src, cap_src;
} prep;


/* Validate one file's text, note its characters, append it. */
static lf_status add_text(prep *p, const char *path, const char *buf, size_t len) {
    const unsigned char *s = (const unsigned char *)buf;
    size_t i = 0, n = 0;
    while (i < len) {
        uint32_t cp;
        int k = 1;
        if (s[i] < 0x80) {
            cp = s[i];
        } else {
            const char *why = "";
            k = lf__utf8_decode(s + i, len - i, &cp, &why);
            if (k == 0)
                return lf_fail(LF_ERR_FORMAT, "input '%s': invalid UTF-8 at byte offset %zu (byte 0x%02X: %s)", path, i,
                               s[i], why);
        }
        p->seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
        n++;
        i += (size_t)k;
    }
    if (p->len + len > p->cap) {
        size_t cap = p->cap ? p->cap : 1 << 16;
        while (cap < p->len + len) cap *= 2;
        char *t = realloc(p->text, cap);
        if (!t) return lf_fail(LF_ERR_NOMEM, "out of memory reading '%s' (%zu bytes so far)", path, p->len + len);
        p->text = t;
        p->cap = cap;
    }
    if (len > 0) memcpy(p->text + p->len, buf, len);
    p->len += len;
    p->n_chars += n;

    if (p->n_src == p->cap_src) {
        size_t cap = p->cap_src ? 2 * p->cap_src : 16;
        source *ns = realloc(p->src, cap * sizeof *ns);
        if (!ns) return lf_fail(LF_ERR_NOMEM, "out of memory listing sources");
        p->src = ns;
        p->cap_src = cap;
    }
    source *sr = &p->src[p->n_src];
    sr->path = malloc(strlen(path) + 1);
    if (!sr->path) return lf_fail(LF_ERR_NOMEM, "out of memory listing sources");
    strcpy(sr->path, path);
    sr->bytes = len;
    lf_sha256_hex(buf, len, sr->sha256);
    p->n_src++;
    return LF_OK;
}

/* Read one file; in_dir: a file with a NUL byte is skipped (*skipped = 1). */
static lf_status read_source(prep *p, const char *path, int in_dir, int *skipped) {
    *skipped = 0;
    char *buf = NULL;
    size_t len = 0;
    size_t room = PREPARE_CHAR_MAX_BYTES - p->len;
    lf_status st = lf_file_read_all(path, room ? room : 1, &buf, &len); /* 0 would mean "no cap" */
    if (st == LF_OK && room == 0 && len > 0) {
        lf_free(buf);
        st = LF_ERR_RANGE;
    }
    if (st == LF_ERR_RANGE)
        return lf_fail(LF_ERR_RANGE, "input '%s': the text would exceed the %zu-byte limit of character-level preparation",
                       p->input, PREPARE_CHAR_MAX_BYTES);
    if (st != LF_OK) return st;
    const char *nul = memchr(buf, 0, len);
    if (nul) {
        size_t off = (size_t)(nul - buf);
        lf_free(buf);
        if (in_dir) {
            lf_log(LF_LOG_DEBUG, "prepare: skipping '%s' (NUL byte at offset %zu: binary)", path, off);
            *skipped = 1;
            return LF_OK;
        }
        return lf_fail(LF_ERR_FORMAT, "input '%s': NUL byte at byte offset %zu (a binary file?)", path, off);
    }
    st = add_text(p, path, buf, len);
    lf_free(buf);
    return st;
}

static lf_status read_dir(prep *p, const char *dir) {
    char **names = NULL;
    size_t n = 0;
    lf_status st = lf__list_dir_sorted(dir, 0, &names, &n);
    if (st != LF_OK) return st;
    size_t used = 0;
    for (size_t i = 0; i < n && st == LF_OK; i++) {
        char *path = lf__path_join(dir, names[i]);
        if (!path) {
            st = lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", dir);
            break;
        }
        struct stat sb;
        if (lstat(path, &sb) != 0) {
            st = lf_fail(LF_ERR_IO, "input '%s': cannot stat: %s", path, strerror(errno));
        } else if (S_ISREG(sb.st_mode)) {
            int skipped = 0;
            st = read_source(p, path, 1, &skipped);
            if (st == LF_OK && !skipped) used++;
        } else {
            lf_log(LF_LOG_DEBUG, "prepare: skipping '%s' (not a regular file)", path);
        }
        free(path);
    }
    if (st == LF_OK && used == 0) st = lf_fail(LF_ERR_INVALID_ARG, "input directory '%s' holds no text files", dir);
    lf__free_names(names, n);
    return st;
}

/* dataset.json text; *out freed with cJSON_free. */
static lf_status manifest_json(const prep *p, const char *vocab_sha, int V, size_t n_train, size_t n_val, char **out) {
    *out = NULL;
    cJSON *root = cJSON_CreateObject(), *tok = NULL, *splits = NULL, *sources = NULL;
    int ok = root != NULL;
    ok = ok && cJSON_AddStringToObject(root, "format", "llmforge-dataset");
    ok = ok && cJSON_AddNumberToObject(root, "version", 1);
    ok = ok && (tok = cJSON_AddObjectToObject(root, "tokenizer"));
    ok = ok && cJSON_AddStringToObject(tok, "spec", "char:vocab.json");
    ok = ok && cJSON_AddStringToObject(tok, "sha256", vocab_sha);
    ok = ok && cJSON_AddNumberToObject(root, "vocab_size", V);
    ok = ok && (splits = cJSON_AddObjectToObject(root, "splits"));
    const char *names[2] = {"train", "val"};
    const size_t counts[2] = {n_train, n_val};
    for (int s = 0; s < 2 && ok; s++) {
        cJSON *sp = cJSON_AddObjectToObject(splits, names[s]);
        cJSON *sh = sp ? cJSON_AddArrayToObject(sp, "shards") : NULL;
        char file[16];
        strcpy(file, names[s]);
        strcat(file, ".bin");
        cJSON *fs = sh ? cJSON_CreateString(file) : NULL;
        ok = fs && cJSON_AddItemToArray(sh, fs);
        if (!ok) cJSON_Delete(fs);
        ok = ok && cJSON_AddNumberToObject(sp, "tokens", (double)counts[s]);
    }
    ok = ok && (sources = cJSON_AddArrayToObject(root, "sources"));
    for (size_t i = 0; i < p->n_src && ok; i++) {
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(sources, o);
        if (!ok) cJSON_Delete(o);
        ok = ok && cJSON_AddStringToObject(o, "path", p->src[i].path);
        ok = ok && cJSON_AddStringToObject(o, "sha256", p->src[i].sha256);
        ok = ok && cJSON_AddNumberToObject(o, "bytes", (double)p->src[i].bytes);
    }
    if (ok) *out = cJSON_Print(root);
    cJSON_Delete(root);
    if (!*out) return lf_fail(LF_ERR_NOMEM, "out of memory building dataset.json");
    return LF_OK;
}

lf_status lf_prepare_char(const char *input_path, const char *out_dir, lf_prepare_stats *stats) {
    if (stats) memset(stats, 0, sizeof *stats);
    if (!input_path || !*input_path || !out_dir || !*out_dir)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_prepare_char: empty input or output path");

    lf_status st = LF_OK;
    prep p = {.input = input_path};
    uint32_t *cps = NULL, *ids = NULL;
    char *vocab_json = NULL, *manifest = NULL, *path = NULL;
    lf_tokenizer *tok = NULL;
    size_t n_ids = 0;

    p.seen = calloc(N_CODE_POINTS / 8, 1);
    if (!p.seen) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory preparing '%s'", input_path);
        goto done;
    }
    struct stat sb;
    if (stat(input_path, &sb) != 0) {
        st = lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "input '%s': %s", input_path, strerror(errno));
        goto done;
    }
    if (S_ISDIR(sb.st_mode)) {
        st = read_dir(&p, input_path);
    } else {
        int skipped = 0;
        st = read_source(&p, input_path, 0, &skipped);
    }
    if (st != LF_OK) goto done;
    if (p.n_chars == 0) {
        st = lf_fail(LF_ERR_INVALID_ARG, "input '%s' is empty (0 characters)", input_path);
        goto done;
    }

    /* vocabulary: the set bits of the bitmap, ascending = sorted by code point */
    size_t V = 0;
    for (uint32_t w = 0; w < N_CODE_POINTS / 8; w++)
        for (uint8_t b = p.seen[w]; b; b &= (uint8_t)(b - 1)) V++;
    cps = malloc(V * sizeof *cps);
    if (!cps) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory preparing '%s'", input_path);
        goto done;
    }
    V = 0;
    for (uint32_t cp = 0; cp < N_CODE_POINTS; cp++)
        if (p.seen[cp >> 3] & (1u << (cp & 7))) cps[V++] = cp;

    if ((st = lf_mkdirs(out_dir)) != LF_OK) goto done;
    if ((st = lf__char_vocab_json(cps, V, &vocab_json)) != LF_OK) goto done;
    char vocab_sha[65];
    lf_sha256_hex(vocab_json, strlen(vocab_json), vocab_sha);
    if (!(path = lf__path_join(out_dir, "vocab.json"))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory preparing '%s'", input_path);
        goto done;
    }
    if ((st = lf__file_write_atomic(path, vocab_json, strlen(vocab_json))) != LF_OK) goto done;

    /* encode through the vocabulary just written: one encoder for prepare and use */
    if ((st = lf_tokenizer_open(&tok, "char:vocab.json", out_dir)) != LF_OK) goto done;
    if ((st = lf_tokenizer_encode(tok, p.text, p.len, &ids, &n_ids)) != LF_OK) {
        lf_error_prefix("input '%s'", input_path);
        goto done;
    }
    if (n_ids != p.n_chars) {
        st = lf_fail(LF_ERR_INTERNAL, "prepare: %zu characters encoded to %zu tokens", p.n_chars, n_ids);
        goto done;
    }
    const size_t n_train = (size_t)((double)n_ids * 0.9); /* Python: int(n*0.9) */
    const size_t n_val = n_ids - n_train;

    const char *files[2] = {"train.bin", "val.bin"};
    const uint32_t *parts[2] = {ids, ids + n_train};
    const size_t counts[2] = {n_train, n_val};
    for (int s = 0; s < 2; s++) {
        free(path);
        if (!(path = lf__path_join(out_dir, files[s]))) {
            st = lf_fail(LF_ERR_NOMEM, "out of memory preparing '%s'", input_path);
            goto done;
        }
        if ((st = lf_shard_write(path, parts[s], NULL, counts[s], (uint32_t)V)) != LF_OK) goto done;
    }

    if ((st = manifest_json(&p, vocab_sha, (int)V, n_train, n_val, &manifest)) != LF_OK) goto done;
    free(path);
    if (!(path = lf__path_join(out_dir, "dataset.json"))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory preparing '%s'", input_path);
        goto done;
    }
    if ((st = lf__file_write_atomic(path, manifest, strlen(manifest))) != LF_OK) goto done;

    if (stats) {
        stats->n_chars = p.n_chars;
        stats->vocab_size = (int)V;
        stats->train_tokens = n_train;
        stats->val_tokens = n_val;
    }

done:
    lf_tokenizer_free(tok);
    lf_free(ids);
    cJSON_free(vocab_json);
    cJSON_free(manifest);
    free(path);
    free(cps);
    free(p.text);
    free(p.seen);
    for (size_t i = 0; i < p.n_src; i++) free(p.src[i].path);
    free(p.src);
    return st;
}
