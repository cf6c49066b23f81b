/*
 * Byte-level BPE training (lf_bpe_train): the "bpe:" tokenizer's vocabulary
 * from the user's corpus, with GPT-2's pre-tokeniser.
 *
 * 1. Count. Each input file is read in blocks of 16 MiB, each block ending
 *    at the last safe cut (lf__bpe_cut's rule: a cut there leaves the
 *    pre-tokens unchanged, so the counts equal those of the whole file; a
 *    block with no such place is cut at a character boundary). Blocks are
 *    checked as strict UTF-8 (an error names file and byte offset) and
 *    pre-tokenised; piece frequencies go to a hash table of byte strings.
 * 2. Merge. Each distinct piece is a word of single-byte symbols with its
 *    frequency. Pair counts (sum over words of frequency x occurrences) live
 *    in a hash table keyed by the symbol pair, each pair with the list of
 *    words that may hold it. A binary max-heap orders pairs by count, then by
 *    the bytes of the left symbol, then of the right (byte-wise, a prefix
 *    before its extensions): the tie-break depends on nothing but the data.
 *    The heap is lazy: an entry whose count is out of date is dropped or
 *    re-pushed with the current count when it reaches the top; every count
 *    increase pushes a fresh entry, so the top valid entry is the maximum.
 *    Merging pair (a, b) into token X touches only the words on the pair's
 *    list: each such word's pairs are subtracted, its (a, b) occurrences are
 *    replaced left to right without overlap, and its pairs are added back;
 *    pairs holding X gain the word on their lists and a heap entry.
 *    When X's bytes are already a token (two different pairs can spell the
 *    same bytes) the existing id is reused and no rank is added, so every
 *    token appears once, as tiktoken requires.
 * 3. Stop when ranks reach vocab_size - 1 (the last id is <|endoftext|>),
 *    when no pair is left, or when the best pair occurs fewer than
 *    min_frequency times.
 * 4. Write the tiktoken rank file: ranks 0..255 = bytes 0x00..0xFF, then the
 *    merges in order, "base64 rank\n" per line, atomically.
 *
 * The ids a bpe: tokenizer then gives follow tiktoken's encoding rule
 * (lowest-rank adjacent merge, bpe_merge.c), which is how tiktoken reads the
 * file too; it usually, but not always, reproduces the training merges.
 *
 * References: Sennrich et al. 2016 (BPE for words); GPT-2 (byte-level,
 * pre-tokenised); Hugging Face tokenizers' BpeTrainer (incremental pair
 * counts with per-pair word sets).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "data_impl.h"

#define BLOCK_BYTES (16u << 20)

/* ---------------------------------------------------------------- growable arrays */
#define GROW(ptr, cap, need, fail_label) \
    do { \
        if ((need) > (cap)) { \
            size_t nc_ = (cap) ? (cap) : 16; \
            while (nc_ < (need)) nc_ *= 2; \
            void *np_ = realloc((ptr), nc_ * sizeof *(ptr)); \
            if (!np_) goto fail_label; \
            (ptr) = np_; \
            (cap) = nc_; \
        } \
    } while (0)

/* ---------------------------------------------------------------- piece counts */
typedef struct piece_tab {
    uint32_t *slot; /* index + 1, 0 = empty */
    size_t mask, n;
    uint64_t *hash, *count, *off;
    uint32_t *len;
    size_t cap;
    unsigned char *blob;
    size_t blob_n, blob_cap;
} piece_tab;

static void piece_tab_free(piece_tab *t) {
    free(t->slot);
    free(t->hash);
    free(t->count);
    free(t->off);
    free(t->len);
    free(t->blob);
}

static int piece_tab_rehash(piece_tab *t, size_t slots) {
    uint32_t *s = calloc(slots, sizeof *s);
    if (!s) return 0;
    for (size_t i = 0; i < t->n; i++) {
        size_t j = (size_t)t->hash[i] & (slots - 1);
        while (s[j]) j = (j + 1) & (slots - 1);
        s[j] = (uint32_t)(i + 1);
    }
    free(t->slot);
    t->slot = s;
    t->mask = slots - 1;
    return 1;
}

