/*
 * safetensors reader and writer (https://huggingface.co/docs/safetensors).
 *
 * Format: u64 little-endian N, then N bytes of UTF-8 JSON header
 * {"NAME": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {"k": "v"}}, then the data region; offsets are relative to
 * the start of the data region. The reader validates everything a hostile
 * file could get wrong (header length beyond the file, bad JSON, offsets out
 * of bounds or overlapping, size != numel * dtype size, unknown dtype) and
 * reports the file and the tensor name.
 */
#ifndef LLMFORGE_SAFETENSORS_H
#define LLMFORGE_SAFETENSORS_H

#include "llmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LF_ST_MAX_DIMS 8
#define LF_ST_NAME_MAX 256

typedef enum lf_st_dtype {
    LF_ST_F32 = 0,
    LF_ST_F16,
    LF_ST_BF16,
    LF_ST_F64,
    LF_ST_I32,
    LF_ST_I64,
    LF_ST_I16,
    LF_ST_I8,
    LF_ST_U8,
    LF_ST_U16,
    LF_ST_U32,
    LF_ST_U64,
    LF_ST_BOOL
} lf_st_dtype;

typedef struct lf_st_tensor {
    char name[LF_ST_NAME_MAX];
    lf_st_dtype dtype;
    int ndim;
    int64_t shape[LF_ST_MAX_DIMS];
    size_t numel;
    size_t nbytes;
    const void *data; /* into the mapped file (reader) / caller memory (writer) */
} lf_st_tensor;

typedef struct lf_safetensors lf_safetensors;

/* Open and validate (mmap). Header is capped at 100 MB. */
lf_status lf_safetensors_open(lf_safetensors **out, const char *path);
void lf_safetensors_close(lf_safetensors *st);
int lf_safetensors_count(const lf_safetensors *st);
const lf_st_tensor *lf_safetensors_at(const lf_safetensors *st, int i);
const lf_st_tensor *lf_safetensors_find(const lf_safetensors *st, const char *name);
/* Value of a __metadata__ key, or NULL. */
const char *lf_safetensors_meta(const lf_safetensors *st, const char *key);
const char *lf_safetensors_path(const lf_safetensors *st);

/* Write tensors (in the given order) plus metadata pairs meta[2*i]=key,
 * meta[2*i+1]=value. Writes path directly (callers handle tmp/rename), fsyncs. */
lf_status lf_safetensors_write(const char *path, const lf_st_tensor *tensors, int n, const char *const *meta,
                               int n_meta);

/* The header alone, the file extended to its full size (the data region
 * reads as zeros until written): for writers that fill the data region in
 * parts, e.g. each rank its slices with pwrite. tensors[i].data is not read
 * (may be NULL). *data_start (may be NULL) receives the data region's file
 * offset. Fsynced; removed again on failure. */
lf_status lf_safetensors_create(const char *path, const lf_st_tensor *tensors, int n, const char *const *meta,
                                int n_meta, size_t *data_start);

const char *lf_st_dtype_name(lf_st_dtype d);
size_t lf_st_dtype_size(lf_st_dtype d);

#ifdef __cplusplus
}
#endif
#endif
