/*
 * Fuzz harness: safetensors reader (src/core/safetensors.c).
 *
 * Input: the bytes of a .safetensors file. lf_safetensors_open must either
 * refuse it with a status or open it; an open file must honour what the
 * header promises:
 *   - every tensor has 0 <= ndim <= LF_ST_MAX_DIMS, numel = prod(shape),
 *     nbytes = numel * dtype size, and nbytes fits in the data region;
 *   - every data byte is readable (each one is read here);
 *   - lf_safetensors_find(name) returns that very tensor (names unique);
 *   - out-of-range lf_safetensors_at and unknown names return NULL.
 * Metadata is probed through lf_safetensors_meta (the API has no iterator).
 */
#include "fuzz_util.h"
#include "llmforge/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_memfile(data, size);
    lf_safetensors *st = NULL;
    lf_status s = lf_safetensors_open(&st, path);
    fuzz_note("lf_safetensors_open", s);
    if (s != LF_OK) {
        FUZZ_CHECK(st == NULL);
        FUZZ_CHECK(lf_last_error()[0] != 0); /* every refusal says why */
        return 0;
    }
    FUZZ_CHECK(st != NULL && size >= 8);
    uint64_t hlen;
    memcpy(&hlen, data, 8);
    FUZZ_CHECK(hlen <= size - 8);
    const size_t region = size - 8 - (size_t)hlen;

    int n = lf_safetensors_count(st);
    FUZZ_CHECK(n >= 0);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const lf_st_tensor *t = lf_safetensors_at(st, i);
        FUZZ_CHECK(t != NULL);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= LF_ST_MAX_DIMS);
        FUZZ_CHECK(memchr(t->name, 0, sizeof t->name) != NULL);
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            FUZZ_CHECK(t->shape[d] >= 0);
            numel *= (size_t)t->shape[d]; /* cannot overflow when the reader's checks hold */
        }
        FUZZ_CHECK(numel == t->numel);
        size_t es = lf_st_dtype_size(t->dtype);
        FUZZ_CHECK(es > 0 && strcmp(lf_st_dtype_name(t->dtype), "?") != 0);
        FUZZ_CHECK(t->nbytes == t->numel * es);
        FUZZ_CHECK(t->nbytes <= region);
        total += t->nbytes; /* ranges do not overlap, so the sum fits the region too */
        FUZZ_CHECK(total <= region);
        if (t->nbytes > 0) {
            FUZZ_CHECK(t->data != NULL);
            fuzz_touch(t->data, t->nbytes);
        }
        FUZZ_CHECK(lf_safetensors_find(st, t->name) == t);
    }
    FUZZ_CHECK(lf_safetensors_at(st, -1) == NULL);
    FUZZ_CHECK(lf_safetensors_at(st, n) == NULL);
    FUZZ_CHECK(lf_safetensors_find(st, "\x01not a tensor name\x01") == NULL);
    static const char *const keys[] = {"format", "llmforge", "step", "config", "", "__metadata__"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *v = lf_safetensors_meta(st, keys[k]);
        if (v) fuzz_touch(v, strlen(v));
    }
    FUZZ_CHECK(strcmp(lf_safetensors_path(st), path) == 0);
    lf_safetensors_close(st);
    return 0;
}
