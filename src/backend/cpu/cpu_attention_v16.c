/*
 * The small-T attention kernels at 16 lanes (cpu_attention_fast.h), compiled
 * with the AVX-512 flags (-mavx512f/bw/vl/dq) by CMakeLists.txt on
 * x86-64; cpu_attention.c calls them only at that ISA level or above.
 */
#define ATT_VL 16
#include "cpu_attention_fast.h"
