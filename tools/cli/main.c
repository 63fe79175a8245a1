/* lockstep CLI entry point (placeholder until the subcommands land). */
#include <stdio.h>

int main(int argc, char **argv) {
    (void)argv;
    if (argc < 2) {
        fprintf(stderr, "usage: lockstep <run|tokenize|logits|bench> [options]\n");
        return 2;
    }
    return 2;
}
