/*
 * Serving several LoRA adapters on one base (serve --lora NAME=DIR, vLLM's
 * --lora-modules): each PEFT adapter directory is checked against the
 * served base, attached, loaded and moved into the model's adapter bank
 * (lf_model_lora_bank_add), where a request's "model" selects it.
 *
 * Invariants:
 *  - Adapter i of the options is bank adapter i + 1; names are unique and
 *    none is the base's own name (a request's "model" is unambiguous).
 *  - An adapter whose base_model_name_or_path resolves to a local directory
 *    must resolve to the served base's directory; one whose base is not
 *    local (a Hub id) is held to the base's modules and shapes only (its
 *    tensors must match the sites exactly, lf_lora_adapter_load).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "llmforge/checkpoint.h"
#include "llmforge/serve.h"
#include "serve_impl.h"

void lf__serve_names_free(char **v, int n) {
    if (!v) return;
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* The adapter's recorded base, when it names a local directory (absolute,
 * or relative to the adapter's), is the served one. */
static lf_status check_base(const char *name, const char *adir, const char *named, const char *base_dir) {
    char want[LF_PATH_MAX * 2 + 2], a[PATH_MAX], b[PATH_MAX];
    struct stat sb;
    if (!named[0]) return LF_OK;
    if (named[0] == '/') snprintf(want, sizeof want, "%s", named);
    else snprintf(want, sizeof want, "%s/%s", adir, named);
    if (stat(want, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return LF_OK; /* a Hub id, not here: the modules and shapes decide (lf_lora_adapter_load) */
    if (!realpath(want, a) || !realpath(base_dir, b))
        return lf_fail(LF_ERR_NOT_FOUND, "adapter '%s' ('%s'): cannot resolve its base '%s' or the served '%s'", name,
                       adir, want, base_dir);
    if (strcmp(a, b) != 0)
        return lf_fail(LF_ERR_MISMATCH,
                       "adapter '%s' ('%s') was trained on base '%s' (base_model_name_or_path), not on the served "
                       "base '%s'",
                       name, adir, a, b);
    return LF_OK;
}

static lf_status load_one(lf_model *m, const char *name, const char *adir, const char *base_dir, int want_index) {
    lf_lora_config lc;
    char named[LF_PATH_MAX];
    lf_status st = lf_lora_adapter_config(adir, &lc, named, sizeof named);
    if (st != LF_OK) return st;
    if ((st = check_base(name, adir, named, base_dir)) != LF_OK) return st;
    if ((st = lf_model_lora_attach(m, &lc, 0)) != LF_OK || (st = lf_lora_adapter_load(m, adir)) != LF_OK) {
        lf_error_prefix("adapter '%s' ('%s') on base '%s'", name, adir, base_dir);
        return st;
    }
    int index = 0;
    if ((st = lf_model_lora_bank_add(m, &index)) != LF_OK) return st;
    if (index != want_index)
        return lf_fail(LF_ERR_INTERNAL, "adapter '%s' became bank adapter %d, not %d", name, index, want_index);
    return LF_OK;
}

lf_status lf__serve_load_adapters(lf_model *m, const char *base_dir, const char *base_name,
                                  const struct lf_server_opts *o, char ***names, char ***dirs) {
    *names = *dirs = NULL;
    if (lf_model_lora(m))
        return lf_fail(LF_ERR_INVALID_ARG,
                       "serve: '%s' is itself an adapter; give the base model with --model and "
                       "each adapter with --lora NAME=DIR",
                       base_dir);
    char **nv = calloc((size_t)o->n_lora, sizeof *nv), **dv = calloc((size_t)o->n_lora, sizeof *dv);
    lf_status st = nv && dv ? LF_OK : lf_fail(LF_ERR_NOMEM, "serve: out of memory");
    for (int i = 0; st == LF_OK && i < o->n_lora; i++) {
        const char *name = o->lora_names[i], *adir = o->lora_dirs[i];
        if (!name || !name[0] || !adir || !adir[0]) {
            st = lf_fail(LF_ERR_INVALID_ARG, "serve: --lora %d: give NAME=DIR", i + 1);
            break;
        }
        if (!strcmp(name, base_name)) {
            st = lf_fail(LF_ERR_INVALID_ARG, "serve: --lora %s=%s: '%s' is the base model's own name", name, adir,
                         name);
            break;
        }
        for (int j = 0; j < i && st == LF_OK; j++)
            if (!strcmp(name, nv[j]))
                st = lf_fail(LF_ERR_INVALID_ARG, "serve: --lora: the name '%s' is given twice", name);
        if (st != LF_OK) break;
        nv[i] = strdup(name);
        dv[i] = strdup(adir);
        if (!nv[i] || !dv[i]) st = lf_fail(LF_ERR_NOMEM, "serve: out of memory");
        else st = load_one(m, name, adir, base_dir, i + 1);
    }
    if (st != LF_OK) {
        lf__serve_names_free(nv, o->n_lora);
        lf__serve_names_free(dv, o->n_lora);
        return st;
    }
    *names = nv;
    *dirs = dv;
    return LF_OK;
}
