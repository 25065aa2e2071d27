/* skiff remove NAME...: delete named containers and their writable layers. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "named.h"

int cmd_remove(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout, "usage: skiff remove NAME...\n");
        return argc < 2 ? 2 : 0;
    }
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        skiff_err err;
        skiff_err_clear(&err);
        if (skiff_named_remove(&cfg, argv[i], &err) < 0)
            rc = cli_fail("remove", &err);
    }
    return rc;
}
