/*
 * The sample kernels (src/backend/cuda/cuda_samples.cu) against host
 * references. Built twice: against the CUDA-on-CPU shim (cuda.test_cuda_samples,
 * every CI run) and, with LF_CUDA, against the real device
 * (gpu.test_cuda_samples, which prints SKIPPED and passes when no GPU
 * answers), so the shim's results and the GPU's are held to the same checks.
 *
 * Checked:
 *  - vector add: exact (one fp32 addition per element), for sizes that are
 *    not multiples of the block (1, 31, 1000, 4097) and blocks of 32, 100,
 *    256 and 1024 threads;
 *  - both reductions: against a double sum within Higham's bound for
 *    summation, |error| <= gamma_h * sum |x_i|, gamma_h = h u / (1 - h u),
 *    u = 2^-24, where h is the most additions any element goes through:
 *    its thread's grid-stride slice, log2(block) tree levels (or 5 shuffle
 *    levels and 5 more across warps), then the same in the second pass over
 *    the partials; and bit-identical on a second run (fixed order);
 *  - the 16-bit round trips: bit for bit against lowp_ref.h (ties, the
 *    largest values, overflow, subnormals, zeros, infinities, NaN, and
 *    random values), the value back exactly the 16-bit value;
 *  - launch configuration errors: a block of 1025 or 0 threads is
 *    cudaErrorInvalidConfiguration from cudaGetLastError, the next launch
 *    runs;
 *  - wrappers refuse arguments they cannot run with (cudaErrorInvalidValue).
 */
#include "../test_util.h"
#include "backend/cuda/cuda_samples.h"
#include "lowp_ref.h"

#define CK(expr)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        if (e_ != cudaSuccess) fail_msg("%s -> %s", #expr, cudaGetErrorString(e_));                \
    } while (0)

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CK(cudaMalloc(&p, bytes));
    return p;
}

static uint64_t rng_state = 0x1234567;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_vadd(void **state) {
    (void)state;
    const int sizes[] = {1, 31, 1000, 4097};
    const int blocks[] = {32, 100, 256, 1024};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        int n = sizes[si];
        float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)), *o = malloc(n * sizeof(float));
        for (int i = 0; i < n; i++) a[i] = frand(), b[i] = frand();
        float *da = dev_alloc(n * sizeof(float)), *db = dev_alloc(n * sizeof(float)),
              *dout = dev_alloc(n * sizeof(float));
        CK(cudaMemcpy(da, a, n * sizeof(float), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(db, b, n * sizeof(float), cudaMemcpyHostToDevice));
        for (size_t bi = 0; bi < sizeof blocks / sizeof *blocks; bi++) {
            CK(cudaMemset(dout, 0xff, n * sizeof(float)));
            CK(lf__cuda_sample_vadd(dout, da, db, n, blocks[bi], 0));
            CK(cudaMemcpy(o, dout, n * sizeof(float), cudaMemcpyDeviceToHost));
            for (int i = 0; i < n; i++)
                if (o[i] != a[i] + b[i]) fail_msg("vadd n=%d block=%d: out[%d] = %g, want %g", n, blocks[bi], i, o[i], a[i] + b[i]);
        }
        CK(cudaFree(da));
        CK(cudaFree(db));
        CK(cudaFree(dout));
        free(a), free(b), free(o);
    }
}

static int log2i(int v) {
    int l = 0;
    while ((1 << l) < v) l++;
    return l;
}

typedef cudaError_t (*sum_fn)(float *, float *, const float *, int, int, int, cudaStream_t);

