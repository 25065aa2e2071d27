/* See caps.h. libcap does the capset; prctl does the rest. */
#include "caps.h"

#include <errno.h>
#include <sys/capability.h>
#include <sys/prctl.h>

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
    cap_t none = cap_init();
    if (!none)
        return skiff_error(err, errno, "cap_init");
    int rc = cap_set_proc(none);
    int e = errno;
    cap_free(none);
    if (rc < 0)
        return skiff_error(err, e, "clear capabilities");
    /* 4. ambient */
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        return skiff_error(err, errno, "clear ambient capabilities");
    /* 5. no new privileges through exec (setuid files, file capabilities) */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return skiff_error(err, errno, "set no_new_privs");
    return 0;
}
