/*
 * Preparation from records (lf_prepare): inputs -> readers -> tokenizer ->
 * content-hash split -> token shards + dataset.json. Contract in
 * include/llmforge/data.h ("preparation from records"), user guide in
 * docs/data.md.
 *
 * Invariants:
 *  - Memory: one record at a time from the readers; per split one buffer of
 *    at most shard_tokens tokens (and mask bytes in fine-tuning mode), which
 *    is written out as a shard whenever it fills. A record's tokens may
 *    continue in the next shard of its split; the sampler reads a split as
 *    the concatenation of its shards, so nothing is lost at the cut.
 *  - Fine-tuning layout per record: ids(prompt) with mask 0, then
 *    ids(response) and the end-of-text id with mask 1. The batch sampler
 *    turns a target whose mask is 0 into -1, so the loss covers exactly the
 *    response and its end-of-text.
 *  - The split of a record is a function of its content alone (split.c).
 *  - Output order: shards, then (for "char"/"char:FILE") vocab.json was
 *    written before encoding, then dataset.json last; each file is written
 *    to a temporary name, fsynced and renamed, so a dataset.json on disk
 *    always describes complete files. Shards left by an earlier run in the
 *    same directory are not deleted; dataset.json names the current ones.
 *  - "char" builds its vocabulary in a first pass over the inputs (the same
 *    readers with the same options, so the same records are skipped), then
 *    encodes in a second. Skipped records are reported from the second pass
 *    only.
 *  - Nothing here prints; skipped records go to opts->on_skip.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "data_impl.h"

#define N_CODE_POINTS 0x110000u
#define VOCAB_FILE_MAX_BYTES ((size_t)64 << 20)

static const char *const g_split_names[LF_PREPARE_N_SPLITS] = {"train", "val", "test"};

/* ---------------------------------------------------------------- end of text (transitional)
 * lf_tokenizer_eot belongs in tokenizer.c, dispatching to the optional
 * ops->eot slot (char: tokenizer_char.c). Until that wrapper lands this weak
 * definition answers through the public API: <|endoftext|> for the kinds that
 * have special tokens, else the id of "\n" (the char kind). A strong
 * definition in tokenizer.c replaces it at link time. */
#if defined(__GNUC__)
__attribute__((weak))
#endif
int lf_tokenizer_eot(const lf_tokenizer *t) {
    if (!t) return -1;
    char saved[1024]; /* the probes below may record messages; this records none */
    snprintf(saved, sizeof saved, "%s", lf_last_error());
    uint32_t id = 0;
    int eot = -1;
    if (lf_tokenizer_special_id(t, "<|endoftext|>", &id) == LF_OK) {
        eot = id <= INT_MAX ? (int)id : -1;
    } else {
        uint32_t *ids = NULL;
        size_t n = 0;
        if (lf_tokenizer_encode(t, "\n", 1, &ids, &n) == LF_OK && n == 1 && ids[0] <= INT_MAX) eot = (int)ids[0];
        lf_free(ids);
    }
    lf_fail(LF_OK, "%s", saved);
    return eot;
}

/* ---------------------------------------------------------------- state */
typedef struct split_buf {
    uint32_t *tok;   /* (cap) */
    uint8_t *mask;   /* (cap) fine-tuning only */
    size_t n, cap;
    uint64_t shards, records, tokens, targets;
} split_buf;

typedef struct source {
    char *path;
    lf_input_format fmt;     /* as resolved by the reader */
    uint64_t bytes, records, skipped;
    char sha256[65];
} source;

typedef struct prep {
    const lf_prepare_opts *o;
    const char *out_dir;
    size_t shard_tokens;
    double w[LF_PREPARE_N_SPLITS];
    source *src;             /* the expanded list of files */
    size_t n_src, cap_src;
    uint64_t bytes_total, bytes_done;
    int passes;
    lf_tokenizer *tok;
    int V, eot, sft;
    split_buf sp[LF_PREPARE_N_SPLITS];
    char *key;               /* split key scratch */
    size_t key_cap;
    uint64_t skipped;
    char first_skip[512];
    char *spec_out;          /* spec written to dataset.json */
    char tok_sha[65];        /* "" when the tokenizer names no single file */
} prep;

