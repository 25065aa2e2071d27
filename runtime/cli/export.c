/* skiff export -o OUT.sqsh NAME: squash a named container's merged root. */
#include "cli.h"
#include "container.h"

int cmd_export(int argc, char **argv)
{
    const char *out, *name;
    int rc = cli_opt_and_arg(argc, argv, "output", 'o', "skiff export -o OUT.sqsh NAME", &out, &name);
    if (rc >= 0)
        return rc;
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_container_export(&cfg, name, out, &err) < 0)
        return cli_fail("export", &err);
    return 0;
}
