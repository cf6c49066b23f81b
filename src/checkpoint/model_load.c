/*
 * Loading a model to run: from an llmforge checkpoint directory (its
 * trainer_state.json's "model" object as a model configuration, the
 * tokenizer spec, then the weights of model.safetensors) or from a Hugging
 * Face model directory as save_pretrained wrote it (config.json through
 * hf.h's family tables, the safetensors shards, tokenizer.json), onto a
 * backend; and the end-of-sequence ids the directory names
 * (generation_config.json, config.json). What `llmforge sample`, `eval` and
 * `serve` load; nothing here needs a trainer.
 *
 * Invariants: a checkpoint's weights are verified (checkpoint.c's load:
 * sizes and SHA-256 of every listed file) before any of them reaches the
 * model; an HF directory is checked whole by lf_hf_open and every tensor
 * by name and shape (lf_hf_load_params); on failure nothing is returned and
 * everything built is released.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "checkpoint/checkpoint_impl.h"
#include "llmforge/backend.h"
#include "llmforge/checkpoint.h"
#include "llmforge/data.h"
#include "llmforge/hf.h"

lf_status lf_checkpoint_read_model(const char *dir, lf_model_config *cfg, char *tokenizer, size_t cap) {
    char path[LF_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    char *text = NULL;
    lf_status st = lf_file_read_all(path, 64u << 20, &text, NULL);
    if (st != LF_OK) return st;
    cJSON *o = cJSON_Parse(text);
    lf_free(text);
    cJSON *mo = o ? cJSON_GetObjectItemCaseSensitive(o, "model") : NULL;
    if (!cJSON_IsObject(mo)) {
        cJSON_Delete(o);
        return lf_fail(LF_ERR_FORMAT, "'%s': not JSON or no \"model\" object", path);
    }
    /* required, then optional (0 = the architecture's default: checkpoints
     * written before Llama carry only GPT-2's keys) */
    static const char *keys[] = {"n_layer",           "n_head",    "n_embd",    "block_size", "vocab_size",
                                 "padded_vocab_size", "n_kv_head", "ffn_hidden"};
    int vals[8] = {0};
    for (int i = 0; i < 8; i++) {
        cJSON *it = cJSON_GetObjectItemCaseSensitive(mo, keys[i]);
        if (!it && i >= 6) continue;
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 1e9) {
            cJSON_Delete(o);
            return lf_fail(LF_ERR_FORMAT, "'%s': model.%s is missing or not a valid number", path, keys[i]);
        }
        vals[i] = (int)it->valuedouble;
    }
    memset(cfg, 0, sizeof *cfg);
    cJSON *ar = cJSON_GetObjectItemCaseSensitive(mo, "arch");
    if (ar && (!cJSON_IsString(ar) || lf_arch_parse(ar->valuestring, &cfg->arch) != LF_OK)) {
        cJSON_Delete(o);
        return lf_fail(LF_ERR_FORMAT, "'%s': model.arch is not one of %s", path, lf_arch_list());
    }
    cfg->n_layer = vals[0];
    cfg->n_head = vals[1];
    cfg->n_embd = vals[2];
    cfg->block_size = vals[3];
    cfg->vocab_size = vals[4];
    cfg->padded_vocab_size = vals[5];
    cfg->n_kv_head = vals[6];
    cfg->ffn_hidden = vals[7];
    cfg->bias = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mo, "bias"));
    cJSON *te = cJSON_GetObjectItemCaseSensitive(mo, "tie_embeddings");
    cfg->tie_embeddings = te ? cJSON_IsTrue(te) : 1;
    cJSON *dr = cJSON_GetObjectItemCaseSensitive(mo, "dropout");
    cfg->dropout = cJSON_IsNumber(dr) ? (float)dr->valuedouble : 0.0f;
    cJSON *ne = cJSON_GetObjectItemCaseSensitive(mo, "norm_eps");
    cfg->norm_eps = cJSON_IsNumber(ne) ? (float)ne->valuedouble : 0.0f;
    cJSON *rt = cJSON_GetObjectItemCaseSensitive(mo, "rope_theta");
    cfg->rope_theta = cJSON_IsNumber(rt) ? (float)rt->valuedouble : 0.0f;
    cJSON *sw = cJSON_GetObjectItemCaseSensitive(mo, "sliding_window"); /* absent: none */
    if (sw && (!cJSON_IsNumber(sw) || !(sw->valuedouble >= 0 && sw->valuedouble <= 1e9) ||
               sw->valuedouble != (double)(int)sw->valuedouble)) {
        cJSON_Delete(o);
        return lf_fail(LF_ERR_FORMAT, "'%s': model.sliding_window is not an integer in [0, 1e9]", path);
    }
    cfg->sliding_window = sw ? (int)sw->valuedouble : 0;
    cJSON *ex = cJSON_GetObjectItemCaseSensitive(mo, "extras"); /* head_dim, biases, RoPE scaling */
    if (ex) {
        char *ext = cJSON_PrintUnformatted(ex);
        char where[LF_PATH_MAX + 96];
        snprintf(where, sizeof where, "'%s': model.extras", path);
        lf_status es = ext ? lf_model_config_extras_parse(ext, where, cfg)
                           : lf_fail(LF_ERR_NOMEM, "out of memory reading '%s'", path);
        cJSON_free(ext);
        if (es != LF_OK) {
            cJSON_Delete(o);
            return es;
        }
    }
    cJSON *tk = cJSON_GetObjectItemCaseSensitive(o, "tokenizer");
    if (tokenizer && cap) {
        tokenizer[0] = 0;
        if (cJSON_IsString(tk)) snprintf(tokenizer, cap, "%s", tk->valuestring);
    }
    cJSON_Delete(o);
    st = lf_model_config_validate(cfg);
    if (st != LF_OK) lf_error_prefix("'%s'", path);
    return st;
}

