/*
 * Fuzz harness: Hugging Face model directories (src/model/hf.c): the
 * config.json and model.safetensors.index.json parsers, the shard checks
 * and the config.json -> lf_model_config mapping.
 *
 * Input: config.json text, then optionally a NUL and the index text. Both are
 * written into a per-process scratch directory (mkdtemp under $TMPDIR or
 * /tmp, removed at exit) that also holds fixed, valid shards written once:
 *   model-00001-of-00002.safetensors  a F32 [2,3], b BF16 [4]
 *   model-00002-of-00002.safetensors  c F16 [2,2], d I32 [1]
 *   model.safetensors                 a F32 [2,3], c F16 [2,2]
 * Without a NUL there is no index, so the one-file layout is opened. The
 * shards themselves are not fuzzed here (fuzz_safetensors does that).
 *
 * Invariants: lf_hf_open either fails with a message and leaves the handle
 * NULL, or: model_type is a non-empty string, config_text is the input's
 * config bytes, the tensor names are strictly increasing, every tensor has
 * a file and a shape of at most 4 dimensions, F32/BF16/F16 tensors read
 * (with exactly their numel; numel + 1 is a mismatch), I32 is refused, and
 * index i = count gives NULL. lf_hf_model_config either fails naming
 * config.json or gives sizes >= 1 with n_embd divisible by n_head and (llama)
 * n_head divisible by n_kv_head.
 */
#include "fuzz_util.h"
#include "llmforge/hf.h"
#include "llmforge/safetensors.h"

static char g_dir[512];
static const char *const k_files[] = {"config.json", "model.safetensors.index.json", "model.safetensors",
                                      "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};

static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }

static void cleanup(void) {
    char p[640];
    for (size_t i = 0; i < sizeof k_files / sizeof k_files[0]; i++) {
        path_in(p, sizeof p, k_files[i]);
        (void)remove(p);
    }
    (void)rmdir(g_dir);
}

static void write_file(const char *name, const void *data, size_t len) {
    char p[640];
    path_in(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        perror("fuzz_hf: cannot write the scratch directory");
        abort();
    }
}

static lf_st_tensor tensor(const char *name, lf_st_dtype dt, int ndim, const int64_t *shape, const void *data) {
    lf_st_tensor t = {.dtype = dt, .ndim = ndim, .data = data};
    snprintf(t.name, sizeof t.name, "%s", name);
    t.numel = 1;
    for (int d = 0; d < ndim; d++) {
        t.shape[d] = shape[d];
        t.numel *= (size_t)shape[d];
    }
    t.nbytes = t.numel * lf_st_dtype_size(dt);
    return t;
}

static void make_dir_once(void) {
    if (g_dir[0]) return;
    const char *base = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/lf_fuzz_hf.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("fuzz_hf: mkdtemp");
        abort();
    }
    atexit(cleanup);
    static const float a[6] = {1, 2, 3, 4, 5, 6};
    static const uint16_t b[4] = {0x3f80, 0x8000, 0x7f80, 0x0001};
    static const uint16_t c[4] = {0x3c00, 0x0001, 0x7c00, 0xfe00};
    static const int32_t d[1] = {7};
    const int64_t s23[2] = {2, 3}, s4[1] = {4}, s22[2] = {2, 2}, s1[1] = {1};
    lf_st_tensor one[2] = {tensor("a", LF_ST_F32, 2, s23, a), tensor("b", LF_ST_BF16, 1, s4, b)};
    lf_st_tensor two[2] = {tensor("c", LF_ST_F16, 2, s22, c), tensor("d", LF_ST_I32, 1, s1, d)};
    lf_st_tensor single[2] = {tensor("a", LF_ST_F32, 2, s23, a), tensor("c", LF_ST_F16, 2, s22, c)};
    char p[640];
    path_in(p, sizeof p, "model-00001-of-00002.safetensors");
    FUZZ_CHECK(lf_safetensors_write(p, one, 2, NULL, 0) == LF_OK);
    path_in(p, sizeof p, "model-00002-of-00002.safetensors");
    FUZZ_CHECK(lf_safetensors_write(p, two, 2, NULL, 0) == LF_OK);
    path_in(p, sizeof p, "model.safetensors");
    FUZZ_CHECK(lf_safetensors_write(p, single, 2, NULL, 0) == LF_OK);
}

