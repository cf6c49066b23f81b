/*
 * Datasets: a directory with dataset.json (layout in include/llmforge/data.h)
 * and the batch sampler.
 *
 * Open validates the manifest key by key (every error names dataset.json and
 * the key path), checks the tokenizer file against its recorded SHA-256,
 * opens every shard with its CRC verified, and requires each shard's
 * vocab_size to equal the manifest's and each split's shard token counts to
 * add up to the split's "tokens". Split names other than train/val are
 * ignored (later formats may add "test"); "train" is required.
 *
 * A split is the concatenation of its shards: token p of the split lives in
 * shard k with start[k] <= p < start[k+1]. The sampler copies each window
 * straight out of the mapped shards (u16 or u32, little-endian), crossing
 * shard boundaries where a window straddles them; it allocates nothing and
 * keeps no state, so it is safe to call from several threads at once.
 *
 *   random:     s(r) = lf_rng_u64(seed, purpose, r) % (N - T)   (nanoGPT's
 *               torch.randint(len(data) - block_size))
 *   sequential: s(r) = (r * T) % (N - T - 1), computed without overflow
 *   inputs[b][t]  = tok[s + t], targets[b][t] = tok[s + t + 1], or -1 where
 *   the loss mask of that target token is 0.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "data_impl.h"

#define MANIFEST_MAX_BYTES (64u << 20)
#define N_SPLITS 2

static const char *const g_split_names[N_SPLITS] = {"train", "val"};

typedef struct split_view {
    int present;
    size_t n_shards;
    lf_shard **shards; /* (n_shards) */
    size_t *start;     /* (n_shards+1) first token of each shard within the split; start[n_shards] = N */
    size_t n_tokens;
    uint64_t *rec_start;   /* LF_SAMPLING_RECORDS: usable record starts (lf_dataset_index_records) */
    size_t n_rec;
} split_view;

struct lf_dataset {
    char *dir;
    char *spec; /* tokenizer spec, paths resolved against the (absolute) dataset dir */
    int vocab_size;
    int eot;    /* end-of-text id from the manifest, -1 when absent */
    split_view splits[N_SPLITS];
};

/* ---------------------------------------------------------------- open */
/* A non-negative integer up to 2^53 (exact in a JSON double). */
static lf_status get_count(const cJSON *obj, const char *key, const char *mpath, const char *keypath, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key '%s' is missing", mpath, keypath);
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!cJSON_IsNumber(v) || !isfinite(d) || d < 0 || d > 9007199254740992.0 || d != floor(d))
        return lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key '%s' must be a non-negative integer", mpath, keypath);
    *out = (uint64_t)d;
    return LF_OK;
}

static lf_status open_split(lf_dataset *d, split_view *sp, const cJSON *js, const char *name, const char *mpath) {
    char key[64];
    if (!cJSON_IsObject(js))
        return lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'splits.%s' must be an object", mpath, name);
    snprintf(key, sizeof key, "splits.%s.shards", name);
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(js, "shards");
    if (!shards) return lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key '%s' is missing", mpath, key);
    int ns = cJSON_IsArray(shards) ? cJSON_GetArraySize(shards) : 0;
    if (ns <= 0)
        return lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key '%s' must be a non-empty array of file names", mpath, key);
    uint64_t want = 0;
    snprintf(key, sizeof key, "splits.%s.tokens", name);
    lf_status st = get_count(js, "tokens", mpath, key, &want);
    if (st != LF_OK) return st;

    sp->present = 1;
    sp->shards = calloc((size_t)ns, sizeof *sp->shards);
    sp->start = calloc((size_t)ns + 1, sizeof *sp->start);
    if (!sp->shards || !sp->start) return lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory", d->dir);
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, shards) {
        if (!cJSON_IsString(e) || !e->valuestring[0])
            return lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'splits.%s.shards[%d]' must be a file name", mpath,
                           name, i);
        char *path = lf__path_join(d->dir, e->valuestring);
        if (!path) return lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory", d->dir);
        st = lf_shard_open(&sp->shards[i], path, 1);
        free(path);
        if (st != LF_OK) return st;
        sp->n_shards = (size_t)i + 1;
        const lf_shard *s = sp->shards[i];
        if (lf_shard_vocab_size(s) != (uint32_t)d->vocab_size)
            return lf_fail(LF_ERR_MISMATCH, "dataset '%s': shard '%s' has vocab_size %u, dataset.json says %d", d->dir,
                           lf__shard_path(s), (unsigned)lf_shard_vocab_size(s), d->vocab_size);
        sp->start[i + 1] = sp->start[i] + lf_shard_num_tokens(s);
        i++;
    }
    sp->n_tokens = sp->start[sp->n_shards];
    if ((uint64_t)sp->n_tokens != want)
        return lf_fail(LF_ERR_MISMATCH, "dataset manifest '%s': key '%s' says %llu tokens, its shards hold %zu", mpath, key,
                       (unsigned long long)want, sp->n_tokens);
    return LF_OK;
}