static int is_file(const char *dir, const char *name) {
    char path[LF_PATH_MAX + 64];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

int lf_checkpoint_is_hf_dir(const char *path) {
    struct stat sb;
    return path && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && is_file(path, "config.json") &&
           !is_file(path, "trainer_state.json") && !is_file(path, "latest") &&
           (is_file(path, "model.safetensors") || is_file(path, "model.safetensors.index.json"));
}

/* An HF model directory: config.json through the family tables, the
 * weights widened to fp32 by name; the tokenizer is its tokenizer.json. */
static lf_status load_hf(const char *path, lf_backend *be, lf_model **model, char *tokenizer, size_t cap,
                         char **dir_out) {
    lf_hf_model *hf = NULL;
    lf_model *m = NULL;
    float *host = NULL;
    char *dir = NULL;
    lf_model_config mc;
    lf_status st = lf_hf_open(&hf, path);
    if (st == LF_OK) st = lf_hf_model_config(hf, &mc);
    if (st == LF_OK && (st = lf_model_config_validate(&mc)) != LF_OK) lf_error_prefix("'%s/config.json'", path);
    if (st == LF_OK) st = lf_model_create(&m, &mc, be);
    if (st == LF_OK) lf_model_release_grads(m); /* a model to run */
    int count = 0;
    const lf_param_info *table = st == LF_OK ? lf_model_params_table(m, &count) : NULL;
    const size_t total = st == LF_OK ? lf_model_num_params(m) : 0;
    /* a backend in host memory takes the weights where they are read: no
     * second fp32 copy of the model at start */
    const int direct = st == LF_OK && lf_backend_host_memory(be);
    if (st == LF_OK && !direct && !(host = lf_alloc(total * sizeof(float))))
        st = lf_fail(LF_ERR_NOMEM, "out of memory reading model directory '%s'", path);
    if (st == LF_OK)
        st = lf_hf_load_params(hf, table, count, mc.tie_embeddings, direct ? (float *)lf_model_params(m) : host);
    if (st == LF_OK) {
        const size_t n = strlen(path) + 1;
        if (!(dir = lf_alloc(n))) st = lf_fail(LF_ERR_NOMEM, "out of memory");
        else memcpy(dir, path, n);
    }
    if (st != LF_OK) {
        lf_free(host);
        lf_model_free(m);
        lf_hf_close(hf);
        return st;
    }
    if (!direct) lf_backend_to_device(be, lf_model_params(m), host, total * sizeof(float));
    lf_model_params_changed(m);
    lf_backend_params_changed(be);
    lf_free(host);
    lf_hf_close(hf);
    if (tokenizer && cap) snprintf(tokenizer, cap, "%s", is_file(dir, "tokenizer.json") ? "hf:tokenizer.json" : "");
    *model = m;
    if (dir_out) *dir_out = dir;
    else lf_free(dir);
    return LF_OK;
}

/* A checkpoint of a model with no position table (RoPE) whose config.json
 * (the HF directory's own, kept by a run --init-from it) gives more
 * positions than the block size it was trained at: a model to run uses
 * them all (up to its sliding window), so generation crops the context only
 * where the model has no positions beyond it. A llmforge-made config.json
 * says block_size, which changes nothing. */
static lf_status model_positions(const char *dir, lf_model_config *mc) {
    if (lf_arch_fixed_context(mc->arch) || !is_file(dir, "config.json")) return LF_OK;
    char path[LF_PATH_MAX + 64], *text = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    lf_status st = lf_file_read_all(path, 16u << 20, &text, NULL);
    if (st != LF_OK) return st;
    cJSON *o = cJSON_Parse(text);
    lf_free(text);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "max_position_embeddings");
    if (!cJSON_IsObject(o) || (v && (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > (1 << 30)))) {
        cJSON_Delete(o);
        return lf_fail(LF_ERR_FORMAT, "'%s': not a JSON object with an integer max_position_embeddings", path);
    }
    int n = v ? (int)v->valuedouble : 0;
    cJSON_Delete(o);
    if (n > mc->block_size) mc->block_size = n;
    return LF_OK;
}

