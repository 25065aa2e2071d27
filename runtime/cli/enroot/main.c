/* skiff-enroot's main: the verb table, usage, errors and dispatch
 * (enroot.h). Verbs of enroot that skiff does not offer (batch, bundle,
 * load) are refused by name with what to use instead. */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "enroot.h"

static int version(int argc, char **argv);
static int help(int argc, char **argv);

static const struct verb {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *synopsis; /* after "usage: PROG " */
    const char *summary;
    const char *options; /* or NULL */
} verbs[] = {
    {"import", enroot_import, "import [-o FILE] [-a ARCH] [-f] [--] URI",
     "import a container image into a squashfs file",
     "  URI: docker://[USER@][REGISTRY#]IMAGE[:TAG] (and skiff's docker-archive:, oci:, oci-archive:, dir:)\n"
     "  -o, --output FILE  output file (default: IMAGE+TAG.sqsh here)\n"
     "  -a, --arch ARCH    architecture to pick from a multi-arch image (default: this host's)\n"
     "  -f, --force        replace an existing output file\n"},
    {"create", enroot_create, "create [-n NAME] [-f] [--] IMAGE.sqsh",
     "create a container (a persistent writable layer over the image)",
     "  -n, --name NAME  the container's name (default: IMAGE without .sqsh); pyxis_NAME is\n"
     "                   the container --container-name=NAME uses on this node\n"
     "  -f, --force      replace an existing container of that name\n"},
    {"start", enroot_start, "start [OPTIONS] [--] NAME|IMAGE.sqsh [COMMAND [ARG...]]",
     "run a command (default: the image's entrypoint and command) in a container",
     "  -r, --root             be root inside (uid 0 mapped to you)\n"
     "  -w, --rw               writable root filesystem (changes of an image are not kept)\n"
     "  -m, --mount SRC:DST[:TYPE[:OPTIONS]]  mount, fstab fields separated by ':'; a relative\n"
     "                         DST is inside the container's root; repeatable\n"
     "  -e, --env KEY[=VALUE]  set a variable (KEY alone: its value here); repeatable\n"
     "      --env-file FILE    KEY=VALUE lines ('#' comments)\n"},
    {"exec", enroot_exec, "exec [-e KEY[=VALUE]] [--] PID COMMAND [ARG...]", "run a command in a running container",
     "  PID: any process of the container (enroot list -f shows them)\n"
     "  -e, --env KEY[=VALUE]  set a variable (KEY alone: its value here); repeatable\n"},
    {"list", enroot_list, "list [-f]", "list the containers of this node, one name per line",
     "  -f, --fancy  a table with each running instance (PID, STATE, STARTED, TIME, MNTNS, USERNS, COMMAND)\n"},
    {"remove", enroot_remove, "remove [-f] [--] NAME...", "remove containers and their writable layers",
     "  -f, --force  do not ask for confirmation\n"},
    {"export", enroot_export, "export [-o FILE] [-f] [--] NAME", "write a container's files as a squashfs image",
     "  -o, --output FILE  output file (default: NAME.sqsh here)\n"
     "  -f, --force        replace an existing output file\n"},
    {"version", version, "version", "print the enroot version whose command line this follows", NULL},
    {"help", help, "help [COMMAND]", "print this list, or a command's usage", NULL},
};

#define NVERBS (sizeof(verbs) / sizeof(verbs[0]))

/* enroot's verbs that skiff does not offer, and what to do instead. */
static const struct {
    const char *name, *instead;
} refused[] = {
    {"batch", "its configuration scripts are bash, and skiff runs no shell: use 'start' with -m, -e and --env-file"},
    {"bundle", "skiff makes no self-extracting bundles: share the .sqsh file, which 'start' runs directly"},
    {"load", "import the image ('import'), then 'create' a container from it"},
};

static const char *prog = "skiff-enroot";

const char *enroot_prog(void)
{
    return prog;
}

static const struct verb *find_verb(const char *name)
{
    for (size_t i = 0; i < NVERBS; i++)
        if (!strcmp(name, verbs[i].name))
            return &verbs[i];
    return NULL;
}

void enroot_usage(const char *name, FILE *out)
{
    const struct verb *v = find_verb(name);
    if (v)
        fprintf(out, "usage: %s %s\n%c%s.\n%s", prog, v->synopsis, toupper((unsigned char)v->summary[0]),
                v->summary + 1, v->options ? v->options : "");
}

static void usage_all(FILE *out)
{
    fprintf(out,
            "usage: %s COMMAND [ARGS...]\nenroot's commands, run by skiff (the names pyxis gave its containers "
            "included).\ncommands:\n",
            prog);
    for (size_t i = 0; i < NVERBS; i++)
        fprintf(out, "  %-8s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(out, "Run '%s COMMAND --help' for a command's options.\n", prog);
}

int enroot_bad_option(const char *name)
{
    const struct verb *v = find_verb(name);
    if (v)
        fprintf(stderr, "usage: %s %s\nRun '%s %s --help' for more.\n", prog, v->synopsis, prog, v->name);
    return 2;
}

int enroot_usage_error(const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", prog, name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return enroot_bad_option(name);
}

int enroot_fail(const char *name, const skiff_err *err)
{
    fprintf(stderr, "%s: %s: %s\n", prog, name, err->msg);
    return 1;
}

int enroot_config(const char *name, struct skiff_config *cfg)
{
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_config_load(cfg, NULL, true, &err) < 0) {
        fprintf(stderr, "%s: %s: configuration: %s\n", prog, name, err.msg);
        return -1;
    }
    return 0;
}

bool enroot_env_true(const char *name)
{
    return skiff_parse_bool(getenv(name)) == 1;
}

static int version(int argc, char **argv)
{
    if (argc > 1)
        return enroot_usage_error("version", "unexpected argument '%s'", argv[1]);
    printf("%s\n", SKIFF_ENROOT_COMPAT_VERSION);
    return 0;
}

static int help(int argc, char **argv)
{
    if (argc > 2)
        return enroot_usage_error("help", "unexpected argument '%s'", argv[2]);
    if (argc == 2 && !find_verb(argv[1]))
        return enroot_usage_error("help", "unknown command '%s'", argv[1]);
    if (argc == 2)
        enroot_usage(argv[1], stdout);
    else
        usage_all(stdout);
    return 0;
}

static bool is_help(const char *a)
{
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

int main(int argc, char **argv)
{
    const char *slash = argv[0] ? strrchr(argv[0], '/') : NULL;
    if (argv[0] && *argv[0])
        prog = slash ? slash + 1 : argv[0];
    if (argc < 2) {
        usage_all(stderr);
        return 2;
    }
    if (is_help(argv[1]))
        return help(1, argv + 1);
    if (!strcmp(argv[1], "--version"))
        return version(1, argv + 1);
    const struct verb *v = find_verb(argv[1]);
    if (!v) {
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
            if (!strcmp(argv[1], refused[i].name)) {
                fprintf(stderr, "%s: '%s' is not supported: %s\n", prog, argv[1], refused[i].instead);
                return 2;
            }
        fprintf(stderr, "%s: unknown command '%s'; run '%s help' for the list\n", prog, argv[1], prog);
        return 2;
    }
    if (argc > 2 && is_help(argv[2])) {
        enroot_usage(v->name, stdout);
        return 0;
    }
    char verb_prog[300];
    snprintf(verb_prog, sizeof(verb_prog), "%s %s", prog, v->name);
    argv[1] = verb_prog;
    return v->fn(argc - 1, argv + 1);
}
