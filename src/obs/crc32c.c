/*
 * CRC-32C (Castagnoli): the checksum of TFRecord framing in TensorBoard
 * event files.
 *
 * Polynomial 0x1EDC6F41, reflected 0x82F63B78, initial value and final XOR
 * 0xFFFFFFFF (RFC 3720 section B.4; check value of "123456789" is
 * 0xE3069283). We write it ourselves because no Debian library exposes
 * CRC-32C conveniently: zlib has only the CRC-32 of IEEE 802.3, and the
 * libraries that do have CRC-32C (e.g. libcrc32c, inside the kernel or
 * bundled in leveldb/rocksdb/abseil) ship no stable C interface in Debian.
 *
 * Two implementations, checked against each other and against a bitwise
 * reference in tests/obs/test_tensorboard.c:
 *   - software: slice-by-8 (Intel, "A systematic approach to building high
 *     performance software-based CRC generators", Kounavis and Berry, 2005),
 *     eight 256-entry tables built once (pthread_once), portable to any byte
 *     order since words are assembled byte by byte;
 *   - hardware: the SSE4.2 crc32 instruction computes exactly this CRC
 *     (it was chosen for iSCSI); compiled with a target attribute so it
 *     needs no -msse4.2, and used only when __builtin_cpu_supports says the
 *     running CPU has it.
 */
#include <pthread.h>
#include <string.h>
#include "obs/obs_impl.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define LF_CRC32C_HAVE_SSE42 1
#include <nmmintrin.h>
#else
#define LF_CRC32C_HAVE_SSE42 0
#endif

#define CRC32C_POLY_REFLECTED 0x82F63B78u

static uint32_t crc_table[8][256];
static pthread_once_t crc_table_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ ((c & 1u) ? CRC32C_POLY_REFLECTED : 0u);
        crc_table[0][i] = c;
    }
    /* crc_table[k][i]: the CRC contribution of byte i followed by k zero bytes */
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++)
            crc_table[k][i] = (crc_table[k - 1][i] >> 8) ^ crc_table[0][crc_table[k - 1][i] & 0xffu];
}

uint32_t lf__crc32c_sw(uint32_t crc, const void *data, size_t len) {
    pthread_once(&crc_table_once, crc_table_init);
    const uint8_t *p = data;
    uint32_t c = ~crc;
    while (len >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = crc_table[7][lo & 0xffu] ^ crc_table[6][(lo >> 8) & 0xffu] ^ crc_table[5][(lo >> 16) & 0xffu] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xffu] ^ crc_table[2][(hi >> 8) & 0xffu] ^
            crc_table[1][(hi >> 16) & 0xffu] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--) c = crc_table[0][(c ^ *p++) & 0xffu] ^ (c >> 8);
    return ~c;
}

#if LF_CRC32C_HAVE_SSE42
int lf__crc32c_hw_available(void) { return __builtin_cpu_supports("sse4.2") ? 1 : 0; }

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const uint8_t *p, size_t len) {
    uint32_t c = ~crc;
#if defined(__x86_64__)
    uint64_t c64 = c;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, 8); /* x86 is little-endian, as the instruction expects */
        c64 = _mm_crc32_u64(c64, w);
    }
    c = (uint32_t)c64;
#endif
    for (; len >= 4; p += 4, len -= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        c = _mm_crc32_u32(c, w);
    }
    while (len--) c = _mm_crc32_u8(c, *p++);
    return ~c;
}

uint32_t lf__crc32c_hw(uint32_t crc, const void *data, size_t len) {
    if (!lf__crc32c_hw_available()) return lf__crc32c_sw(crc, data, len);
    return crc32c_sse42(crc, data, len);
}
#else
int lf__crc32c_hw_available(void) { return 0; }
uint32_t lf__crc32c_hw(uint32_t crc, const void *data, size_t len) { return lf__crc32c_sw(crc, data, len); }
#endif

uint32_t lf__crc32c(uint32_t crc, const void *data, size_t len) {
    /* __builtin_cpu_supports reads a word libgcc filled in at start-up: cheap
     * enough to ask on every call, and free of any lazy-initialisation race. */
    return lf__crc32c_hw(crc, data, len);
}
