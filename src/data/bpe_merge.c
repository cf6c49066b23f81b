/*
 * Byte-level BPE core: the vocabulary's lookup tables and the merge of one
 * pre-tokenised piece, exactly as tiktoken's byte_pair_merge
 * (tiktoken/src/lib.rs) and GPT-2's encoder.py bpe() agree on.
 *
 * Semantics (tiktoken): a piece starts as its single bytes; repeatedly, of
 * all adjacent part pairs whose concatenated bytes are a token, the one with
 * the lowest rank is merged, the leftmost among equal ranks; the parts left
 * are the ids. Every part is always a token, so "the concatenation of parts
 * a and b is a token" is a lookup of the id pair (a, b) in a table built once
 * from the vocabulary: for each token and each way to split its bytes into
 * two tokens, (left, right) -> token. That table holds every pair the merge
 * can meet (not only the merge list's), so the ranks equal tiktoken's
 * byte-slice lookups.
 *
 * Two ways to run it, same result:
 *   - a quadratic scan over a small array (tiktoken's own method), for the
 *     pieces of ordinary text (up to 64 bytes);
 *   - a doubly linked list of parts with a binary min-heap of (rank, start
 *     byte) and lazy deletion, O(n log n), for long pieces (a run of a
 *     million letters or digits is one piece). A heap entry is live when the
 *     pair its left part now forms with its right neighbour still has the
 *     entry's rank; the heap key orders equal ranks by start byte, which is
 *     the quadratic scan's leftmost rule.
 *
 * Explicit merge lists (Hugging Face tokenizer.json, lf__bpe_set_merges):
 * the pair table then holds exactly the listed pairs, each with its
 * position in the list as its priority, and merge_id[priority] is the token
 * the merge makes; ids are no longer priorities, so the two algorithms
 * compare priorities and write merge_id[] (lf__bpe_result). This is
 * tokenizers' Word::merge_all (lowest merge index first, leftmost among
 * equal), and a pair absent from the list never merges even when its
 * concatenation is a token. Without a list (tiktoken ranks) merge_id is
 * NULL and the priority is the token's own rank, as above.
 *
 * Tables: open addressing with linear probing, power-of-two sizes, load at
 * most 1/2. Token bytes hash with a 64-bit multiply-fold over 8-byte words
 * (wyhash's mum); the slot keeps the rank and 32 more hash bits so that a
 * miss rarely touches the token bytes. Both tables are read-only after
 * lf__bpe_build: any number of threads may look up concurrently.
 */
#include <stdlib.h>
#include <string.h>
#include "data_impl.h"

#define SMALL_PIECE 64

static inline uint64_t mum(uint64_t a, uint64_t b) {
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0x2d358dccaa6c78a5ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mum(h ^ w, 0x8bb84b93962eacc9ull);
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    if (n >= 4) {
        uint32_t a, c;
        memcpy(&a, p, 4);
        memcpy(&c, p + n - 4, 4);
        w = (uint64_t)a << 32 | c;
    } else if (n > 0) {
        w = (uint64_t)p[0] << 16 | (uint64_t)p[n >> 1] << 8 | p[n - 1];
    }
    return mum(h ^ w ^ 0x4b33a62ed433d4a3ull, 0x9e3779b97f4a7c15ull ^ (uint64_t)n);
}

uint64_t lf__bpe_hash(const unsigned char *p, size_t n) { return hash_bytes(p, n); }

static inline uint64_t hash_pair(uint64_t key) { return mum(key ^ 0x9e3779b97f4a7c15ull, 0xd6e8feb86659fd93ull); }

static size_t pow2_at_least(size_t n) {
    size_t s = 16;
    while (s < n) s <<= 1;
    return s;
}

