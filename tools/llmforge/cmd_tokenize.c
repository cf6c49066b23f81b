/* llmforge tokenize / detokenize / tokenizer: placeholders until the BPE tokenizer lands. */
#include <stdio.h>
#include "commands.h"
static int na(const char *what) {
    fprintf(stderr, "llmforge %s: not available in this build yet\n", what);
    return 2;
}
int cmd_tokenize(int argc, char **argv) { (void)argc; (void)argv; return na("tokenize"); }
int cmd_detokenize(int argc, char **argv) { (void)argc; (void)argv; return na("detokenize"); }
int cmd_tokenizer(int argc, char **argv) { (void)argc; (void)argv; return na("tokenizer"); }
