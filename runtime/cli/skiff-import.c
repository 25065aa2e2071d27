/* bin/skiff-import's main: the whole CLI, the import verbs (import.c,
 * resolve.c) included, with libcurl, libarchive and libcrypto linked.
 * bin/skiff (skiff.c) runs it for `skiff import` and `skiff resolve`. */
#include "cli.h"

int main(int argc, char **argv)
{
    return cli_main(argc, argv);
}