/* h: additions an element goes through, as in the header comment */
static void check_sum(const char *what, sum_fn fn, int n, int grid, int block, int levels_per_pass) {
    float *x = malloc((size_t)n * sizeof(float));
    double ref = 0, mag = 0;
    for (int i = 0; i < n; i++) {
        x[i] = frand() * 3.0f;
        ref += x[i];
        mag += fabs(x[i]);
    }
    float *dx = dev_alloc((size_t)n * sizeof(float)), *dp = dev_alloc((size_t)grid * sizeof(float)),
          *dout = dev_alloc(sizeof(float));
    CK(cudaMemcpy(dx, x, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    float got[2];
    for (int run = 0; run < 2; run++) {
        CK(fn(dout, dp, dx, n, grid, block, 0));
        CK(cudaMemcpy(&got[run], dout, sizeof(float), cudaMemcpyDeviceToHost));
    }
    long threads = (long)grid * block;
    int h = (int)((n + threads - 1) / threads) + levels_per_pass /* first pass */
            + (grid + block - 1) / block + levels_per_pass /* second pass */;
    double u = ldexp(1.0, -24), gamma = h * u / (1 - h * u);
    double err = fabs((double)got[0] - ref);
    if (!(err <= gamma * mag))
        fail_msg("%s n=%d grid=%d block=%d: %.9g, reference %.9g, error %.3g > bound %.3g (h=%d)", what, n, grid,
                 block, got[0], ref, err, gamma * mag, h);
    if (memcmp(&got[0], &got[1], sizeof(float)) != 0)
        fail_msg("%s n=%d: two runs differ (%.9g, %.9g)", what, n, got[0], got[1]);
    CK(cudaFree(dx));
    CK(cudaFree(dp));
    CK(cudaFree(dout));
    free(x);
}

static void test_block_sum(void **state) {
    (void)state;
    const int cfg[][3] = {{1, 1, 32}, {1000, 3, 64}, {4097, 7, 128}, {100003, 13, 256}, {5, 2, 1024}};
    for (size_t i = 0; i < sizeof cfg / sizeof *cfg; i++)
        check_sum("block_sum", lf__cuda_sample_block_sum, cfg[i][0], cfg[i][1], cfg[i][2], log2i(cfg[i][2]));
    /* a block size the tree cannot halve is refused before any launch */
    float *d = dev_alloc(64 * sizeof(float));
    assert_int_equal(lf__cuda_sample_block_sum(d, d + 1, d + 2, 10, 1, 96, 0), cudaErrorInvalidValue);
    CK(cudaFree(d));
}

static void test_warp_sum(void **state) {
    (void)state;
    const int cfg[][3] = {{1, 1, 32}, {1000, 3, 64}, {4097, 7, 96}, {100003, 13, 256}, {33, 2, 1024}};
    for (size_t i = 0; i < sizeof cfg / sizeof *cfg; i++)
        check_sum("warp_sum", lf__cuda_sample_warp_sum, cfg[i][0], cfg[i][1], cfg[i][2], 10);
    float *d = dev_alloc(64 * sizeof(float));
    assert_int_equal(lf__cuda_sample_warp_sum(d, d + 1, d + 2, 10, 1, 48, 0), cudaErrorInvalidValue);
    CK(cudaFree(d));
}

static void test_lowp_round(void **state) {
    (void)state;
    const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, /* zeros, +-1 */
        0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, /* bf16 ties (to even, up), just above/below */
        0x3f801000u, 0x3f803000u, 0x3f801001u,             /* fp16 ties around 1 */
        0x7f7fffffu, 0xff7fffffu, 0x7f7f7fffu, 0x7f7f8000u, /* bf16 near max: stays, overflows */
        0x477fe000u, 0x477fefffu, 0x477ff000u, 0x47800000u, /* fp16 65504, below/at the overflow tie, 65536 */
        0x38800000u, 0x38000000u, 0x33800000u, 0x33000000u, 0x33000001u, 0x337fffffu, /* fp16 normal min, subnormals */
        0x00000001u, 0x007fffffu, 0x00800000u, 0x00408000u, /* float subnormals, bf16 subnormal tie */
        0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, /* inf, NaNs */
    };
    const int nspec = (int)(sizeof special / sizeof *special);
    const int n = nspec + 3001;
    float *x = malloc(n * sizeof(float));
    for (int i = 0; i < nspec; i++) x[i] = ref_bits_f32(special[i]);
    for (int i = nspec; i < n; i++) x[i] = frand() * ldexp(1.0f, (int)(frand() * 40.0f));
    float *dx = dev_alloc(n * sizeof(float)), *dbb = dev_alloc(n * sizeof(float)), *dhb = dev_alloc(n * sizeof(float));
    uint16_t *dbf = dev_alloc(n * 2), *dh = dev_alloc(n * 2);
    CK(cudaMemcpy(dx, x, n * sizeof(float), cudaMemcpyHostToDevice));
    CK(lf__cuda_sample_lowp_round(dbf, dbb, dh, dhb, dx, n, 128, 0));
    uint16_t *bf = malloc(n * 2), *h = malloc(n * 2);
    float *bb = malloc(n * sizeof(float)), *hb = malloc(n * sizeof(float));
    CK(cudaMemcpy(bf, dbf, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h, dh, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(bb, dbb, n * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb, dhb, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        uint32_t xb;
        memcpy(&xb, &x[i], 4);
        if (bf[i] != ref_bf16_bits(x[i]))
            fail_msg("bf16(%a = 0x%08x) = 0x%04x, want 0x%04x", x[i], xb, bf[i], ref_bf16_bits(x[i]));
        if (h[i] != ref_f16_bits(x[i]))
            fail_msg("fp16(%a = 0x%08x) = 0x%04x, want 0x%04x", x[i], xb, h[i], ref_f16_bits(x[i]));
        double vb = ref_bf16_value(bf[i]), vh = ref_f16_value(h[i]);
        if (!(isnan(vb) ? isnan(bb[i]) : (double)bb[i] == vb))
            fail_msg("bf16 0x%04x back to float: %a, want %a", bf[i], bb[i], vb);
        if (!(isnan(vh) ? isnan(hb[i]) : (double)hb[i] == vh))
            fail_msg("fp16 0x%04x back to float: %a, want %a", h[i], hb[i], vh);
    }
    CK(cudaFree(dx));
    CK(cudaFree(dbb));
    CK(cudaFree(dhb));
    CK(cudaFree(dbf));
    CK(cudaFree(dh));
    free(x), free(bf), free(h), free(bb), free(hb);
}

static void test_launch_config_errors(void **state) {
    (void)state;
    const int n = 2000;
    float *d = dev_alloc(3 * n * sizeof(float));
    assert_int_equal(lf__cuda_sample_vadd(d, d + n, d + 2 * n, n, 1025, 0), cudaErrorInvalidConfiguration);
    assert_int_equal(cudaGetLastError(), cudaSuccess); /* the wrapper's cudaGetLastError cleared it */
    assert_int_equal(lf__cuda_sample_vadd(d, d + n, d + 2 * n, n, 0, 0), cudaErrorInvalidConfiguration);
    CK(lf__cuda_sample_vadd(d, d + n, d + 2 * n, n, 1024, 0)); /* not sticky: the next launch runs */
    CK(cudaDeviceSynchronize());
    assert_int_equal(lf__cuda_sample_vadd(d, d + n, d + 2 * n, -1, 128, 0), cudaErrorInvalidValue);
    CK(cudaFree(d));
}

int main(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("SKIPPED: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "no error", count);
        return 0;
    }
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess) {
        printf("cudaGetDeviceProperties: %s\n", cudaGetErrorString(e));
        return 1;
    }
    printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vadd),
        cmocka_unit_test(test_block_sum),
        cmocka_unit_test(test_warp_sum),
        cmocka_unit_test(test_lowp_round),
        cmocka_unit_test(test_launch_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
