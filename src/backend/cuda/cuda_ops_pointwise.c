/*
 * The CUDA backend's pointwise op family: host glue (see cuda_internal.h).
 * Placeholder: no slot filled yet (a NULL slot means "unsupported").
 */
#include "cuda_internal.h"

void lf__cuda_install_pointwise(lf_backend_ops *ops) { (void)ops; }
