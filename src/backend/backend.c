/* Backend registry: the one place that knows which backends were compiled in. */
#include <string.h>
#include "backend/backend_impl.h"

const lf_backend_ops *lf_backend_get(const char *name) {
    if (!name || strcmp(name, "cpu") == 0) return lf__backend_cpu();
    if (strcmp(name, "cpu-bf16") == 0) return lf__backend_cpu_bf16();
    lf_fail(LF_ERR_NOT_FOUND, "unknown backend '%s' (compiled in: cpu, cpu-bf16)", name);
    return NULL;
}

const char *lf_backend_name(const lf_backend_ops *ops) { return ops ? ops->name : "(none)"; }