lf_prepare_opts lf_prepare_opts_default(void) {
    lf_prepare_opts o;
    memset(&o, 0, sizeof o);
    o.format = LF_INPUT_AUTO;
    o.mode = LF_RECORD_PRETRAIN;
    o.split[0] = 0.9;
    o.split[1] = 0.1;
    o.split[2] = 0.0;
    return o;
}

/* ---------------------------------------------------------------- inputs */

static lf_status add_source(prep *p, const char *path, uint64_t bytes) {
    if (p->n_src == p->cap_src) {
        size_t cap = p->cap_src ? 2 * p->cap_src : 16;
        source *ns = realloc(p->src, cap * sizeof *ns);
        if (!ns) return lf_fail(LF_ERR_NOMEM, "out of memory listing inputs");
        p->src = ns;
        p->cap_src = cap;
    }
    source *s = &p->src[p->n_src];
    memset(s, 0, sizeof *s);
    if (!(s->path = malloc(strlen(path) + 1))) return lf_fail(LF_ERR_NOMEM, "out of memory listing inputs");
    strcpy(s->path, path);
    s->bytes = bytes;
    p->n_src++;
    p->bytes_total += bytes;
    return LF_OK;
}

/* 1 when the file holds a NUL byte (a binary file in a text directory). */
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
    if (err) return lf_fail(LF_ERR_IO, "%s: read failed", path);
    return LF_OK;
}

/* Every regular, non-hidden file of dir in byte-wise name order; with the
 * auto format those whose name tells no format are skipped, and text files
 * holding a NUL byte (binaries next to the texts) too. */
static lf_status add_dir(prep *p, const char *dir) {
    char **names = NULL;
    size_t n = 0;
    size_t used = 0;
    lf_status st = lf__list_dir_sorted(dir, 1, &names, &n);
    if (st != LF_OK) return st;
    for (size_t i = 0; i < n && st == LF_OK; i++) {
        char *path = lf__path_join(dir, names[i]);
        if (!path) {
            st = lf_fail(LF_ERR_NOMEM, "out of memory listing '%s'", dir);
            break;
        }
        struct stat sb;
        lf_input_format f = p->o->format != LF_INPUT_AUTO ? p->o->format : lf__input_format_of_name(path);
        if (lstat(path, &sb) != 0) {
            st = lf_fail(LF_ERR_IO, "input '%s': cannot stat: %s", path, strerror(errno));
        } else if (!S_ISREG(sb.st_mode)) {
            lf_log(LF_LOG_DEBUG, "prepare: skipping '%s' (not a regular file)", path);
        } else if (f == LF_INPUT_AUTO) {
            lf_log(LF_LOG_INFO, "prepare: skipping '%s' (its name tells no input format)", path);
        } else {
            int bin = 0;
            if (f == LF_INPUT_TEXT) st = has_nul(path, &bin);
            if (st == LF_OK && bin) lf_log(LF_LOG_INFO, "prepare: skipping '%s' (a NUL byte: binary)", path);
            else if (st == LF_OK && (st = add_source(p, path, (uint64_t)sb.st_size)) == LF_OK) used++;
        }
        free(path);
    }
    if (st == LF_OK && used == 0) st = lf_fail(LF_ERR_INVALID_ARG, "input directory '%s' holds no input files", dir);
    lf__free_names(names, n);
    return st;
}

static lf_status expand_inputs(prep *p) {
    for (size_t i = 0; i < p->o->n_inputs; i++) {
        const char *in = p->o->inputs[i];
        if (!in || !*in) return lf_fail(LF_ERR_INVALID_ARG, "prepare: input %zu is an empty path", i + 1);
        struct stat sb;
        if (stat(in, &sb) != 0)
            return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "input '%s': %s", in, strerror(errno));
        lf_status st = S_ISDIR(sb.st_mode) ? add_dir(p, in) : add_source(p, in, (uint64_t)sb.st_size);
        if (st != LF_OK) return st;
    }
    return LF_OK;
}

