/*
 * Fuzz harness: training configuration parser (src/train/config.c).
 *
 * Input: configuration text. The bytes up to the first NUL are the JSON
 * document (parsed with lf_train_config_parse(cfg, text, "fuzz", 0, NULL));
 * the NUL-separated pieces after it, at most 8, are "key.path=value"
 * overrides, applied in a second parse of the same text. A plain JSON file
 * (no NUL) therefore exercises exactly the file parser.
 *
 * Invariant (config.c promises "parse(to_json(cfg)) reproduces cfg"): for
 * every config that parses, lf_train_config_to_json succeeds, its output
 * parses again, and dumping that second config gives the same text.
 */
#include "fuzz_util.h"
#include "llmforge/train.h"

#define MAX_OVERRIDES 8

static void round_trip(const lf_train_config *cfg) {
    char *j1 = lf_train_config_to_json(cfg);
    FUZZ_CHECK(j1 != NULL);
    lf_train_config cfg2 = lf_train_config_default();
    lf_status st = lf_train_config_parse(&cfg2, j1, "fuzz round trip", 0, NULL);
    if (st != LF_OK) fprintf(stderr, "round trip failed: %s\n--- dump ---\n%s\n", lf_last_error(), j1);
    FUZZ_CHECK(st == LF_OK);
    char *j2 = lf_train_config_to_json(&cfg2);
    FUZZ_CHECK(j2 != NULL);
    if (strcmp(j1, j2) != 0)
        fprintf(stderr, "dump changed on the round trip:\n--- first ---\n%s\n--- second ---\n%s\n", j1, j2);
    FUZZ_CHECK(strcmp(j1, j2) == 0);
    lf_free(j2);
    lf_free(j1);
}

static void parse_one(const char *text, int n_ov, const char *const *ov) {
    lf_train_config cfg = lf_train_config_default();
    lf_status st = lf_train_config_parse(&cfg, text, "fuzz", n_ov, ov);
    fuzz_note(n_ov ? "lf_train_config_parse with overrides" : "lf_train_config_parse", st);
    if (st == LF_OK) {
        round_trip(&cfg);
    } else {
        FUZZ_CHECK(lf_last_error()[0] != 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    const char *ov[MAX_OVERRIDES];
    int n_ov = 0;
    size_t text_len = strlen(buf);
    for (size_t at = text_len + 1; at <= size && n_ov < MAX_OVERRIDES; at += strlen(buf + at) + 1)
        ov[n_ov++] = buf + at;
    parse_one(buf, 0, NULL);
    if (n_ov > 0) parse_one(buf, n_ov, ov);
    free(buf);
    return 0;
}
