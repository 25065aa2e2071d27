/* Job epilog (root, once per node at job end): with container_scope=job,
 * the job's named containers on this node are removed by the user-side
 * helper, as the user (exit.c, skiff_remove_job_containers). */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "named.h"
#include "plugin.h"
#include "step.h"
#include "userproc.h"

int skiff_epilog(spank_t sp, const struct skiff_plugin_args *args)
{
    skiff_err err;
    skiff_err_clear(&err);
    if (args->scope != SKIFF_SCOPE_JOB)
        return 0;
    uid_t uid;
    uint32_t jobid;
    if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS) {
        skiff_log_error("skiff: epilog: cannot read the job's uid or id from Slurm");
        return 0;
    }
    struct passwd pw, *pwp = NULL;
    char buf[4096];
    if (getpwuid_r(uid, &pw, buf, sizeof(buf), &pwp) != 0 || !pwp) {
        skiff_log_error("skiff: epilog: uid %u has no passwd entry", (unsigned)uid);
        return 0;
    }
    gid_t groups[256];
    int ngroups = 256;
    if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &ngroups) < 0) {
        groups[0] = pw.pw_gid;
        ngroups = 1;
    }
    char node[256];
    skiff_named_this_node(node, sizeof(node));
    struct skiff_config cfg;
    struct skiff_user u = {
        .uid = uid, .gid = pw.pw_gid, .groups = groups, .ngroups = ngroups, .name = pw.pw_name, .home = pw.pw_dir};
    if (skiff_load_user_config(args, uid, pw.pw_name, pw.pw_dir, &cfg, &err) < 0 ||
        skiff_remove_job_containers(args, &u, node, jobid, &cfg, &err) < 0)
        skiff_log_error("skiff: epilog: job %u: %s", (unsigned)jobid, err.msg);
    return 0; /* never drain a node over a leftover directory */
}
