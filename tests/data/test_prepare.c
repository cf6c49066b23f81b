/* lf_prepare (src/data/prepare.c): fine-tuning masks exactly on response +
 * end-of-text, end-of-text after every pretraining document, content-hash
 * split stability when records are appended, --split none, shards of bounded
 * size, dataset.json contents, the round trip through lf_dataset_open +
 * lf_dataset_get_batch (prompt positions give -1 targets), bad records and
 * skip counts, char vocabularies given or built, directories, the GPT-2
 * tokenizer when its files are in the shared directory, and pairs rendered
 * through a chat template (the ids are the server's prompt ids for
 * [user: prompt], then the response and the assistant's suffix; the
 * template's characters join a char vocabulary; chat_template.json written
 * and named in dataset.json, and gone after a run without one; with GPT-2,
 * special tokens are read in template text only); conversations ("messages"
 * records, and pairs) through a Hugging Face Jinja template: the ids are the
 * rendering's, the mask is 1 exactly on the assistant turns with their
 * end-of-turn marker, the template is written as chat_template.json and
 * reads back to the same renderer, and a template's raise_exception is a
 * bad record naming FILE:LINE; the seeded shuffle split: a bijection of
 * [0, n) for every n tried, exact counts, the same records for the same
 * seed and other ones for another seed, every record in one split. */
#include "test_util.h"
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "llmforge/data.h"

#include "prepare_fixture.h"
#include "data/chat_template.h"
#include "data/data_impl.h"

static void put(const char *name, const char *text) {
    LF_ASSERT_OK(lf_file_write_all(path_in(name), text, strlen(text)));
}

static cJSON *read_manifest(const char *dir) {
    char p[1200], *buf = NULL;
    size_t len = 0;
    snprintf(p, sizeof p, "%s/dataset.json", dir);
    LF_ASSERT_OK(lf_file_read_all(p, 0, &buf, &len));
    cJSON *j = cJSON_ParseWithLength(buf, len);
    lf_free(buf);
    assert_non_null(j);
    return j;
}

static double num_at(const cJSON *o, const char *a, const char *b, const char *c) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) v = cJSON_GetObjectItemCaseSensitive(v, b);
    if (c) v = cJSON_GetObjectItemCaseSensitive(v, c);
    if (!cJSON_IsNumber(v)) fail_msg("dataset.json: %s.%s.%s is not a number", a, b ? b : "", c ? c : "");
    return v->valuedouble;
}

/* All tokens and mask bytes of one split, over its shards in manifest order. */
typedef struct split_data {
    size_t n;
    uint32_t *tok;
    uint8_t *mask;
    int has_mask;
} split_data;

static void load_split(const char *dir, const cJSON *man, const char *name, split_data *sd) {
    memset(sd, 0, sizeof *sd);
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "splits"), name);
    if (!sp) return;
    const cJSON *sh;
    cJSON_ArrayForEach(sh, cJSON_GetObjectItemCaseSensitive(sp, "shards")) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, sh->valuestring);
        lf_shard *s = NULL;
        LF_ASSERT_OK(lf_shard_open(&s, p, 1));
        size_t m = lf_shard_num_tokens(s);
        sd->tok = realloc(sd->tok, (sd->n + m + 1) * sizeof *sd->tok);
        sd->mask = realloc(sd->mask, sd->n + m + 1);
        sd->has_mask = lf_shard_has_mask(s);
        for (size_t i = 0; i < m; i++) {
            sd->tok[sd->n + i] = lf_shard_token(s, i);
            sd->mask[sd->n + i] = (uint8_t)lf_shard_mask(s, i);
        }
        sd->n += m;
        lf_shard_close(s);
    }
}

static void free_split(split_data *sd) {
    free(sd->tok);
    free(sd->mask);
}

static lf_tokenizer *open_tok(const char *dir) {
    lf_tokenizer *t = NULL;
    LF_ASSERT_OK(lf_tokenizer_open(&t, "char:vocab.json", dir));
    return t;
}

static uint32_t id_of(const lf_tokenizer *t, const char *ch) {
    uint32_t *ids = NULL;
    size_t n = 0;
    LF_ASSERT_OK(lf_tokenizer_encode(t, ch, strlen(ch), &ids, &n));
    assert_int_equal(n, 1);
    uint32_t id = ids[0];
    lf_free(ids);
    return id;
}

/* ---------------------------------------------------------------- fine-tuning layout */
static void test_sft_masks(void **state) {
    (void)state;
    put("p.jsonl", "{\"prompt\": \"12+3=\", \"response\": \"15\"}\n"
                   "{\"input_text\": \"ab\", \"target_text\": \"c\"}\n"
                   "{\"prompt\": \"\", \"response\": \"zz\"}\n");
    lf_prepare_opts o = opts1(path_in("p.jsonl"), LF_RECORD_SFT, "char");
    o.split[0] = 1;
    o.split[1] = 0;
    const char *out = path_in("out");
    lf_prepare_result res;
    LF_ASSERT_OK(lf_prepare(&o, out, &res));
    assert_int_equal(res.records[0], 3);
    assert_int_equal(res.records[1] + res.records[2], 0);
    /* 12+3= 15 \n | ab c \n | zz \n */
    assert_int_equal(res.tokens[0], 8 + 4 + 3);
    assert_int_equal(res.target_tokens[0], 3 + 2 + 3);
    assert_int_equal(res.shards[0], 1);
    assert_int_equal(res.skipped, 0);

    lf_tokenizer *t = open_tok(out);
    assert_int_equal(res.eot, (int)id_of(t, "\n"));
    assert_int_equal(lf_tokenizer_eot(t), res.eot);
    assert_int_equal(res.vocab_size, lf_tokenizer_vocab_size(t));
    cJSON *man = read_manifest(out);
    split_data sd;
    load_split(out, man, "train", &sd);
    assert_true(sd.has_mask);
    const char *text = "12+3=15\nabc\nzz\n";
    const uint8_t want_mask[] = {0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1};
    assert_int_equal(sd.n, strlen(text));
    for (size_t i = 0; i < sd.n; i++) {
        char ch[2] = {text[i], 0};
        assert_int_equal(sd.tok[i], id_of(t, ch));
        if (sd.mask[i] != want_mask[i]) fail_msg("mask[%zu] = %d, expected %d", i, sd.mask[i], want_mask[i]);
    }
    free_split(&sd);
    cJSON_Delete(man);
    lf_tokenizer_free(t);
}

