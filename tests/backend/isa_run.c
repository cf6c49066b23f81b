/* isa_run PROGRAM [ARGS...]: runs a test program under the LLMFORGE_CPU_ISA
 * of its environment (tests/CMakeLists.txt's ISA block), unless that level
 * is above this CPU's: then it prints SKIPPED: and the reason, and CTest
 * counts the test as skipped (SKIP_REGULAR_EXPRESSION). Any other error of
 * the variable is left to the program, which must report it. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "backend/cpu/cpu_internal.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: isa_run PROGRAM [ARGS...]\n");
        return 2;
    }
    lf__cpu_isa_choice c;
    lf__cpu_isa_choose(getenv("LLMFORGE_CPU_ISA"), lf__cpu_isa_cpuid(), &c);
    if (c.error == LF_CPU_ISA_ERR_ABOVE_CPU) {
        printf("SKIPPED: %s\n", c.message);
        return 0;
    }
    execv(argv[1], argv + 1);
    perror(argv[1]);
    return 127;
}
