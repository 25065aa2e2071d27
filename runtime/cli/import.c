/* skiff import [-o FILE.sqsh] [-a ARCH] [-f] [--lazy] URI
 * skiff import --system URI: into the site's store (system_cache_path) */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "fsutil.h"
#include "image.h"
#include "lazy.h"

static void print_warning(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "skiff: import: warning: %s\n", msg);
}

/* --lazy: a lazy image's directory (lazy.h) instead of a squashfs file. */
static int import_lazy(const struct skiff_config *cfg, const char *uri, const char *output,
                       const struct skiff_import_opts *io)
{
    skiff_err err;
    skiff_err_clear(&err);
    char name[4096];
    if (!output) {
        if (skiff_image_default_name(uri, name, sizeof(name), &err) < 0)
            return cli_fail("import", &err);
        size_t l = strlen(name);
        if (l > 5 && !strcmp(name + l - 5, ".sqsh"))
            name[l - 5] = '\0';
        strncat(name, ".lazy", sizeof(name) - strlen(name) - 1);
        output = name;
    }
    struct stat st;
    if (lstat(output, &st) == 0) {
        if (!io->force)
            return cli_fail("import", (skiff_error(&err, 0, "%s exists (use -f to replace it)", output), &err));
        if (!S_ISDIR(st.st_mode) || !skiff_lazy_is_image(output))
            return cli_fail("import",
                            (skiff_error(&err, 0, "%s exists and is not a lazy image: not replaced", output), &err));
        if (skiff_remove_tree(output, &err) < 0)
            return cli_fail("import", &err);
    }
    struct skiff_lazy_build_opts lo = {.progress = io->progress};
    if (skiff_lazy_build(cfg, uri, output, &lo, &err) < 0) {
        if (err.code == ENOTSUP) {
            size_t l = strlen(err.msg);
            snprintf(err.msg + l, sizeof(err.msg) - l, "; import it without --lazy");
        }
        return cli_fail("import", &err);
    }
    printf("%s\n", output);
    return 0;
}

/* On a terminal: how far the downloads are, one line rewritten. */
static void print_progress(void *ctx, const struct skiff_import_progress *p)
{
    (void)ctx;
    char line[160];
    skiff_import_progress_text(p, line, sizeof(line));
    fprintf(stderr, "\rskiff: downloading %s\033[K%s", line, p->done >= p->total ? "\n" : "");
}

const char *cli_import_args(int argc, char **argv, const struct cli_front *f, struct skiff_import_opts *o,
                            const char **output, bool *system, bool *lazy, int *rc)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"arch", required_argument, NULL, 'a'},
        {"force", no_argument, NULL, 'f'},
        {"lazy", no_argument, NULL, 'L'},
        {"system", no_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 0; /* glibc: a full restart, whatever a parse before left */
    while ((c = getopt_long(argc, argv, "+o:a:fh", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            *output = optarg;
            break;
        case 'a':
            o->arch = optarg;
            break;
        case 'f':
            o->force = true;
            break;
        case 'L':
            if (!lazy) { /* a front end without lazy images */
                *rc = f->usage_error("import", "unknown option --lazy");
                return NULL;
            }
            *lazy = true;
            break;
        case 'S':
            if (!system) { /* a front end without a store */
                *rc = f->usage_error("import", "unknown option --system");
                return NULL;
            }
            *system = true;
            break;
        case 'h':
            f->usage("import", stdout);
            *rc = 0;
            return NULL;
        default:
            *rc = f->bad_option("import");
            return NULL;
        }
    }
    if (optind != argc - 1) {
        *rc = optind == argc ? f->usage_error("import", "no image URI given")
                             : f->usage_error("import", "unexpected argument '%s'", argv[optind + 1]);
        return NULL;
    }
    if (system && *system && lazy && *lazy) {
        *rc = f->usage_error("import", "--system and --lazy do not go together: the store holds squashfs images");
        return NULL;
    }
    if (system && *system && (*output || o->force || o->arch)) {
        *rc = f->usage_error("import", "--system takes no -o, -f or -a: the store keys images as "
                                       "--container-image looks for them");
        return NULL;
    }
    return argv[optind];
}

int cmd_import(int argc, char **argv)
{
    static const struct cli_front skiff_front = {cli_usage, cli_usage_error, cli_bad_option};
    const char *output = NULL;
    bool system = false, lazy = false;
    struct skiff_import_opts o = {.progress = isatty(2) == 1, .warn = print_warning};
    if (o.progress)
        o.on_progress = print_progress;
    int rc;
    const char *uri = cli_import_args(argc, argv, &skiff_front, &o, &output, &system, &lazy, &rc);
    if (!uri)
        return rc;
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_err err;
    skiff_err_clear(&err);
    if (lazy)
        return import_lazy(&cfg, uri, output, &o);
    char written[4096];
    if (system) {
        struct skiff_resolve_opts ro = {.warn = print_warning, .on_progress = o.progress ? print_progress : NULL};
        if (skiff_image_import_system(&cfg, uri, &ro, written, sizeof(written), &err) < 0)
            return cli_fail("import", &err);
        printf("%s\n", written);
        return 0;
    }
    if (skiff_image_import(&cfg, uri, output, &o, written, sizeof(written), &err) < 0)
        return cli_fail("import", &err);
    printf("%s\n", written);
    return 0;
}
