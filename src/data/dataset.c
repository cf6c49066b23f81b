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
 * A directory without dataset.json that holds llm.c token files (*.bin with
 * llm.c's magic, the train split from names containing "train", val from
 * names containing "val", each sorted by name) opens as a dataset too:
 * version-1 files are GPT-2 tokens (vocab 50257, end-of-text 50256),
 * version-2 files LLaMA-3 tokens (vocab 128256). llm.c records no tokenizer,
 * so its spec is NULL until lf_dataset_set_tokenizer names one.
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
 *   records:    s(r) = a record start drawn by lf_rng_u64(seed, purpose, r)
 *   packed:     the split cut into W = (N-1)/T windows [wT, wT+T]; row r is
 *               window perm_e(r mod W) of epoch e = r / W, where perm_e is a
 *               pseudo-random permutation of 0..W-1 keyed by (seed, purpose,
 *               e): a 6-round Feistel network on the smallest even number of
 *               bits covering W, cycle-walked into range. It is evaluated per
 *               row (no table), so any row, hence a resume, costs O(1).
 *   inputs[b][t]  = tok[s + t], targets[b][t] = tok[s + t + 1], or -1 where
 *   the loss mask of that target token is 0.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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
    uint64_t *rec_start; /* LF_SAMPLING_RECORDS: usable record starts (lf_dataset_index_records) */
    size_t n_rec;
} split_view;

struct lf_dataset {
    char *dir;
    char *spec; /* tokenizer spec, paths resolved against the (absolute) dataset dir */
    int vocab_size;
    int eot;       /* end-of-text id from the manifest, -1 when absent */
    int llmc;      /* opened from llm.c files (no dataset.json) */
    char mode[16]; /* dataset.json's "mode" ("pretrain", "sft", "dpo"); "" when absent */
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
        return lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key '%s' must be a non-empty array of file names", mpath,
                       key);
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
            return lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'splits.%s.shards[%d]' must be a file name",
                           mpath, name, i);
        char *path = lf__path_join(d->dir, e->valuestring);
        if (!path) return lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory", d->dir);
        st = lf_shard_open(&sp->shards[i], path, 1);
        free(path);
        if (st != LF_OK) return st;
        sp->n_shards = (size_t)i + 1;
        const lf_shard *s = sp->shards[i];
        if (lf_shard_is_llmc(s) && lf_shard_vocab_size(s) > (uint32_t)d->vocab_size)
            return lf_fail(LF_ERR_MISMATCH, "dataset '%s': llm.c shard '%s' holds token %u, not below vocab_size %d",
                           d->dir, lf__shard_path(s), (unsigned)lf_shard_vocab_size(s) - 1, d->vocab_size);
        if (!lf_shard_is_llmc(s) && lf_shard_vocab_size(s) != (uint32_t)d->vocab_size)
            return lf_fail(LF_ERR_MISMATCH, "dataset '%s': shard '%s' has vocab_size %u, dataset.json says %d", d->dir,
                           lf__shard_path(s), (unsigned)lf_shard_vocab_size(s), d->vocab_size);
        sp->start[i + 1] = sp->start[i] + lf_shard_num_tokens(s);
        i++;
    }
    sp->n_tokens = sp->start[sp->n_shards];
    if ((uint64_t)sp->n_tokens != want)
        return lf_fail(LF_ERR_MISMATCH, "dataset manifest '%s': key '%s' says %llu tokens, its shards hold %zu", mpath,
                       key, (unsigned long long)want, sp->n_tokens);
    return LF_OK;
}

/* ---------------------------------------------------------------- llm.c directories */
static int is_llmc_file(const char *path) {
    unsigned char h[4];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int ok = fread(h, 1, 4, f) == 4 && lf__ld_u32le(h) == LF_LLMC_MAGIC;
    fclose(f);
    return ok;
}

/* d->dir has no dataset.json: open its llm.c files (LF_ERR_NOT_FOUND when
 * there are none, so the caller reports the missing manifest). */
