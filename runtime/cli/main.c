/* skiff: command-line front end over libskiff. Each verb lives in its own file
 * and calls the library; no logic here that the SPANK plugin would need too. */
#include <stdio.h>
#include <string.h>

#include "error.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: skiff COMMAND [ARGS...]\n"
                 "commands: version\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "version") == 0) {
        printf("skiff %s\n", SKIFF_VERSION);
        return 0;
    }
    if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "skiff: unknown command '%s'; run 'skiff help' for the list\n", argv[1]);
    return 2;
}
