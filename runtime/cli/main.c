/* skiff: command-line front end over libskiff. Each verb lives in its own file
 * and calls the library; no logic here that the SPANK plugin would need too. */
#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "error.h"

#ifdef SKIFF_CLI_LEAN
/* bin/skiff is linked without the import verbs' libraries (libcurl,
 * libarchive, libcrypto and their dependencies: 37 more shared objects,
 * ~4 ms to load and relocate on every `skiff start`). `skiff import` and
 * `skiff resolve` run bin/skiff-import, the full CLI, from the same
 * directory. */
static int cmd_via_helper(int argc, char **argv)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 16);
    if (n <= 0) {
        fprintf(stderr, "skiff: %s: cannot find my own path: %s\n", argv[0], strerror(errno));
        return 1;
    }
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    strcpy(slash ? slash + 1 : exe, "skiff-import");
    char **av = calloc((size_t)argc + 2, sizeof(char *));
    if (!av) {
        fprintf(stderr, "skiff: %s: out of memory\n", argv[0]);
        return 1;
    }
    av[0] = exe;
    for (int i = 0; i < argc; i++)
        av[i + 1] = argv[i];
    execv(exe, av);
    fprintf(stderr, "skiff: %s: cannot run %s: %s (install it beside skiff)\n", argv[0], exe, strerror(errno));
    free(av);
    return 1;
}
#define cmd_import cmd_via_helper
#define cmd_resolve cmd_via_helper
#endif

static int cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("skiff %s\n", SKIFF_VERSION);
    return 0;
}

static int cmd_help(int argc, char **argv);

static const struct verb {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} verbs[] = {
    {"import", cmd_import, "import an image (docker://, docker-archive:, oci:, oci-archive:, dir:) into a squashfs file"},
    {"start", cmd_start, "run a command in a container from a squashfs image or a named container"},
    {"create", cmd_create, "create a named container (persistent writable layer) from a squashfs image"},
    {"list", cmd_list, "list named containers"},
    {"remove", cmd_remove, "remove a named container"},
    {"export", cmd_export, "write a named container's root filesystem as a squashfs image"},
    {"exec", cmd_exec, "run a command in a running container"},
    {"doctor", cmd_doctor, "check this host for what unprivileged containers need"},
    {"resolve", cmd_resolve, "resolve --container-image's argument (importing into the cache) and print the squashfs path"},
    {"version", cmd_version, "print the version"},
    {"help", cmd_help, "print this list"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: skiff COMMAND [ARGS...]\ncommands:\n");
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        fprintf(out, "  %-10s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(out, "Run 'skiff COMMAND --help' for a command's options.\n");
}

static int cmd_help(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    usage(stdout);
    return 0;
}

int cli_load_config(struct skiff_config *cfg)
{
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_config_load(cfg, NULL, true, &err) < 0) {
        fprintf(stderr, "skiff: configuration: %s\n", err.msg);
        return -1;
    }
    return 0;
}

int cli_fail(const char *verb, const skiff_err *err)
{
    fprintf(stderr, "skiff: %s: %s\n", verb, err->msg);
    return 1;
}

int cli_opt_and_arg(int argc, char **argv, const char *long_name, char short_opt, const char *usage,
                    const char **value, const char **arg)
{
    const struct option longopts[] = {{long_name, required_argument, NULL, short_opt},
                                      {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char shortopts[] = {short_opt, ':', 'h', '\0'};
    *value = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        if (ch == short_opt) {
            *value = optarg;
        } else {
            fprintf(ch == 'h' ? stdout : stderr, "usage: %s\n", usage);
            return ch == 'h' ? 0 : 2;
        }
    }
    if (!*value || optind + 1 != argc) {
        fprintf(stderr, "usage: %s\n", usage);
        return 2;
    }
    *arg = argv[optind];
    return -1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return cmd_help(argc - 1, argv + 1);
    if (!strcmp(argv[1], "--version"))
        return cmd_version(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        if (!strcmp(argv[1], verbs[i].name))
            return verbs[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "skiff: unknown command '%s'; run 'skiff help' for the list\n", argv[1]);
    return 2;
}
