/* skiff export -o OUT.sqsh NAME: squash a named container's merged root. */
#include "cli.h"
#include "container.h"
#include "named.h"

int cmd_export(int argc, char **argv)
{
    const char *out, *name;
    int rc = cli_opt_and_arg(argc, argv, "export", "output", 'o', "NAME", &out, &name);
    if (rc >= 0)
        return rc;
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_name_check(name, &err) < 0)
        return cli_usage_error("export", "%s", err.msg);
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    if (skiff_container_export(&cfg, name, out, &err) < 0)
        return cli_fail("export", &err);
    return 0;
}
