/* See caps.h. prctl and capset, the system calls: nothing here allocates,
 * so a child cloned from the multithreaded holder (command.c, the spawned
 * command) may call it before exec. libcap's cap_set_proc would malloc a
 * cap_t first; its header still gives the capability numbers. */
#include "caps.h"

#include <errno.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

int skiff_caps_drop_all(skiff_err *err)
{
    /* 1. bounding set: needs CAP_SETPCAP, which we still hold here */
    for (int c = 0; c <= CAP_LAST_CAP || cap_valid(c); c++) {
        if (prctl(PR_CAPBSET_READ, c, 0, 0, 0) <= 0)
            break;
        if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
            return skiff_error(err, errno, "drop capability %d from the bounding set", c);
    }
    /* 2. ids: the caller's uid/gid are already what the command runs as */
    /* 3. capset: clear effective, permitted, inheritable */
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = {{0, 0, 0}};
    if (syscall(SYS_capset, &hdr, none) < 0)
        return skiff_error(err, errno, "clear capabilities");
    /* 4. ambient */
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return skiff_error(err, errno, "clear ambient capabilities");
    /* 5. no new privileges through exec (setuid files, file capabilities) */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return skiff_error(err, errno, "set no_new_privs");
    return 0;
}

int skiff_caps_keep_userns(skiff_err *err)
{
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
    if (syscall(SYS_capget, &hdr, d) < 0)
        return skiff_error(err, errno, "read capabilities");
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
        d[i].inheritable = d[i].permitted;
    if (syscall(SYS_capset, &hdr, d) < 0)
        return skiff_error(err, errno, "set inheritable capabilities");
    for (int c = 0; c < 32 * _LINUX_CAPABILITY_U32S_3; c++) {
        if (!(d[c / 32].permitted & (1u << (c % 32))))
            continue;
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0) < 0 && errno != EINVAL)
            return skiff_error(err, errno, "keep capability %d", c);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return skiff_error(err, errno, "set no_new_privs");
    return 0;
}