lf_status lf_dataset_open(lf_dataset **out, const char *dir) {
    if (!out) return lf_fail(LF_ERR_INVALID_ARG, "lf_dataset_open: out is NULL");
    *out = NULL;
    if (!dir || !*dir) return lf_fail(LF_ERR_INVALID_ARG, "lf_dataset_open: empty directory");

    lf_status st = LF_OK;
    char *mpath = NULL, *buf = NULL, *absdir = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    lf_dataset *d = calloc(1, sizeof *d);
    if (!d || !(d->dir = malloc(strlen(dir) + 1)) || !(mpath = lf__path_join(dir, "dataset.json"))) {
        st = lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory", dir);
        goto fail;
    }
    strcpy(d->dir, dir);
    if ((st = lf_file_read_all(mpath, MANIFEST_MAX_BYTES, &buf, &len)) != LF_OK) {
        lf_error_prefix("dataset '%s'", dir);
        goto fail;
    }
    root = cJSON_ParseWithLength(buf, len);
    if (!root || !cJSON_IsObject(root)) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = !root && at && at >= buf && at <= buf + len ? (size_t)(at - buf) : 0;
        st = root ? lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': not a JSON object", mpath)
                  : lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': invalid JSON near byte %zu", mpath, off);
        goto fail;
    }

    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "llmforge-dataset") != 0) {
        st = lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'format' must be \"llmforge-dataset\"", mpath);
        goto fail;
    }
    uint64_t u = 0;
    if ((st = get_count(root, "version", mpath, "version", &u)) != LF_OK) goto fail;
    if (u != 1) {
        st = lf_fail(LF_ERR_UNSUPPORTED, "dataset manifest '%s': key 'version' is %llu, this build reads version 1", mpath,
                     (unsigned long long)u);
        goto fail;
    }
    if ((st = get_count(root, "vocab_size", mpath, "vocab_size", &u)) != LF_OK) goto fail;
    if (u < 1 || u > INT32_MAX) {
        st = lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'vocab_size' is %llu, must be 1..%d", mpath,
                     (unsigned long long)u, INT32_MAX);
        goto fail;
    }
    d->vocab_size = (int)u;
    d->eot = -1;
    const cJSON *eotj = cJSON_GetObjectItemCaseSensitive(root, "eot");
    if (eotj && !cJSON_IsNull(eotj)) {
        if (!cJSON_IsNumber(eotj) || eotj->valuedouble < 0 || eotj->valuedouble >= (double)d->vocab_size ||
            eotj->valuedouble != floor(eotj->valuedouble)) {
            st = lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'eot' must be a token id below vocab_size %d", mpath,
                         d->vocab_size);
            goto fail;
        }
        d->eot = (int)eotj->valuedouble;
    }

    /* tokenizer: spec resolved against the absolute dataset dir, file hash checked */
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
    const cJSON *spec = cJSON_IsObject(tok) ? cJSON_GetObjectItemCaseSensitive(tok, "spec") : NULL;
    if (!cJSON_IsString(spec) || !spec->valuestring[0]) {
        st = lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'tokenizer.spec' is missing or not a string", mpath);
        goto fail;
    }
    absdir = realpath(dir, NULL);
    if ((st = lf__tokenizer_spec_resolve(spec->valuestring, absdir ? absdir : dir, &d->spec)) != LF_OK) goto fail;
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(tok, "sha256");
    const char *tfile = lf__tokenizer_spec_file(d->spec);
    if (sha && !cJSON_IsString(sha)) {
        st = lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'tokenizer.sha256' must be a string", mpath);
        goto fail;
    }
    if (sha && tfile) {
        char got[65];
        if ((st = lf_sha256_file_hex(tfile, got)) != LF_OK) {
            lf_error_prefix("dataset '%s': tokenizer", dir);
            goto fail;
        }
        if (strcmp(got, sha->valuestring) != 0) {
            st = lf_fail(LF_ERR_CHECKSUM, "dataset '%s': tokenizer file '%s' has sha256 %s, key 'tokenizer.sha256' says %s",
                         dir, tfile, got, sha->valuestring);
            goto fail;
        }
    }

    const cJSON *splits = cJSON_GetObjectItemCaseSensitive(root, "splits");
    if (!cJSON_IsObject(splits)) {
        st = lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'splits' is missing or not an object", mpath);
        goto fail;
    }
    for (int s = 0; s < N_SPLITS; s++) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(splits, g_split_names[s]);
        if (!js) {
            if (s == LF_SPLIT_TRAIN) {
                st = lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'splits.train' is missing", mpath);
                goto fail;
            }
            continue;
        }
        if ((st = open_split(d, &d->splits[s], js, g_split_names[s], mpath)) != LF_OK) goto fail;
    }

    cJSON_Delete(root);
    lf_free(buf);
    free(mpath);
    free(absdir);
    *out = d;
    return LF_OK;

