/* skiff import [-o FILE.sqsh] [-a ARCH] [-f] URI */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "image.h"

static void import_usage(FILE *out)
{
    fprintf(out,
            "usage: skiff import [-o FILE.sqsh] [-a ARCH] [-f] URI\n"
            "  URI: docker://[USER@][REGISTRY#]IMAGE[:TAG|@sha256:DIGEST]\n"
            "       docker-archive:PATH.tar  oci:DIR[:TAG]  oci-archive:PATH.tar[:TAG]  dir:PATH\n"
            "  -o FILE  output file (default: IMAGE+TAG.sqsh in the current directory)\n"
            "  -a ARCH  platform to pick from a multi-arch image (amd64, arm64, ...)\n"
            "  -f       replace an existing output file\n");
}

static void print_warning(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "skiff: import: warning: %s\n", msg);
}

int cmd_import(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"arch", required_argument, NULL, 'a'},
        {"force", no_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *output = NULL;
    struct skiff_import_opts o = {.progress = isatty(2) == 1, .warn = print_warning};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+o:a:fh", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            output = optarg;
            break;
        case 'a':
            o.arch = optarg;
            break;
        case 'f':
            o.force = true;
            break;
        case 'h':
            import_usage(stdout);
            return 0;
        default:
            import_usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        import_usage(stderr);
        return 2;
    }
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_err err;
    skiff_err_clear(&err);
    char written[4096];
    if (skiff_image_import(&cfg, argv[optind], output, &o, written, sizeof(written), &err) < 0)
        return cli_fail("import", &err);
    printf("%s\n", written);
    return 0;
}
