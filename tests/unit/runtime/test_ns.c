/* Namespace ownership (runtime/lib/container/ns.c): root's check of the container
 * process a user-side helper names. */

#include <criterion/criterion.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ns.h"

Test(ns, the_callers_own_mount_namespace_is_nobodys_container)
{
    int fd = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert(!skiff_ns_owned_by(fd, getuid()));
    cr_assert(!skiff_ns_owned_by(fd, 0));
    close(fd);
    cr_assert(!skiff_ns_owned_by(-1, getuid()));
    fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    cr_assert(!skiff_ns_owned_by(fd, getuid())); /* not a mount namespace */
    close(fd);
}

Test(ns, a_mount_namespace_of_a_user_namespace_of_ours_is)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        char ok = unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0 ? 'y' : 'n';
        (void)!write(p[1], &ok, 1);
        pause();
        _exit(0);
    }
    char ok = 0;
    cr_assert_eq(read(p[0], &ok, 1), 1);
    if (ok != 'y') {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        cr_skip_test("unprivileged user namespaces are unavailable here");
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert(skiff_ns_owned_by(fd, getuid()));
    cr_assert(!skiff_ns_owned_by(fd, getuid() + 1));
    close(fd);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}
