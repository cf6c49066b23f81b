/*
 * Fuzz harness: dataset manifest (dataset.json) reader (src/data/dataset.c).
 *
 * Input: the bytes of dataset.json. On first use the harness makes a
 * per-process directory (under /dev/shm when it exists, else $TMPDIR or
 * /tmp; removed at exit) holding valid files the manifest can point at:
 *
 *   vocab.json   {"type":"char","chars":["\n"," ","a","b","c","d","e","f"]}
 *   train.bin    64 tokens, vocab_size 8, with a loss mask (u16 tokens)
 *   val.bin      16 tokens, vocab_size 8, no mask
 *   empty.bin     0 tokens, vocab_size 8
 *   wide.bin     20 tokens, vocab_size 70000 (u32 tokens)
 *
 * and each input is written there as dataset.json before lf_dataset_open.
 * When the dataset opens, the harness checks the accessors, opens the
 * tokenizer spec it reports, and draws batches from every present split
 * (both sampling modes, a few block sizes): each call either fails with a
 * message or fills inputs with ids below vocab_size and targets with ids
 * below vocab_size or -1.
 */
#include <dirent.h>
#include <sys/stat.h>
#include "fuzz_util.h"
#include "llmforge/data.h"

static char g_dir[512];

static void rm_dir(void) {
    if (!g_dir[0]) return;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
    g_dir[0] = 0;
}

static void write_file(const char *name, const void *buf, size_t len) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || fuzz_rewrite_fd(fd, buf, len) != 0) {
        perror("fuzz_dataset: cannot write a file");
        abort();
    }
    close(fd);
}

static void shard(const char *name, size_t n, uint32_t vocab, int with_mask) {
    uint32_t tok[64];
    uint8_t mask[64];
    for (size_t i = 0; i < n; i++) {
        tok[i] = (uint32_t)((i * 5 + 3) % vocab);
        mask[i] = (uint8_t)(i % 3 != 0);
    }
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    if (lf_shard_write(p, tok, with_mask ? mask : NULL, n, vocab) != LF_OK) {
        fprintf(stderr, "fuzz_dataset: cannot write shard '%s': %s\n", p, lf_last_error());
        abort();
    }
}

static void setup(void) {
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/lf_fuzz_dataset.XXXXXX", base);
    if (!mkdtemp(g_dir)) {
        perror("fuzz_dataset: mkdtemp");
        abort();
    }
    atexit(rm_dir);
    static const char vocab[] = "{\"type\":\"char\",\"chars\":[\"\\n\",\" \",\"a\",\"b\",\"c\",\"d\",\"e\",\"f\"]}\n";
    write_file("vocab.json", vocab, sizeof vocab - 1);
    shard("train.bin", 64, 8, 1);
    shard("val.bin", 16, 8, 0);
    shard("empty.bin", 0, 8, 0);
    shard("wide.bin", 20, 70000, 0);
}

static void batches(const lf_dataset *d, lf_split split) {
    static const int Ts[] = {1, 3, 8, 62};
    const int V = lf_dataset_vocab_size(d);
    enum { B = 3, TMAX = 62 };
    int32_t in[B * TMAX], tg[B * TMAX];
    for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
        for (int mode = 0; mode < 2; mode++) {
            const int T = Ts[k];
            lf_status st = lf_dataset_get_batch(d, split, (lf_sampling)mode, 1337, LF_RNG_DATA, 5, B, T, in, tg);
            if (T == 3)
                fuzz_note(split == LF_SPLIT_TRAIN ? "lf_dataset_get_batch train T=3" : "lf_dataset_get_batch val T=3", st);
            if (st != LF_OK) {
                FUZZ_CHECK(lf_last_error()[0] != 0);
                FUZZ_CHECK(lf_dataset_num_tokens(d, split) < (size_t)T + 2);
                continue;
            }
            for (int i = 0; i < B * T; i++) {
                FUZZ_CHECK(in[i] >= 0 && in[i] < V);
                FUZZ_CHECK(tg[i] >= -1 && tg[i] < V);
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) setup();
    write_file("dataset.json", data, size);
    lf_dataset *d = NULL;
    lf_status ost = lf_dataset_open(&d, g_dir);
    fuzz_note("lf_dataset_open", ost);
    if (ost != LF_OK) {
        FUZZ_CHECK(d == NULL);
        FUZZ_CHECK(lf_last_error()[0] != 0);
        return 0;
    }
    FUZZ_CHECK(d != NULL);
    FUZZ_CHECK(lf_dataset_vocab_size(d) >= 1);
    FUZZ_CHECK(strcmp(lf_dataset_dir(d), g_dir) == 0);
    const char *spec = lf_dataset_tokenizer_spec(d);
    FUZZ_CHECK(spec != NULL);
    lf_tokenizer *t = NULL;
    if (lf_tokenizer_open(&t, spec, NULL) == LF_OK) lf_tokenizer_free(t);
    batches(d, LF_SPLIT_TRAIN);
    batches(d, LF_SPLIT_VAL);
    lf_dataset_close(d);
    return 0;
}