/* ---------------------------------------------------------------- through a chat template */
static const char k_tpl[] = "{\"format\": \"llmforge.chat_template.v1\", \"bos\": \"<s>\",\n"
                            " \"roles\": {\"system\": {\"prefix\": \"[S] \", \"suffix\": \"\\n\"},\n"
                            "           \"user\": {\"prefix\": \"[INST] \", \"suffix\": \" [/INST]\"},\n"
                            "           \"assistant\": {\"prefix\": \" \", \"suffix\": \" </s>\"}},\n"
                            " \"generation_prompt\": \" \", \"stop\": [\"</s>\"]}\n";

static void test_sft_chat_template(void **state) {
    (void)state;
    put("p.jsonl", "{\"prompt\": \"12+3=\", \"response\": \"15\"}\n{\"prompt\": \"ab\", \"response\": \"c\"}\n");
    put("tpl.json", k_tpl);
    lf_prepare_opts o = opts1(path_in("p.jsonl"), LF_RECORD_SFT, "char");
    o.split[1] = 0;
    o.chat_template = path_in("tpl.json");
    const char *out = path_in("out");
    lf_prepare_result res;
    LF_ASSERT_OK(lf_prepare(&o, out, &res));
    /* what the chat endpoint renders for [user: prompt], then response + suffix, then the end of text */
    const char *text = "<s>[INST] 12+3= [/INST] 15 </s>\n<s>[INST] ab [/INST] c </s>\n";
    const size_t prompt1 = strlen("<s>[INST] 12+3= [/INST] "), rec1 = strlen("<s>[INST] 12+3= [/INST] 15 </s>\n"),
                 prompt2 = strlen("<s>[INST] ab [/INST] ");
    assert_int_equal(res.tokens[0], strlen(text));
    assert_int_equal(res.target_tokens[0], (rec1 - prompt1) + (strlen(text) - rec1 - prompt2));
    lf_tokenizer *t = open_tok(out); /* '<', '[', '/', ... came from the template alone */
    cJSON *man = read_manifest(out);
    split_data sd;
    load_split(out, man, "train", &sd);
    assert_int_equal(sd.n, strlen(text));
    for (size_t i = 0; i < sd.n; i++) {
        char ch[2] = {text[i], 0};
        const int want = i < prompt1 ? 0 : i < rec1 ? 1 : i < rec1 + prompt2 ? 0 : 1;
        assert_int_equal(sd.tok[i], id_of(t, ch));
        if (sd.mask[i] != want) fail_msg("mask[%zu] ('%c') = %d, expected %d", i, text[i], sd.mask[i], want);
    }
    /* the prompt part is byte for byte the server's rendering */
    lf__chat_template tpl, back;
    LF_ASSERT_OK(lf__chat_template_load(path_in("tpl.json"), &tpl));
    lf__chat_message m = {LF__ROLE_USER, "12+3=", 5};
    char *r = NULL;
    size_t rl = 0;
    LF_ASSERT_OK(lf__chat_template_render(&tpl, &m, 1, 1, &r, &rl, NULL, NULL));
    assert_int_equal(rl, prompt1);
    assert_memory_equal(r, text, prompt1);
    free(r);
    /* chat_template.json: the same template, named and hashed in dataset.json */
    char *js = NULL;
    size_t jl = 0;
    LF_ASSERT_OK(lf_file_read_all(join2(out, "chat_template.json"), 0, &js, &jl));
    LF_ASSERT_OK(lf__chat_template_parse(js, jl, "written", &back));
    assert_string_equal(back.bos, "<s>");
    assert_string_equal(back.suffix[LF__ROLE_ASSISTANT], " </s>");
    assert_string_equal(back.stop[0], "</s>");
    char sha[65];
    lf_sha256_hex(js, jl, sha);
    lf_free(js);
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(man, "chat_template");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ct, "file")->valuestring, "chat_template.json");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(ct, "sha256")->valuestring, sha);
    lf__chat_template_free(&back);
    lf__chat_template_free(&tpl);
    free_split(&sd);
    cJSON_Delete(man);
    lf_tokenizer_free(t);

    /* the same directory again without a template: the old chat_template.json goes */
    o.chat_template = NULL;
    LF_ASSERT_OK(lf_prepare(&o, out, &res));
    assert_int_equal(res.tokens[0], strlen("12+3=15\nabc\n"));
    assert_int_not_equal(access(join2(out, "chat_template.json"), F_OK), 0);
    man = read_manifest(out);
    assert_null(cJSON_GetObjectItemCaseSensitive(man, "chat_template"));
    cJSON_Delete(man);
    /* ChatML by name */
    o.chat_template = "chatml";
    LF_ASSERT_OK(lf_prepare(&o, out, &res));
    assert_int_equal(access(join2(out, "chat_template.json"), F_OK), 0);
    /* refusals: pretraining, a missing or bad template (and no dataset.json is left) */
    o.mode = LF_RECORD_PRETRAIN;
    assert_int_equal(lf_prepare(&o, path_in("o2"), &res), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("mode sft");
    o.mode = LF_RECORD_SFT;
    o.chat_template = path_in("missing.json");
    assert_int_equal(lf_prepare(&o, path_in("o3"), &res), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("missing.json");
    put("bad.json", "{\"format\": \"llmforge.chat_template.v1\", \"roles\": {}}");
    o.chat_template = path_in("bad.json");
    assert_int_equal(lf_prepare(&o, path_in("o4"), &res), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("bad.json");
    assert_int_not_equal(access(join2(path_in("o4"), "dataset.json"), F_OK), 0);
}

/* GPT-2 through a template whose bos is "<|endoftext|>": the template's
 * occurrence is the special token, a prompt that types it is plain text. */
static void test_sft_chat_template_gpt2(void **state) {
    (void)state;
    char dir[1200], enc[1300], spec[1300];
    snprintf(dir, sizeof dir, "%s/data/gpt2", LF_SHARED_DIR);
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    if (access(enc, R_OK) != 0) {
        print_message("skipped: no GPT-2 files in %s\n", dir);
        skip();
    }
    snprintf(spec, sizeof spec, "gpt2:%s", dir);
    put("g.jsonl", "{\"prompt\": \"<|endoftext|>\", \"response\": \"Hello\"}\n");
    put("t.json",
        "{\"format\": \"llmforge.chat_template.v1\", \"bos\": \"<|endoftext|>\",\n"
        " \"roles\": {\"system\": {\"prefix\": \"\", \"suffix\": \"\"}, \"user\": {\"prefix\": \"\", \"suffix\": \"\"},\n"
        "           \"assistant\": {\"prefix\": \"\", \"suffix\": \"\"}}, \"generation_prompt\": \"\"}");
    lf_prepare_opts o = opts1(path_in("g.jsonl"), LF_RECORD_SFT, spec);
    o.split[1] = 0;
    o.chat_template = path_in("t.json");
    lf_prepare_result res;
    LF_ASSERT_OK(lf_prepare(&o, path_in("og"), &res));
    cJSON *man = read_manifest(path_in("og"));
    split_data sd;
    load_split(path_in("og"), man, "train", &sd);
    /* [50256] (bos), "<|endoftext|>" as text: "<", "|", "end", "of", "text", "|", ">" = 27, 91, 437, 1659, 5239, 91, 29;
     * "Hello" 15496, then the end of text 50256 */
    const uint32_t want[] = {50256, 27, 91, 437, 1659, 5239, 91, 29, 15496, 50256};
    assert_int_equal(sd.n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sd.n; i++) {
        if (sd.tok[i] != want[i]) fail_msg("token %zu: %u, expected %u", i, sd.tok[i], want[i]);
        assert_int_equal(sd.mask[i], i >= 8);
    }
    free_split(&sd);
    cJSON_Delete(man);
}

/* ---------------------------------------------------------------- pretraining layout */
static void test_pretrain_eot(void **state) {
    (void)state;
    put("d.jsonl", "{\"text\": \"hello\"}\n{\"text\": \"two\\nlines\"}\n{\"text\": \"x\"}\n");
    lf_prepare_opts o = opts1(path_in("d.jsonl"), LF_RECORD_PRETRAIN, "char");
    o.split[1] = 0;
    const char *out = path_in("out");
    lf_prepare_result res;
    LF_ASSERT_OK(lf_prepare(&o, out, &res));
    assert_int_equal(res.records[0], 3);
    assert_int_equal(res.tokens[0], 6 + 10 + 2);
    assert_int_equal(res.target_tokens[0], res.tokens[0]);
    cJSON *man = read_manifest(out);
    split_data sd;
    load_split(out, man, "train", &sd);
    assert_false(sd.has_mask); /* pretraining shards carry no mask */
    lf_tokenizer *t = open_tok(out);
    char *dec = NULL;
    size_t len = 0;
    LF_ASSERT_OK(lf_tokenizer_decode(t, sd.tok, sd.n, &dec, &len));
    assert_string_equal(dec, "hello\ntwo\nlines\nx\n");
    lf_free(dec);
    free_split(&sd);
    cJSON_Delete(man);
    lf_tokenizer_free(t);

    /* plain text files: one document each (directory order), eot after each */
    LF_ASSERT_OK(lf_mkdirs(path_in("txt")));
    put("txt/b.txt", "second");
    put("txt/a.txt", "first\n");
    put("txt/.hidden.txt", "never");
    put("txt/c.bin", "skipped: the name tells no format");
    put("txt/README", "third");
    LF_ASSERT_OK(lf_file_write_all(path_in("txt/d.txt"), "bin\0ary", 7));
    lf_prepare_opts o2 = opts1(path_in("txt"), LF_RECORD_PRETRAIN, "char");
    o2.split[1] = 0;
    const char *out2 = path_in("out2");
    LF_ASSERT_OK(lf_prepare(&o2, out2, &res));
    assert_int_equal(res.sources, 3);
    assert_int_equal(res.records[0], 3);
    man = read_manifest(out2);
    load_split(out2, man, "train", &sd);
    t = open_tok(out2);
    LF_ASSERT_OK(lf_tokenizer_decode(t, sd.tok, sd.n, &dec, &len));
    assert_string_equal(dec, "third\nfirst\n\nsecond\n"); /* README < a.txt < b.txt */
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(man, "sources");
    assert_int_equal(cJSON_GetArraySize(src), 3);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(src, 0), "format")->valuestring, "text");
    lf_free(dec);
    free_split(&sd);
    cJSON_Delete(man);
    lf_tokenizer_free(t);
}