static lf_status open_llmc_dir(lf_dataset *d) {
    char **names = NULL;
    size_t n = 0;
    lf_status st = lf__list_dir_sorted(d->dir, 1, &names, &n);
    if (st != LF_OK) return LF_ERR_NOT_FOUND; /* the caller's manifest error says why */
    size_t cnt[N_SPLITS] = {0, 0};
    char **paths = calloc(n ? n : 1, sizeof *paths);
    int *which = calloc(n ? n : 1, sizeof *which);
    if (!paths || !which) {
        st = lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory", d->dir);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        which[i] = -1;
        if (len < 5 || strcmp(names[i] + len - 4, ".bin") != 0) continue;
        int s = strstr(names[i], "train") ? LF_SPLIT_TRAIN : strstr(names[i], "val") ? LF_SPLIT_VAL : -1;
        if (s < 0) continue;
        if (!(paths[i] = lf__path_join(d->dir, names[i]))) {
            st = lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory", d->dir);
            goto done;
        }
        if (!is_llmc_file(paths[i])) continue;
        which[i] = s;
        cnt[s]++;
    }
    if (cnt[LF_SPLIT_TRAIN] == 0) {
        st = cnt[LF_SPLIT_VAL] ? lf_fail(LF_ERR_FORMAT,
                                         "dataset '%s': llm.c files for 'val' but none with \"train\" in "
                                         "its name",
                                         d->dir)
                               : LF_ERR_NOT_FOUND;
        goto done;
    }
    d->eot = -1;
    for (int s = 0; s < N_SPLITS; s++) {
        split_view *sp = &d->splits[s];
        if (!cnt[s]) continue;
        sp->present = 1;
        sp->shards = calloc(cnt[s], sizeof *sp->shards);
        sp->start = calloc(cnt[s] + 1, sizeof *sp->start);
        if (!sp->shards || !sp->start) {
            st = lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory", d->dir);
            goto done;
        }
        for (size_t i = 0; i < n; i++) {
            if (which[i] != s) continue;
            lf_shard *sh = NULL;
            if ((st = lf_shard_open(&sh, paths[i], 0)) != LF_OK) goto done;
            sp->shards[sp->n_shards++] = sh;
            sp->start[sp->n_shards] = sp->start[sp->n_shards - 1] + lf_shard_num_tokens(sh);
            /* version 1 = GPT-2 (u16), version 2 = LLaMA-3 (u32) */
            int V = lf__shard_bytes_per_token(sh) == 2 ? 50257 : 128256;
            if (d->vocab_size && d->vocab_size != V) {
                st = lf_fail(LF_ERR_MISMATCH, "dataset '%s': llm.c file '%s' is version %d, others are not", d->dir,
                             names[i], V == 50257 ? 1 : 2);
                goto done;
            }
            d->vocab_size = V;
            d->eot = V == 50257 ? 50256 : -1;
            if (lf_shard_vocab_size(sh) > (uint32_t)V) {
                st = lf_fail(LF_ERR_MISMATCH, "dataset '%s': llm.c file '%s' holds token %u, not below vocab_size %d",
                             d->dir, names[i], (unsigned)lf_shard_vocab_size(sh) - 1, V);
                goto done;
            }
        }
        sp->n_tokens = sp->start[sp->n_shards];
    }
    d->llmc = 1;
done:
    for (size_t i = 0; i < n && paths; i++) free(paths[i]);
    free(paths);
    free(which);
    lf__free_names(names, n);
    return st;
}

lf_status lf_dataset_set_tokenizer(lf_dataset *d, const char *spec) {
    if (!d || !spec || !*spec) return lf_fail(LF_ERR_INVALID_ARG, "lf_dataset_set_tokenizer: empty spec");
    if (d->spec) {
        if (strcmp(d->spec, spec) == 0) return LF_OK;
        return lf_fail(LF_ERR_CONFIG, "dataset '%s' names its tokenizer '%s'; another one ('%s') cannot replace it",
                       d->dir, d->spec, spec);
    }
    lf_tokenizer *tok = NULL;
    lf_status st = lf_tokenizer_open(&tok, spec, NULL);
    if (st != LF_OK) return st;
    int V = lf_tokenizer_vocab_size(tok);
    lf_tokenizer_free(tok);
    if (V != d->vocab_size)
        return lf_fail(LF_ERR_MISMATCH, "tokenizer '%s' has %d tokens, dataset '%s' has vocab_size %d", spec, V, d->dir,
                       d->vocab_size);
    if (!(d->spec = malloc(strlen(spec) + 1))) return lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory", d->dir);
    strcpy(d->spec, spec);
    return LF_OK;
}

