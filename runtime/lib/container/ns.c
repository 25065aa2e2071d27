/* See ns.h. */
#include "ns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

int skiff_ns_drop_creds(uid_t uid, gid_t gid, const gid_t *groups, size_t ngroups, skiff_err *err)
{
    /* slurmstepd's user_init runs with real uid 0 and the job user's euid:
     * regain euid 0 (allowed: real/saved uid is 0) so setgroups works */
    if (geteuid() != 0 && getuid() == 0 && seteuid(0) < 0)
        return skiff_error(err, errno, "seteuid 0");
    if (setgroups(ngroups, groups) < 0)
        return skiff_error(err, errno, "setgroups");
    if (setresgid(gid, gid, gid) < 0)
        return skiff_error(err, errno, "setresgid %u", (unsigned)gid);
    if (setresuid(uid, uid, uid) < 0)
        return skiff_error(err, errno, "setresuid %u", (unsigned)uid);
    if (uid != 0 &&
        (setresuid((uid_t)-1, 0, (uid_t)-1) == 0 || setresgid((gid_t)-1, 0, (gid_t)-1) == 0 || setgroups(0, NULL) == 0))
        return skiff_error(err, EPERM, "could regain root after dropping to uid %u", (unsigned)uid);
    /* Not made dumpable: the caller still holds a copy of root's memory.
     * It execs a program next (plugin/spawn_user.c), which starts with a
     * fresh image and is then the user's own, dumpable process. */
    return 0;
}

static int write_file(const char *path, const char *buf, skiff_err *err)
{
    cleanup_close int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return skiff_error(err, errno, "open %s", path);
    size_t n = strlen(buf);
    if (write(fd, buf, n) != (ssize_t)n)
        return skiff_error(err, errno, "write %s", path);
    return 0;
}

/* A new network namespace has only "lo", and it is down: 127.0.0.1 is then
 * unreachable ("Network is unreachable"), where under pyxis a closed port
 * is refused and a service of the container's own can listen there. The
 * holder owns the namespace (through its user namespace): it may. */
static int loopback_up(skiff_err *err)
{
    cleanup_close int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return skiff_error(err, errno, "loopback: socket");
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
    if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        return skiff_error(err, errno, "loopback: read the flags of lo");
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        return skiff_error(err, errno, "loopback: bring lo up");
    return 0;
}

int skiff_ns_create(int extra_flags, bool remap_root, skiff_err *err)
{
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS | extra_flags) < 0) {
        int e = errno;
        skiff_error(err, e, "create user and mount namespaces");
        if (e == EPERM || e == ENOSPC || e == EINVAL)
            skiff_err_wrap(err, "unprivileged user namespaces are unavailable (run 'skiff doctor')");
        return -1;
    }
    char map[64];
    if (write_file("/proc/self/setgroups", "deny", err) < 0)
        return -1;
    snprintf(map, sizeof(map), "%u %u 1\n", remap_root ? 0 : (unsigned)uid, (unsigned)uid);
    if (write_file("/proc/self/uid_map", map, err) < 0)
        return -1;
    snprintf(map, sizeof(map), "%u %u 1\n", remap_root ? 0 : (unsigned)gid, (unsigned)gid);
    if (write_file("/proc/self/gid_map", map, err) < 0)
        return -1;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return skiff_error(err, errno, "make mounts private");
    if ((extra_flags & CLONE_NEWNET) && loopback_up(err) < 0)
        return -1;
    return 0;
}

static int same_ns(pid_t pid, const char *name)
{
    char a[64], b[64];
    struct stat sa, sb;
    snprintf(a, sizeof(a), "/proc/%d/ns/%s", (int)pid, name);
    snprintf(b, sizeof(b), "/proc/self/ns/%s", name);
    if (stat(a, &sa) < 0 || stat(b, &sb) < 0)
        return -1;
    return sa.st_ino == sb.st_ino && sa.st_dev == sb.st_dev;
}

