/* skiff resolve IMAGE: what the SPANK plugin does with --container-image:
 * a squashfs path is checked, an image reference is imported once into the
 * per-user cache; prints the squashfs path. Useful to fill the cache before
 * a job (and to test the plugin's resolution without Slurm). */
#include <stdio.h>

#include "cli.h"
#include "image.h"

int cmd_resolve(int argc, char **argv)
{
    if (argc != 2)
        return argc < 2 ? cli_usage_error("resolve", "no image given")
                        : cli_usage_error("resolve", "unexpected argument '%s'", argv[2]);
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_err err;
    skiff_err_clear(&err);
    char path[4096];
    if (skiff_image_resolve(&cfg, argv[1], path, sizeof(path), NULL, &err) < 0)
        return cli_fail("resolve", &err);
    printf("%s\n", path);
    return 0;
}