/* memcmp(a, b, n) == 0 without a call for the short keys of ordinary text. */
static inline int bytes_equal(const unsigned char *a, const unsigned char *b, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y) return 0;
    }
    for (; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

uint32_t lf__bpe_lookup(const lf__bpe *b, const unsigned char *p, size_t n) {
    uint64_t h = hash_bytes(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t i = (size_t)h & b->map_mask;
    for (;;) {
        uint32_t r1 = b->map[i];
        if (r1 == 0) return LF_BPE_NONE;
        if (b->map_tag[i] == tag) {
            uint32_t r = r1 - 1;
            if (b->tok_len[r] == n && bytes_equal(b->blob + b->tok_off[r], p, n)) return r;
        }
        i = (i + 1) & b->map_mask;
    }
}

uint32_t lf__bpe_pair(const lf__bpe *b, uint32_t a, uint32_t r) {
    uint64_t key = (uint64_t)a << 32 | r;
    size_t i = (size_t)hash_pair(key) & b->pair_mask;
    for (;;) {
        uint64_t k = b->pair_key[i];
        if (k == key) return b->pair_val[i];
        if (k == UINT64_MAX) return LF_BPE_NONE;
        i = (i + 1) & b->pair_mask;
    }
}

void lf__bpe_release(lf__bpe *b) {
    if (!b) return;
    free(b->merge_id);
    free(b->tok_off);
    free(b->tok_len);
    free(b->blob);
    free(b->map);
    free(b->map_tag);
    free(b->pair_key);
    free(b->pair_val);
    memset(b, 0, sizeof *b);
}

static void pair_insert(lf__bpe *b, uint32_t a, uint32_t r, uint32_t val) {
    uint64_t key = (uint64_t)a << 32 | r;
    size_t i = (size_t)hash_pair(key) & b->pair_mask;
    while (b->pair_key[i] != UINT64_MAX && b->pair_key[i] != key) i = (i + 1) & b->pair_mask;
    b->pair_key[i] = key; /* a repeat is the same token: the bytes decide it */
    b->pair_val[i] = val;
}

lf_status lf__bpe_build_map(lf__bpe *b, const char *what) {
    b->n_tokens = 0;
    for (uint32_t r = 0; r < b->n_ranks; r++) b->n_tokens += b->tok_len[r] > 0;
    size_t slots = pow2_at_least(2 * b->n_tokens + 2);
    b->map = calloc(slots, sizeof *b->map);
    b->map_tag = calloc(slots, sizeof *b->map_tag);
    if (!b->map || !b->map_tag) return lf_fail(LF_ERR_NOMEM, "%s: out of memory building the token table", what);
    b->map_mask = slots - 1;
    for (uint32_t r = 0; r < b->n_ranks; r++) {
        size_t n = b->tok_len[r];
        if (n == 0) continue;
        const unsigned char *p = b->blob + b->tok_off[r];
        uint64_t h = hash_bytes(p, n);
        size_t i = (size_t)h & b->map_mask;
        for (;;) {
            uint32_t r1 = b->map[i];
            if (r1 == 0) break;
            uint32_t o = r1 - 1;
            if (b->tok_len[o] == n && memcmp(b->blob + b->tok_off[o], p, n) == 0)
                return lf_fail(LF_ERR_FORMAT, "%s: ranks %u and %u have the same bytes (a token must appear once)",
                               what, (unsigned)o, (unsigned)r);
            i = (i + 1) & b->map_mask;
        }
        b->map[i] = r + 1;
        b->map_tag[i] = (uint32_t)(h >> 32);
    }
    for (int c = 0; c < 256; c++) {
        unsigned char byte = (unsigned char)c;
        b->byte_id[c] = lf__bpe_lookup(b, &byte, 1);
        if (b->byte_id[c] == LF_BPE_NONE)
            return lf_fail(LF_ERR_FORMAT, "%s: byte 0x%02X has no token (byte-level BPE needs all 256 single bytes)",
                           what, (unsigned)c);
    }
    return LF_OK;
}

static lf_status alloc_pairs(lf__bpe *b, size_t n_pairs, const char *what) {
    size_t ps = pow2_at_least(2 * n_pairs + 2);
    b->pair_key = malloc(ps * sizeof *b->pair_key);
    b->pair_val = malloc(ps * sizeof *b->pair_val);
    if (!b->pair_key || !b->pair_val) return lf_fail(LF_ERR_NOMEM, "%s: out of memory building the pair table", what);
    memset(b->pair_key, 0xFF, ps * sizeof *b->pair_key);
    b->pair_mask = ps - 1;
    return LF_OK;
}

lf_status lf__bpe_build(lf__bpe *b, const char *what) {
    lf_status st = lf__bpe_build_map(b, what);
    if (st != LF_OK) return st;
    /* pair table: every split of every token into two tokens */
    size_t n_pairs = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && (st = alloc_pairs(b, n_pairs, what)) != LF_OK) return st;
        for (uint32_t r = 0; r < b->n_ranks; r++) {
            size_t n = b->tok_len[r];
            const unsigned char *p = b->blob + b->tok_off[r];
            for (size_t k = 1; k < n; k++) {
                uint32_t x = k == 1 ? b->byte_id[p[0]] : lf__bpe_lookup(b, p, k);
                if (x == LF_BPE_NONE) continue;
                uint32_t y = n - k == 1 ? b->byte_id[p[k]] : lf__bpe_lookup(b, p + k, n - k);
                if (y == LF_BPE_NONE) continue;
                if (pass == 0) n_pairs++;
                else pair_insert(b, x, y, r);
            }
        }
    }
    return LF_OK;
}

