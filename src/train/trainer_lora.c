/*
 * The PEFT files of a LoRA run's checkpoints (docs/checkpoints.md "LoRA"):
 * every step directory also holds adapter_config.json and
 * adapter_model.safetensors as peft's save_pretrained writes them
 * (peft/utils/save_and_load.py: the adapter's tensors only, named
 * "base_model.model.<module>.lora_A.weight" without the adapter name), so
 * peft.PeftModel.from_pretrained(base, step_dir) loads it. What llmforge
 * resumes from stays model.safetensors / optimizer.safetensors by the
 * adapters' own names (the checkpoint format of checkpoint.c).
 *
 * Invariants:
 *  - adapter_config.json is built once (lf__lora_setup) from the resolved
 *    lora.* keys and the base; adapter_model.safetensors from the snapshot
 *    being written (never the live model), so the writer thread may build
 *    it.
 *  - The base is named in trainer_state.json ("lora.base": the absolute
 *    --init-from path, or "" for the seeded initialisation); a resume on
 *    another base is refused (lf__lora_check_resume).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "llmforge/checkpoint.h"
#include "llmforge/train.h"
#include "trainer_impl.h"

/* The distinct module names the adapters sit on ("q_proj", ...), in table order. */
static void add_targets(const lf_model *m, cJSON *arr) {
    int count;
    const lf_param_info *t = lf_model_train_table(m, &count);
    for (int i = 0; i < count; i++) {
        const char *end = strstr(t[i].name, ".lora_A.");
        if (!end) continue;
        const char *start = end;
        while (start > t[i].name && start[-1] != '.') start--;
        char leaf[LF_PARAM_NAME_MAX];
        snprintf(leaf, sizeof leaf, "%.*s", (int)(end - start), start);
        int seen = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) seen |= !strcmp(it->valuestring, leaf);
        if (!seen) cJSON_AddItemToArray(arr, cJSON_CreateString(leaf));
    }
}

lf_status lf__lora_setup(lf_trainer *t) {
    const lf_lora_config *lc = lf_model_lora(t->model);
    if (!lc) return LF_OK;
    t->lora_base[0] = '\0';
    if (t->opts.init_from && t->opts.init_from[0] && !realpath(t->opts.init_from, t->lora_base))
        snprintf(t->lora_base, sizeof t->lora_base, "%s", t->opts.init_from);
    cJSON *o = cJSON_CreateObject();
    if (!o) return lf__trainer_fail(t, lf_fail(LF_ERR_NOMEM, "out of memory building adapter_config.json"));
    cJSON_AddStringToObject(o, "peft_type", "LORA");
    cJSON_AddStringToObject(o, "task_type", "CAUSAL_LM");
    if (t->lora_base[0]) cJSON_AddStringToObject(o, "base_model_name_or_path", t->lora_base);
    else cJSON_AddNullToObject(o, "base_model_name_or_path");
    cJSON_AddNumberToObject(o, "r", lc->r);
    cJSON_AddNumberToObject(o, "lora_alpha", lc->alpha);
    cJSON_AddNumberToObject(o, "lora_dropout", lc->dropout);
    add_targets(t->model, cJSON_AddArrayToObject(o, "target_modules"));
    cJSON_AddStringToObject(o, "bias", lc->bias);
    cJSON_AddBoolToObject(o, "use_rslora", lc->use_rslora != 0);
    cJSON_AddBoolToObject(o, "fan_in_fan_out", t->mcfg.arch == LF_ARCH_GPT2); /* Conv1D */
    cJSON_AddBoolToObject(o, "init_lora_weights", 1);
    cJSON_AddBoolToObject(o, "inference_mode", 1);
    cJSON_AddBoolToObject(o, "use_dora", 0);
    cJSON_AddNullToObject(o, "modules_to_save");
    cJSON_AddNullToObject(o, "layers_to_transform");
    t->lora_config = lf_json_print(o, 1);
    cJSON_Delete(o);
    if (!t->lora_config)
        return lf__trainer_fail(t, lf_fail(LF_ERR_NOMEM, "out of memory printing adapter_config.json"));
    t->lora_config_len = strlen(t->lora_config);
    return LF_OK;
}

void lf__lora_state_json(const lf_trainer *t, cJSON *state) {
    if (!lf_model_lora(t->model)) return;
    cJSON *l = cJSON_AddObjectToObject(state, "lora");
    cJSON_AddStringToObject(l, "base", t->lora_base);
    cJSON_AddStringToObject(l, "adapter_config", "adapter_config.json");
    cJSON_AddStringToObject(l, "adapter_model", "adapter_model.safetensors");
}

lf_status lf__lora_check_resume(const lf_trainer *t, const char *dir, const cJSON *o) {
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "lora");
    const int ckpt_lora = cJSON_IsObject(l), run_lora = lf_model_lora(t->model) != NULL;
    const cJSON *b = ckpt_lora ? cJSON_GetObjectItemCaseSensitive(l, "base") : NULL;
    char base[LF_PATH_MAX];
    snprintf(base, sizeof base, "%s", cJSON_IsString(b) ? b->valuestring : "");
    if (ckpt_lora != run_lora)
        return lf_fail(LF_ERR_CONFIG, "checkpoint '%s' %s LoRA adapters, but this run's lora.target_modules %s", dir,
                       ckpt_lora ? "holds" : "holds no", run_lora ? "asks for them" : "is empty");
    if (run_lora && strcmp(base, t->lora_base) != 0)
        return lf_fail(LF_ERR_CONFIG,
                       "checkpoint '%s' holds LoRA adapters of the base %s%s%s, but this run's base is %s%s%s; resume "
                       "with the same --init-from",
                       dir, base[0] ? "'" : "", base[0] ? base : "of the seeded initialisation", base[0] ? "'" : "",
                       t->lora_base[0] ? "'" : "", t->lora_base[0] ? t->lora_base : "the seeded initialisation",
                       t->lora_base[0] ? "'" : "");
    return LF_OK;
}