int lf_dataset_is_llmc(const lf_dataset *d) { return d ? d->llmc : 0; }

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
    if (access(mpath, F_OK) != 0 && errno == ENOENT) {
        lf_status lst = open_llmc_dir(d);
        if (lst == LF_OK) {
            free(mpath);
            *out = d;
            return LF_OK;
        }
        if (lst != LF_ERR_NOT_FOUND) {
            st = lst;
            goto fail;
        }
        for (int s = 0; s < N_SPLITS; s++) d->splits[s].present = 0;
    }
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
        st = lf_fail(LF_ERR_UNSUPPORTED, "dataset manifest '%s': key 'version' is %llu, this build reads version 1",
                     mpath, (unsigned long long)u);
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
            st = lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'eot' must be a token id below vocab_size %d",
                         mpath, d->vocab_size);
            goto fail;
        }
        d->eot = (int)eotj->valuedouble;
    }

    const cJSON *modej = cJSON_GetObjectItemCaseSensitive(root, "mode");
    if (cJSON_IsString(modej)) snprintf(d->mode, sizeof d->mode, "%s", modej->valuestring);

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
            st = lf_fail(LF_ERR_CHECKSUM,
                         "dataset '%s': tokenizer file '%s' has sha256 %s, key 'tokenizer.sha256' says %s", dir, tfile,
                         got, sha->valuestring);
            goto fail;
        }
    }

    /* gpt2:DIR: each file against tokenizer.files */
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(tok, "files");
    if (files && !cJSON_IsObject(files)) {
        st = lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'tokenizer.files' must be an object", mpath);
        goto fail;
    }
    if (files && strncmp(d->spec, "gpt2:", 5) == 0) {
        const cJSON *f;
        cJSON_ArrayForEach(f, files) {
            if (!cJSON_IsString(f)) {
                st = lf_fail(LF_ERR_FORMAT, "dataset manifest '%s': key 'tokenizer.files.%s' must be a string", mpath,
                             f->string);
                goto fail;
            }
            if (strcmp(f->string, lf__gpt2_files[0]) && strcmp(f->string, lf__gpt2_files[1])) continue;
            char got[65], *fp = lf__path_join(d->spec + 5, f->string);
            if (!fp) {
                st = lf_fail(LF_ERR_NOMEM, "dataset '%s': out of memory", dir);
                goto fail;
            }
            st = lf_sha256_file_hex(fp, got);
            if (st == LF_OK && strcmp(got, f->valuestring) != 0)
                st = lf_fail(LF_ERR_CHECKSUM,
                             "dataset '%s': tokenizer file '%s' has sha256 %s, key "
                             "'tokenizer.files.%s' says %s",
                             dir, fp, got, f->string, f->valuestring);
            else if (st != LF_OK) lf_error_prefix("dataset '%s': tokenizer", dir);
            free(fp);
            if (st != LF_OK) goto fail;
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
const char *lf_dataset_mode(const lf_dataset *d) { return d ? d->mode : ""; }
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

/* For the pair index (pairs.c) and the SFT packer: split tokens [pos, pos+count), the masked ones -1. */
lf_status lf__dataset_copy(const lf_dataset *d, lf_split split, size_t pos, size_t count, int32_t *dst,
                           int apply_mask) {
    if (!d || (int)split < 0 || (int)split >= N_SPLITS || !d->splits[split].present)
        return lf_fail(LF_ERR_NOT_FOUND, "dataset '%s': has no split %d", d ? d->dir : "(null)", (int)split);
    const split_view *sp = &d->splits[split];
    if (pos > sp->n_tokens || count > sp->n_tokens - pos)
        return lf_fail(LF_ERR_RANGE, "dataset '%s': tokens %zu..%zu of split '%s' (%zu tokens)", d->dir, pos,
                       pos + count, g_split_names[split], sp->n_tokens);
    if (count) copy_tokens(sp, pos, count, dst, apply_mask);
    return LF_OK;
}

lf_status lf_dataset_index_records(lf_dataset *d, lf_split split, int T) {
    if (!d || (int)split < 0 || (int)split >= N_SPLITS || T < 1)
        return lf_fail(LF_ERR_INVALID_ARG, "lf_dataset_index_records: bad argument");
    split_view *sp = &d->splits[split];
    const char *name = g_split_names[split];
    if (!sp->present) return lf_fail(LF_ERR_NOT_FOUND, "dataset '%s': has no split '%s'", d->dir, name);
    if (sp->rec_start) return LF_OK;
    if (d->eot < 0)
        return lf_fail(LF_ERR_UNSUPPORTED,
                       "dataset '%s' names no end-of-text token (\"eot\" in dataset.json), so it "
                       "has no record boundaries; use data.sampling random or sequential",
                       d->dir);
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

/* ---------------------------------------------------------------- packed epochs */
/* Round function of the Feistel network: `half` bits of Philox output. */
static uint64_t feistel_f(uint64_t seed, uint32_t purpose, uint64_t epoch, int round, uint64_t x, uint64_t mask) {
    return lf_rng_u64(seed, purpose, lf_rng_mix(lf_rng_mix(epoch, (uint64_t)round + 1), x)) & mask;
}

/* Position of i (< n) under the permutation of 0..n-1 keyed by (seed, purpose, epoch). */
static uint64_t permute(uint64_t i, uint64_t n, uint64_t seed, uint32_t purpose, uint64_t epoch) {
    if (n <= 1) return 0;
    int bits = 2;
    while (bits < 64 && (UINT64_C(1) << bits) < n) bits += 2; /* an even number of bits covering n */
    const int half = bits / 2;
    const uint64_t mask = (UINT64_C(1) << half) - 1;
    uint64_t x = i;
    do { /* cycle walking: the domain is < 4n, so a few rounds on average */
        uint64_t l = x >> half, r = x & mask;
        for (int k = 0; k < 6; k++) {
            uint64_t t = l ^ feistel_f(seed, purpose, epoch, k, r, mask);
            l = r;
            r = t;
        }
        x = l << half | r;
    } while (x >= n);
    return x;
}

uint64_t lf_dataset_packed_windows(const lf_dataset *d, lf_split split, int T) {
    if (!d || (int)split < 0 || (int)split >= N_SPLITS || T < 1 || !d->splits[split].present) return 0;
    uint64_t N = d->splits[split].n_tokens;
    return N > 1 ? (N - 1) / (uint64_t)T : 0;
}

uint64_t lf_dataset_packed_window(uint64_t row, uint64_t n_windows, uint64_t seed, uint32_t purpose) {
    if (n_windows == 0) return 0;
    return permute(row % n_windows, n_windows, seed, purpose, row / n_windows);
}

lf_status lf_dataset_get_batch(const lf_dataset *d, lf_split split, lf_sampling sampling, uint64_t seed,
                               uint32_t purpose, uint64_t first_row, int B, int T, int32_t *inputs, int32_t *targets) {
    if (!d || !inputs || !targets) return lf_fail(LF_ERR_INVALID_ARG, "lf_dataset_get_batch: NULL argument");
    if ((int)split < 0 || (int)split >= N_SPLITS)
        return lf_fail(LF_ERR_INVALID_ARG, "dataset '%s': unknown split %d", d->dir, (int)split);
    if (sampling != LF_SAMPLING_RANDOM && sampling != LF_SAMPLING_SEQUENTIAL && sampling != LF_SAMPLING_RECORDS &&
        sampling != LF_SAMPLING_PACKED)
        return lf_fail(LF_ERR_INVALID_ARG, "dataset '%s': unknown sampling mode %d", d->dir, (int)sampling);
    if (B < 1 || T < 1)
        return lf_fail(LF_ERR_INVALID_ARG, "dataset '%s': batch size %d and block_size %d must be positive", d->dir, B,
                       T);
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
        else if (sampling == LF_SAMPLING_RECORDS) s = sp->rec_start[lf_rng_u64(seed, purpose, r) % sp->n_rec];
        else s = lf_dataset_packed_window(r, (N - 1) / TT, seed, purpose) * TT;
        copy_tokens(sp, (size_t)s, (size_t)T, inputs + (size_t)b * (size_t)T, 0);
        copy_tokens(sp, (size_t)s + 1, (size_t)T, targets + (size_t)b * (size_t)T, 1);
    }
    return LF_OK;
}
