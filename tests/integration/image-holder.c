/* image-holder IMAGE: resolves IMAGE as the plugin's helper does for a
 * step (skiff_image_resolve through the site's store and the user's
 * cache, SKIFF_CONFIG's settings), holds it the way a running container
 * does (a shared lock, runtime/lib/image/cache.h), prints "held PATH" and
 * keeps holding it until its stdin closes. image-scale.sh starts 64 of
 * these at once: all 64 hold the image together (readers do not
 * serialise) and a prune meanwhile leaves it alone. */
#include <stdio.h>
#include <unistd.h>

#include "config.h"
#include "image.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: image-holder IMAGE\n");
        return 2;
    }
    struct skiff_config cfg;
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_config_load(&cfg, NULL, true, &err) < 0) {
        fprintf(stderr, "image-holder: %s\n", err.msg);
        return 1;
    }
    int hold = -1;
    struct skiff_resolve_opts o = {.hold_fd = &hold};
    char path[4096];
    if (skiff_image_resolve(&cfg, argv[1], path, sizeof(path), &o, &err) < 0) {
        fprintf(stderr, "image-holder: %s\n", err.msg);
        return 1;
    }
    printf("held %s\n", path);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    close(hold);
    return 0;
}
