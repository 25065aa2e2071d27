/* skiff create -n NAME IMAGE.sqsh */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "named.h"

int cmd_create(int argc, char **argv)
{
    static const struct option longopts[] = {{"name", required_argument, NULL, 'n'},
                                             {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *name = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "n:h", longopts, NULL)) != -1) {
        if (ch == 'n')
            name = optarg;
        else {
            fprintf(ch == 'h' ? stdout : stderr, "usage: skiff create -n NAME IMAGE.sqsh\n");
            return ch == 'h' ? 0 : 2;
        }
    }
    if (!name || optind + 1 != argc) {
        fprintf(stderr, "usage: skiff create -n NAME IMAGE.sqsh\n");
        return 2;
    }
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_named_create(&cfg, name, argv[optind], &err) < 0)
        return cli_fail("create", &err);
    return 0;
}