/* ---------------------------------------------------------------- split */
/* The split each text record landed in, decoded from the shards: 1 + split
 * index at texts[i], 0 when absent. */
static void splits_of(const char *out, char **texts, int n, int *where) {
    cJSON *man = read_manifest(out);
    lf_tokenizer *t = open_tok(out);
    static const char *names[3] = {"train", "val", "test"};
    memset(where, 0, (size_t)n * sizeof *where);
    for (int s = 0; s < 3; s++) {
        split_data sd;
        load_split(out, man, names[s], &sd);
        if (sd.n == 0) continue;
        char *dec = NULL;
        size_t len = 0;
        LF_ASSERT_OK(lf_tokenizer_decode(t, sd.tok, sd.n, &dec, &len));
        for (char *line = strtok(dec, "\n"); line; line = strtok(NULL, "\n")) {
            for (int i = 0; i < n; i++)
                if (!strcmp(texts[i], line)) {
                    if (where[i]) fail_msg("record '%s' appears twice", line);
                    where[i] = s + 1;
                }
        }
        lf_free(dec);
        free_split(&sd);
    }
    cJSON_Delete(man);
    lf_tokenizer_free(t);
}

static void test_split_stable(void **state) {
    (void)state;
    const int n1 = 600, n2 = 1000;
    char **texts = calloc((size_t)n2, sizeof *texts);
    size_t cap = (size_t)n2 * 64;
    char *body = malloc(cap);
    size_t at = 0;
    for (int i = 0; i < n2; i++) {
        texts[i] = malloc(48);
        /* later records bring new characters: the vocabulary (and so the ids) change, the split must not */
        snprintf(texts[i], 48, "record %d %s", i, i < n1 ? "abc" : "XYZ\xc3\xa9");
        if (i == n1) {
            LF_ASSERT_OK(lf_file_write_all(path_in("s1.jsonl"), body, at));
        }
        at += (size_t)snprintf(body + at, cap - at, "{\"text\": \"%s\"}\n", texts[i]);
    }
    LF_ASSERT_OK(lf_file_write_all(path_in("s2.jsonl"), body, at));
    int *w1 = calloc((size_t)n2, sizeof *w1), *w2 = calloc((size_t)n2, sizeof *w2);
    lf_prepare_result r1, r2;
    lf_prepare_opts o = opts1(path_in("s1.jsonl"), LF_RECORD_PRETRAIN, "char");
    o.split[0] = 7;
    o.split[1] = 2;
    o.split[2] = 1; /* weights, normalised */
    LF_ASSERT_OK(lf_prepare(&o, path_in("o1"), &r1));
    o = opts1(path_in("s2.jsonl"), LF_RECORD_PRETRAIN, "char");
    o.split[0] = 0.7;
    o.split[1] = 0.2;
    o.split[2] = 0.1;
    LF_ASSERT_OK(lf_prepare(&o, path_in("o2"), &r2));
    splits_of(path_in("o1"), texts, n2, w1);
    splits_of(path_in("o2"), texts, n2, w2);
    int counts[3] = {0};
    for (int i = 0; i < n2; i++) {
        if (!w2[i]) fail_msg("record %d is in no split", i);
        if (i < n1 && w1[i] != w2[i])
            fail_msg("record %d moved from split %d to %d when records were appended", i, w1[i] - 1, w2[i] - 1);
        if (i >= n1) assert_int_equal(w1[i], 0);
        counts[w2[i] - 1]++;
    }
    assert_int_equal(r2.records[0], (uint64_t)counts[0]);
    assert_int_equal(r2.records[1], (uint64_t)counts[1]);
    assert_int_equal(r2.records[2], (uint64_t)counts[2]);
    /* 1000 draws: each fraction within 5 points of its weight */
    assert_true(abs(counts[0] - 700) < 50);
    assert_true(abs(counts[1] - 200) < 50);
    assert_true(abs(counts[2] - 100) < 50);
    assert_true(counts[2] > 0);

    /* --split none: one set */
    o.split[0] = 1;
    o.split[1] = o.split[2] = 0;
    LF_ASSERT_OK(lf_prepare(&o, path_in("o3"), &r1));
    assert_int_equal(r1.records[0], (uint64_t)n2);
    assert_int_equal(r1.shards[1] + r1.shards[2], 0);
    cJSON *man = read_manifest(path_in("o3"));
    const cJSON *splits = cJSON_GetObjectItemCaseSensitive(man, "splits");
    assert_int_equal(cJSON_GetArraySize(splits), 1);
    assert_non_null(cJSON_GetObjectItemCaseSensitive(splits, "train"));
    cJSON_Delete(man);
    /* a weight of 0 gets nothing even at the edges: no test split with 0.9,0.1,0 */
    o.split[0] = 0.9;
    o.split[1] = 0.1;
    LF_ASSERT_OK(lf_prepare(&o, path_in("o4"), &r1));
    assert_int_equal(r1.records[2], 0);
    assert_int_equal(r1.records[0] + r1.records[1], (uint64_t)n2);

    for (int i = 0; i < n2; i++) free(texts[i]);
    free(texts);
    free(body);
    free(w1);
    free(w2);
}

