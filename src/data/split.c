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
