/* skiff exec PID CMD...: run a command in a running container, joining the
 * namespaces of PID (the container's holder or any process in it). */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

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
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_container c;
    /* marked first: the container's stop then also looks for us */
    if (skiff_container_load(&cfg, (pid_t)pid, &c, &err) < 0 || skiff_container_mark_joined(&c, &err) < 0) {
        skiff_container_free(&c);
        return cli_fail("exec", &err);
    }
    int rc = cli_run_in(&c, argv + 2, (pid_t)pid);
    skiff_container_free(&c); /* the container keeps running */
    return rc;
}
