/*
 * The CPU baseline check of the CLI, before main: the rest of llmforge (this
 * program's main included) is compiled for the build's baseline
 * (-march=x86-64-v3 by default: AVX2+FMA), and on an older CPU would die
 * with SIGILL at its first AVX2 instruction, wherever that falls. This file
 * is compiled for plain x86-64 (CMakeLists.txt) and runs as a constructor,
 * so the person gets the reason and the way out instead.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "llmforge/core.h"

__attribute__((constructor(101))) static void cpu_guard(void) {
    char msg[320];
    if (lf_cpu_baseline_check(msg, sizeof msg) == LF_OK) return;
    const int native = !strcmp(lf_cpu_baseline_name(), "native");
    fprintf(stderr,
            "llmforge: %s.\nllmforge: rebuild for this CPU: cmake -DLF_NATIVE=OFF -DLF_ARCH=x86-64 (%s), or build "
            "on this machine with -DLF_NATIVE=ON\n",
            msg,
            native ? "this build was made with LF_NATIVE=ON, for the CPU it was built on"
                   : "a baseline every x86-64 CPU has; the AVX2/AVX-512 kernels are still chosen at run time");
    fflush(stderr);
    _exit(2);
}