static void check_model(lf_hf_model *h, const uint8_t *cfg, size_t cfg_len) {
    const char *mt = lf_hf_model_type(h);
    FUZZ_CHECK(mt && mt[0]);
    const char *text = lf_hf_config_text(h);
    FUZZ_CHECK(text && strlen(text) == cfg_len && memcmp(text, cfg, cfg_len) == 0);
    int n = lf_hf_num_tensors(h);
    FUZZ_CHECK(n >= 0 && n <= 4);
    FUZZ_CHECK(lf_hf_tensor_name(h, n) == NULL && lf_hf_tensor_name(h, -1) == NULL);
    for (int i = 0; i < n; i++) {
        const char *name = lf_hf_tensor_name(h, i);
        FUZZ_CHECK(name != NULL);
        if (i > 0) FUZZ_CHECK(strcmp(lf_hf_tensor_name(h, i - 1), name) < 0);
        FUZZ_CHECK(lf_hf_tensor_file(h, name) != NULL);
        int ndim = -1;
        int64_t shape[4];
        FUZZ_CHECK(lf_hf_tensor_shape(h, name, &ndim, shape) == LF_OK);
        FUZZ_CHECK(ndim >= 0 && ndim <= 4);
        size_t numel = 1;
        for (int d = 0; d < ndim; d++) numel *= (size_t)shape[d];
        float buf[8];
        FUZZ_CHECK(numel < 8);
        lf_status s = lf_hf_read_f32(h, name, buf, numel);
        if (strcmp(name, "d") == 0) {
            FUZZ_CHECK(s == LF_ERR_UNSUPPORTED);
        } else {
            FUZZ_CHECK(s == LF_OK);
            FUZZ_CHECK(lf_hf_read_f32(h, name, buf, numel + 1) == LF_ERR_MISMATCH);
        }
    }
    FUZZ_CHECK(lf_hf_read_f32(h, "no such tensor", NULL, 0) == LF_ERR_NOT_FOUND);

    lf_model_config c;
    lf_status s = lf_hf_model_config(h, &c);
    fuzz_note("lf_hf_model_config", s);
    if (s != LF_OK) {
        FUZZ_CHECK(strstr(lf_last_error(), "config.json") != NULL);
        return;
    }
    FUZZ_CHECK(c.n_layer >= 1 && c.n_head >= 1 && c.n_kv_head >= 1 && c.n_embd >= 1 && c.block_size >= 1);
    FUZZ_CHECK(c.vocab_size >= 1 && c.padded_vocab_size == c.vocab_size && c.ffn_hidden >= 0);
    /* an explicit head_dim (even) frees hidden_size from dividing by the heads */
    FUZZ_CHECK(c.head_dim > 0 ? c.head_dim % 2 == 0 && c.head_dim <= 1024 : c.n_embd % c.n_head == 0);
    FUZZ_CHECK(c.norm_eps > 0);
    if (c.arch == LF_ARCH_LLAMA) {
        /* q/k/v biases (Qwen2, attention_bias), o_proj's only with them */
        FUZZ_CHECK(c.n_head % c.n_kv_head == 0 && c.norm == LF_NORM_RMSNORM && (c.bias || !c.out_bias));
        FUZZ_CHECK(c.rope_theta > 1 && c.ffn_hidden >= 1 && (unsigned)c.rope.type <= LF_ROPE_LLAMA3);
        FUZZ_CHECK(c.rope.type == LF_ROPE_DEFAULT || c.rope.factor >= 1 || c.rope.type == LF_ROPE_YARN);
    } else {
        FUZZ_CHECK(c.arch == LF_ARCH_GPT2 && c.bias == 1 && c.tie_embeddings == 1 && c.n_kv_head == c.n_head);
        FUZZ_CHECK(c.head_dim == 0 && !c.out_bias && !c.mlp_bias && c.rope.type == LF_ROPE_DEFAULT);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    make_dir_once();
    const uint8_t *nul = memchr(data, 0, size);
    size_t cfg_len = nul ? (size_t)(nul - data) : size;
    write_file("config.json", data, cfg_len);
    char ip[640];
    path_in(ip, sizeof ip, "model.safetensors.index.json");
    if (nul) write_file("model.safetensors.index.json", nul + 1, size - cfg_len - 1);
    else (void)remove(ip);

    lf_hf_model *h = NULL;
    lf_status s = lf_hf_open(&h, g_dir);
    fuzz_note("lf_hf_open", s);
    if (s != LF_OK) {
        FUZZ_CHECK(h == NULL && lf_last_error()[0] != 0);
        return 0;
    }
    FUZZ_CHECK(h != NULL);
    check_model(h, data, cfg_len);
    lf_hf_close(h);
    return 0;
}
