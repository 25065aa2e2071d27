/* skiff list: named containers and their images. */
#include <stdio.h>

#include "cli.h"
#include "container.h"
#include "named.h"

static void print_one(const char *name, const char *image, void *arg)
{
    (void)arg;
    printf("%s\t%s\n", name, image);
}

int cmd_list(int argc, char **argv)
{
    if (argc > 1)
        return cli_usage_error("list", "unexpected argument '%s'", argv[1]);
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_container_prune(&cfg);
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_named_list(&cfg, print_one, NULL, &err) < 0)
        return cli_fail("list", &err);
    return 0;
}
