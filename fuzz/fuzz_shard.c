/*
 * Fuzz harness: token shard reader (src/data/shard.c).
 *
 * Input: the bytes of a shard file. It is opened twice with the checksum
 * verified: once as given, and once with the CRC-32 field (header bytes
 * 32..35) recomputed over the payload, so inputs whose checksum the fuzzer
 * cannot guess still reach everything behind the CRC check. When a shard
 * opens, the harness checks what the header promises (64 + n_tokens *
 * (bytes_per_token + has_mask) == file size) and reads every token and every
 * mask entry, plus one index past the end (which must give 0 and 1).
 */
#include "fuzz_util.h"
#include "llmforge/data.h"

static uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void one(const uint8_t *data, size_t size) {
    const char *path = fuzz_memfile(data, size);
    lf_shard *s = NULL;
    lf_status st = lf_shard_open(&s, path, 1);
    fuzz_note("lf_shard_open", st);
    if (st != LF_OK) {
        FUZZ_CHECK(s == NULL);
        FUZZ_CHECK(lf_last_error()[0] != 0);
        return;
    }
    FUZZ_CHECK(s != NULL && size >= LF_SHARD_HEADER_BYTES);
    const size_t n = lf_shard_num_tokens(s);
    const uint32_t bpt = ld32(data + 12);
    const int has_mask = lf_shard_has_mask(s);
    FUZZ_CHECK(bpt == 2 || bpt == 4);
    FUZZ_CHECK(lf_shard_vocab_size(s) == ld32(data + 28) && lf_shard_vocab_size(s) > 0);
    FUZZ_CHECK(LF_SHARD_HEADER_BYTES + n * (bpt + (has_mask ? 1 : 0)) == size);
    for (size_t i = 0; i < n; i++) {
        uint32_t tok = lf_shard_token(s, i);
        const uint8_t *p = data + LF_SHARD_HEADER_BYTES + i * bpt;
        FUZZ_CHECK(tok == (bpt == 2 ? (uint32_t)(p[0] | p[1] << 8) : ld32(p)));
        int m = lf_shard_mask(s, i);
        FUZZ_CHECK(m == 0 || m == 1);
        if (!has_mask) FUZZ_CHECK(m == 1);
    }
    FUZZ_CHECK(lf_shard_token(s, n) == 0);
    FUZZ_CHECK(lf_shard_mask(s, n) == 1);
    lf_shard_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one(data, size);
    if (size >= LF_SHARD_HEADER_BYTES) {
        uint8_t *fixed = malloc(size);
        if (!fixed) return 0;
        memcpy(fixed, data, size);
        uint32_t crc = lf_crc32(0, fixed + LF_SHARD_HEADER_BYTES, size - LF_SHARD_HEADER_BYTES);
        for (int i = 0; i < 4; i++) fixed[32 + i] = (uint8_t)(crc >> (8 * i));
        if (memcmp(fixed + 32, data + 32, 4) != 0) one(fixed, size);
        free(fixed);
    }
    return 0;
}
