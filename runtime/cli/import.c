/* skiff import [-o FILE.sqsh] [-a ARCH] [-f] URI */
#include <getopt.h>
#include <stdio.h>
#include <unistd.h>

#include "cli.h"
#include "image.h"

static void print_warning(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "skiff: import: warning: %s\n", msg);
}

const char *cli_import_args(int argc, char **argv, const struct cli_front *f, struct skiff_import_opts *o,
                            const char **output, int *rc)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"arch", required_argument, NULL, 'a'},
        {"force", no_argument, NULL, 'f'},
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
    return argv[optind];
}

int cmd_import(int argc, char **argv)
{
    static const struct cli_front skiff_front = {cli_usage, cli_usage_error, cli_bad_option};
    const char *output = NULL;
    struct skiff_import_opts o = {.progress = isatty(2) == 1, .warn = print_warning};
    int rc;
    const char *uri = cli_import_args(argc, argv, &skiff_front, &o, &output, &rc);
    if (!uri)
        return rc;
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_err err;
    skiff_err_clear(&err);
    char written[4096];
    if (skiff_image_import(&cfg, uri, output, &o, written, sizeof(written), &err) < 0)
        return cli_fail("import", &err);
    printf("%s\n", written);
    return 0;
}
