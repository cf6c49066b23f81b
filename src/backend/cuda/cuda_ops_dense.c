/*
 * The CUDA backend's dense op family: host glue (see cuda_internal.h).
 * Placeholder: no slot filled yet (a NULL slot means "unsupported").
 */
#include "cuda_internal.h"

void lf__cuda_install_dense(lf_backend_ops *ops) { (void)ops; }
