/*
 * The small-T attention kernels at 8 lanes (cpu_attention_fast.h), compiled
 * with the AVX2 flags (-mavx2 -mfma, AVX-512 off) by CMakeLists.txt on
 * x86-64; cpu_attention.c calls them only at that ISA level or above.
 */
#define ATT_VL 8
#include "cpu_attention_fast.h"
