/* llmforge score: placeholder until the metrics library lands. */
#include <stdio.h>
#include "commands.h"
int cmd_score(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "llmforge score: not available in this build yet\n");
    return 2;
}