static lf_reader_opts reader_opts(const prep *p) {
    lf_reader_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.format = p->o->format;
    ro.mode = p->o->mode;
    ro.text_field = p->o->text_field;
    ro.prompt_field = p->o->prompt_field;
    ro.response_field = p->o->response_field;
    ro.skip_bad_records = p->o->skip_bad_records;
    ro.max_record_bytes = p->o->max_record_bytes;
    return ro;
}

static void progress(prep *p, uint64_t done) {
    if (p->o->progress) p->o->progress(done, p->bytes_total * (uint64_t)p->passes, p->o->progress_user);
}

/* ---------------------------------------------------------------- skipped records */
static void note_skip(prep *p, const char *msg) {
    if (p->skipped == 0) snprintf(p->first_skip, sizeof p->first_skip, "%s", msg);
    p->skipped++;
    if (p->o->on_skip) p->o->on_skip(msg, p->o->on_skip_user);
}

static void on_reader_skip(const char *msg, void *user) { note_skip(user, msg); }

/* ---------------------------------------------------------------- pass 1: character vocabulary */
static void mark_chars(uint8_t *seen, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp = u[i];
        int k = 1;
        if (cp >= 0x80) {
            const char *why;
            k = lf__utf8_decode(u + i, n - i, &cp, &why);
            if (k == 0) return; /* readers hand out valid UTF-8 only */
        }
        seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
        i += (size_t)k;
    }
}

static lf_status build_char_vocab(prep *p) {
    lf_status st = LF_OK;
    uint8_t *seen = calloc(N_CODE_POINTS / 8, 1);
    uint32_t *cps = NULL;
    char *json = NULL, *path = NULL;
    lf_reader *r = NULL;
    if (!seen) return lf_fail(LF_ERR_NOMEM, "out of memory building a character vocabulary");
    lf_reader_opts ro = reader_opts(p);
    for (size_t i = 0; i < p->n_src && st == LF_OK; i++) {
        if ((st = lf_reader_open(&r, p->src[i].path, &ro)) != LF_OK) break;
        for (;;) {
            lf_record rec;
            int eof;
            if ((st = lf_reader_next(r, &rec, &eof)) != LF_OK || eof) break;
            if (rec.text) mark_chars(seen, rec.text, rec.text_len);
            if (rec.prompt) mark_chars(seen, rec.prompt, rec.prompt_len);
            if (rec.response) mark_chars(seen, rec.response, rec.response_len);
        }
        p->bytes_done += lf_reader_bytes_read(r);
        progress(p, p->bytes_done);
        lf_reader_close(r);
        r = NULL;
    }
    if (st != LF_OK) goto done;
    seen['\n' >> 3] |= (uint8_t)(1u << ('\n' & 7)); /* the end-of-text of character vocabularies */
    size_t V = 0;
    for (uint32_t w = 0; w < N_CODE_POINTS / 8; w++)
        for (uint8_t b = seen[w]; b; b &= (uint8_t)(b - 1)) V++;
    if (!(cps = malloc(V * sizeof *cps))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory building a character vocabulary");
        goto done;
    }
    V = 0;
    for (uint32_t cp = 0; cp < N_CODE_POINTS; cp++)
        if (seen[cp >> 3] & (1u << (cp & 7))) cps[V++] = cp;
    if ((st = lf__char_vocab_json(cps, V, &json)) != LF_OK) goto done;
    if (!(path = lf__path_join(p->out_dir, "vocab.json"))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory building a character vocabulary");
        goto done;
    }
    if ((st = lf__file_write_atomic(path, json, strlen(json))) != LF_OK) goto done;
    lf_sha256_hex(json, strlen(json), p->tok_sha);
done:
    lf_reader_close(r);
    free(seen);
    free(cps);
    cJSON_free(json);
    free(path);
    return st;
}