/* count += 1 for piece p[0, n); 0 when out of memory */
static int piece_add(piece_tab *t, const unsigned char *p, size_t n) {
    uint64_t h = lf__bpe_hash(p, n);
    size_t j = (size_t)h & t->mask;
    for (;;) {
        uint32_t e = t->slot[j];
        if (!e) break;
        size_t i = e - 1;
        if (t->hash[i] == h && t->len[i] == n && memcmp(t->blob + t->off[i], p, n) == 0) {
            t->count[i]++;
            return 1;
        }
        j = (j + 1) & t->mask;
    }
    if (t->n >= UINT32_MAX - 1) return 0;
    size_t need = t->n + 1;
    if (need > t->cap) {
        size_t c = t->cap ? t->cap * 2 : 1024;
        uint64_t *h2 = realloc(t->hash, c * sizeof *h2);
        if (!h2) return 0;
        t->hash = h2;
        uint64_t *c2 = realloc(t->count, c * sizeof *c2);
        if (!c2) return 0;
        t->count = c2;
        uint64_t *o2 = realloc(t->off, c * sizeof *o2);
        if (!o2) return 0;
        t->off = o2;
        uint32_t *l2 = realloc(t->len, c * sizeof *l2);
        if (!l2) return 0;
        t->len = l2;
        t->cap = c;
    }
    GROW(t->blob, t->blob_cap, t->blob_n + n, oom);
    memcpy(t->blob + t->blob_n, p, n);
    size_t i = t->n++;
    t->hash[i] = h;
    t->count[i] = 1;
    t->off[i] = t->blob_n;
    t->len[i] = (uint32_t)n;
    t->blob_n += n;
    t->slot[j] = (uint32_t)(i + 1);
    if (t->n * 2 > t->mask + 1 && !piece_tab_rehash(t, (t->mask + 1) * 2)) return 0;
    return 1;
oom:
    return 0;
}

/* The last safe cut in s[0, len) (0 when none). */
static size_t last_cut(const unsigned char *s, size_t len) {
    for (size_t p = len; p-- > 1;) {
        unsigned char c = s[p], d = s[p - 1];
        if ((c == ' ' || (c >= '\t' && c <= '\r')) && d > 0x20 && d < 0x7F) return p;
    }
    return 0;
}

static lf_status count_block(lf__pretok_scan *sc, piece_tab *tab, const unsigned char *s, size_t len, const char *path,
                             uint64_t file_off, lf_bpe_train_stats *stats) {
    size_t v = lf__utf8_valid_prefix(s, len);
    if (v < len) {
        uint32_t cp;
        const char *why = "";
        lf__utf8_decode(s + v, len - v, &cp, &why);
        return lf_fail(LF_ERR_FORMAT, "bpe training input '%s': invalid UTF-8 at byte offset %llu (byte 0x%02X: %s)",
                       path, (unsigned long long)(file_off + v), s[v], why);
    }
    size_t pos = 0;
    while (pos < len) {
        size_t a, e;
        lf_status st = lf__pretok_next(sc, s, len, pos, &a, &e);
        if (st == LF_ERR_NOT_FOUND) break;
        if (st != LF_OK) return st;
        if (e - a >= UINT32_MAX)
            return lf_fail(LF_ERR_RANGE, "bpe training input '%s': a piece of %zu bytes at offset %llu", path, e - a,
                           (unsigned long long)(file_off + a));
        if (!piece_add(tab, s + a, e - a)) return lf_fail(LF_ERR_NOMEM, "bpe training: out of memory counting pieces");
        stats->pieces++;
        pos = e;
    }
    return LF_OK;
}

