/*
 * PEFT adapter directories (include/llmforge/checkpoint.h "LoRA"): reading
 * adapter_config.json into an lf_lora_config, loading adapter_model.safetensors
 * into a model's adapters by PEFT's names, and `llmforge merge`: base +
 * adapter -> a Hugging Face directory with the merged weights (PEFT's
 * merge_and_unload), which transformers loads.
 *
 * Invariants:
 *  - Only what llmforge implements is accepted: peft_type LORA, bias none,
 *    no DoRA, no per-module rank or alpha patterns, no modules_to_save;
 *    anything else is refused naming the key and the file.
 *  - The adapter's tensors must be exactly the model's adapters (names and
 *    shapes), F32, BF16 or F16 (widened to fp32).
 *  - The merged directory is written file by file into out_dir (created);
 *    the base directory is never written.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "checkpoint/checkpoint_impl.h"
#include "llmforge/backend.h"
#include "llmforge/checkpoint.h"
#include "llmforge/hf.h"
#include "llmforge/safetensors.h"

char *lf__lora_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = lf_alloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* A key llmforge does not implement, when present with a value other than "off". */
static lf_status refuse_set(const cJSON *o, const char *key, const char *path) {
    const cJSON *v = item(o, key);
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return LF_OK;
    if ((cJSON_IsObject(v) || cJSON_IsArray(v)) && cJSON_GetArraySize(v) == 0) return LF_OK;
    return lf_fail(LF_ERR_UNSUPPORTED, "'%s': key '%s' is set; llmforge's LoRA does not implement it", path, key);
}

lf_status lf_lora_adapter_config(const char *dir, lf_lora_config *lc, char *base, size_t cap) {
    char path[LF_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *text = NULL;
    size_t len = 0;
    lf_status st = lf_file_read_all(path, 1u << 20, &text, &len);
    if (st != LF_OK) return st;
    cJSON *o = cJSON_ParseWithLength(text, len);
    lf_free(text);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return lf_fail(LF_ERR_FORMAT, "'%s' is not a JSON object", path);
    }
    *lc = lf_lora_config_default();
    const cJSON *pt = item(o, "peft_type"), *r = item(o, "r"), *a = item(o, "lora_alpha"), *d = item(o, "lora_dropout");
    const cJSON *tm = item(o, "target_modules"), *b = item(o, "bias"), *rs = item(o, "use_rslora");
    const cJSON *bm = item(o, "base_model_name_or_path");
    if (!cJSON_IsString(pt) || strcmp(pt->valuestring, "LORA") != 0)
        st = lf_fail(LF_ERR_UNSUPPORTED, "'%s': peft_type is not \"LORA\"", path);
    else if (!cJSON_IsNumber(r) || r->valuedouble != (int)r->valuedouble)
        st = lf_fail(LF_ERR_FORMAT, "'%s': key 'r' is not an integer", path);
    else if (a && !cJSON_IsNumber(a)) st = lf_fail(LF_ERR_FORMAT, "'%s': key 'lora_alpha' is not a number", path);
    else if (b && !cJSON_IsString(b)) st = lf_fail(LF_ERR_FORMAT, "'%s': key 'bias' is not a string", path);
    const char *const unsupported[] = {"use_dora",        "rank_pattern",        "alpha_pattern",
                                       "modules_to_save", "layers_to_transform", "lora_bias",
                                       "exclude_modules", "target_parameters"};
    for (size_t i = 0; st == LF_OK && i < sizeof unsupported / sizeof *unsupported; i++)
        st = refuse_set(o, unsupported[i], path);
    if (st == LF_OK) {
        lc->r = r->valueint;
        if (a) lc->alpha = (float)a->valuedouble;
        if (cJSON_IsNumber(d)) lc->dropout = (float)d->valuedouble;
        lc->use_rslora = cJSON_IsTrue(rs);
        if (b) snprintf(lc->bias, sizeof lc->bias, "%s", b->valuestring);
        size_t at = 0;
        if (cJSON_IsString(tm)) {
            snprintf(lc->target_modules, sizeof lc->target_modules, "%s", tm->valuestring);
        } else if (cJSON_IsArray(tm)) {
            const cJSON *it;
            cJSON_ArrayForEach(it, tm) {
                if (!cJSON_IsString(it)) continue;
                at += (size_t)snprintf(lc->target_modules + at,
                                       at < sizeof lc->target_modules ? sizeof lc->target_modules - at : 0, "%s%s",
                                       at ? "\n" : "", it->valuestring);
            }
        }
        if (!lc->target_modules[0] || at >= sizeof lc->target_modules)
            st = lf_fail(LF_ERR_FORMAT, "'%s': target_modules is missing, empty or too long", path);
    }
    if (st == LF_OK) st = lf_lora_config_check(lc, NULL);
    if (st == LF_OK && base && cap) {
        base[0] = '\0';
        if (cJSON_IsString(bm)) snprintf(base, cap, "%s", bm->valuestring);
    }
    cJSON_Delete(o);
    if (st != LF_OK && !strstr(lf_last_error(), path)) lf_error_prefix("'%s'", path);
    return st;
}

