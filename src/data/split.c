/*
 * Content-hash split: which of train/val/test a record belongs to is a pure
 * function of its bytes, so appending records to a corpus never moves an
 * existing one, re-running prepare gives the same split, and duplicates of
 * one record always land in the same split (no train/val leakage through
 * repeats).
 *
 *   u = (first 8 bytes of SHA-256(key), big-endian) / 2^64      in [0, 1)
 *   split = train if u < w0/S, val if u < (w0+w1)/S, else test  (S = w0+w1+w2)
 *
 * A split whose weight is 0 never receives a record, even where rounding of
 * the cumulative fractions would leave a sliver of [0,1) to it. SHA-256 is
 * used rather than a faster hash because the rule is part of the dataset
 * format (docs/data.md): anyone can recompute it with hashlib.
 *
 * Seeded shuffle split (`prepare --split-method shuffle --seed S`), as
 * `datasets`' train_test_split(shuffle=True, seed=S) gives: exact counts
 * (n_val = round(N w1/S), n_test = round(N w2/S), n_train the rest) over the
 * N records the readers yield, each record's split decided by where a
 * seeded permutation of [0, N) sends its index i (in input order):
 *   j = pi(i); train if j < n_train, val if j < n_train + n_val, else test.
 * pi is a bijection of [0, N) that needs no memory: a 4-round Feistel
 * network on [0, 2^2k) (2^2k >= N, round function splitmix64 of (seed,
 * round, half)), cycle-walked back into [0, N). So the split is a pure
 * function of (seed, N, i): reproducible, streaming, exact in proportion;
 * unlike the content hash, appending records moves existing ones.
 */
#include "data_impl.h"

double lf__split_unit(const void *key, size_t len) {
    char hex[65];
    lf_sha256_hex(key, len, hex);
    uint64_t h = 0;
    for (int i = 0; i < 16; i++) {
        char c = hex[i];
        uint64_t d = c >= '0' && c <= '9' ? (uint64_t)(c - '0') : (uint64_t)(c - 'a' + 10);
        h = h << 4 | d;
    }
    return (double)(h >> 11) * 0x1.0p-53; /* the top 53 bits: exact in a double, < 1 */
}

int lf__split_pick(double u, const double w[3]) {
    double sum = w[0] + w[1] + w[2];
    if (!(sum > 0)) return 0;
    if (u < w[0] / sum) return 0;
    if (w[1] > 0 && (w[2] <= 0 || u < (w[0] + w[1]) / sum)) return 1;
    if (w[2] > 0) return 2;
    return 0; /* only train has weight */
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t lf__split_perm(uint64_t i, uint64_t n, uint64_t seed) {
    if (n <= 1) return 0;
    int k = 1; /* half width: 2^(2k) >= n */
    while (k < 32 && ((uint64_t)1 << (2 * k)) < n) k++;
    const uint64_t mask = ((uint64_t)1 << k) - 1;
    uint64_t x = i;
    do { /* cycle walking: at most a few rounds, as 2^(2k) < 4n */
        uint64_t l = x >> k, r = x & mask;
        for (uint64_t round = 0; round < 4; round++) {
            uint64_t f = mix64(seed ^ mix64(round << 32 ^ r)) & mask;
            uint64_t t = l ^ f;
            l = r;
            r = t;
        }
        x = l << k | r;
    } while (x >= n);
    return x;
}

void lf__split_counts(uint64_t n, const double w[3], uint64_t out[3]) {
    double sum = w[0] + w[1] + w[2];
    if (!(sum > 0)) sum = 1;
    out[1] = w[1] > 0 ? (uint64_t)((double)n * w[1] / sum + 0.5) : 0;
    out[2] = w[2] > 0 ? (uint64_t)((double)n * w[2] / sum + 0.5) : 0;
    if (out[1] + out[2] > n) out[2] = n - out[1];
    out[0] = n - out[1] - out[2];
}

int lf__split_shuffled(uint64_t i, uint64_t n, uint64_t seed, const uint64_t counts[3]) {
    const uint64_t j = lf__split_perm(i, n, seed);
    return j < counts[0] ? 0 : j < counts[0] + counts[1] ? 1 : 2;
}