/* ---------------------------------------------------------------- tokenizer */
static lf_status set_spec_out(prep *p, const char *s) {
    free(p->spec_out);
    if (!(p->spec_out = malloc(strlen(s) + 1))) return lf_fail(LF_ERR_NOMEM, "out of memory");
    strcpy(p->spec_out, s);
    return LF_OK;
}

/* "char:FILE": copy FILE into out_dir/vocab.json (unless it is that file). */
static lf_status copy_char_vocab(prep *p, const char *file) {
    lf_status st = LF_OK;
    char *dst = lf__path_join(p->out_dir, "vocab.json"), *a = NULL, *b = NULL, *buf = NULL;
    size_t len = 0;
    if (!dst) return lf_fail(LF_ERR_NOMEM, "out of memory");
    a = realpath(file, NULL);
    b = realpath(dst, NULL);
    if ((st = lf_file_read_all(file, VOCAB_FILE_MAX_BYTES, &buf, &len)) != LF_OK) {
        lf_error_prefix("char vocabulary '%s'", file);
        goto done;
    }
    if (!(a && b && strcmp(a, b) == 0)) st = lf__file_write_atomic(dst, buf, len);
    if (st == LF_OK) lf_sha256_hex(buf, len, p->tok_sha);
done:
    lf_free(buf);
    free(dst);
    free(a);
    free(b);
    return st;
}

/* The spec as dataset.json records it: the file by absolute path, or
 * relative to out_dir when it lies inside it; sha256 when it is one file. */
static lf_status record_spec(prep *p, const char *spec) {
    const char *colon = strchr(spec, ':');
    if (!colon || !colon[1]) return set_spec_out(p, spec);
    char *abs = realpath(colon + 1, NULL), *od = realpath(p->out_dir, NULL);
    lf_status st = LF_OK;
    if (!abs) {
        st = set_spec_out(p, spec); /* not a path (the tokenizer opened it anyway) */
        goto done;
    }
    const char *arg = abs;
    size_t nd = od ? strlen(od) : 0;
    if (od && strncmp(abs, od, nd) == 0 && abs[nd] == '/') arg = abs + nd + 1;
    size_t np = (size_t)(colon - spec) + 1;
    char *s = malloc(np + strlen(arg) + 1);
    if (!s) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory");
        goto done;
    }
    memcpy(s, spec, np);
    strcpy(s + np, arg);
    free(p->spec_out);
    p->spec_out = s;
    struct stat sb;
    if (stat(abs, &sb) == 0 && S_ISREG(sb.st_mode)) st = lf_sha256_file_hex(abs, p->tok_sha);
done:
    free(abs);
    free(od);
    return st;
}

static lf_status open_tokenizer(prep *p) {
    const char *spec = p->o->tokenizer;
    lf_status st;
    if (strcmp(spec, "char") == 0) {
        if ((st = build_char_vocab(p)) != LF_OK) return st;
        if ((st = set_spec_out(p, "char:vocab.json")) != LF_OK) return st;
        st = lf_tokenizer_open(&p->tok, "char:vocab.json", p->out_dir);
    } else if (strncmp(spec, "char:", 5) == 0 && spec[5]) {
        if ((st = copy_char_vocab(p, spec + 5)) != LF_OK) return st;
        if ((st = set_spec_out(p, "char:vocab.json")) != LF_OK) return st;
        st = lf_tokenizer_open(&p->tok, "char:vocab.json", p->out_dir);
    } else {
        if ((st = lf_tokenizer_open(&p->tok, spec, NULL)) != LF_OK) return st;
        st = record_spec(p, spec);
    }
    if (st != LF_OK) return st;
    p->V = lf_tokenizer_vocab_size(p->tok);
    p->eot = lf_tokenizer_eot(p->tok);
    if (p->eot < 0)
        return lf_fail(LF_ERR_INVALID_ARG,
                       "tokenizer '%s' has no end-of-text token to end each record (a character vocabulary needs \"\\n\")",
                       spec);
    if (p->V < 1) return lf_fail(LF_ERR_INTERNAL, "tokenizer '%s' reports vocabulary size %d", spec, p->V);
    return LF_OK;
}