/* fp32 of one element of a safetensors tensor. */
static float elem(const lf_st_tensor *x, size_t i) {
    if (x->dtype == LF_ST_F32) {
        float f;
        memcpy(&f, (const char *)x->data + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)x->data + 2 * i, 2);
    if (x->dtype == LF_ST_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    /* F16 */
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
    if (e == 0) {
        float f = (float)mant * (1.0f / 16777216.0f); /* 2^-24 */
        return sign ? -f : f;
    }
    u = e == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((e + 112) << 23) | (mant << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

lf_status lf_lora_adapter_load(lf_model *m, const char *dir) {
    if (!lf_model_lora(m)) return lf_fail(LF_ERR_INVALID_ARG, "loading an adapter into a model without LoRA");
    char path[LF_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    lf_safetensors *st = NULL;
    lf_status s = lf_safetensors_open(&st, path);
    if (s != LF_OK) return s;
    int count;
    const lf_param_info *t = lf_model_train_table(m, &count);
    const size_t n = lf_model_train_num_params(m);
    float *host = lf_alloc(n * sizeof(float));
    if (!host) {
        lf_safetensors_close(st);
        return lf_fail(LF_ERR_NOMEM, "out of memory loading '%s'", path);
    }
    char name[256];
    for (int i = 0; s == LF_OK && i < count; i++) {
        lf_model_lora_peft_name(m, i, name, sizeof name);
        const lf_st_tensor *x = lf_safetensors_find(st, name);
        if (!x) s = lf_fail(LF_ERR_MISMATCH, "'%s' has no tensor %s (the adapter does not fit this base)", path, name);
        else if (x->ndim != 2 || x->shape[0] != t[i].shape[0] || x->shape[1] != t[i].shape[1])
            s = lf_fail(LF_ERR_MISMATCH, "'%s': %s has shape [%lld, %lld], the model's adapter [%lld, %lld]", path,
                        name, (long long)x->shape[0], (long long)(x->ndim > 1 ? x->shape[1] : 0),
                        (long long)t[i].shape[0], (long long)t[i].shape[1]);
        else if (x->dtype != LF_ST_F32 && x->dtype != LF_ST_BF16 && x->dtype != LF_ST_F16)
            s = lf_fail(LF_ERR_UNSUPPORTED, "'%s': %s is %s (F32, BF16 or F16 expected)", path, name,
                        lf_st_dtype_name(x->dtype));
        else
            for (size_t j = 0; j < t[i].numel; j++) host[t[i].offset + j] = elem(x, j);
    }
    if (s == LF_OK && lf_safetensors_count(st) != count)
        s = lf_fail(LF_ERR_MISMATCH, "'%s' holds %d tensors; the model's adapters are %d (other modules or keys)", path,
                    lf_safetensors_count(st), count);
    if (s == LF_OK) s = lf_backend_to_device(lf_model_backend(m), lf_model_train_params(m), host, n * sizeof(float));
    lf_free(host);
    lf_safetensors_close(st);
    return s;
}

/* The base directory of an adapter: base_dir when given, else its
 * base_model_name_or_path when that is a local directory (relative to the
 * adapter's directory when not absolute). */
lf_status lf_lora_adapter_base(const char *adapter_dir, const char *named, const char *base_dir, char *out,
                               size_t cap) {
    if (base_dir && base_dir[0]) {
        snprintf(out, cap, "%s", base_dir);
        return LF_OK;
    }
    char cand[LF_PATH_MAX * 2 + 2];
    if (named && named[0]) {
        if (named[0] == '/') snprintf(cand, sizeof cand, "%s", named);
        else snprintf(cand, sizeof cand, "%s/%s", adapter_dir, named);
        if (lf_checkpoint_is_hf_dir(cand)) {
            snprintf(out, cap, "%s", cand);
            return LF_OK;
        }
    }
    return lf_fail(LF_ERR_NOT_FOUND,
                   "adapter '%s': its base_model_name_or_path %s%s%s is not a local Hugging Face directory; give the "
                   "base with --base DIR",
                   adapter_dir, named && named[0] ? "'" : "", named && named[0] ? named : "(none)",
                   named && named[0] ? "'" : "");
}

static lf_status copy_if_present(const char *from_dir, const char *to_dir, const char *name) {
    char a[LF_PATH_MAX + 64], b[LF_PATH_MAX + 64];
    snprintf(a, sizeof a, "%s/%s", from_dir, name);
    if (access(a, F_OK) != 0) return LF_OK;
    snprintf(b, sizeof b, "%s/%s", to_dir, name);
    char *data = NULL;
    size_t len = 0;
    lf_status st = lf_file_read_all(a, 1u << 30, &data, &len);
    if (st == LF_OK) st = lf_file_write_all(b, data, len);
    lf_free(data);
    return st;
}

lf_status lf_lora_merge(const char *adapter_dir, const char *base_dir, const char *out_dir) {
    lf_lora_config lc;
    char named[LF_PATH_MAX], base[LF_PATH_MAX * 2 + 2];
    lf_status st = lf_lora_adapter_config(adapter_dir, &lc, named, sizeof named);
    if (st == LF_OK) st = lf_lora_adapter_base(adapter_dir, named, base_dir, base, sizeof base);
    if (st != LF_OK) return st;
    lf_model *m = NULL;
    lf_status s2 = lf_checkpoint_load_model(base, lf_backend_get("cpu"), &m, NULL, 0, NULL);
    if (s2 != LF_OK) return s2;
    float *w = NULL;
    lf_st_tensor *ts = NULL;
    if ((st = lf_model_lora_attach(m, &lc, 0)) != LF_OK) {
        lf_error_prefix("adapter '%s' on base '%s'", adapter_dir, base);
        goto done;
    }
    if ((st = lf_lora_adapter_load(m, adapter_dir)) != LF_OK || (st = lf_model_lora_merge(m)) != LF_OK) goto done;
    if ((st = lf_mkdirs(out_dir)) != LF_OK) goto done;
    static const char *const keep[] = {"config.json",
                                       "generation_config.json",
                                       "tokenizer.json",
                                       "tokenizer_config.json",
                                       "special_tokens_map.json",
                                       "vocab.json",
                                       "merges.txt",
                                       "chat_template.jinja"};
    for (size_t i = 0; st == LF_OK && i < sizeof keep / sizeof *keep; i++) st = copy_if_present(base, out_dir, keep[i]);
    if (st != LF_OK) goto done;
    int count;
    const lf_param_info *t = lf_model_params_table(m, &count);
    w = lf_alloc(lf_model_num_params(m) * sizeof(float));
    ts = calloc((size_t)count, sizeof *ts);
    if (!w || !ts) {
        st = lf_fail(LF_ERR_NOMEM, "out of memory writing the merged model");
        goto done;
    }
    if ((st = lf_backend_to_host(lf_model_backend(m), w, lf_model_params(m), lf_model_num_params(m) * 4)) != LF_OK)
        goto done;
    for (int i = 0; i < count; i++) {
        snprintf(ts[i].name, sizeof ts[i].name, "%s", t[i].name);
        ts[i].dtype = LF_ST_F32;
        ts[i].ndim = t[i].ndim;
        for (int d = 0; d < t[i].ndim; d++) ts[i].shape[d] = t[i].shape[d];
        ts[i].numel = t[i].numel;
        ts[i].nbytes = t[i].numel * sizeof(float);
        ts[i].data = w + t[i].offset;
    }
    char path[LF_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    const char *meta[] = {"format", "pt"};
    st = lf_safetensors_write(path, ts, count, meta, 1);
done:
    free(ts);
    lf_free(w);
    lf_model_free(m);
    return st;
}

lf_status lf__lora_load_model(const char *dir, lf_backend *be, lf_model **out, char *tokenizer, size_t cap,
                              char **dir_out) {
    *out = NULL;
    lf_lora_config lc;
    char named[LF_PATH_MAX], base[LF_PATH_MAX * 2 + 2], spec[LF_PATH_MAX + 32] = "";
    lf_status st = lf_lora_adapter_config(dir, &lc, named, sizeof named);
    if (st == LF_OK) st = lf_lora_adapter_base(dir, named, NULL, base, sizeof base);
    if (st != LF_OK) return st;
    char *base_dir = NULL;
    lf_model *m = NULL;
    if ((st = lf_checkpoint_load_model(base, be, &m, spec, sizeof spec, &base_dir)) != LF_OK) return st;
    if ((st = lf_model_lora_attach(m, &lc, 0)) != LF_OK || (st = lf_lora_adapter_load(m, dir)) != LF_OK) {
        lf_error_prefix("adapter '%s' on base '%s'", dir, base);
        lf_model_free(m);
        lf_free(base_dir);
        return st;
    }
    /* a LoRA run's step directory names its own tokenizer (trainer_state.json); PEFT's bare
     * adapter directory runs with the base's, relative to the base */
    char path[LF_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    lf_model_config mc;
    const int own = access(path, F_OK) == 0 && lf_checkpoint_read_model(dir, &mc, spec, sizeof spec) == LF_OK;
    if (tokenizer && cap) snprintf(tokenizer, cap, "%s", spec);
    if (dir_out) {
        *dir_out = own ? lf__lora_strdup(dir) : base_dir;
        if (own) lf_free(base_dir);
    } else {
        lf_free(base_dir);
    }
    *out = m;
    return LF_OK;
}
