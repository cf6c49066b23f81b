/*
 * Private interface of the observability module (src/obs): CRC-32C, the
 * TensorBoard event encoder and the test hooks of the TensorBoard sink.
 * Nothing here is public API; tests/obs include it directly.
 *
 * References:
 *   CRC-32C: Castagnoli, Braeutigam, Herrmann, "Optimization of cyclic
 *     redundancy-check codes with 24 and 32 parity bits", IEEE Trans.
 *     Commun. 41(6), 1993; RFC 3720 section B.4 (iSCSI) for test vectors.
 *   TFRecord framing and the masked CRC: tensorflow/core/lib/io/record_writer.h
 *     and tensorflow/core/lib/hash/crc32c.h (Mask/Unmask).
 *   Event protocol buffer: tensorflow/core/util/event.proto and
 *     tensorflow/core/framework/summary.proto; wire format:
 *     https://protobuf.dev/programming-guides/encoding/
 */
#ifndef LF_OBS_IMPL_H
#define LF_OBS_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "llmforge/obs.h"

/* ---------------------------------------------------------------- CRC-32C
 * Same calling convention as zlib's crc32(): pass 0 to start, or the value a
 * previous call returned to continue (pre- and post-inversion happen inside),
 * so lf__crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t lf__crc32c(uint32_t crc, const void *data, size_t len);    /* fastest available */
uint32_t lf__crc32c_sw(uint32_t crc, const void *data, size_t len); /* slice-by-8 tables */
/* 1 if this CPU has the SSE4.2 crc32 instruction and it was compiled in. */
int lf__crc32c_hw_available(void);
/* SSE4.2 version; call only when lf__crc32c_hw_available() (else it falls
 * back to lf__crc32c_sw). */
uint32_t lf__crc32c_hw(uint32_t crc, const void *data, size_t len);

/* TensorFlow's masked CRC: rotate right by 15, add a constant (a CRC of data
 * that itself holds CRCs is then not trivially related to them). */
static inline uint32_t lf__crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---------------------------------------------------------------- encoding
 * A growable byte buffer. Appends return LF_OK or LF_ERR_NOMEM (message
 * recorded); after a failed append the buffer is unchanged. */
typedef struct lf__tb_buf {
    uint8_t *data;
    size_t len, cap;
} lf__tb_buf;

void lf__tb_buf_free(lf__tb_buf *b);

/* Append one framed TFRecord holding
 *   Event{wall_time, file_version: version}. */
lf_status lf__tb_append_file_version(lf__tb_buf *b, double wall_time, const char *version);

/* Append one framed TFRecord holding
 *   Event{wall_time, step, summary: Summary{value: [{tag, simple_value}...]}}
 * with the scalars in order (values narrowed to float, as TensorBoard stores
 * them). Scalars with a NULL or empty tag are skipped; if none is left,
 * nothing is appended. step 0 is omitted from the encoding (proto3 default). */
lf_status lf__tb_append_scalars(lf__tb_buf *b, double wall_time, long step, const lf_obs_scalar *scalars,
                                int n_scalars);

/* ---------------------------------------------------------------- sink hooks
 * Open a TensorBoard sink on exactly `path` (created or truncated, no
 * directory creation), its file_version event stamped with `wall_time`
 * instead of the clock: the tests write byte-for-byte reproducible files. */
lf_status lf__tb_open_path(lf_obs_sink **out, const char *path, double wall_time, double flush_secs);
/* The file the sink writes (for tests); NULL if `s` is not a TensorBoard sink. */
const char *lf__tb_path(const lf_obs_sink *s);
/* Fault injection: the k-th write(2) from now on (k >= 1) fails with EIO;
 * k = 0 switches injection off. */
void lf__tb_fail_write_after(lf_obs_sink *s, int k);

#endif