/* ---------------------------------------------------------------- shards */
static char *shard_name(int s, uint64_t k) {
    char name[64];
    snprintf(name, sizeof name, "%s_%03llu.bin", g_split_names[s], (unsigned long long)k);
    char *r = malloc(strlen(name) + 1);
    if (r) strcpy(r, name);
    return r;
}

static lf_status flush_split(prep *p, int s) {
    split_buf *b = &p->sp[s];
    if (b->n == 0) return LF_OK;
    char *name = shard_name(s, b->shards), *path = name ? lf__path_join(p->out_dir, name) : NULL;
    lf_status st = path ? lf_shard_write(path, b->tok, p->sft ? b->mask : NULL, b->n, (uint32_t)p->V)
                        : lf_fail(LF_ERR_NOMEM, "out of memory");
    free(name);
    free(path);
    if (st != LF_OK) return st;
    b->shards++;
    b->n = 0;
    return LF_OK;
}

/* Append ids with one mask value, cutting shards at exactly shard_tokens. */
static lf_status push(prep *p, int s, const uint32_t *ids, size_t n, uint8_t m) {
    split_buf *b = &p->sp[s];
    b->tokens += n;
    if (m) b->targets += n;
    while (n > 0) {
        if (b->n == p->shard_tokens) {
            lf_status st = flush_split(p, s);
            if (st != LF_OK) return st;
        }
        size_t room = p->shard_tokens - b->n, take = n < room ? n : room;
        if (b->n + take > b->cap) {
            size_t cap = b->cap ? b->cap : 1 << 16;
            while (cap < b->n + take) cap *= 2;
            if (cap > p->shard_tokens) cap = p->shard_tokens;
            uint32_t *t = realloc(b->tok, cap * sizeof *t);
            if (!t) return lf_fail(LF_ERR_NOMEM, "out of memory buffering %zu tokens", cap);
            b->tok = t;
            if (p->sft) {
                uint8_t *mm = realloc(b->mask, cap);
                if (!mm) return lf_fail(LF_ERR_NOMEM, "out of memory buffering %zu tokens", cap);
                b->mask = mm;
            }
            b->cap = cap;
        }
        memcpy(b->tok + b->n, ids, take * sizeof *ids);
        if (p->sft) memset(b->mask + b->n, m, take);
        b->n += take;
        ids += take;
        n -= take;
    }
    return LF_OK;
}

/* ---------------------------------------------------------------- pass 2: encode */
/* Encode one field; *skipped = 1 when the record was skipped instead. */
static lf_status encode_field(prep *p, const source *src, const lf_record *rec, const char *key, const char *s,
                              size_t n, uint32_t **ids, size_t *m, int *skipped) {
    *skipped = 0;
    lf_status st = lf_tokenizer_encode(p->tok, s, n, ids, m);
    if (st == LF_OK || st == LF_ERR_NOMEM || st == LF_ERR_INVALID_ARG || st == LF_ERR_INTERNAL) return st;
    char msg[1024];
    if (key)
        snprintf(msg, sizeof msg, "%s:%llu: field '%s': %s", src->path, (unsigned long long)rec->line, key,
                 lf_last_error());
    else
        snprintf(msg, sizeof msg, "%s:%llu: %s", src->path, (unsigned long long)rec->line, lf_last_error());
    if (!p->o->skip_bad_records) return lf_fail(LF_ERR_FORMAT, "%s", msg);
    note_skip(p, msg);
    *skipped = 1;
    return LF_OK;
}

