/*
 * Loading a model from a checkpoint directory: its trainer_state.json's
 * "model" object as a model configuration (and the tokenizer spec), then
 * the weights of model.safetensors onto a backend. What `llmforge sample`,
 * `eval` and `serve` load; nothing here needs a trainer.
 *
 * Invariants: the weights are verified (checkpoint.c's load: sizes and
 * SHA-256 of every listed file) before any of them reaches the model; on
 * failure nothing is returned and everything built is released.
 */
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "llmforge/backend.h"
#include "llmforge/checkpoint.h"

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

lf_status lf_checkpoint_load_model(const char *ckpt, lf_backend *be, lf_model **model, char *tokenizer, size_t cap,
                                   char **dir_out) {
    *model = NULL;
    if (dir_out) *dir_out = NULL;
    if (!be) be = lf_backend_default();
    if (!be) return LF_ERR_NOT_FOUND;
    char *dir = NULL;
    float *host = NULL;
    lf_model *m = NULL;
    lf_status st = lf_checkpoint_resolve(ckpt, &dir);
    if (st != LF_OK) return st;
    lf_model_config mc;
    char spec[LF_PATH_MAX + 32];
    if ((st = lf_checkpoint_read_model(dir, &mc, spec, sizeof spec)) != LF_OK) goto fail;
    if (tokenizer && cap) snprintf(tokenizer, cap, "%s", spec);
    if ((st = lf_model_create(&m, &mc, be)) != LF_OK) goto fail;
    int count;
    const lf_param_info *table = lf_model_params_table(m, &count);
    lf_ckpt_tensors tt = {table, count, lf_model_num_params(m)};
    if (!(host = lf_alloc(tt.total * sizeof(float)))) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory reading checkpoint '%s'", dir);
        goto fail;
    }
    if ((st = lf_checkpoint_load(dir, &tt, host, NULL, NULL, NULL)) != LF_OK) goto fail;
    lf_backend_to_device(be, lf_model_params(m), host, tt.total * sizeof(float));
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
