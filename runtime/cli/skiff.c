/* bin/skiff's main: the container verbs. Each verb lives in its own file
 * and calls the library; no logic here that the SPANK plugin would need too.
 * The verb table (verbs.c) holds each verb's usage: `skiff VERB --help` (or
 * -h) is answered from it before the verb runs, and the verbs' usage errors
 * print from it (cli_usage_error). bin/skiff-import (skiff-import.c) is the
 * same CLI with the import verbs linked in.
 *
 * bin/skiff is linked without the import verbs' libraries (libcurl,
 * libarchive, libcrypto and their dependencies: 37 more shared objects,
 * ~4 ms to load and relocate on every `skiff start`). `skiff import`,
 * `skiff resolve` and `skiff fetch` run bin/skiff-import from the same
 * directory, with the same arguments. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static int exec_full(char *verb, int argc, char **argv)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 16);
    if (n <= 0) {
        fprintf(stderr, "skiff: %s: cannot find my own path: %s\n", verb, strerror(errno));
        return 1;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    strcpy(slash ? slash + 1 : exe, "skiff-import");
    char **av = calloc((size_t)argc + 2, sizeof(char *));
    if (!av) {
        fprintf(stderr, "skiff: %s: out of memory\n", verb);
        return 1;
    }
    av[0] = exe;
    av[1] = verb;
    for (int i = 1; i < argc; i++)
        av[i + 1] = argv[i];
    execv(exe, av);
    fprintf(stderr, "skiff: %s: cannot run %s: %s (install it beside skiff)\n", verb, exe, strerror(errno));
    free(av);
    return 1;
}

int cmd_import(int argc, char **argv)
{
    static char verb[] = "import";
    return exec_full(verb, argc, argv);
}

int cmd_resolve(int argc, char **argv)
{
    static char verb[] = "resolve";
    return exec_full(verb, argc, argv);
}

int cmd_fetch(int argc, char **argv)
{
    static char verb[] = "fetch";
    return exec_full(verb, argc, argv);
}

int main(int argc, char **argv)
{
    return cli_main(argc, argv);
}