static lf_status key_of(prep *p, const lf_record *rec, size_t *len) {
    size_t need = p->sft ? rec->prompt_len + 1 + rec->response_len : rec->text_len;
    if (need + 1 > p->key_cap) {
        char *k = realloc(p->key, need + 1);
        if (!k) return lf_fail(LF_ERR_NOMEM, "out of memory");
        p->key = k;
        p->key_cap = need + 1;
    }
    if (p->sft) {
        memcpy(p->key, rec->prompt, rec->prompt_len);
        p->key[rec->prompt_len] = 0;
        memcpy(p->key + rec->prompt_len + 1, rec->response, rec->response_len);
    } else {
        memcpy(p->key, rec->text, rec->text_len);
    }
    *len = need;
    return LF_OK;
}

static lf_status encode_source(prep *p, source *src) {
    lf_status st;
    uint32_t *a = NULL, *b = NULL;
    lf_reader *r = NULL;
    if ((st = lf_sha256_file_hex(src->path, src->sha256)) != LF_OK) return st;
    lf_reader_opts ro = reader_opts(p);
    ro.on_skip = on_reader_skip;
    ro.on_skip_user = p;
    if ((st = lf_reader_open(&r, src->path, &ro)) != LF_OK) return st;
    src->fmt = lf_reader_format(r);
    const uint32_t eot = (uint32_t)p->eot;
    uint64_t last = 0, skipped_before = p->skipped;
    for (;;) {
        lf_record rec;
        int eof, skipped = 0;
        size_t na = 0, nb = 0, klen = 0;
        if ((st = lf_reader_next(r, &rec, &eof)) != LF_OK || eof) break;
        if (p->sft) {
            st = encode_field(p, src, &rec, rec.prompt_key, rec.prompt, rec.prompt_len, &a, &na, &skipped);
            if (st == LF_OK && !skipped)
                st = encode_field(p, src, &rec, rec.response_key, rec.response, rec.response_len, &b, &nb, &skipped);
        } else {
            st = encode_field(p, src, &rec, rec.text_key, rec.text, rec.text_len, &a, &na, &skipped);
        }
        if (st == LF_OK && !skipped && (st = key_of(p, &rec, &klen)) == LF_OK) {
            int s = lf__split_pick(lf__split_unit(p->key, klen), p->w);
            if (p->sft) {
                if ((st = push(p, s, a, na, 0)) == LF_OK && (st = push(p, s, b, nb, 1)) == LF_OK)
                    st = push(p, s, &eot, 1, 1);
            } else {
                if ((st = push(p, s, a, na, 1)) == LF_OK) st = push(p, s, &eot, 1, 1);
            }
            p->sp[s].records++;
            src->records++;
        }
        lf_free(a);
        lf_free(b);
        a = b = NULL;
        if (st != LF_OK) break;
        uint64_t at = lf_reader_bytes_read(r);
        if (at - last >= (1u << 20)) {
            last = at;
            progress(p, p->bytes_done + at);
        }
    }
    p->bytes_done += lf_reader_bytes_read(r);
    progress(p, p->bytes_done);
    src->skipped = p->skipped - skipped_before;
    lf_reader_close(r);
    return st;
}