static lf_status count_file(lf__pretok_scan *sc, piece_tab *tab, const char *path, lf_bpe_train_stats *stats) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return lf_fail(errno == ENOENT ? LF_ERR_NOT_FOUND : LF_ERR_IO, "bpe training input '%s': cannot open: %s", path,
                       strerror(errno));
    unsigned char *buf = malloc(BLOCK_BYTES);
    lf_status st = LF_OK;
    if (!buf) {
        fclose(f);
        return lf_fail(LF_ERR_NOMEM, "bpe training: out of memory for the read buffer");
    }
    size_t have = 0;
    uint64_t file_off = 0; /* offset of buf[0] in the file */
    for (;;) {
        size_t got = fread(buf + have, 1, BLOCK_BYTES - have, f);
        if (ferror(f)) {
            st = lf_fail(LF_ERR_IO, "bpe training input '%s': read error", path);
            break;
        }
        have += got;
        stats->input_bytes += got;
        int eof = got == 0 || feof(f);
        size_t take = have;
        if (!eof) {
            take = last_cut(buf, have);
            if (take == 0) { /* no safe cut in 16 MiB: a character boundary */
                take = have;
                while (take > 0 && lf__utf8_is_cont(buf[take - 1])) take--;
                if (take > 0 && buf[take - 1] >= 0xC0) take--; /* and the lead byte before them */
                if (take == 0) take = have;
            }
        }
        if ((st = count_block(sc, tab, buf, take, path, file_off, stats)) != LF_OK) break;
        memmove(buf, buf + take, have - take);
        have -= take;
        file_off += take;
        if (eof) break; /* take == have: all counted */
    }
    free(buf);
    fclose(f);
    return st;
}

/* ---------------------------------------------------------------- merging */
typedef struct wordlist {
    uint32_t *v;
    uint32_t n, cap;
} wordlist;

typedef struct trainer {
    /* tokens */
    uint64_t *tok_off;
    uint32_t *tok_len;
    size_t n_tok, tok_cap;
    unsigned char *blob;
    size_t blob_n, blob_cap;
    uint32_t *tok_slot; /* bytes -> id + 1 */
    size_t tok_mask;
    /* words */
    uint32_t *sym;
    uint64_t *w_off;
    uint32_t *w_len;
    uint64_t *w_freq;
    size_t n_words;
    /* pairs */
    uint32_t *pa, *pb;
    int64_t *pcount;
    wordlist *pwhere;
    uint32_t *pstamp;
    size_t n_pairs, pair_cap;
    uint64_t *pkey; /* a << 32 | b, UINT64_MAX = empty */
    uint32_t *pidx;
    size_t pmask;
    /* heap of (count, pair) */
    int64_t *hc;
    uint32_t *hp;
    size_t hn, hcap;
} trainer;

static void trainer_free(trainer *t) {
    free(t->tok_off);
    free(t->tok_len);
    free(t->blob);
    free(t->tok_slot);
    free(t->sym);
    free(t->w_off);
    free(t->w_len);
    free(t->w_freq);
    if (t->pwhere)
        for (size_t i = 0; i < t->n_pairs; i++) free(t->pwhere[i].v);
    free(t->pa);
    free(t->pb);
    free(t->pcount);
    free(t->pwhere);
    free(t->pstamp);
    free(t->pkey);
    free(t->pidx);
    free(t->hc);
    free(t->hp);
}

static inline uint64_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

static int pair_rehash(trainer *t, size_t slots) {
    uint64_t *k = malloc(slots * sizeof *k);
    uint32_t *x = malloc(slots * sizeof *x);
    if (!k || !x) {
        free(k);
        free(x);
        return 0;
    }
    memset(k, 0xFF, slots * sizeof *k);
    for (size_t i = 0; i < t->n_pairs; i++) {
        uint64_t key = (uint64_t)t->pa[i] << 32 | t->pb[i];
        size_t j = (size_t)pair_hash(key) & (slots - 1);
        while (k[j] != UINT64_MAX) j = (j + 1) & (slots - 1);
        k[j] = key;
        x[j] = (uint32_t)i;
    }
    free(t->pkey);
    free(t->pidx);
    t->pkey = k;
    t->pidx = x;
    t->pmask = slots - 1;
    return 1;
}

