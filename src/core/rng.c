/*
 * Counter-based random numbers: Philox4x32-10 (Salmon, Moraes, Dror, Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC'11). The key is the
 * 64-bit seed; the 128-bit counter is (index, purpose, sub). Every value is
 * a pure function of its coordinates: no state to save, nothing depends on
 * thread or rank. Known-answer tests against the paper's vectors live in
 * tests/core/test_core.c.
 */
#include <math.h>
#include "llmforge/core.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void philox_round(uint32_t ctr[4], const uint32_t key[2]) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * ctr[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * ctr[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ ctr[1] ^ key[0];
    uint32_t n1 = lo1;
    uint32_t n2 = hi0 ^ ctr[3] ^ key[1];
    uint32_t n3 = lo0;
    ctr[0] = n0;
    ctr[1] = n1;
    ctr[2] = n2;
    ctr[3] = n3;
}

/* Raw Philox4x32-10 on a 128-bit counter and 64-bit key. */
void lf__philox_raw(const uint32_t in[4], const uint32_t key_in[2], uint32_t out[4]) {
    uint32_t ctr[4] = {in[0], in[1], in[2], in[3]};
    uint32_t key[2] = {key_in[0], key_in[1]};
    for (int r = 0; r < 10; r++) {
        philox_round(ctr, key);
        key[0] += PHILOX_W0;
        key[1] += PHILOX_W1;
    }
    out[0] = ctr[0];
    out[1] = ctr[1];
    out[2] = ctr[2];
    out[3] = ctr[3];
}

void lf_philox4x32(uint64_t seed, uint32_t purpose, uint64_t index, uint32_t sub, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), purpose, sub};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    lf__philox_raw(ctr, key, out);
}

uint64_t lf_rng_u64(uint64_t seed, uint32_t purpose, uint64_t index) {
    uint32_t o[4];
    lf_philox4x32(seed, purpose, index, 0, o);
    return ((uint64_t)o[1] << 32) | o[0];
}

float lf_rng_uniform(uint64_t seed, uint32_t purpose, uint64_t index) {
    uint32_t o[4];
    lf_philox4x32(seed, purpose, index, 0, o);
    return (float)(o[0] >> 8) * (1.0f / 16777216.0f);
}

float lf_rng_normal(uint64_t seed, uint32_t purpose, uint64_t index) {
    uint32_t o[4];
    lf_philox4x32(seed, purpose, index, 1, o);
    /* u1 in (0,1], u2 in [0,1) from 32 bits each */
    double u1 = ((double)o[0] + 1.0) * (1.0 / 4294967296.0);
    double u2 = (double)o[1] * (1.0 / 4294967296.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