/* ---------------------------------------------------------------- seeded shuffle split */

static void test_split_shuffle(void **state) {
    (void)state;
    /* the permutation is a bijection of [0, n), n not a power of 4 included */
    const uint64_t ns[] = {1, 2, 3, 4, 5, 17, 100, 1000, 4097};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        const uint64_t n = ns[k];
        unsigned char *hit = calloc(n, 1);
        for (uint64_t i = 0; i < n; i++) {
            const uint64_t j = lf__split_perm(i, n, 42);
            if (j >= n || hit[j])
                fail_msg("n %llu: pi(%llu) = %llu is out of range or repeated", (unsigned long long)n,
                         (unsigned long long)i, (unsigned long long)j);
            hit[j] = 1;
        }
        free(hit);
    }
    /* a record set through lf_prepare: exact counts, seed-determined */
    const int n = 1000;
    char **texts = calloc((size_t)n, sizeof *texts);
    size_t cap = (size_t)n * 64, at = 0;
    char *body = malloc(cap);
    for (int i = 0; i < n; i++) {
        texts[i] = malloc(48);
        snprintf(texts[i], 48, "row %d", i);
        at += (size_t)snprintf(body + at, cap - at, "{\"text\": \"%s\"}\n", texts[i]);
    }
    LF_ASSERT_OK(lf_file_write_all(path_in("sh.jsonl"), body, at));
    int *wa = calloc((size_t)n, sizeof *wa), *wb = calloc((size_t)n, sizeof *wb), *wc = calloc((size_t)n, sizeof *wc);
    lf_prepare_result r;
    lf_prepare_opts o = opts1(path_in("sh.jsonl"), LF_RECORD_PRETRAIN, "char");
    o.split[0] = 7;
    o.split[1] = 2;
    o.split[2] = 1;
    o.split_shuffle = 1;
    o.split_seed = 7;
    LF_ASSERT_OK(lf_prepare(&o, path_in("sa"), &r));
    assert_int_equal(r.records[0], 700);
    assert_int_equal(r.records[1], 200);
    assert_int_equal(r.records[2], 100);
    LF_ASSERT_OK(lf_prepare(&o, path_in("sb"), &r));
    o.split_seed = 8;
    LF_ASSERT_OK(lf_prepare(&o, path_in("sc"), &r));
    assert_int_equal(r.records[1], 200);
    splits_of(path_in("sa"), texts, n, wa);
    splits_of(path_in("sb"), texts, n, wb);
    splits_of(path_in("sc"), texts, n, wc);
    int same = 0, differ = 0;
    for (int i = 0; i < n; i++) {
        if (!wa[i] || !wc[i]) fail_msg("record %d is in no split", i);
        if (wa[i] != wb[i]) fail_msg("record %d: seed 7 put it in split %d, then in %d", i, wa[i] - 1, wb[i] - 1);
        same += wa[i] == wc[i];
        differ += wa[i] != wc[i];
    }
    /* two independent 7:2:1 draws agree on a record with probability 0.49 + 0.04 + 0.01 = 0.54:
     * 540 of 1000 expected (sd ~16); 800 agreements would be 16 sd out */
    assert_true(differ > 0 && same < 800);
    cJSON *man = read_manifest(path_in("sa"));
    const cJSON *rule = cJSON_GetObjectItemCaseSensitive(man, "split");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(rule, "method")->valuestring, "shuffle");
    assert_int_equal((int)num_at(man, "split", "seed", NULL), 7);
    assert_int_equal((int)num_at(man, "split", "records", NULL), n);
    cJSON_Delete(man);
    o.keep_splits = 1;
    assert_int_equal(lf_prepare(&o, path_in("sd"), &r), LF_ERR_INVALID_ARG);
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(body);
    free(wa);
    free(wb);
    free(wc);
}