lf_status lf_checkpoint_load_model(const char *ckpt, lf_backend *be, lf_model **model, char *tokenizer, size_t cap,
                                   char **dir_out) {
    *model = NULL;
    if (dir_out) *dir_out = NULL;
    if (!be) be = lf_backend_default();
    if (!be) return LF_ERR_NOT_FOUND;
    if (lf_checkpoint_is_hf_dir(ckpt)) return load_hf(ckpt, be, model, tokenizer, cap, dir_out);
    if (is_file(ckpt, "adapter_config.json") && !is_file(ckpt, "trainer_state.json")) /* PEFT's own directory */
        return lf__lora_load_model(ckpt, be, model, tokenizer, cap, dir_out);
    char *dir = NULL;
    float *host = NULL;
    lf_model *m = NULL;
    lf_status st = lf_checkpoint_resolve(ckpt, &dir);
    if (st != LF_OK) return st;
    if (is_file(dir, "adapter_config.json")) { /* LoRA: its base, then the adapter (lora_adapter.c) */
        st = lf__lora_load_model(dir, be, model, tokenizer, cap, dir_out);
        lf_free(dir);
        return st;
    }
    lf_model_config mc;
    char spec[LF_PATH_MAX + 32];
    if ((st = lf_checkpoint_read_model(dir, &mc, spec, sizeof spec)) != LF_OK) goto fail;
    if ((st = model_positions(dir, &mc)) != LF_OK) goto fail;
    if (tokenizer && cap) snprintf(tokenizer, cap, "%s", spec);
    if ((st = lf_model_create(&m, &mc, be)) != LF_OK) goto fail;
    lf_model_release_grads(m); /* a model to run */
    int count;
    const lf_param_info *table = lf_model_params_table(m, &count);
    lf_ckpt_tensors tt = {table, count, lf_model_num_params(m)};
    const int direct = lf_backend_host_memory(be); /* read straight into the model (no second copy) */
    if (!direct && !(host = lf_alloc(tt.total * sizeof(float)))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory reading checkpoint '%s'", dir);
        goto fail;
    }
    if ((st = lf_checkpoint_load(dir, &tt, direct ? (float *)lf_model_params(m) : host, NULL, NULL, NULL)) != LF_OK)
        goto fail;
    if (!direct) lf_backend_to_device(be, lf_model_params(m), host, tt.total * sizeof(float));
    lf_model_params_changed(m);
    lf_backend_params_changed(be);
    lf_free(host);
    *model = m;
    if (dir_out) *dir_out = dir;
    else lf_free(dir);
    return LF_OK;
fail:
    lf_free(host);
    lf_free(dir);
    lf_model_free(m);
    return st;
}

