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
 * valid UTF-8; the error names the file and the byte offset. A file holding
 * a NUL byte is reported as such even when invalid UTF-8 comes first.
 *
 * Streaming, in memory bounded independent of the input size (a READ_BYTES
 * buffer, its ids, two code-point bitmaps and two shard writers):
 *  - pass 1 reads each file in chunks, validates it, marks its code points
 *    in a bitmap of its own (merged into the vocabulary only when the file
 *    is kept) and counts them; the vocabulary and n are then known;
 *  - pass 2 reads the files again and encodes each chunk up to its last
 *    complete character (the rest is carried into the next chunk), sending
 *    the first int(n*0.9) ids to train.bin and the others to val.bin
 *    through lf_shard_writer. A file that changed between the passes is an
 *    error naming it.
 *
 * Output, in this order so a dataset.json on disk always describes complete
 * files: (an earlier dataset.json is removed first) vocab.json, train.bin,
 * val.bin, dataset.json (each written to a temporary name, fsynced and
 * renamed).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "data_impl.h"

#define N_CODE_POINTS 0x110000u
#define READ_BYTES ((size_t)1 << 20) /* one chunk; a character never straddles two */

typedef struct source {
    char *path;
    uint64_t bytes;
    char sha256[65];
} source;

typedef struct prep {
    const char *input;
    unsigned char *buf; /* (READ_BYTES) */
    uint64_t n_chars;
    uint8_t *seen;  /* (N_CODE_POINTS / 8) the vocabulary */
    uint8_t *fseen; /* (N_CODE_POINTS / 8) the current file's code points */
    source *src;
    size_t n_src, cap_src;
} prep;

/* ---------------------------------------------------------------- chunked reading */
typedef struct chunker {
    int fd;
    size_t have;   /* bytes in buf (a carried partial character first) */
    uint64_t base; /* file offset of buf[0] */
    int eof;
} chunker;

static lf_status chunk_open(chunker *c, const char *path) {
    memset(c, 0, sizeof *c);
    c->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (c->fd < 0)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "input '%s': cannot open: %s", path,
                       strerror(errno));
    return LF_OK;
}

/* Read more bytes after the c->have already in buf; sets c->eof at the end. */
static lf_status chunk_read(chunker *c, unsigned char *buf, const char *path) {
    for (;;) {
        ssize_t n = read(c->fd, buf + c->have, READ_BYTES - c->have);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return lf_fail(LF_ERR_IO, "input '%s': read failed: %s", path, strerror(errno));
        if (n == 0) c->eof = 1;
        c->have += (size_t)n;
        return LF_OK;
    }
}

/* Drop buf[0, used) and keep the rest at the start. */
static void chunk_consume(chunker *c, unsigned char *buf, size_t used) {
    memmove(buf, buf + used, c->have - used);
    c->have -= used;
    c->base += used;
}

/* ---------------------------------------------------------------- pass 1 */
/* Scan one file: validate, count and mark its code points. in_dir: a file
 * with a NUL byte is skipped (*skipped = 1). */