/* ---------------------------------------------------------------- manifest and round trip */
static void test_manifest_and_batches(void **state) {
    (void)state;
    /* arithmetic-like pairs */
    size_t cap = 1 << 16, at = 0;
    char *body = malloc(cap);
    for (int i = 0; i < 400; i++) {
        int a = (int)(lf_rng_u64(1, LF_RNG_TEST, (uint64_t)i) % 100),
            b = (int)(lf_rng_u64(2, LF_RNG_TEST, (uint64_t)i) % 100);
        at += (size_t)snprintf(body + at, cap - at, "{\"prompt\": \"%d+%d=\", \"response\": \"%d\"}\n", a, b, a + b);
    }
    LF_ASSERT_OK(lf_file_write_all(path_in("a.jsonl"), body, at));
    free(body);
    lf_prepare_opts o = opts1(path_in("a.jsonl"), LF_RECORD_SFT, "char");
    o.shard_tokens = 500; /* several shards per split, records cut across them */
    const char *out = path_in("ds");
    lf_prepare_result res;
    LF_ASSERT_OK(lf_prepare(&o, out, &res));
    assert_true(res.shards[0] > 3);
    assert_true(res.records[1] > 0);

    cJSON *man = read_manifest(out);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(man, "format")->valuestring, "llmforge-dataset");
    assert_int_equal(num_at(man, "version", NULL, NULL), 1);
    assert_int_equal(num_at(man, "vocab_size", NULL, NULL), res.vocab_size);
    assert_int_equal(res.vocab_size, 13); /* \n + = 0-9 */
    assert_int_equal(num_at(man, "eot", NULL, NULL), res.eot);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(man, "mode")->valuestring, "sft");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(man, "tokenizer");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(tok, "spec")->valuestring, "char:vocab.json");
    char sha[65];
    LF_ASSERT_OK(lf_sha256_file_hex(path_in("ds/vocab.json"), sha));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(tok, "sha256")->valuestring, sha);
    assert_int_equal(num_at(man, "splits", "train", "tokens"), res.tokens[0]);
    assert_int_equal(num_at(man, "splits", "train", "records"), res.records[0]);
    assert_int_equal(num_at(man, "splits", "train", "target_tokens"), res.target_tokens[0]);
    assert_int_equal(num_at(man, "splits", "val", "records"), res.records[1]);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(
                         cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "splits"), "train"),
                         "shards")),
                     (int)res.shards[0]);
    assert_int_equal(num_at(man, "records", NULL, NULL), 400);
    assert_int_equal(num_at(man, "skipped_records", NULL, NULL), 0);
    const cJSON *src = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(man, "sources"), 0);
    LF_ASSERT_OK(lf_sha256_file_hex(path_in("a.jsonl"), sha));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(src, "sha256")->valuestring, sha);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(src, "path")->valuestring, path_in("a.jsonl"));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(src, "format")->valuestring, "jsonl");
    assert_int_equal(num_at(src, "records", NULL, NULL), 400);
    struct stat sb;
    assert_int_equal(stat(path_in("a.jsonl"), &sb), 0);
    assert_int_equal(num_at(src, "bytes", NULL, NULL), (double)sb.st_size);
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "split"), "fractions");
    assert_int_equal(cJSON_GetArraySize(fr), 3);
    assert_true(fabs(cJSON_GetArrayItem(fr, 0)->valuedouble - 0.9) < 1e-12);

    /* every shard is at most shard_tokens */
    split_data sd;
    load_split(out, man, "train", &sd);
    assert_int_equal(sd.n, res.tokens[0]);
    size_t targets = 0;
    for (size_t i = 0; i < sd.n; i++) targets += sd.mask[i];
    assert_int_equal(targets, res.target_tokens[0]);

    /* the round trip: the sampler gives -1 exactly at prompt positions */
    lf_dataset *d = NULL;
    LF_ASSERT_OK(lf_dataset_open(&d, out));
    assert_int_equal(lf_dataset_vocab_size(d), res.vocab_size);
    assert_int_equal(lf_dataset_num_tokens(d, LF_SPLIT_TRAIN), res.tokens[0]);
    assert_int_equal(lf_dataset_num_tokens(d, LF_SPLIT_VAL), res.tokens[1]);
    const int B = 16, T = 32;
    int32_t x[16 * 32], y[16 * 32];
    LF_ASSERT_OK(lf_dataset_get_batch(d, LF_SPLIT_TRAIN, LF_SAMPLING_RANDOM, 7, LF_RNG_DATA, 0, B, T, x, y));
    int minus = 0, real = 0;
    for (int b = 0; b < B; b++) {
        /* find the window's start by matching the inputs (distinct enough over 32 tokens) */
        size_t s = SIZE_MAX;
        for (size_t p = 0; p + (size_t)T < sd.n && s == SIZE_MAX; p++) {
            int same = 1;
            for (int k = 0; k < T && same; k++) same = sd.tok[p + (size_t)k] == (uint32_t)x[b * T + k];
            if (same) s = p;
        }
        assert_true(s != SIZE_MAX);
        for (int k = 0; k < T; k++) {
            size_t q = s + (size_t)k + 1;
            int32_t want = sd.mask[q] ? (int32_t)sd.tok[q] : -1;
            /* a repeated window may match elsewhere with another mask; the token must agree anyway */
            if (y[b * T + k] != want && y[b * T + k] != -1 && want != -1)
                fail_msg("row %d position %d: target %d, expected %d", b, k, y[b * T + k], want);
            if (y[b * T + k] < 0) minus++;
            else real++;
        }
    }
    assert_true(minus > 0 && real > 0);
    /* the same check exactly, with the sequential sampler whose starts are known */
    LF_ASSERT_OK(lf_dataset_get_batch(d, LF_SPLIT_TRAIN, LF_SAMPLING_SEQUENTIAL, 0, LF_RNG_EVAL, 0, B, T, x, y));
    lf_tokenizer *t = open_tok(out);
    uint32_t eq = id_of(t, "=");
    for (int b = 0; b < B; b++) {
        size_t s = ((size_t)b * (size_t)T) % (sd.n - (size_t)T - 1);
        for (int k = 0; k < T; k++) {
            size_t q = s + (size_t)k + 1;
            assert_int_equal(x[b * T + k], (int32_t)sd.tok[q - 1]);
            assert_int_equal(y[b * T + k], sd.mask[q] ? (int32_t)sd.tok[q] : -1);
            /* the token after '=' starts the response: a real target; '=' itself is prompt */
            if (sd.tok[q - 1] == eq) assert_true(y[b * T + k] >= 0);
            if (sd.tok[q] == eq) assert_int_equal(y[b * T + k], -1);
        }
    }
    lf_tokenizer_free(t);
    lf_dataset_close(d);
    free_split(&sd);
    cJSON_Delete(man);
}