int skiff_ns_join(pid_t pid, skiff_err *err)
{
    static const struct {
        const char *name;
        int type;
    } others[] = {{"net", CLONE_NEWNET}, {"ipc", CLONE_NEWIPC}, {"uts", CLONE_NEWUTS}};
    char path[64];
    int fds[3] = {-1, -1, -1};
    int rv = -1;
    snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
    cleanup_close int userfd = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
    cleanup_close int mntfd = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof(path), "/proc/%d/root", (int)pid);
    cleanup_close int rootfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (userfd < 0 || mntfd < 0 || rootfd < 0)
        return skiff_error(err, errno, "open namespaces of container process %d (is it running, and yours?)", (int)pid);
    for (size_t i = 0; i < 3; i++) {
        if (same_ns(pid, others[i].name) == 0) {
            snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, others[i].name);
            fds[i] = open(path, O_RDONLY | O_CLOEXEC);
            if (fds[i] < 0) {
                skiff_error(err, errno, "open %s", path);
                goto out;
            }
        }
    }
    if (same_ns(pid, "user") == 0 && setns(userfd, CLONE_NEWUSER) < 0) {
        skiff_error(err, errno, "join user namespace of %d", (int)pid);
        goto out;
    }
    if (setns(mntfd, CLONE_NEWNS) < 0) {
        skiff_error(err, errno, "join mount namespace of %d", (int)pid);
        goto out;
    }
    for (size_t i = 0; i < 3; i++)
        if (fds[i] >= 0 && setns(fds[i], others[i].type) < 0) {
            skiff_error(err, errno, "join %s namespace of %d", others[i].name, (int)pid);
            goto out;
        }
    if (fchdir(rootfd) < 0 || chroot(".") < 0 || chdir("/") < 0) {
        skiff_error(err, errno, "enter the root of %d", (int)pid);
        goto out;
    }
    rv = 0;
out:
    for (size_t i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return rv;
}

int skiff_proc_stat(pid_t pid, char *state, int *ppid)
{
    char p[64], buf[512];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    cleanup_close int fd = open(p, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    /* the command name may hold ')' and spaces: the last ')' ends it */
    const char *paren = strrchr(buf, ')');
    return paren && sscanf(paren + 1, " %c %d", state, ppid) == 2 ? 0 : -1;
}

int skiff_ns_kill_members(const struct stat *ns, pid_t skip, int wait_ms)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    struct dirent *e;
    pid_t self = getpid();
    int killed = 0;
    char p[64];
    while ((e = readdir(d))) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid == skip || pid == self)
            continue;
        struct stat st;
        snprintf(p, sizeof(p), "/proc/%d/ns/mnt", (int)pid);
        if (stat(p, &st) < 0 || st.st_ino != ns->st_ino || st.st_dev != ns->st_dev)
            continue;
        /* (not reaped here: its parent may be init) */
        int pfd = wait_ms > 0 ? pidfd_open(pid, 0) : -1;
        if (kill(pid, SIGKILL) == 0)
            killed++;
        if (pfd >= 0) {
            struct pollfd pf = {.fd = pfd, .events = POLLIN};
            poll(&pf, 1, wait_ms);
            close(pfd);
        }
    }
    closedir(d);
    return killed;
}

bool skiff_ns_owned_by(int mntns_fd, uid_t uid)
{
    if (mntns_fd < 0 || ioctl(mntns_fd, NS_GET_NSTYPE) != CLONE_NEWNS)
        return false;
    int ufd = ioctl(mntns_fd, NS_GET_USERNS);
    if (ufd < 0)
        return false;
    uid_t owner = (uid_t)-1;
    struct stat us, hs;
    bool ok = ioctl(ufd, NS_GET_OWNER_UID, &owner) == 0 && owner == uid && fstat(ufd, &us) == 0 &&
              stat("/proc/self/ns/user", &hs) == 0 && (us.st_ino != hs.st_ino || us.st_dev != hs.st_dev);
    close(ufd);
    struct stat ms, self;
    if (ok && fstat(mntns_fd, &ms) == 0 && stat("/proc/self/ns/mnt", &self) == 0 && ms.st_ino == self.st_ino &&
        ms.st_dev == self.st_dev)
        ok = false;
    return ok;
}

int skiff_ns_check_unshared(pid_t pid, int flags, skiff_err *err)
{
    static const struct {
        int flag;
        const char *ns, *what, *opt;
    } kinds[] = {{CLONE_NEWUTS, "uts", "UTS", "uts"},
                 {CLONE_NEWIPC, "ipc", "IPC", "ipc"},
                 {CLONE_NEWNET, "net", "network", "net"}};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (!(flags & kinds[i].flag))
            continue;
        int same = same_ns(pid, kinds[i].ns);
        if (same < 0)
            return skiff_error(err, errno, "read the namespaces of container process %d", (int)pid);
        if (same)
            return skiff_error(err, 0,
                               "--container-unshare=%s: the running container is not in a separate %s namespace "
                               "(it was started without --container-unshare=%s)",
                               kinds[i].opt, kinds[i].what, kinds[i].opt);
    }
    return 0;
}