lf_status lf__bpe_set_merges(lf__bpe *b, const uint32_t *left, const uint32_t *right, const uint32_t *result,
                             uint32_t n_merges, const char *what) {
    lf_status st;
    if (n_merges >= LF_BPE_MAX_RANKS)
        return lf_fail(LF_ERR_FORMAT, "%s: %u merges, more than %u allowed", what, (unsigned)n_merges,
                       (unsigned)LF_BPE_MAX_RANKS - 1);
    b->merge_id = malloc((n_merges ? n_merges : 1) * sizeof *b->merge_id);
    if (!b->merge_id) return lf_fail(LF_ERR_NOMEM, "%s: out of memory building the merge table", what);
    if ((st = alloc_pairs(b, n_merges, what)) != LF_OK) return st;
    for (uint32_t p = 0; p < n_merges; p++) {
        b->merge_id[p] = result[p];
        if (left[p] != LF_BPE_NONE && right[p] != LF_BPE_NONE)
            pair_insert(b, left[p], right[p], p); /* a pair listed twice keeps its later position */
    }
    b->n_merges = n_merges;
    return LF_OK;
}

/* ---------------------------------------------------------------- merging */

/* tiktoken's method: parts in an array, the lowest-ranked pair found by a scan. */
static size_t merge_scan(const lf__bpe *b, const unsigned char *p, size_t n, uint32_t *sym) {
    uint32_t rk[SMALL_PIECE];
    uint32_t *rank = n <= SMALL_PIECE ? rk : malloc(n * sizeof *rank);
    if (!rank) return 0;
    for (size_t i = 0; i < n; i++) sym[i] = b->byte_id[p[i]];
    size_t m = n;
    for (size_t i = 0; i + 1 < m; i++) rank[i] = lf__bpe_pair(b, sym[i], sym[i + 1]);
    while (m > 1) {
        uint32_t best = LF_BPE_NONE;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] < best) {
                best = rank[i];
                at = i;
            }
        if (best == LF_BPE_NONE) break;
        sym[at] = lf__bpe_result(b, best);
        /* drop part at+1 and pair at+1 (a few elements: a loop beats a call) */
        for (size_t i = at + 1; i + 1 < m; i++) {
            sym[i] = sym[i + 1];
            rank[i] = rank[i + 1];
        }
        m--;
        if (at > 0) rank[at - 1] = lf__bpe_pair(b, sym[at - 1], sym[at]);
        if (at + 1 < m) rank[at] = lf__bpe_pair(b, sym[at], sym[at + 1]);
    }
    if (rank != rk) free(rank);
    return m;
}

/* Heap entry: rank in the high half, start byte of the left part in the low
 * half, so the u64 order is (rank, leftmost). */
static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (h[up] <= v) break;
        h[i] = h[up];
        i = up;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    if (m > 0) h[i] = v;
    return top;
}

/* Returns SIZE_MAX when out of memory. Parts are named by their first byte. */
static size_t merge_heap(const lf__bpe *b, const unsigned char *p, size_t n, uint32_t *sym) {
    uint32_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    /* n-1 entries at first; a merge pops at least one and pushes at most two,
     * and there are at most n-1 merges: never more than 2n-2 entries */
    uint64_t *heap = malloc(2 * n * sizeof *heap);
    size_t m = SIZE_MAX;
    if (!next || !prev || !heap) goto done;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        sym[i] = b->byte_id[p[i]];
        next[i] = (uint32_t)(i + 1); /* n = end */
        prev[i] = (uint32_t)(i - 1); /* UINT32_MAX for the first */
    }
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t r = lf__bpe_pair(b, sym[i], sym[i + 1]);
        if (r != LF_BPE_NONE) heap_push(heap, &hn, (uint64_t)r << 32 | i);
    }
    while (hn > 0) {
        uint64_t e = heap_pop(heap, &hn);
        uint32_t r = (uint32_t)(e >> 32), L = (uint32_t)e;
        if (sym[L] == LF_BPE_NONE) continue; /* absorbed */
        uint32_t R = next[L];
        if (R >= n || lf__bpe_pair(b, sym[L], sym[R]) != r) continue; /* stale */
        uint32_t id = lf__bpe_result(b, r);
        sym[L] = id;
        sym[R] = LF_BPE_NONE;
        next[L] = next[R];
        if (next[R] < n) prev[next[R]] = L;
        if (prev[L] != UINT32_MAX) {
            uint32_t q = lf__bpe_pair(b, sym[prev[L]], id);
            if (q != LF_BPE_NONE) heap_push(heap, &hn, (uint64_t)q << 32 | prev[L]);
        }
        if (next[L] < n) {
            uint32_t q = lf__bpe_pair(b, id, sym[next[L]]);
            if (q != LF_BPE_NONE) heap_push(heap, &hn, (uint64_t)q << 32 | L);
        }
    }
    m = 0;
    for (size_t i = 0; i < n; i = next[i]) sym[m++] = sym[i];
done:
    free(next);
    free(prev);
    free(heap);
    return m;
}

size_t lf__bpe_merge(const lf__bpe *b, const unsigned char *p, size_t n, uint32_t *out, int algo) {
    if (n == 1) {
        out[0] = b->byte_id[p[0]];
        return 1;
    }
    if (algo == 1 || (algo == 0 && n <= SMALL_PIECE)) {
        size_t m = merge_scan(b, p, n, out);
        return m ? m : SIZE_MAX;
    }
    return merge_heap(b, p, n, out);
}
