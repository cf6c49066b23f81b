/*
 * Rows of whole SFT examples (lf_sft_pack; src/data/sft_pack.c): over one
 * epoch of rows every example of the split appears exactly once, whole
 * (truncated to T only when longer), in one row, with its prompt targets
 * masked and its positions 0, 1, ... restarting at the example; the rest
 * of a row is padding (end-of-text inputs, targets -1, positions of their
 * own run) and only at the row's end; padded mode puts one example per
 * row; packed mode leaves less padding; the statistics count what the rows
 * hold; the loader hands out the pack's rows with their positions; a
 * dataset without an end-of-text is refused. The split spans two shards,
 * so examples straddle a shard boundary.
 */
#include "test_util.h"
#include "llmforge/data.h"

#define EOT 0
#define V 40
#define T 24
#define MAX_EX 200

typedef struct exv {
    size_t start; /* split offset of the first token */
    int len;      /* tokens, the end-of-text included */
    int prompt;   /* the first `prompt` tokens carry mask 0 */
} exv;

static exv g_ex[MAX_EX];
static int g_nex;

/* examples of 1..40 tokens (some longer than T), prompt part masked, a few
 * empty records (a lone end-of-text), split over two shards */
static size_t make_dataset(const char *dir, int with_eot, uint32_t *tok, uint8_t *mask, size_t cap) {
    size_t n = 0;
    g_nex = 0;
    for (int r = 0; g_nex < MAX_EX && n + 50 < cap; r++) {
        if (r % 17 == 5) { /* an empty record */
            tok[n] = EOT, mask[n] = 1, n++;
            continue;
        }
        const int body = 1 + (r * 13) % 40, prompt = body / 3;
        g_ex[g_nex++] = (exv){n, body + 1, prompt};
        for (int j = 0; j < body; j++) {
            tok[n] = 1 + (uint32_t)((r * 7 + j * 3) % (V - 1));
            mask[n] = j >= prompt;
            n++;
        }
        tok[n] = EOT, mask[n] = 1, n++;
    }
    char path[700];
    LF_ASSERT_OK(lf_mkdirs(dir));
    const size_t half = n / 2 + 3;
    snprintf(path, sizeof path, "%s/train_000.bin", dir);
    LF_ASSERT_OK(lf_shard_write(path, tok, mask, half, V));
    snprintf(path, sizeof path, "%s/train_001.bin", dir);
    LF_ASSERT_OK(lf_shard_write(path, tok + half, mask + half, n - half, V));
    char manifest[1024];
    snprintf(manifest, sizeof manifest,
             "{\"format\":\"llmforge-dataset\",\"version\":1,\"vocab_size\":%d,%s"
             "\"tokenizer\":{\"spec\":\"none\"},\"splits\":{\"train\":{\"shards\":[\"train_000.bin\","
             "\"train_001.bin\"],\"tokens\":%zu}}}",
             V, with_eot ? "\"eot\":0," : "", n);
    snprintf(path, sizeof path, "%s/dataset.json", dir);
    LF_ASSERT_OK(lf_file_write_all(path, manifest, strlen(manifest)));
    return n;
}

/* The example whose positions are in[0..n), tg[0..n), or -1. */
static int find_example(const uint32_t *tok, const uint8_t *mask, const int32_t *in, const int32_t *tg, int n,
                        const int *used) {
    for (int k = 0; k < g_nex; k++) {
        const int want = g_ex[k].len - 1 < T ? g_ex[k].len - 1 : T;
        if (used[k] || want != n) continue;
        int same = 1;
        for (int i = 0; i < n && same; i++) {
            const size_t s = g_ex[k].start + (size_t)i;
            same = in[i] == (int32_t)tok[s] && tg[i] == (mask[s + 1] ? (int32_t)tok[s + 1] : -1);
        }
        if (same) return k;
    }
    return -1;
}

