/* skiff export -o OUT.sqsh NAME: squash a named container's merged root. */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "container.h"

int cmd_export(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *out = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        if (ch == 'o')
            out = optarg;
        else {
            fprintf(ch == 'h' ? stdout : stderr, "usage: skiff export -o OUT.sqsh NAME\n");
            return ch == 'h' ? 0 : 2;
        }
    }
    if (!out || optind + 1 != argc) {
        fprintf(stderr, "usage: skiff export -o OUT.sqsh NAME\n");
        return 2;
    }
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_container_export(&cfg, argv[optind], out, &err) < 0)
        return cli_fail("export", &err);
    return 0;
}
