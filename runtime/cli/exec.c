/* skiff exec PID CMD...: run a command in a running container, joining the
 * namespaces of PID (the container's holder or any process in it): one the
 * CLI started (runtime_path) or a step's (plugin_runtime_path/UID). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"
#include "container.h"

int cmd_exec(int argc, char **argv)
{
    if (argc < 3)
        return cli_usage_error("exec", argc < 2 ? "no process id and command given" : "no command given");
    char *end;
    errno = 0;
    long pid = strtol(argv[1], &end, 10);
    if (*end || end == argv[1] || pid <= 0 || pid > INT_MAX || errno)
        return cli_usage_error("exec", "'%s' is not a process id", argv[1]);
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    return cli_exec(&cfg, (pid_t)pid, argv + 2, NULL);
}

int cli_exec(const struct skiff_config *cfg, pid_t pid, char *const *argv, const char *const *extra_env)
{
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_container c;
    int rc = skiff_container_load(cfg, pid, &c, &err);
    if (rc < 0 && (err.code == ESRCH || err.code == ENOENT)) {
        /* not one of the CLI's: a step's, in the plugin's directory? */
        struct skiff_config steps = *cfg;
        skiff_err e2;
        if (skiff_config_plugin_runtime(cfg, (unsigned)getuid(), steps.runtime_path, sizeof(steps.runtime_path)) == 0 &&
            skiff_container_load(&steps, pid, &c, &e2) == 0)
            rc = 0;
        else if (err.code == ENOENT)
            skiff_error(&err, 0, "process %d is not in a running container of yours", (int)pid);
    }
    /* marked first: the container's stop then also looks for us */
    if (rc < 0 || skiff_container_mark_joined(&c, &err) < 0) {
        skiff_container_free(&c);
        return cli_fail("exec", &err);
    }
    rc = cli_run_in(&c, argv, pid, extra_env);
    skiff_container_free(&c); /* the container keeps running */
    return rc;
}