fail:
    cJSON_Delete(root);
    lf_free(buf);
    free(mpath);
    free(absdir);
    lf_dataset_close(d);
    return st;
}

void lf_dataset_close(lf_dataset *d) {
    if (!d) return;
    for (int s = 0; s < N_SPLITS; s++) {
        split_view *sp = &d->splits[s];
        for (size_t i = 0; i < sp->n_shards; i++) lf_shard_close(sp->shards[i]);
        free(sp->shards);
        free(sp->start);
        free(sp->rec_start);
    }
    free(d->spec);
    free(d->dir);
    free(d);
}

int lf_dataset_vocab_size(const lf_dataset *d) { return d ? d->vocab_size : 0; }
int lf_dataset_eot(const lf_dataset *d) { return d ? d->eot : -1; }

size_t lf_dataset_num_tokens(const lf_dataset *d, lf_split split) {
    if (!d || (int)split < 0 || (int)split >= N_SPLITS) return 0;
    return d->splits[split].n_tokens;
}

const char *lf_dataset_tokenizer_spec(const lf_dataset *d) { return d ? d->spec : NULL; }
const char *lf_dataset_dir(const lf_dataset *d) { return d ? d->dir : NULL; }

/* ---------------------------------------------------------------- batches */
/* (a * b) mod m without overflow, m >= 1. */
static uint64_t mulmod_u64(uint64_t a, uint64_t b, uint64_t m) {
#if defined(__SIZEOF_INT128__)
    return (uint64_t)(((unsigned __int128)a * b) % m);
#else
    uint64_t r = 0;
    a %= m;
    b %= m;
    while (b) {
        if (b & 1) r = (r >= m - a) ? r - (m - a) : r + a;
        a = (a >= m - a) ? a - (m - a) : a + a;
        b >>= 1;
    }
    return r;
#endif
}

/* Copy split tokens [pos, pos+count) to dst as int32; with apply_mask, a
 * token whose loss mask is 0 becomes -1. pos + count <= sp->n_tokens. */
static void copy_tokens(const split_view *sp, size_t pos, size_t count, int32_t *dst, int apply_mask) {
    /* the shard holding pos: the last k with start[k] <= pos (skips empty shards) */
    size_t lo = 0, hi = sp->n_shards - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (sp->start[mid] <= pos) lo = mid;
        else hi = mid - 1;
    }
    size_t k = lo, off = pos - sp->start[k];
    while (count > 0) {
        const lf_shard *s = sp->shards[k];
        size_t avail = sp->start[k + 1] - sp->start[k] - off;
        size_t m = count < avail ? count : avail;
        const unsigned char *tb = lf__shard_token_bytes(s);
        if (lf__shard_bytes_per_token(s) == 2) {
            const unsigned char *p = tb + 2 * off;
            for (size_t j = 0; j < m; j++) dst[j] = (int32_t)lf__ld_u16le(p + 2 * j);
        } else {
            const unsigned char *p = tb + 4 * off;
            for (size_t j = 0; j < m; j++) dst[j] = (int32_t)lf__ld_u32le(p + 4 * j);
        }
        const unsigned char *mask = apply_mask ? lf__shard_mask_bytes(s) : NULL;
        if (mask)
            for (size_t j = 0; j < m; j++)
                if (!mask[off + j]) dst[j] = -1;
        dst += m;
        count -= m;
        k++;
        off = 0;
    }
}