static lf_status scan_source(prep *p, const char *path, int in_dir, int *skipped) {
    *skipped = 0;
    chunker c;
    lf_status st = chunk_open(&c, path);
    if (st != LF_OK) return st;
    uint64_t n = 0, bad_at = 0, size = 0;
    uint32_t max_cp = 0;
    int bad = 0;
    unsigned bad_byte = 0;
    const char *bad_why = "";
    for (;;) {
        size_t fresh = c.have;
        if ((st = chunk_read(&c, p->buf, path)) != LF_OK) goto done;
        size += c.have - fresh;
        const unsigned char *nul = memchr(p->buf + fresh, 0, c.have - fresh);
        if (nul) {
            uint64_t off = c.base + (uint64_t)(nul - p->buf);
            if (in_dir) {
                lf_log(LF_LOG_DEBUG, "prepare: skipping '%s' (NUL byte at offset %llu: binary)", path,
                       (unsigned long long)off);
                *skipped = 1;
            } else {
                st = lf_fail(LF_ERR_FORMAT, "input '%s': NUL byte at byte offset %llu (a binary file?)", path,
                             (unsigned long long)off);
            }
            goto done;
        }
        if (bad) { /* after invalid UTF-8 only a NUL byte is looked for (it names the file better) */
            chunk_consume(&c, p->buf, c.have);
            if (c.eof) break;
            continue;
        }
        /* characters starting in the last 3 bytes may continue in the next chunk */
        const size_t lim = c.eof ? c.have : c.have > 3 ? c.have - 3 : 0;
        size_t i = 0;
        while (i < lim) {
            uint32_t cp = p->buf[i];
            int k = 1;
            if (cp >= 0x80 && (k = lf__utf8_decode(p->buf + i, c.have - i, &cp, &bad_why)) == 0) {
                bad = 1;
                bad_at = c.base + i;
                bad_byte = p->buf[i];
                break;
            }
            p->fseen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
            if (cp > max_cp) max_cp = cp;
            n++;
            i += (size_t)k;
        }
        chunk_consume(&c, p->buf, bad ? c.have : i);
        if (c.eof) break;
    }
    if (bad) {
        st = lf_fail(LF_ERR_FORMAT, "input '%s': invalid UTF-8 at byte offset %llu (byte 0x%02X: %s)", path,
                     (unsigned long long)bad_at, bad_byte, bad_why);
        goto done;
    }
    /* keep the file: its code points join the vocabulary */
    for (uint32_t w = 0; w <= max_cp >> 3; w++) p->seen[w] |= p->fseen[w];
    p->n_chars += n;
    if (p->n_src == p->cap_src) {
        size_t cap = p->cap_src ? 2 * p->cap_src : 16;
        source *ns = realloc(p->src, cap * sizeof *ns);
        if (!ns) {
            st = lf_fail(LF_ERR_NOMEM, "out of memory listing sources");
            goto done;
        }
        p->src = ns;
        p->cap_src = cap;
    }
    source *sr = &p->src[p->n_src];
    if (!(sr->path = malloc(strlen(path) + 1))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory listing sources");
        goto done;
    }
    strcpy(sr->path, path);
    sr->bytes = size;
    p->n_src++;
    if ((st = lf_sha256_file_hex(path, sr->sha256)) != LF_OK) goto done;
done:
    memset(p->fseen, 0, (size_t)(max_cp >> 3) + 1); /* only the part this file touched */
    close(c.fd);
    return st;
}

