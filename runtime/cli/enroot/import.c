/* enroot import [-o FILE] [-a ARCH] [-f] URI: libskiff's import, with
 * enroot's defaults (the output name is enroot's, IMAGE+TAG.sqsh). The
 * Docker daemon's schemes (dockerd://, podman://) are refused: skiff talks
 * to registries and archives, never to a daemon. */
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "enroot.h"
#include "image.h"

static void warn(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "%s: import: warning: %s\n", enroot_prog(), msg);
}

int enroot_import(int argc, char **argv)
{
    static const struct cli_front enroot_front = {enroot_usage, enroot_usage_error, enroot_bad_option};
    const char *output = NULL;
    struct skiff_import_opts o = {
        .progress = isatty(2) == 1, .warn = warn, .force = enroot_env_true("ENROOT_FORCE_OVERRIDE")};
    int rc;
    const char *uri = cli_import_args(argc, argv, &enroot_front, &o, &output, NULL, NULL, &rc);
    if (!uri)
        return rc;
    if (!strncmp(uri, "dockerd://", 10) || !strncmp(uri, "podman://", 9))
        return enroot_usage_error("import",
                                  "'%s': images of a local Docker or Podman daemon are not supported (skiff talks to "
                                  "no daemon); save it first (docker save IMAGE -o FILE.tar) and import "
                                  "docker-archive:FILE.tar, or import it from its registry with docker://",
                                  uri);
    struct skiff_config cfg;
    if (enroot_config("import", &cfg) < 0)
        return 1;
    skiff_err err;
    skiff_err_clear(&err);
    char written[SKIFF_PATH_MAX];
    if (skiff_image_import(&cfg, uri, output, &o, written, sizeof(written), &err) < 0)
        return enroot_fail("import", &err);
    return 0;
}