lf_status lf_dataset_index_records(lf_dataset *d, lf_split split, int T) {
    if (!d || (int)split < 0 || (int)split >= N_SPLITS || T < 1)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_dataset_index_records: bad argument");
    split_view *sp = &d->splits[split];
    const char *name = g_split_names[split];
    if (!sp->present) return lf_fail(LF_ERR_NOT_FOUND, "dataset '%s': has no split '%s'", d->dir, name);
    if (sp->rec_start) return LF_OK;
    if (d->eot < 0)
        return lf_fail(LF_ERR_UNSUPPORTED, "dataset '%s' names no end-of-text token (\"eot\" in dataset.json), so it "
                       "has no record boundaries; use data.sampling random or sequential", d->dir);
    const uint64_t N = sp->n_tokens;
    if (N < (uint64_t)T + 2)
        return lf_fail(LF_ERR_RANGE, "dataset '%s': split '%s' has %llu tokens, fewer than block_size+2 = %d", d->dir,
                       name, (unsigned long long)N, T + 2);
    const uint64_t last = N - (uint64_t)T - 1; /* a window of T+1 tokens starting here still fits */
    size_t cap = 1024, n = 0;
    uint64_t *starts = malloc(cap * sizeof *starts);
    int32_t buf[4096];
    if (!starts) return lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory indexing records", d->dir);
    starts[n++] = 0;
    for (uint64_t pos = 0; pos < last; pos += sizeof buf / sizeof buf[0]) {
        size_t m = (size_t)(last - pos < sizeof buf / sizeof buf[0] ? last - pos : sizeof buf / sizeof buf[0]);
        copy_tokens(sp, (size_t)pos, m, buf, 0);
        for (size_t j = 0; j < m; j++) {
            if (buf[j] != d->eot) continue;
            if (n == cap) {
                uint64_t *bigger = realloc(starts, 2 * cap * sizeof *starts);
                if (!bigger) {
                    free(starts);
                    return lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory indexing records", d->dir);
                }
                starts = bigger;
                cap *= 2;
            }
            starts[n++] = pos + j + 1; /* the record after this end-of-text (<= last) */
        }
    }
    sp->rec_start = starts;
    sp->n_rec = n;
    return LF_OK;
}

lf_status lf_dataset_get_batch(const lf_dataset *d, lf_split split, lf_sampling sampling, uint64_t seed,
                               uint32_t purpose, uint64_t first_row, int B, int T, int32_t *inputs,
                               int32_t *targets) {
    if (!d || !inputs || !targets) return lf_fail(LF_ERR_INVALID_ARG, "lf_dataset_get_batch: NULL argument");
    if ((int)split < 0 || (int)split >= N_SPLITS)
        return lf_fail(LF_ERR_INVALID_ARG, "dataset '%s': unknown split %d", d->dir, (int)split);
    if (sampling != LF_SAMPLING_RANDOM && sampling != LF_SAMPLING_SEQUENTIAL && sampling != LF_SAMPLING_RECORDS)
        return lf_fail(LF_ERR_INVALID_ARG, "dataset '%s': unknown sampling mode %d", d->dir, (int)sampling);
    if (B < 1 || T < 1)
        return lf_fail(LF_ERR_INVALID_ARG, "dataset '%s': batch size %d and block_size %d must be positive", d->dir, B, T);
    const split_view *sp = &d->splits[split];
    const char *name = g_split_names[split];
    if (!sp->present) return lf_fail(LF_ERR_NOT_FOUND, "dataset '%s': has no split '%s'", d->dir, name);
    const uint64_t N = sp->n_tokens, TT = (uint64_t)T;
    if (N < TT + 2)
        return lf_fail(LF_ERR_RANGE, "dataset '%s': split '%s' has %llu tokens, fewer than block_size+2 = %llu", d->dir,
                       name, (unsigned long long)N, (unsigned long long)(TT + 2));

    if (sampling == LF_SAMPLING_RECORDS && !sp->rec_start)
        return lf_fail(LF_ERR_INVALID_ARG, "dataset '%s': split '%s' has no record index (lf_dataset_index_records)",
                       d->dir, name);
    for (int b = 0; b < B; b++) {
        const uint64_t r = first_row + (uint64_t)b;
        uint64_t s;
        if (sampling == LF_SAMPLING_RANDOM) s = lf_rng_u64(seed, purpose, r) % (N - TT);
        else if (sampling == LF_SAMPLING_SEQUENTIAL) s = mulmod_u64(r, TT, N - TT - 1);
        else s = sp->rec_start[lf_rng_u64(seed, purpose, r) % sp->n_rec];
        copy_tokens(sp, (size_t)s, (size_t)T, inputs + (size_t)b * (size_t)T, 0);
        copy_tokens(sp, (size_t)s + 1, (size_t)T, targets + (size_t)b * (size_t)T, 1);
    }
    return LF_OK;
}