/* Index of pair (a, b), created (count 0) when absent; UINT32_MAX when out of memory. */
static uint32_t pair_get(trainer *t, uint32_t a, uint32_t b) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t j = (size_t)pair_hash(key) & t->pmask;
    while (t->pkey[j] != UINT64_MAX) {
        if (t->pkey[j] == key) return t->pidx[j];
        j = (j + 1) & t->pmask;
    }
    if (t->n_pairs >= UINT32_MAX - 1) return UINT32_MAX;
    if (t->n_pairs == t->pair_cap) {
        size_t c = t->pair_cap ? t->pair_cap * 2 : 4096;
        void *p;
        if (!(p = realloc(t->pa, c * sizeof *t->pa))) return UINT32_MAX;
        t->pa = p;
        if (!(p = realloc(t->pb, c * sizeof *t->pb))) return UINT32_MAX;
        t->pb = p;
        if (!(p = realloc(t->pcount, c * sizeof *t->pcount))) return UINT32_MAX;
        t->pcount = p;
        if (!(p = realloc(t->pwhere, c * sizeof *t->pwhere))) return UINT32_MAX;
        t->pwhere = p;
        if (!(p = realloc(t->pstamp, c * sizeof *t->pstamp))) return UINT32_MAX;
        t->pstamp = p;
        t->pair_cap = c;
    }
    uint32_t i = (uint32_t)t->n_pairs++;
    t->pa[i] = a;
    t->pb[i] = b;
    t->pcount[i] = 0;
    t->pwhere[i] = (wordlist){0};
    t->pstamp[i] = 0;
    t->pkey[j] = key;
    t->pidx[j] = i;
    if (t->n_pairs * 2 > t->pmask + 1 && !pair_rehash(t, (t->pmask + 1) * 2)) return UINT32_MAX;
    return i;
}

static int where_add(wordlist *l, uint32_t w) {
    if (l->n > 0 && l->v[l->n - 1] == w) return 1;
    if (l->n == l->cap) {
        uint32_t c = l->cap ? l->cap * 2 : 4;
        uint32_t *v = realloc(l->v, (size_t)c * sizeof *v);
        if (!v) return 0;
        l->v = v;
        l->cap = c;
    }
    l->v[l->n++] = w;
    return 1;
}

/* Heap order: a before b when a's count is larger, or equal with smaller bytes. */
static int tok_cmp(const trainer *t, uint32_t x, uint32_t y) {
    if (x == y) return 0;
    size_t lx = t->tok_len[x], ly = t->tok_len[y];
    int c = memcmp(t->blob + t->tok_off[x], t->blob + t->tok_off[y], lx < ly ? lx : ly);
    if (c) return c;
    return lx < ly ? -1 : lx > ly;
}

static int heap_before(const trainer *t, int64_t c1, uint32_t p1, int64_t c2, uint32_t p2) {
    if (c1 != c2) return c1 > c2;
    int c = tok_cmp(t, t->pa[p1], t->pa[p2]);
    if (c) return c < 0;
    return tok_cmp(t, t->pb[p1], t->pb[p2]) < 0;
}

static int heap_push(trainer *t, int64_t c, uint32_t p) {
    if (t->hn == t->hcap) {
        size_t nc = t->hcap ? t->hcap * 2 : 4096;
        int64_t *a = realloc(t->hc, nc * sizeof *a);
        if (!a) return 0;
        t->hc = a;
        uint32_t *b = realloc(t->hp, nc * sizeof *b);
        if (!b) return 0;
        t->hp = b;
        t->hcap = nc;
    }
    size_t i = t->hn++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!heap_before(t, c, p, t->hc[up], t->hp[up])) break;
        t->hc[i] = t->hc[up];
        t->hp[i] = t->hp[up];
        i = up;
    }
    t->hc[i] = c;
    t->hp[i] = p;
    return 1;
}

static void heap_pop(trainer *t, int64_t *c, uint32_t *p) {
    *c = t->hc[0];
    *p = t->hp[0];
    int64_t vc = t->hc[--t->hn];
    uint32_t vp = t->hp[t->hn];
    size_t i = 0, m = t->hn;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= m) break;
        if (k + 1 < m && heap_before(t, t->hc[k + 1], t->hp[k + 1], t->hc[k], t->hp[k])) k++;
        if (!heap_before(t, t->hc[k], t->hp[k], vc, vp)) break;
        t->hc[i] = t->hc[k];
        t->hp[i] = t->hp[k];
        i = k;
    }
    if (m > 0) {
        t->hc[i] = vc;
        t->hp[i] = vp;
    }
}

