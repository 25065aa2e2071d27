/* skiff fetch DIR: a lazy image's span fetcher (image/lazy.h), which
 * `skiff start` runs for a lazy image with the channel to the container's
 * FUSE server on fd 3. Not a command for people. */
#include <stdio.h>
#include <sys/socket.h>

#include "cli.h"
#include "lazy.h"

int cmd_fetch(int argc, char **argv)
{
    if (argc != 2)
        return argc < 2 ? cli_usage_error("fetch", "no lazy image given")
                        : cli_usage_error("fetch", "unexpected argument '%s'", argv[2]);
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_SEQPACKET) {
        fprintf(stderr, "skiff: fetch: run by skiff start for a lazy image only (fd 3 is not its channel)\n");
        return 2;
    }
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_lazy_fetch_main(&cfg, argv[1], 3, &err) < 0)
        return cli_fail("fetch", &err);
    return 0;
}