/* One epoch of rows: every example exactly once; returns padding positions. */
static uint64_t check_epoch(const lf_sft_pack *p, const uint32_t *tok, const uint8_t *mask, int padded) {
    lf_sft_pack_stats st;
    lf_sft_pack_stats_get(p, &st);
    int used[MAX_EX] = {0};
    int32_t in[T], tg[T], pos[T];
    uint64_t pad = 0, tokens = 0, targets = 0;
    for (uint64_t r = 0; r < st.rows; r++) {
        LF_ASSERT_OK(lf_sft_pack_get_batch(p, 5, LF_RNG_DATA, r, 1, in, tg, pos));
        int t = 0, in_row = 0;
        while (t < T) {
            assert_int_equal(pos[t], 0); /* every run starts at position 0 */
            int n = 1;
            while (t + n < T && pos[t + n] == n) n++;
            if (in[t] == EOT) { /* padding: the row's last run */
                if (t + n != T) fail_msg("row %llu: padding at %d is not at the row's end", (unsigned long long)r, t);
                for (int i = t; i < T; i++) assert_int_equal(tg[i], -1);
                pad += (uint64_t)n;
                break;
            }
            const int k = find_example(tok, mask, in + t, tg + t, n, used);
            if (k < 0) fail_msg("row %llu: the run at %d (%d tokens) is no whole example", (unsigned long long)r, t, n);
            used[k] = 1;
            tokens += (uint64_t)n;
            for (int i = 0; i < n; i++) targets += tg[t + i] >= 0;
            in_row++;
            t += n;
        }
        if (padded) assert_int_equal(in_row, 1);
        assert_true(in_row >= 1);
    }
    for (int k = 0; k < g_nex; k++)
        if (!used[k]) fail_msg("example %d (%d tokens) missing from the epoch", k, g_ex[k].len);
    assert_int_equal(st.examples, (uint64_t)g_nex);
    assert_int_equal(st.block_size, T);
    assert_int_equal(st.tokens, tokens);
    assert_int_equal(st.targets, targets);
    assert_int_equal(st.rows * T - pad, tokens);
    uint64_t trunc = 0;
    for (int k = 0; k < g_nex; k++) trunc += g_ex[k].len - 1 > T;
    assert_int_equal(st.truncated, trunc);
    assert_true(trunc > 0);
    return pad;
}

static void test_epochs(void **state) {
    (void)state;
    char *tmp = lf_test_tmpdir(), dir[600];
    snprintf(dir, sizeof dir, "%s/ds", tmp);
    static uint32_t tok[20000];
    static uint8_t mask[20000];
    make_dataset(dir, 1, tok, mask, 20000);
    lf_dataset *d = NULL;
    LF_ASSERT_OK(lf_dataset_open(&d, dir));
    lf_sft_pack *packed = NULL, *padded = NULL;
    LF_ASSERT_OK(lf_sft_pack_create(&packed, d, LF_SPLIT_TRAIN, T, LF_SFT_PACKED));
    LF_ASSERT_OK(lf_sft_pack_create(&padded, d, LF_SPLIT_TRAIN, T, LF_SFT_PADDED));
    const uint64_t pad_packed = check_epoch(packed, tok, mask, 0), pad_padded = check_epoch(padded, tok, mask, 1);
    lf_sft_pack_stats a, b;
    lf_sft_pack_stats_get(packed, &a);
    lf_sft_pack_stats_get(padded, &b);
    assert_int_equal(b.rows, (uint64_t)g_nex);
    assert_true(a.rows < b.rows);
    assert_true(pad_packed * 4 < pad_padded); /* packing saves most of the padding */

    /* the loader: a step's micro-batches are the pack's rows lf_loader_row names, positions included */
    lf_loader_opts o = lf_loader_opts_default();
    o.micro_batch = 3, o.block_size = T, o.accum = 2, o.seed = 9, o.pack = packed, o.prefetch = 2;
    lf_loader *l = NULL;
    LF_ASSERT_OK(lf_loader_open(&l, d, &o, 4));
    int32_t x[2 * 3 * T], y[2 * 3 * T], p[2 * 3 * T], wx[3 * T], wy[3 * T], wp[3 * T];
    assert_int_equal(lf_loader_next(l, x, y, NULL), LF_ERR_INVALID_ARG); /* a pack's loader needs pos */
    LF_ASSERT_OK(lf_loader_next_pos(l, x, y, p, NULL));
    for (int m = 0; m < 2; m++) {
        LF_ASSERT_OK(lf_sft_pack_get_batch(packed, 9, LF_RNG_DATA, lf_loader_row(&o, 4, m, 0), 3, wx, wy, wp));
        assert_memory_equal(x + m * 3 * T, wx, sizeof wx);
        assert_memory_equal(y + m * 3 * T, wy, sizeof wy);
        assert_memory_equal(p + m * 3 * T, wp, sizeof wp);
    }
    assert_true(lf_loader_epoch(l) > 0);
    lf_loader_close(l);
    o.block_size = T + 1; /* rows of another length: refused, not overrun */
    assert_int_equal(lf_loader_open(&l, d, &o, 0), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("rows are 24 tokens long");
    assert_null(l);
    lf_sft_pack_free(packed);
    lf_sft_pack_free(padded);
    lf_dataset_close(d);

    /* no end-of-text: no example boundaries, refused */
    snprintf(dir, sizeof dir, "%s/noeot", tmp);
    make_dataset(dir, 0, tok, mask, 20000);
    LF_ASSERT_OK(lf_dataset_open(&d, dir));
    assert_int_equal(lf_sft_pack_create(&packed, d, LF_SPLIT_TRAIN, T, LF_SFT_PACKED), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("end-of-text");
    assert_null(packed);
    lf_dataset_close(d);
    lf_test_rmrf(tmp);
    free(tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_epochs)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