static int tok_rehash(trainer *t, size_t slots) {
    uint32_t *s = calloc(slots, sizeof *s);
    if (!s) return 0;
    for (size_t i = 0; i < t->n_tok; i++) {
        size_t j = (size_t)lf__bpe_hash(t->blob + t->tok_off[i], t->tok_len[i]) & (slots - 1);
        while (s[j]) j = (j + 1) & (slots - 1);
        s[j] = (uint32_t)(i + 1);
    }
    free(t->tok_slot);
    t->tok_slot = s;
    t->tok_mask = slots - 1;
    return 1;
}

/* Id of the token a ++ b: existing, or appended. UINT32_MAX when out of memory. */
static uint32_t tok_concat(trainer *t, uint32_t a, uint32_t b, int *is_new) {
    size_t la = t->tok_len[a], lb = t->tok_len[b], n = la + lb;
    GROW(t->blob, t->blob_cap, t->blob_n + n, oom);
    unsigned char *p = t->blob + t->blob_n;
    memcpy(p, t->blob + t->tok_off[a], la);
    memcpy(p + la, t->blob + t->tok_off[b], lb);
    size_t j = (size_t)lf__bpe_hash(p, n) & t->tok_mask;
    while (t->tok_slot[j]) {
        uint32_t i = t->tok_slot[j] - 1;
        if (t->tok_len[i] == n && memcmp(t->blob + t->tok_off[i], p, n) == 0) {
            *is_new = 0;
            return i;
        }
        j = (j + 1) & t->tok_mask;
    }
    if (t->n_tok == t->tok_cap) {
        size_t c = t->tok_cap * 2;
        uint64_t *o = realloc(t->tok_off, c * sizeof *o);
        if (!o) goto oom;
        t->tok_off = o;
        uint32_t *l = realloc(t->tok_len, c * sizeof *l);
        if (!l) goto oom;
        t->tok_len = l;
        t->tok_cap = c;
    }
    uint32_t id = (uint32_t)t->n_tok++;
    t->tok_off[id] = t->blob_n;
    t->tok_len[id] = (uint32_t)n;
    t->blob_n += n;
    t->tok_slot[j] = id + 1;
    if (t->n_tok * 2 > t->tok_mask + 1 && !tok_rehash(t, (t->tok_mask + 1) * 2)) goto oom;
    *is_new = 1;
    return id;
oom:
    return UINT32_MAX;
}

static lf_status oom(void) { return lf_fail(LF_ERR_NOMEM, "bpe training: out of memory"); }

/* Words from the piece counts; initial pair counts, lists and heap. */
static lf_status trainer_init(trainer *t, const piece_tab *pieces) {
    t->tok_cap = 512;
    t->tok_off = malloc(t->tok_cap * sizeof *t->tok_off);
    t->tok_len = malloc(t->tok_cap * sizeof *t->tok_len);
    t->blob_cap = 4096;
    t->blob = malloc(t->blob_cap);
    if (!t->tok_off || !t->tok_len || !t->blob) return oom();
    for (int c = 0; c < 256; c++) {
        t->blob[c] = (unsigned char)c;
        t->tok_off[c] = (uint64_t)c;
        t->tok_len[c] = 1;
    }
    t->blob_n = 256;
    t->n_tok = 256;
    if (!tok_rehash(t, 1024)) return oom();
    size_t total = 0, n_words = 0;
    for (size_t i = 0; i < pieces->n; i++)
        if (pieces->len[i] > 1) {
            total += pieces->len[i];
            n_words++;
        }
    t->sym = malloc((total + 1) * sizeof *t->sym);
    t->w_off = malloc((n_words + 1) * sizeof *t->w_off);
    t->w_len = malloc((n_words + 1) * sizeof *t->w_len);
    t->w_freq = malloc((n_words + 1) * sizeof *t->w_freq);
    if (!t->sym || !t->w_off || !t->w_len || !t->w_freq || !pair_rehash(t, 4096)) return oom();
    size_t at = 0;
    for (size_t i = 0; i < pieces->n; i++) {
        if (pieces->len[i] <= 1) continue; /* no pairs */
        size_t w = t->n_words++;
        t->w_off[w] = at;
        t->w_len[w] = pieces->len[i];
        t->w_freq[w] = pieces->count[i];
        const unsigned char *p = pieces->blob + pieces->off[i];
        for (size_t k = 0; k < pieces->len[i]; k++) t->sym[at++] = p[k];
    }
    for (size_t w = 0; w < t->n_words; w++) {
        const uint32_t *s = t->sym + t->w_off[w];
        for (size_t k = 0; k + 1 < t->w_len[w]; k++) {
            uint32_t pi = pair_get(t, s[k], s[k + 1]);
            if (pi == UINT32_MAX) return oom();
            t->pcount[pi] += (int64_t)t->w_freq[w];
            if (!where_add(&t->pwhere[pi], (uint32_t)w)) return oom();
        }
    }
    for (size_t i = 0; i < t->n_pairs; i++)
        if (!heap_push(t, t->pcount[i], (uint32_t)i)) return oom();
    return LF_OK;
}

