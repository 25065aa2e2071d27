/* skiff remove NAME...: delete named containers and their writable layers. */
#include "cli.h"
#include "named.h"

int cmd_remove(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error("remove", "no container name given");
    skiff_err err;
    skiff_err_clear(&err);
    for (int i = 1; i < argc; i++)
        if (skiff_name_check(argv[i], &err) < 0)
            return cli_usage_error("remove", "%s", err.msg); /* before removing any */
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        skiff_err_clear(&err);
        if (skiff_named_remove(&cfg, argv[i], &err) < 0)
            rc = cli_fail("remove", &err);
    }
    return rc;
}
