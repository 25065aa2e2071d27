/* For tests/bench/start.sh only: `skiff start` linked without the import
 * verbs, to measure what loading the import libraries (libcurl, libarchive,
 * libcrypto, ... 49 shared objects in all instead of 12) costs each start. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_load_config(struct skiff_config *cfg)
{
    skiff_err e;
    skiff_err_clear(&e);
    if (skiff_config_load(cfg, NULL, true, &e) < 0) {
        fprintf(stderr, "skiff: configuration: %s\n", e.msg);
        return -1;
    }
    return 0;
}

int cli_fail(const char *verb, const skiff_err *err)
{
    fprintf(stderr, "skiff: %s: %s\n", verb, err->msg);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "start"))
        return cmd_start(argc - 1, argv + 1);
    fprintf(stderr, "usage: %s start ...\n", argv[0]);
    return 2;
}