/* adapter_model.safetensors in memory: an 8-byte header length, the JSON
 * header (PEFT's names, F32, shapes, offsets; space-padded to 8 bytes), the
 * data in table order. */
static lf_status adapter_safetensors(const lf_trainer *t, const float *params, char **out, size_t *len) {
    const lf_model *m = t->model;
    int count;
    const lf_param_info *tab = lf_model_train_table(m, &count);
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0;
    char name[256];
    for (int i = 0; i < count; i++) {
        lf_model_lora_peft_name(m, i, name, sizeof name);
        cJSON *e = cJSON_AddObjectToObject(h, name);
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < tab[i].ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)tab[i].shape[d]));
        cJSON *dof = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(dof, cJSON_CreateNumber((double)off));
        off += tab[i].numel * sizeof(float);
        cJSON_AddItemToArray(dof, cJSON_CreateNumber((double)off));
    }
    char *hj = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!hj) return lf_fail(LF_ERR_NOMEM, "out of memory building adapter_model.safetensors");
    size_t hn = strlen(hj), pad = (8 - hn % 8) % 8, total = 8 + hn + pad + off;
    char *buf = lf_alloc(total);
    if (!buf) {
        cJSON_free(hj);
        return lf_fail(LF_ERR_NOMEM, "out of memory building adapter_model.safetensors");
    }
    uint64_t hl = hn + pad;
    for (int k = 0; k < 8; k++) buf[k] = (char)((hl >> (8 * k)) & 0xff); /* little-endian */
    memcpy(buf + 8, hj, hn);
    memset(buf + 8 + hn, ' ', pad);
    cJSON_free(hj);
    char *data = buf + 8 + hn + pad;
    for (int i = 0; i < count; i++)
        memcpy(data, params + tab[i].offset, tab[i].numel * sizeof(float)), data += tab[i].numel * sizeof(float);
    *out = buf;
    *len = total;
    return LF_OK;
}

lf_status lf__lora_ckpt_extras(const lf_trainer *t, const float *params, lf_ckpt_file *extra, int *n, char **owned) {
    *owned = NULL;
    if (!lf_model_lora(t->model)) return LF_OK;
    size_t len = 0;
    lf_status st = adapter_safetensors(t, params, owned, &len);
    if (st != LF_OK) return st;
    extra[(*n)++] = (lf_ckpt_file){"adapter_config.json", t->lora_config, t->lora_config_len};
    extra[(*n)++] = (lf_ckpt_file){"adapter_model.safetensors", *owned, len};
    return LF_OK;
}

/* Two LoRA configs that train the same adapters. */
static int same_lora(const lf_lora_config *a, const lf_lora_config *b) {
    return a->r == b->r && a->alpha == b->alpha && a->use_rslora == b->use_rslora &&
           !strcmp(a->target_modules, b->target_modules) && !strcmp(a->bias, b->bias);
}

lf_status lf__lora_init_from_adapter(lf_trainer *t) {
    const char *dir = t->opts.init_from;
    char probe[LF_PATH_MAX + 32];
    if (!dir || !dir[0]) return LF_OK;
    snprintf(probe, sizeof probe, "%s/adapter_config.json", dir);
    if (access(probe, F_OK) != 0) {
        if (t->opts.base && t->opts.base[0])
            return lf__trainer_fail(t, lf_fail(LF_ERR_CONFIG,
                                               "--base is for --init-from a PEFT adapter directory; '%s' "
                                               "holds no adapter_config.json",
                                               dir));
        return LF_OK;
    }
    lf_lora_config lc;
    char named[LF_PATH_MAX];
    lf_status st = lf_lora_adapter_config(dir, &lc, named, sizeof named);
    if (st == LF_OK) st = lf_lora_adapter_base(dir, named, t->opts.base, t->adapter_base, sizeof t->adapter_base);
    if (st != LF_OK) return lf__trainer_fail(t, st);
    char targets[LF_LORA_TARGETS_MAX];
    snprintf(targets, sizeof targets, "%s", lc.target_modules);
    for (char *c = targets; *c; c++)
        if (*c == '\n') *c = ' ';
    if (lf_lora_enabled(&t->cfg.lora) && !same_lora(&t->cfg.lora, &lc))
        return lf__trainer_fail(t, lf_fail(LF_ERR_CONFIG,
                                           "keys 'lora.*' differ from the adapter's '%s' (r %d, alpha %g, targets "
                                           "\"%s\"): leave them out to go on with the adapter's",
                                           probe, lc.r, (double)lc.alpha, targets));
    lc.dropout = t->cfg.lora.dropout; /* a training choice, not the adapter's shape */
    t->cfg.lora = lc;
    snprintf(t->adapter_dir, sizeof t->adapter_dir, "%s", dir);
    t->opts.init_from = t->adapter_base; /* from here on the base is what --init-from names */
    lf_log(LF_LOG_INFO, "--init-from PEFT adapter %s: base %s, r %d, alpha %g", dir, t->adapter_base, lc.r,
           (double)lc.alpha);
    return LF_OK;
}

lf_status lf__lora_load_adapter(lf_trainer *t) {
    if (!t->adapter_dir[0] || t->rank != 0 || t->opts.resume) return LF_OK; /* start_state shares rank 0's */
    lf_status st = lf_lora_adapter_load(t->model, t->adapter_dir);
    return st == LF_OK ? LF_OK : lf__trainer_fail(t, st);
}