static lf_status scan_dir(prep *p, const char *dir) {
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
            st = scan_source(p, path, 1, &skipped);
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

/* ---------------------------------------------------------------- pass 2 */
/* Length of buf[0, have) up to its last complete character (valid UTF-8). */
static size_t complete_prefix(const unsigned char *buf, size_t have) {
    if (have == 0) return 0;
    size_t j = have - 1;
    while (j > 0 && have - j < 4 && lf__utf8_is_cont(buf[j])) j--;
    return j + lf__utf8_lead_len(buf[j]) <= have ? have : j;
}

/* Encode one kept file; the first *train_left ids go to train. */
static lf_status encode_source(prep *p, const lf_tokenizer *tok, const source *s, lf_shard_writer *train,
                               lf_shard_writer *val, uint64_t *train_left, uint64_t *n_ids) {
    chunker c;
    lf_status st = chunk_open(&c, s->path);
    if (st != LF_OK) return st;
    uint32_t *ids = NULL;
    for (;;) {
        if ((st = chunk_read(&c, p->buf, s->path)) != LF_OK) break;
        size_t cut = c.eof ? c.have : complete_prefix(p->buf, c.have);
        size_t n = 0;
        if (cut > 0 && (st = lf_tokenizer_encode(tok, (const char *)p->buf, cut, &ids, &n)) != LF_OK) {
            lf_error_prefix("input '%s' (changed since it was read?)", s->path);
            break;
        }
        *n_ids += n;
        size_t to_train = (uint64_t)n < *train_left ? n : (size_t)*train_left;
        if (n > 0) {
            if ((st = lf_shard_writer_append(train, ids, NULL, to_train)) != LF_OK) break;
            if ((st = lf_shard_writer_append(val, ids + to_train, NULL, n - to_train)) != LF_OK) break;
        }
        *train_left -= to_train;
        lf_free(ids);
        ids = NULL;
        chunk_consume(&c, p->buf, cut);
        if (c.eof) break;
    }
    lf_free(ids);
    close(c.fd);
    return st;
}

/* dataset.json text; *out freed with cJSON_free. */
static lf_status manifest_json(const prep *p, const char *vocab_sha, int V, uint64_t n_train, uint64_t n_val,
                               char **out) {
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
    const uint64_t counts[2] = {n_train, n_val};
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

/* out_dir/name, or NULL after recording LF_ERR_NOMEM. */
static char *out_path(const char *out_dir, const char *name) {
    char *path = lf__path_join(out_dir, name);
    if (!path) lf_fail(LF_ERR_NOMEM, "out of memory");
    return path;
}

lf_status lf_prepare_char(const char *input_path, const char *out_dir, lf_prepare_stats *stats) {
    if (stats) memset(stats, 0, sizeof *stats);
    if (!input_path || !*input_path || !out_dir || !*out_dir)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_prepare_char: empty input or output path");

    lf_status st = LF_OK;
    prep p = {.input = input_path};
    uint32_t *cps = NULL;
    char *vocab_json = NULL, *manifest = NULL, *path = NULL, *train_path = NULL;
    lf_tokenizer *tok = NULL;
    lf_shard_writer *wt = NULL, *wv = NULL;
    int train_done = 0;

    p.seen = calloc(N_CODE_POINTS / 8, 1);
    p.fseen = calloc(N_CODE_POINTS / 8, 1);
    p.buf = malloc(READ_BYTES);
    if (!p.seen || !p.fseen || !p.buf) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory preparing '%s'", input_path);
        goto done;
    }
    struct stat sb;
    if (stat(input_path, &sb) != 0) {
        st = lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "input '%s': %s", input_path, strerror(errno));
        goto done;
    }
    if (S_ISDIR(sb.st_mode)) {
        st = scan_dir(&p, input_path);
    } else {
        int skipped = 0;
        st = scan_source(&p, input_path, 0, &skipped);
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
    /* an earlier dataset.json would describe files about to be replaced */
    if (!(path = out_path(out_dir, "dataset.json"))) goto nomem;
    if (unlink(path) != 0 && errno != ENOENT) {
        st = lf_fail(LF_ERR_IO, "prepare: cannot remove the earlier '%s': %s", path, strerror(errno));
        goto done;
    }
    if ((st = lf__char_vocab_json(cps, V, &vocab_json)) != LF_OK) goto done;
    char vocab_sha[65];
    lf_sha256_hex(vocab_json, strlen(vocab_json), vocab_sha);
    free(path);
    if (!(path = out_path(out_dir, "vocab.json"))) goto nomem;
    if ((st = lf__file_write_atomic(path, vocab_json, strlen(vocab_json))) != LF_OK) goto done;

    /* encode through the vocabulary just written: one encoder for prepare and use */
    if ((st = lf_tokenizer_open(&tok, "char:vocab.json", out_dir)) != LF_OK) goto done;
    const uint64_t n_train = (uint64_t)((double)p.n_chars * 0.9); /* Python: int(n*0.9) */
    const uint64_t n_val = p.n_chars - n_train;
    free(path);
    if (!(train_path = out_path(out_dir, "train.bin")) || !(path = out_path(out_dir, "val.bin"))) goto nomem;
    if ((st = lf_shard_writer_open(&wt, train_path, (uint32_t)V, 0)) != LF_OK) goto done;
    if ((st = lf_shard_writer_open(&wv, path, (uint32_t)V, 0)) != LF_OK) goto done;
    uint64_t train_left = n_train, n_ids = 0;
    for (size_t i = 0; i < p.n_src; i++)
        if ((st = encode_source(&p, tok, &p.src[i], wt, wv, &train_left, &n_ids)) != LF_OK) goto done;
    if (n_ids != p.n_chars) {
        st = lf_fail(LF_ERR_IO,
                     "input '%s': %llu characters read first, %llu the second time (a file changed "
                     "while being prepared?)",
                     input_path, (unsigned long long)p.n_chars, (unsigned long long)n_ids);
        goto done;
    }
    st = lf_shard_writer_close(wt);
    wt = NULL;
    if (st != LF_OK) goto done;
    train_done = 1;
    st = lf_shard_writer_close(wv);
    wv = NULL;
    if (st != LF_OK) goto done;

    if ((st = manifest_json(&p, vocab_sha, (int)V, n_train, n_val, &manifest)) != LF_OK) goto done;
    free(path);
    if (!(path = out_path(out_dir, "dataset.json"))) goto nomem;
    if ((st = lf__file_write_atomic(path, manifest, strlen(manifest))) != LF_OK) goto done;

    if (stats) {
        stats->n_chars = (size_t)p.n_chars;
        stats->vocab_size = (int)V;
        stats->train_tokens = (size_t)n_train;
        stats->val_tokens = (size_t)n_val;
    }
    goto done;
nomem:
    st = LF_ERR_NOMEM;
done:
    lf_shard_writer_free(wt);
    lf_shard_writer_free(wv);
    if (st != LF_OK && train_done) unlink(train_path); /* no half dataset */
    lf_tokenizer_free(tok);
    cJSON_free(vocab_json);
    cJSON_free(manifest);
    free(path);
    free(train_path);
    free(cps);
    free(p.buf);
    free(p.seen);
    free(p.fseen);
    for (size_t i = 0; i < p.n_src; i++) free(p.src[i].path);
    free(p.src);
    return st;
}
