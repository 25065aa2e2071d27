/* The verb table and what every verb shares: usage, usage errors, the
 * dispatch (cli.h). */
#include <ctype.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);

/* synopsis: what follows "usage: "; help: what --help adds (options,
 * operand forms), or NULL. */
static const struct verb {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
    const char *synopsis;
    const char *help;
} verbs[] = {
    {"import", cmd_import,
     "import an image (docker://, docker-archive:, oci:, oci-archive:, dir:) into a squashfs file",
     "skiff import [-o FILE.sqsh] [-a ARCH] [-f] [--lazy] URI | skiff import --system URI",
     "  URI: docker://[USER@][REGISTRY#]IMAGE[:TAG|@sha256:DIGEST]\n"
     "       docker-archive:PATH.tar  oci:DIR[:TAG]  oci-archive:PATH.tar[:TAG]  dir:PATH\n"
     "  -o, --output FILE  output file (default: IMAGE+TAG.sqsh in the current directory)\n"
     "  -a, --arch ARCH    platform to pick from a multi-arch image (amd64, arm64, ...)\n"
     "  -f, --force        replace an existing output file\n"
     "      --lazy         write a lazy image (a directory, default IMAGE+TAG.lazy): the index of\n"
     "                     each gzip layer and the tree's metadata; skiff start then fetches file\n"
     "                     data as it is read (docker://, oci:, dir: sources; doc/lazy.md)\n"
     "      --system       into the site's image store (system_cache_path), where every user's\n"
     "                     --container-image=URI finds it; for the store's owner\n"},
    {"start", cmd_start, "run a command in a container from a squashfs image or a named container",
     "skiff start [OPTIONS] IMAGE.sqsh|IMAGE.lazy|NAME [CMD [ARG...]]",
     "  -m, --mount SRC:DST[:FLAGS]  bind mount, submounts too (flags: ro, rw, bind, x-create=dir|file,\n"
     "                               noexec; SRC 'tmpfs' for a tmpfs); repeatable\n"
     "  -e, --env KEY=VALUE          set an environment variable; repeatable\n"
     "      --rw                     writable root (overlay over a tmpfs)\n"
     "      --remap-root             run as uid/gid 0 inside\n"
     "  -w, --workdir DIR            working directory inside (absolute)\n"
     "      --no-entrypoint          ignore the image's Entrypoint\n"
     "      --mount-home             bind your home directory\n"
     "CMD defaults to the image's Entrypoint + Cmd. Exit status: CMD's (128+N for signal N).\n"},
    {"create", cmd_create, "create a named container (persistent writable layer) from a squashfs image",
     "skiff create -n NAME IMAGE.sqsh",
     "  -n, --name NAME  letters, digits, '.', '_', '-', '+' (not first: '.', '-', '+'); at most 128\n"},
    {"list", cmd_list, "list named containers", "skiff list", NULL},
    {"remove", cmd_remove, "remove a named container", "skiff remove NAME...", NULL},
    {"export", cmd_export, "write a named container's root filesystem as a squashfs image",
     "skiff export -o OUT.sqsh NAME", "  -o, --output OUT.sqsh  the squashfs file to write\n"},
    {"exec", cmd_exec, "run a command in a running container", "skiff exec PID CMD [ARG...]",
     "  PID: the container's holder or any process in the container\n"},
    {"doctor", cmd_doctor, "check this host for what unprivileged containers need", "skiff doctor [--fabric]",
     "      --fabric  the GPUs and RDMA devices of this node, what a container would get of them\n"
     "                (the hooks run as a container start runs them), and NCCL/UCX hints\n"},
    {"resolve", cmd_resolve,
     "resolve --container-image's argument (importing into the cache) and print the squashfs path",
     "skiff resolve IMAGE",
     "  IMAGE: ./file.sqsh, /abs/file.sqsh, docker://..., oci:..., or a bare name (ubuntu:22.04)\n"},
    {"fetch", cmd_fetch, "serve a lazy image's file data to its container (run by skiff start)",
     "skiff fetch LAZY-IMAGE-DIR", NULL},
    {"cache", cmd_cache, "list the image cache, or prune it (never an image in use)",
     "skiff cache list [--system] | skiff cache prune [--older-than D] [--max-size S] [--all] [--dry-run] [--system]",
     "  list               images (size, last used, in use, the references that resolve to them), layer blobs\n"
     "  prune              with no option: what nothing uses (blobs no image names, leftovers)\n"
     "  --older-than D     images unused for D (30d, 12h, 90m), and their layer blobs\n"
     "  --max-size S       shrink to S (500G, 20G): layer blobs first, then least recently used images\n"
     "  --all              every image not in use\n"
     "  --dry-run          say what would go, remove nothing\n"
     "  --system           the site's store (system_cache_path) instead of your cache\n"},
    {"version", cmd_version, "print the version", "skiff version", NULL},
    {"help", cmd_help, "print this list, or a command's usage", "skiff help [COMMAND]", NULL},
};

