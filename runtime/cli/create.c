/* skiff create -n NAME IMAGE.sqsh */
#include "cli.h"
#include "named.h"

int cmd_create(int argc, char **argv)
{
    const char *name, *image;
    int rc = cli_opt_and_arg(argc, argv, "create", "name", 'n', "IMAGE.sqsh", &name, &image);
    if (rc >= 0)
        return rc;
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_name_check(name, &err) < 0)
        return cli_usage_error("create", "%s", err.msg);
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    if (skiff_named_create(&cfg, name, image, NULL, false, &err) < 0)
        return cli_fail("create", &err);
    return 0;
}