/* ---------------------------------------------------------------- bad input */
typedef struct skips {
    int n;
} skips;
static void count_skip(const char *msg, void *user) {
    (void)msg;
    ((skips *)user)->n++;
}

static void test_bad_records(void **state) {
    (void)state;
    put("b.jsonl", "{\"text\": \"good one\"}\n{\"text\": 3}\nnope\n{\"text\": \"good two\"}\n");
    lf_prepare_opts o = opts1(path_in("b.jsonl"), LF_RECORD_PRETRAIN, "char");
    o.split[1] = 0;
    lf_prepare_result res;
    assert_int_equal(lf_prepare(&o, path_in("o"), &res), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("b.jsonl:2: field 'text' is a number");
    skips sk = {0};
    o.skip_bad_records = 1;
    o.on_skip = count_skip;
    o.on_skip_user = &sk;
    LF_ASSERT_OK(lf_prepare(&o, path_in("o"), &res));
    assert_int_equal(res.records[0], 2);
    assert_int_equal(res.skipped, 2);
    assert_int_equal(sk.n, 2); /* reported once, though "char" reads the inputs twice */
    assert_non_null(strstr(res.first_skip, "b.jsonl:2: field 'text' is a number"));
    cJSON *man = read_manifest(path_in("o"));
    assert_int_equal(num_at(man, "skipped_records", NULL, NULL), 2);
    assert_int_equal(num_at(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(man, "sources"), 0), "skipped", NULL,
                            NULL),
                     2);
    cJSON_Delete(man);

    /* a given vocabulary: a character outside it is a bad record naming the field */
    put("v.json", "{\"type\": \"char\", \"chars\": [\"\\n\", \"a\", \"b\", \"=\"]}");
    put("c.jsonl", "{\"prompt\": \"a=\", \"response\": \"b\"}\n{\"prompt\": \"a=\", \"response\": \"c\"}\n");
    char spec[1300];
    snprintf(spec, sizeof spec, "char:%s", path_in("v.json"));
    o = opts1(path_in("c.jsonl"), LF_RECORD_SFT, spec);
    o.split[1] = 0;
    assert_int_equal(lf_prepare(&o, path_in("oc"), &res), LF_ERR_FORMAT);
    LF_ASSERT_ERR_CONTAINS("c.jsonl:2: field 'response': char tokenizer: character U+0063 'c'");
    o.skip_bad_records = 1;
    LF_ASSERT_OK(lf_prepare(&o, path_in("oc"), &res));
    assert_int_equal(res.records[0], 1);
    assert_int_equal(res.skipped, 1);
    assert_int_equal(res.vocab_size, 4);
    assert_int_equal(res.eot, 0);
    /* the vocabulary is copied into the dataset, which stands alone */
    lf_dataset *d = NULL;
    LF_ASSERT_OK(lf_dataset_open(&d, path_in("oc")));
    lf_dataset_close(d);
    char *a = NULL, *b = NULL;
    size_t la, lb;
    LF_ASSERT_OK(lf_file_read_all(path_in("v.json"), 0, &a, &la));
    LF_ASSERT_OK(lf_file_read_all(path_in("oc/vocab.json"), 0, &b, &lb));
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    lf_free(a);
    lf_free(b);

    /* a vocabulary without "\n" has no end-of-text */
    put("v2.json", "{\"type\": \"char\", \"chars\": [\"a\", \"b\", \"=\", \"c\"]}");
    snprintf(spec, sizeof spec, "char:%s", path_in("v2.json"));
    o.tokenizer = spec;
    assert_int_equal(lf_prepare(&o, path_in("od"), &res), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("no end-of-text");
    lf_tokenizer *t = NULL;
    LF_ASSERT_OK(lf_tokenizer_open(&t, spec, NULL));
    lf_fail(LF_ERR_IO, "an earlier message");
    assert_int_equal(lf_tokenizer_eot(t), -1);
    LF_ASSERT_ERR_CONTAINS("an earlier message"); /* lf_tokenizer_eot records no error */
    lf_tokenizer_free(t);
    assert_int_equal(lf_tokenizer_eot(NULL), -1);

    /* nothing at all, nothing for train, bad options */
    put("x.jsonl", "bad\n");
    o = opts1(path_in("x.jsonl"), LF_RECORD_PRETRAIN, "char");
    o.skip_bad_records = 1;
    assert_int_equal(lf_prepare(&o, path_in("ox"), &res), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("the inputs hold no records (1 skipped; first: ");
    put("y.jsonl", "{\"text\": \"one record\"}\n");
    o = opts1(path_in("y.jsonl"), LF_RECORD_PRETRAIN, "char");
    o.split[0] = 1e-12;
    o.split[1] = 1;
    assert_int_equal(lf_prepare(&o, path_in("oy"), &res), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("no record fell into the train split");
    o.split[0] = 0;
    assert_int_equal(lf_prepare(&o, path_in("oy"), &res), LF_ERR_RANGE);
    o.split[0] = 1;
    o.split[2] = -1;
    assert_int_equal(lf_prepare(&o, path_in("oy"), &res), LF_ERR_RANGE);
    o.split[2] = 0;
    o.tokenizer = "nope:x";
    assert_int_equal(lf_prepare(&o, path_in("oy"), &res), LF_ERR_UNSUPPORTED);
    o.tokenizer = "char";
    o.n_inputs = 0;
    assert_int_equal(lf_prepare(&o, path_in("oy"), &res), LF_ERR_INVALID_ARG);
    o = opts1(path_in("missing.jsonl"), LF_RECORD_PRETRAIN, "char");
    assert_int_equal(lf_prepare(&o, path_in("oy"), &res), LF_ERR_NOT_FOUND);
    LF_ASSERT_ERR_CONTAINS("missing.jsonl");
    assert_int_equal(lf_prepare(NULL, path_in("oy"), &res), LF_ERR_INVALID_ARG);
}

/* ---------------------------------------------------------------- GPT-2 */
static void test_gpt2(void **state) {
    (void)state;
    char dir[1200], enc[1300];
    snprintf(dir, sizeof dir, "%s/data/gpt2", LF_SHARED_DIR);
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    if (access(enc, R_OK) != 0) {
        print_message("skipped: no GPT-2 files in %s\n", dir);
        skip();
    }
    put("g.jsonl", "{\"prompt\": \"Hello\", \"response\": \" world\"}\n");
    char spec[1300];
    snprintf(spec, sizeof spec, "gpt2:%s", dir);
    lf_prepare_opts o = opts1(path_in("g.jsonl"), LF_RECORD_SFT, spec);
    o.split[1] = 0;
    lf_prepare_result res;
    LF_ASSERT_OK(lf_prepare(&o, path_in("og"), &res));
    assert_int_equal(res.eot, 50256);
    assert_int_equal(res.vocab_size, 50257);
    cJSON *man = read_manifest(path_in("og"));
    split_data sd;
    load_split(path_in("og"), man, "train", &sd);
    /* tiktoken gpt2: "Hello" = [15496], " world" = [995] */
    assert_int_equal(sd.n, 3);
    assert_int_equal(sd.tok[0], 15496);
    assert_int_equal(sd.tok[1], 995);
    assert_int_equal(sd.tok[2], 50256);
    assert_int_equal(sd.mask[0], 0);
    assert_int_equal(sd.mask[1], 1);
    assert_int_equal(sd.mask[2], 1);
    const char *rs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(man, "tokenizer"), "spec")
                         ->valuestring;
    assert_true(strncmp(rs, "gpt2:/", 6) == 0); /* absolute: the dataset opens from anywhere */
    free_split(&sd);
    cJSON_Delete(man);
    lf_dataset *d = NULL;
    LF_ASSERT_OK(lf_dataset_open(&d, path_in("og")));
    lf_dataset_close(d);
}

/* ---------------------------------------------------------------- conversations through a Jinja template */
static const char k_chatml_jinja[] =
    "{%- for message in messages %}\n"
    "    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}\n";

static void test_sft_messages_jinja(void **state) {
    (void)state;
    put("tpl.jinja", k_chatml_jinja);
    put("c.jsonl", "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": "
                   "\"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": \"user\", \"content\": "
                   "\"q\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}\n"
                   "{\"prompt\": \"p\", \"response\": \"r\"}\n");
    lf_prepare_opts o = opts1(path_in("c.jsonl"), LF_RECORD_SFT, "char");
    o.split[1] = 0;
    o.chat_template = path_in("tpl.jinja");
    const char *out = path_in("out");
    lf_prepare_result res;
    LF_ASSERT_OK(lf_prepare(&o, out, &res));
    /* each conversation as transformers renders it, then the end of text ("\n" for char) */
    const char *r1 = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
                     "yo<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n\n";
    const char *r2 = "<|im_start|>user\np<|im_end|>\n<|im_start|>assistant\nr<|im_end|>\n\n";
    char text[1024];
    snprintf(text, sizeof text, "%s%s", r1, r2);
    /* mask 1 exactly on "yo<|im_end|>", "a<|im_end|>", "r<|im_end|>" */
    const char *turns[] = {"yo<|im_end|>", "a<|im_end|>", "r<|im_end|>"};
    uint8_t want[1024] = {0};
    const char *from = text;
    for (int k = 0; k < 3; k++) {
        const char *at = strstr(from, turns[k]);
        assert_non_null(at);
        memset(want + (at - text), 1, strlen(turns[k]));
        from = at + strlen(turns[k]);
    }
    assert_int_equal(res.records[0], 2);
    assert_int_equal(res.tokens[0], strlen(text));
    assert_int_equal(res.target_tokens[0], strlen(turns[0]) + strlen(turns[1]) + strlen(turns[2]));
    lf_tokenizer *t = open_tok(out);
    cJSON *man = read_manifest(out);
    split_data sd;
    load_split(out, man, "train", &sd);
    assert_int_equal(sd.n, strlen(text));
    for (size_t i = 0; i < sd.n; i++) {
        char ch[2] = {text[i], 0};
        assert_int_equal(sd.tok[i], id_of(t, ch));
        if (sd.mask[i] != want[i]) fail_msg("mask[%zu] ('%c') = %d, expected %d", i, text[i], sd.mask[i], want[i]);
    }
    free_split(&sd);
    cJSON_Delete(man);
    lf_tokenizer_free(t);
    /* chat_template.json holds the Jinja source: it loads (as training's checkpoint copy will) and renders the same */
    lf__chat_template back;
    LF_ASSERT_OK(lf__chat_template_load(join2(out, "chat_template.json"), &back));
    assert_non_null(back.jinja);
    assert_string_equal(back.stop[0], "<|im_end|>");
    lf__chat_message m[] = {{LF__ROLE_USER, "p", 1}};
    char *rr = NULL;
    size_t rl = 0;
    LF_ASSERT_OK(lf__chat_template_render(&back, m, 1, 1, &rr, &rl, NULL, NULL));
    assert_string_equal(rr, "<|im_start|>user\np<|im_end|>\n<|im_start|>assistant\n");
    free(rr);
    lf__chat_template_free(&back);

    /* the template refuses a conversation: a bad record naming the file, line and message */
    put("strict.jinja", "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}"
                        "{% endif %}{% for m in messages %}{{ m.content }}|{% endfor %}");
    o.chat_template = path_in("strict.jinja");
    assert_int_equal(lf_prepare(&o, path_in("o2"), &res), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("c.jsonl:1: field 'messages':");
    LF_ASSERT_ERR_CONTAINS("System role not supported");
    o.skip_bad_records = 1;
    LF_ASSERT_OK(lf_prepare(&o, path_in("o3"), &res));
    assert_int_equal(res.skipped, 1);
    assert_int_equal(res.records[0], 1);
    assert_non_null(strstr(res.first_skip, "System role not supported"));
    /* messages without a template: refused, naming the option */
    o.chat_template = NULL;
    o.skip_bad_records = 0;
    assert_int_equal(lf_prepare(&o, path_in("o4"), &res), LF_ERR_INVALID_ARG);
    LF_ASSERT_ERR_CONTAINS("--chat-template");
    /* a template with an unsupported construct: refused before any record, naming the line */
    put("bad.jinja", "ok\n{% for m in messages %}{{ m | wordcount }}{% endfor %}");
    o.chat_template = path_in("bad.jinja");
    assert_int_equal(lf_prepare(&o, path_in("o5"), &res), LF_ERR_UNSUPPORTED);
    LF_ASSERT_ERR_CONTAINS("bad.jinja:2: unsupported filter 'wordcount'");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sft_masks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pretrain_eot, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_stable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_shuffle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_manifest_and_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gpt2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sft_chat_template, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sft_chat_template_gpt2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sft_messages_jinja, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
