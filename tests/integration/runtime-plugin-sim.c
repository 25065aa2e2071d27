/* Drives libskiff the way the SPANK plugin does, for runtime-start.sh:
 *   root drops fully to the job user (as before the plugin execs
 *   skiff-helper), skiff_container_start with a state key -> N "tasks"
 *   (fork, skiff_container_join, apply skiff_container_env, exec) -> wait
 *   -> skiff_container_stop.
 * usage: runtime-plugin-sim UID GID IMAGE STATE_KEY NTASKS CMD... */
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "container.h"

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: %s UID GID IMAGE STATE_KEY NTASKS CMD...\n", argv[0]);
        return 2;
    }
    uid_t uid = (uid_t)atoi(argv[1]);
    gid_t gid = (gid_t)atoi(argv[2]);
    int ntasks = atoi(argv[5]);
    skiff_err err = {0};
    struct skiff_config cfg;
    skiff_config_for_user(uid, NULL, NULL);
    if (skiff_config_load(&cfg, NULL, true, &err) < 0) {
        fprintf(stderr, "config: %s\n", err.msg);
        return 1;
    }
    if (getuid() == 0) {
        /* as the plugin: drop fully, then exec (a fresh, dumpable image
         * that may write its new user namespace's maps) */
        if (setgroups(1, &gid) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) {
            perror("drop to the user");
            return 1;
        }
        execv("/proc/self/exe", argv);
        perror("exec");
        return 1;
    }
    struct skiff_start_request o;
    skiff_start_request_init(&o);
    o.image = argv[3];
    o.state_key = argv[4];
    const char *hook_env[] = {"SLURM_JOB_ID=42", NULL};
    o.hook_env = hook_env;
    struct skiff_container c;
    if (skiff_container_start(&cfg, &o, &c, &err) < 0) {
        fprintf(stderr, "start: %s\n", err.msg);
        return 1;
    }
    printf("holder %d state %s\n", (int)c.holder, c.state_dir);
    fflush(stdout);
    int rc = 0;
    for (int t = 0; t < ntasks; t++) {
        pid_t pid = fork();
        if (pid == 0) { /* task: as the user, like task_init */
            char **env = NULL;
            if (skiff_container_join(c.holder, c.workdir, SKIFF_JOIN_KEEP_CAPS, &err) < 0 ||
                skiff_container_env(&c, &env, &err) < 0) {
                fprintf(stderr, "task_init: %s\n", err.msg);
                _exit(121);
            }
            for (char **e = env; *e; e++)
                putenv(*e);
            char rank[32];
            snprintf(rank, sizeof(rank), "%d", t);
            setenv("RANK", rank, 1);
            execvp(argv[6], argv + 6);
            _exit(127);
        }
        int st;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            rc = 1;
    }
    if (skiff_container_stop(&c, &err) < 0) {
        fprintf(stderr, "stop: %s\n", err.msg);
        rc = 1;
    }
    return rc;
}
