/* skiff resolve IMAGE: what the SPANK plugin does with --container-image:
 * a squashfs path is checked, an image reference is imported once into the
 * per-user cache; prints the squashfs path. Useful to fill the cache before
 * a job (and to test the plugin's resolution without Slurm). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "image.h"

int cmd_resolve(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: skiff resolve IMAGE\n"
               "  IMAGE: ./file.sqsh, /abs/file.sqsh, docker://..., oci:..., or a bare name (ubuntu:22.04)\n");
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: skiff resolve IMAGE\n");
        return 2;
    }
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_err err;
    skiff_err_clear(&err);
    char path[4096];
    if (skiff_image_resolve(&cfg, argv[1], path, sizeof(path), &err) < 0)
        return cli_fail("resolve", &err);
    printf("%s\n", path);
    return 0;
}