/* ---------------------------------------------------------------- manifest */
static lf_status write_manifest(prep *p) {
    lf_status st = LF_OK;
    char *text = NULL, *path = NULL;
    cJSON *root = cJSON_CreateObject(), *tok = NULL, *splits = NULL, *rule = NULL, *arr = NULL, *sources = NULL;
    int ok = root != NULL;
    ok = ok && cJSON_AddStringToObject(root, "format", "llmforge-dataset");
    ok = ok && cJSON_AddNumberToObject(root, "version", 1);
    ok = ok && (tok = cJSON_AddObjectToObject(root, "tokenizer"));
    ok = ok && cJSON_AddStringToObject(tok, "spec", p->spec_out);
    if (ok && p->tok_sha[0]) ok = cJSON_AddStringToObject(tok, "sha256", p->tok_sha) != NULL;
    ok = ok && cJSON_AddNumberToObject(root, "vocab_size", p->V);
    ok = ok && cJSON_AddNumberToObject(root, "eot", p->eot);
    ok = ok && cJSON_AddStringToObject(root, "mode", p->sft ? "sft" : "pretrain");
    ok = ok && (splits = cJSON_AddObjectToObject(root, "splits"));
    uint64_t total = 0;
    for (int s = 0; s < LF_PREPARE_N_SPLITS && ok; s++) {
        const split_buf *b = &p->sp[s];
        total += b->records;
        if (b->shards == 0) continue;
        cJSON *o = cJSON_AddObjectToObject(splits, g_split_names[s]), *sh = o ? cJSON_AddArrayToObject(o, "shards") : NULL;
        ok = sh != NULL;
        for (uint64_t k = 0; k < b->shards && ok; k++) {
            char *name = shard_name(s, k);
            cJSON *js = name ? cJSON_CreateString(name) : NULL;
            free(name);
            ok = js && cJSON_AddItemToArray(sh, js);
            if (!ok) cJSON_Delete(js);
        }
        ok = ok && cJSON_AddNumberToObject(o, "tokens", (double)b->tokens);
        ok = ok && cJSON_AddNumberToObject(o, "records", (double)b->records);
        ok = ok && cJSON_AddNumberToObject(o, "target_tokens", (double)b->targets);
    }
    ok = ok && (rule = cJSON_AddObjectToObject(root, "split"));
    ok = ok && cJSON_AddStringToObject(rule, "method", "sha256");
    ok = ok && (arr = cJSON_AddArrayToObject(rule, "fractions"));
    for (int s = 0; s < LF_PREPARE_N_SPLITS && ok; s++) {
        cJSON *v = cJSON_CreateNumber(p->w[s]);
        ok = v && cJSON_AddItemToArray(arr, v);
        if (!ok) cJSON_Delete(v);
    }
    ok = ok && cJSON_AddNumberToObject(root, "records", (double)total);
    ok = ok && cJSON_AddNumberToObject(root, "skipped_records", (double)p->skipped);
    ok = ok && (sources = cJSON_AddArrayToObject(root, "sources"));
    for (size_t i = 0; i < p->n_src && ok; i++) {
        const source *s = &p->src[i];
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(sources, o);
        if (!ok) cJSON_Delete(o);
        ok = ok && cJSON_AddStringToObject(o, "path", s->path);
        ok = ok && cJSON_AddStringToObject(o, "sha256", s->sha256);
        ok = ok && cJSON_AddNumberToObject(o, "bytes", (double)s->bytes);
        ok = ok && cJSON_AddStringToObject(o, "format", lf_input_format_name(s->fmt));
        ok = ok && cJSON_AddNumberToObject(o, "records", (double)s->records);
        ok = ok && cJSON_AddNumberToObject(o, "skipped", (double)s->skipped);
    }
    if (ok) text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text || !(path = lf__path_join(p->out_dir, "dataset.json"))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory building dataset.json");
        goto done;
    }
    st = lf__file_write_atomic(path, text, strlen(text));
done:
    cJSON_free(text);
    free(path);
    return st;
}