/* Replace pair p = (a, b) by token x in every word that holds it. */
static lf_status apply_merge(trainer *t, uint32_t p, uint32_t x, uint32_t stamp, uint32_t **touched, size_t *n_touched,
                             size_t *touched_cap) {
    uint32_t a = t->pa[p], b = t->pb[p];
    wordlist list = t->pwhere[p];
    t->pwhere[p] = (wordlist){0};
    lf_status st = LF_OK;
    *n_touched = 0;
    for (uint32_t li = 0; li < list.n; li++) {
        uint32_t w = list.v[li];
        uint32_t *s = t->sym + t->w_off[w];
        size_t m = t->w_len[w];
        int has = 0;
        for (size_t k = 0; k + 1 < m && !has; k++) has = s[k] == a && s[k + 1] == b;
        if (!has) continue; /* stale or repeated entry */
        int64_t f = (int64_t)t->w_freq[w];
        for (size_t k = 0; k + 1 < m; k++) {
            uint32_t pi = pair_get(t, s[k], s[k + 1]);
            if (pi == UINT32_MAX) goto nomem;
            t->pcount[pi] -= f;
        }
        size_t j = 0;
        for (size_t k = 0; k < m;) {
            if (k + 1 < m && s[k] == a && s[k + 1] == b) {
                s[j++] = x;
                k += 2;
            } else {
                s[j++] = s[k++];
            }
        }
        m = j;
        t->w_len[w] = (uint32_t)m;
        for (size_t k = 0; k + 1 < m; k++) {
            uint32_t pi = pair_get(t, s[k], s[k + 1]);
            if (pi == UINT32_MAX) goto nomem;
            t->pcount[pi] += f;
            if (s[k] == x || s[k + 1] == x) {
                if (!where_add(&t->pwhere[pi], w)) goto nomem;
                if (t->pstamp[pi] != stamp) {
                    t->pstamp[pi] = stamp;
                    GROW(*touched, *touched_cap, *n_touched + 1, nomem);
                    (*touched)[(*n_touched)++] = pi;
                }
            }
        }
    }
    for (size_t i = 0; i < *n_touched; i++) {
        uint32_t pi = (*touched)[i];
        if (t->pcount[pi] > 0 && !heap_push(t, t->pcount[pi], pi)) goto nomem;
    }
    free(list.v);
    return st;
nomem:
    free(list.v);
    return oom();
}

static void b64_encode(const unsigned char *p, size_t n, char *out) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out[o++] = tab[w >> 18 & 63];
        out[o++] = tab[w >> 12 & 63];
        out[o++] = i + 1 < n ? tab[w >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? tab[w & 63] : '=';
    }
    out[o] = 0;
}

static lf_status write_ranks(const trainer *t, const uint32_t *order, size_t n, const char *path) {
    size_t cap = 0;
    for (size_t i = 0; i < n; i++) cap += (t->tok_len[order[i]] + 2) / 3 * 4 + 16;
    char *buf = malloc(cap + 1);
    if (!buf) return oom();
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        b64_encode(t->blob + t->tok_off[order[i]], t->tok_len[order[i]], buf + at);
        at += strlen(buf + at);
        at += (size_t)snprintf(buf + at, cap + 1 - at, " %zu\n", i);
    }
    lf_status st = lf__file_write_atomic(path, buf, at);
    free(buf);
    return st;
}

