/*
 * Backends: the compute behind the model. A backend is an operations table
 * (src/backend/backend_impl.h); this public header only names and selects
 * them. The CPU backend is the reference every other backend is tested
 * against.
 */
#ifndef LLMFORGE_BACKEND_H
#define LLMFORGE_BACKEND_H

#include "llmforge/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lf_backend_ops lf_backend_ops;

/* The backend registered under `name` ("cpu"), or NULL (message recorded). */
const lf_backend_ops *lf_backend_get(const char *name);
const char *lf_backend_name(const lf_backend_ops *ops);

/* Threads the CPU backend uses (OpenMP + BLAS). n <= 0 keeps OpenMP's
 * default (OMP_NUM_THREADS when set, else every core). */
void lf_backend_cpu_set_threads(int n);
int lf_backend_cpu_threads(void);

#ifdef __cplusplus
}
#endif
#endif