/* ---------------------------------------------------------------- entry */
static lf_status check_opts(const lf_prepare_opts *o, const char *out_dir, double w[LF_PREPARE_N_SPLITS]) {
    if (!o) return lf_fail(LF_ERR_INVALID_ARG, "lf_prepare: opts is NULL");
    if (!out_dir || !*out_dir) return lf_fail(LF_ERR_INVALID_ARG, "prepare: empty output directory");
    if (!o->inputs || o->n_inputs == 0) return lf_fail(LF_ERR_INVALID_ARG, "prepare: no inputs");
    if (!o->tokenizer || !*o->tokenizer) return lf_fail(LF_ERR_INVALID_ARG, "prepare: no tokenizer spec");
    if (o->mode != LF_RECORD_PRETRAIN && o->mode != LF_RECORD_SFT)
        return lf_fail(LF_ERR_INVALID_ARG, "prepare: unknown mode %d", (int)o->mode);
    if (!lf_input_format_name(o->format)) return lf_fail(LF_ERR_INVALID_ARG, "prepare: unknown format %d", (int)o->format);
    double sum = 0;
    for (int s = 0; s < LF_PREPARE_N_SPLITS; s++) {
        double v = o->split[s];
        if (!(v >= 0 && v <= 1e12))
            return lf_fail(LF_ERR_RANGE, "prepare: split weight %d (%s) is %g, must be a finite number >= 0", s,
                           g_split_names[s], v);
        sum += v;
    }
    if (!(o->split[0] > 0)) return lf_fail(LF_ERR_RANGE, "prepare: the train split weight must be > 0");
    for (int s = 0; s < LF_PREPARE_N_SPLITS; s++) w[s] = o->split[s] / sum;
    return LF_OK;
}

lf_status lf_prepare(const lf_prepare_opts *opts, const char *out_dir, lf_prepare_result *result) {
    if (result) memset(result, 0, sizeof *result);
    prep p;
    memset(&p, 0, sizeof p);
    lf_status st = check_opts(opts, out_dir, p.w);
    if (st != LF_OK) return st;
    p.o = opts;
    p.out_dir = out_dir;
    p.sft = opts->mode == LF_RECORD_SFT;
    p.shard_tokens = opts->shard_tokens ? opts->shard_tokens : LF_PREPARE_SHARD_TOKENS;
    p.passes = strcmp(opts->tokenizer, "char") == 0 ? 2 : 1;
    p.eot = -1;

    if ((st = expand_inputs(&p)) != LF_OK) goto done;
    if ((st = lf_mkdirs(out_dir)) != LF_OK) goto done;
    if ((st = open_tokenizer(&p)) != LF_OK) goto done;
    for (size_t i = 0; i < p.n_src; i++)
        if ((st = encode_source(&p, &p.src[i])) != LF_OK) goto done;

    uint64_t total = p.sp[0].records + p.sp[1].records + p.sp[2].records;
    if (total == 0) {
        st = lf_fail(LF_ERR_INVALID_ARG, "prepare: the inputs hold no records (%llu skipped%s%s)",
                     (unsigned long long)p.skipped, p.skipped ? "; first: " : "", p.skipped ? p.first_skip : "");
        goto done;
    }
    if (p.sp[0].records == 0) {
        st = lf_fail(LF_ERR_INVALID_ARG,
                     "prepare: no record fell into the train split (%llu records, split %g/%g/%g); add records or "
                     "raise the train fraction", (unsigned long long)total, p.w[0], p.w[1], p.w[2]);
        goto done;
    }
    for (int s = 0; s < LF_PREPARE_N_SPLITS; s++)
        if ((st = flush_split(&p, s)) != LF_OK) goto done;
    if ((st = write_manifest(&p)) != LF_OK) goto done;

    if (result) {
        for (int s = 0; s < LF_PREPARE_N_SPLITS; s++) {
            result->records[s] = p.sp[s].records;
            result->tokens[s] = p.sp[s].tokens;
            result->target_tokens[s] = p.sp[s].targets;
            result->shards[s] = p.sp[s].shards;
        }
        result->skipped = p.skipped;
        result->sources = p.n_src;
        result->vocab_size = p.V;
        result->eot = p.eot;
        snprintf(result->first_skip, sizeof result->first_skip, "%s", p.first_skip);
    }
done:
    lf_tokenizer_free(p.tok);
    for (int s = 0; s < LF_PREPARE_N_SPLITS; s++) {
        free(p.sp[s].tok);
        free(p.sp[s].mask);
    }
    for (size_t i = 0; i < p.n_src; i++) free(p.src[i].path);
    free(p.src);
    free(p.key);
    free(p.spec_out);
    return st;
}
