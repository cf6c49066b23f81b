/* Backend registry: the one place that knows which backends were compiled in. */
#include <stdlib.h>
#include <string.h>
#include "backend/backend_impl.h"

const lf_backend_ops *lf_backend_get(const char *name) {
    if (!name || strcmp(name, "cpu") == 0) return lf__backend_cpu();
    if (strcmp(name, "cpu-bf16") == 0) return lf__backend_cpu_bf16();
    if (strcmp(name, "cpu-fenced") == 0) return lf__backend_cpu_fenced();
    lf_fail(LF_ERR_NOT_FOUND, "unknown backend '%s' (compiled in: cpu, cpu-bf16, cpu-fenced)", name);
    return NULL;
}

const lf_backend_ops *lf_backend_default(void) {
    const char *env = getenv("LLMFORGE_BACKEND");
    if (env && *env) return lf_backend_get(env);
    return lf__backend_cpu();
}

const char *lf_backend_name(const lf_backend_ops *ops) { return ops ? ops->name : "(none)"; }
