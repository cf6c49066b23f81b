/*
 * GELU forward and backward (cpu_gelu.h's loops) compiled with the AVX-512
 * flags (-mavx512f/bw/vl/dq) by CMakeLists.txt on x86-64; cpu_pointwise.c
 * calls them only at that ISA level or above. The same bits as the
 * baseline build (cpu_gelu.h says why).
 */
#include "cpu_gelu.h"

void lf__cpu_gelu_forward_v16(float *restrict out, const float *restrict inp, size_t n) {
    gelu_forward_loop(out, inp, n);
}

void lf__cpu_gelu_backward_v16(float *restrict dinp, const float *restrict inp, const float *restrict dout, size_t n) {
    gelu_backward_loop(dinp, inp, dout, n);
}