/* One eos_token_id value (a number or an array of numbers) into ids. */
static lf_status eos_from(const cJSON *v, const char *path, int32_t *ids, int cap, int *n) {
    const int arr = cJSON_IsArray(v);
    const int count = arr ? cJSON_GetArraySize(v) : 1;
    if (count > cap) return lf_fail(LF_ERR_RANGE, "'%s': eos_token_id lists %d ids (at most %d)", path, count, cap);
    for (int i = 0; i < count; i++) {
        const cJSON *e = arr ? cJSON_GetArrayItem(v, i) : v;
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 2147483647.0 ||
            e->valuedouble != (double)(int32_t)e->valuedouble)
            return lf_fail(LF_ERR_FORMAT, "'%s': eos_token_id must be a token id or a list of them", path);
        ids[(*n)++] = (int32_t)e->valuedouble;
    }
    return LF_OK;
}

lf_status lf_checkpoint_eos_ids(const char *dir, int32_t *ids, int cap, int *n) {
    if (!dir || !ids || !n || cap < 1) return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_eos_ids: bad argument");
    *n = 0;
    /* generation_config.json first (what generate() reads), then an HF
     * directory's config.json; an llmforge checkpoint's config.json is its
     * export, not a source */
    const char *names[2] = {"generation_config.json", "config.json"};
    const int files = lf_checkpoint_is_hf_dir(dir) ? 2 : 1;
    for (int f = 0; f < files; f++) {
        if (!is_file(dir, names[f])) continue;
        char path[LF_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        char *text = NULL;
        lf_status st = lf_file_read_all(path, 16u << 20, &text, NULL);
        if (st != LF_OK) return st;
        cJSON *o = cJSON_Parse(text);
        lf_free(text);
        if (!cJSON_IsObject(o)) {
            cJSON_Delete(o);
            return lf_fail(LF_ERR_FORMAT, "'%s' is not a JSON object", path);
        }
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "eos_token_id");
        st = v && !cJSON_IsNull(v) ? eos_from(v, path, ids, cap, n) : LF_OK;
        cJSON_Delete(o);
        if (st != LF_OK || *n) return st;
    }
    return LF_OK;
}

lf_status lf_checkpoint_open_tokenizer(const char *dir, const char *spec, const lf_model *m, lf_tokenizer **tok) {
    if (!dir || !spec || !m || !tok) return lf_fail(LF_ERR_INVALID_ARG, "lf_checkpoint_open_tokenizer: NULL argument");
    lf_status st = lf_tokenizer_open(tok, spec, dir);
    if (st != LF_OK) return st;
    const int tv = lf_tokenizer_vocab_size(*tok), mv = lf_model_get_config(m)->vocab_size;
    if (tv > mv) {
        lf_tokenizer_free(*tok);
        *tok = NULL;
        return lf_fail(LF_ERR_MISMATCH,
                       "'%s': the tokenizer (%s) has %d tokens but the model's vocabulary has %d rows: "
                       "the tokenizer is not the model's",
                       dir, spec, tv, mv);
    }
    return LF_OK;
}

lf_status lf_checkpoint_load_text_model(const char *ckpt, lf_backend *be, lf_model **m, lf_tokenizer **tok,
                                        char **dir_out) {
    char spec[LF_PATH_MAX + 32], *dir = NULL;
    *tok = NULL;
    if (dir_out) *dir_out = NULL;
    lf_status st = lf_checkpoint_load_model(ckpt, be, m, spec, sizeof spec, &dir);
    if (st != LF_OK) return st;
    if (!spec[0])
        st = lf_fail(LF_ERR_NOT_FOUND, "'%s' %s (text in and out needs one)", dir,
                     lf_checkpoint_is_hf_dir(dir) ? "has no tokenizer.json" : "does not name its tokenizer");
    else st = lf_checkpoint_open_tokenizer(dir, spec, *m, tok);
    if (st != LF_OK) {
        lf_model_free(*m);
        *m = NULL;
        lf_free(dir);
        return st;
    }
    if (dir_out) *dir_out = dir;
    else lf_free(dir);
    return LF_OK;
}
