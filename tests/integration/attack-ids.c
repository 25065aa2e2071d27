/* The attacker's tool for plugin-attacks.sh, run inside a container: what
 * the id filter (runtime/lib/container/idfilter.h) lets a process believe, and what
 * it still cannot do.
 *   attack-ids FILE_TO_CHOWN FILE_TO_READ
 * prints "setuid=R1 setresuid=R2 setgroups=R3 chown=R4 uid=U euid=E read=X":
 * the return values of setuid(0), setresuid(0,0,0), setgroups(0) and
 * chown(FILE, 0, 0) (0: "success"), the ids the process really has, and
 * whether FILE_TO_READ could be opened (ok, or the errno's name). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    int a = setuid(0);
    int b = setresuid(0, 0, 0);
    int c = setgroups(0, NULL);
    int d = chown(argv[1], 0, 0);
    int fd = open(argv[2], O_RDONLY);
    printf("setuid=%d setresuid=%d setgroups=%d chown=%d uid=%u euid=%u read=%s\n", a, b, c, d, (unsigned)getuid(),
           (unsigned)geteuid(), fd >= 0 ? "ok" : strerrorname_np(errno));
    return 0;
}