#define NVERBS (sizeof(verbs) / sizeof(verbs[0]))

static const struct verb *find_verb(const char *name)
{
    for (size_t i = 0; i < NVERBS; i++)
        if (!strcmp(name, verbs[i].name))
            return &verbs[i];
    return NULL;
}

const char *cli_verb_name(size_t i)
{
    return i < NVERBS ? verbs[i].name : NULL;
}

static bool is_help(const char *arg)
{
    return !strcmp(arg, "--help") || !strcmp(arg, "-h");
}

static void usage(FILE *out)
{
    fprintf(out, "usage: skiff COMMAND [ARGS...]\ncommands:\n");
    for (size_t i = 0; i < NVERBS; i++)
        fprintf(out, "  %-10s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(out, "Run 'skiff COMMAND --help' for a command's options.\n");
}

void cli_usage(const char *verb, FILE *out)
{
    const struct verb *v = find_verb(verb);
    if (!v)
        return;
    fprintf(out, "usage: %s\n%c%s.\n%s", v->synopsis, toupper((unsigned char)v->summary[0]), v->summary + 1,
            v->help ? v->help : "");
}

static int usage_tail(const struct verb *v)
{
    if (v) {
        fprintf(stderr, "usage: %s\n", v->synopsis);
        if (v->help)
            fprintf(stderr, "Run 'skiff %s --help' for more.\n", v->name);
    }
    return 2;
}

int cli_usage_error(const char *verb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "skiff %s: ", verb);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return usage_tail(find_verb(verb));
}

int cli_bad_option(const char *verb)
{
    return usage_tail(find_verb(verb));
}

static int cmd_version(int argc, char **argv)
{
    if (argc > 1)
        return cli_usage_error("version", "unexpected argument '%s'", argv[1]);
    printf("skiff %s\n", SKIFF_VERSION);
    return 0;
}

static int cmd_help(int argc, char **argv)
{
    if (argc > 2)
        return cli_usage_error("help", "unexpected argument '%s'", argv[2]);
    if (argc == 2) {
        if (!find_verb(argv[1]))
            return cli_usage_error("help", "unknown command '%s'", argv[1]);
        cli_usage(argv[1], stdout);
        return 0;
    }
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

int cli_sibling(const char *name, char *out, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", out, n - 1);
    if (len <= 0)
        return -1;
    out[len] = '\0';
    char *slash = strrchr(out, '/');
    size_t dir = slash ? (size_t)(slash - out) + 1 : 0;
    if (dir + strlen(name) >= n)
        return -1;
    strcpy(out + dir, name);
    return 0;
}

int cli_fail(const char *verb, const skiff_err *err)
{
    fprintf(stderr, "skiff: %s: %s\n", verb, err->msg);
    return 1;
}

int cli_opt_and_arg(int argc, char **argv, const char *verb, const char *long_name, char short_opt, const char *operand,
                    const char **value, const char **arg)
{
    const struct option longopts[] = {
        {long_name, required_argument, NULL, short_opt}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char shortopts[] = {short_opt, ':', 'h', '\0'};
    *value = NULL;
    int ch;
    optind = 0; /* glibc: a full restart, whatever a parse before left */
    while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        if (ch == short_opt) {
            *value = optarg;
        } else if (ch == 'h') {
            cli_usage(verb, stdout);
            return 0;
        } else {
            return cli_bad_option(verb);
        }
    }
    if (!*value)
        return cli_usage_error(verb, "-%c/--%s is required", short_opt, long_name);
    if (optind == argc)
        return cli_usage_error(verb, "no %s given", operand);
    if (optind + 1 != argc)
        return cli_usage_error(verb, "unexpected argument '%s'", argv[optind + 1]);
    *arg = argv[optind];
    return -1;
}

int cli_main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (is_help(argv[1]))
        return cmd_help(1, argv + 1);
    if (!strcmp(argv[1], "--version"))
        return cmd_version(1, argv + 1);
    const struct verb *v = find_verb(argv[1]);
    if (!v) {
        fprintf(stderr, "skiff: unknown command '%s'; run 'skiff help' for the list\n", argv[1]);
        return 2;
    }
    if (argc > 2 && is_help(argv[2])) {
        cli_usage(v->name, stdout);
        return 0;
    }
    /* the verb's argv[0] is "skiff VERB": getopt's own messages then name
     * the program and the verb ("skiff start: unrecognized option ...") */
    char prog[32];
    snprintf(prog, sizeof(prog), "skiff %s", v->name);
    argv[1] = prog;
    return v->fn(argc - 1, argv + 1);
}