lf_bpe_train_opts lf_bpe_train_opts_default(void) {
    lf_bpe_train_opts o;
    memset(&o, 0, sizeof o);
    o.vocab_size = 50257;
    o.min_frequency = 2;
    return o;
}

lf_status lf_bpe_train(const char *const *inputs, size_t n_inputs, const lf_bpe_train_opts *opts, const char *out_path,
                       lf_bpe_train_stats *stats) {
    lf_bpe_train_stats dummy;
    if (!stats) stats = &dummy;
    memset(stats, 0, sizeof *stats);
    if (!inputs || n_inputs == 0) return lf_fail(LF_ERR_INVALID_ARG, "bpe training: no input files");
    if (!out_path || !*out_path) return lf_fail(LF_ERR_INVALID_ARG, "bpe training: no output path");
    lf_bpe_train_opts o = opts ? *opts : lf_bpe_train_opts_default();
    if (o.vocab_size < 257 || o.vocab_size > LF_BPE_MAX_RANKS)
        return lf_fail(LF_ERR_INVALID_ARG, "bpe training: vocab_size %u is not in [257, %u]", (unsigned)o.vocab_size,
                       (unsigned)LF_BPE_MAX_RANKS);
    if (o.min_frequency < 1) o.min_frequency = 1;
    for (size_t i = 0; i < n_inputs; i++)
        if (!inputs[i]) return lf_fail(LF_ERR_INVALID_ARG, "bpe training: input %zu is NULL", i);

    lf__pretok *pt = NULL;
    lf__pretok_scan sc = {0};
    piece_tab pieces = {0};
    trainer t = {0};
    uint32_t *order = NULL, *touched = NULL;
    size_t touched_cap = 0;
    lf_status st = lf__pretok_create(&pt);
    if (st != LF_OK) return st;
    if ((st = lf__pretok_scan_init(&sc, pt)) != LF_OK) goto done;
    if (!piece_tab_rehash(&pieces, 1 << 16)) {
        st = oom();
        goto done;
    }
    for (size_t i = 0; i < n_inputs; i++)
        if ((st = count_file(&sc, &pieces, inputs[i], stats)) != LF_OK) goto done;
    stats->unique_pieces = pieces.n;

    if ((st = trainer_init(&t, &pieces)) != LF_OK) goto done;
    piece_tab_free(&pieces);
    memset(&pieces, 0, sizeof pieces);

    size_t target = (size_t)o.vocab_size - 1, n_ranks = 256;
    order = malloc(target * sizeof *order);
    if (!order) {
        st = oom();
        goto done;
    }
    for (uint32_t c = 0; c < 256; c++) order[c] = c;
    uint32_t stamp = 0;
    while (n_ranks < target && t.hn > 0) {
        int64_t c;
        uint32_t p;
        heap_pop(&t, &c, &p);
        int64_t cur = t.pcount[p];
        if (cur != c) {
            if (cur > 0 && cur < c && !heap_push(&t, cur, p)) {
                st = oom();
                goto done;
            }
            continue;
        }
        if (cur <= 0 || (uint64_t)cur < o.min_frequency) break;
        int is_new = 0;
        uint32_t x = tok_concat(&t, t.pa[p], t.pb[p], &is_new);
        if (x == UINT32_MAX) {
            st = oom();
            goto done;
        }
        if (is_new) order[n_ranks++] = x;
        if ((st = apply_merge(&t, p, x, ++stamp, &touched, &(size_t){0}, &touched_cap)) != LF_OK) goto done;
    }
    stats->merges = (uint32_t)(n_ranks - 256);
    stats->vocab_size = (uint32_t)n_ranks + 1;
    st = write_ranks(&t, order, n_ranks, out_path);
done:
    free(order);
    free(touched);
    trainer_free(&t);
    piece_tab_free(&pieces);
    lf__pretok_scan_done(&sc);
    lf__pretok_free(pt);
    return st;
}
