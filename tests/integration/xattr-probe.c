/* Prints what listxattr/getxattr return for argv[1]: runs inside a test
 * container (static: the image has no libc), tests/integration/runtime-start.sh. */
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>
#include <errno.h>
int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: xa PATH\n");
        return 2;
    }
    char list[256], val[64];
    ssize_t n = listxattr(argv[1], list, sizeof list);
    if (n < 0) {
        printf("list: %s\n", strerror(errno));
    } else
        for (char *p = list; p < list + n; p += strlen(p) + 1)
            printf("name %s\n", p);
    ssize_t need = getxattr(argv[1], "user.skiff", NULL, 0);
    ssize_t v = getxattr(argv[1], "user.skiff", val, sizeof val - 1);
    if (v < 0)
        printf("get: %s\n", strerror(errno));
    else {
        val[v] = 0;
        printf("value %s (size query %zd)\n", val, need);
    }
    v = getxattr(argv[1], "user.missing", val, sizeof val);
    printf("missing: %s\n", v < 0 ? strerror(errno) : "found?");
    v = getxattr(argv[1], "user.skiff", val, 2);
    printf("small buffer: %s\n", v < 0 ? strerror(errno) : "fit?");
    return 0;
}
