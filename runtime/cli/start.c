/* skiff start: start a container from a squashfs image (or a named
 * container), run one command in it, return its exit status. The same
 * library calls the SPANK plugin makes: start (holder) -> join + exec in a
 * child -> wait -> stop. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "container.h"
#include "named.h"

static volatile sig_atomic_t child_pid;

/* Forwards signals sent to skiff by a process (kill, Slurm, a batch
 * system). Terminal-generated ones (Ctrl-C: si_code SI_KERNEL) already reach
 * the command, which shares our process group: not sent twice. */
static void forward(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    if (child_pid > 0 && (!si || si->si_code <= 0))
        kill((pid_t)child_pid, sig);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: skiff start [OPTIONS] IMAGE.sqsh|NAME [CMD [ARG...]]\n"
            "  -m, --mount SRC:DST[:FLAGS]  bind mount (flags: ro, rw, rbind, x-create=dir|file, noexec;\n"
            "                               SRC 'tmpfs' for a tmpfs); repeatable\n"
            "  -e, --env KEY=VALUE          set an environment variable; repeatable\n"
            "      --rw                     writable root (overlay over a tmpfs)\n"
            "      --remap-root             run as uid/gid 0 inside\n"
            "  -w, --workdir DIR            working directory inside\n"
            "      --no-entrypoint          ignore the image's Entrypoint\n"
            "      --mount-home             bind your home directory\n"
            "CMD defaults to the image's Entrypoint + Cmd. Exit status: CMD's (128+N for signal N).\n");
}

int cli_run_in(struct skiff_container *c, bool use_entrypoint, char *const *user_argv, const char *workdir,
               bool remap_root, int join_pid)
{
    skiff_err err;
    skiff_err_clear(&err);
    char **argv = NULL, **envp = NULL;
    if (skiff_container_argv(c, use_entrypoint, user_argv, &argv, &err) < 0 ||
        skiff_container_env(c, &envp, &err) < 0) {
        skiff_strv_free(argv);
        return cli_fail("start", &err);
    }
    /* a terminal's TERM and the user's HOME when the image sets none */
    bool has_term = false, has_home = false;
    size_t n = 0;
    for (; envp[n]; n++) {
        has_term |= !strncmp(envp[n], "TERM=", 5);
        has_home |= !strncmp(envp[n], "HOME=", 5);
    }
    char term[256], home[SKIFF_PATH_MAX + 8];
    char **ne = realloc(envp, (n + 3) * sizeof(char *));
    if (ne) {
        envp = ne;
        const char *t = getenv("TERM"), *h = getenv("HOME");
        if (!has_term && t && (size_t)snprintf(term, sizeof(term), "TERM=%s", t) < sizeof(term))
            envp[n++] = strdup(term);
        if (!has_home && (remap_root || h) &&
            (size_t)snprintf(home, sizeof(home), "HOME=%s", remap_root ? "/root" : h) < sizeof(home))
            envp[n++] = strdup(home);
        envp[n] = NULL;
    }
    struct sigaction sa = {.sa_sigaction = forward};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGWINCH};
    sigset_t block, old;
    sigemptyset(&block);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaddset(&block, sigs[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        skiff_error(&err, errno, "fork");
        return cli_fail("start", &err);
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (skiff_container_join(join_pid, workdir && *workdir ? workdir : c->workdir, &err) < 0) {
            fprintf(stderr, "skiff: start: %s\n", err.msg);
            _exit(125);
        }
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != parent)
            _exit(125);
        skiff_trace(getenv("SKIFF_TRACE") != NULL, "child: joined, exec");
        close_range(3, ~0U, 0); /* no stray fds into the container */
        extern char **environ;
        environ = envp; /* execvp searches the container's PATH */
        execvp(argv[0], argv);
        int e = errno;
        fprintf(stderr, "skiff: start: exec %s: %s\n", argv[0], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }
    child_pid = pid;
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    child_pid = 0;
    skiff_strv_free(argv);
    skiff_strv_free(envp);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return WEXITSTATUS(st);
}

int cmd_start(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"mount", required_argument, NULL, 'm'},   {"env", required_argument, NULL, 'e'},
        {"rw", no_argument, NULL, 'W'},            {"remap-root", no_argument, NULL, 'R'},
        {"workdir", required_argument, NULL, 'w'}, {"no-entrypoint", no_argument, NULL, 'N'},
        {"mount-home", no_argument, NULL, 'H'},    {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char **mounts = calloc((size_t)argc + 1, sizeof(char *));
    const char **env = calloc((size_t)argc + 1, sizeof(char *));
    size_t nm = 0, ne = 0;
    if (!mounts || !env) {
        fprintf(stderr, "skiff: start: out of memory\n");
        return 1;
    }
    struct skiff_start_opts o;
    skiff_start_opts_init(&o);
    o.die_with_parent = true;
    o.trace = getenv("SKIFF_TRACE") != NULL;
    o.no_warm = getenv("SKIFF_NO_WARM") != NULL;
    if (getenv("SKIFF_HOOK_TIMEOUT"))
        o.hook_timeout_s = atoi(getenv("SKIFF_HOOK_TIMEOUT"));
    skiff_trace(o.trace, "cli: main");
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "+m:e:w:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'm':
            mounts[nm++] = optarg;
            break;
        case 'e':
            env[ne++] = optarg;
            break;
        case 'W':
            o.writable = true;
            break;
        case 'R':
            o.remap_root = true;
            break;
        case 'w':
            o.workdir = optarg;
            break;
        case 'N':
            o.use_entrypoint = false;
            break;
        case 'H':
            o.mount_home = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_container_prune(&cfg);
    const char *target = argv[optind++];
    struct stat st;
    if (stat(target, &st) == 0 && S_ISREG(st.st_mode))
        o.image = target;
    else if (!strchr(target, '/') && skiff_named_exists(&cfg, target))
        o.name = target;
    else {
        fprintf(stderr, "skiff: start: '%s' is neither a squashfs file nor a named container (see 'skiff list')\n",
                target);
        return 1;
    }
    o.mounts = mounts;
    o.env = env;
    o.command = argv + optind;
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_container c;
    if (skiff_container_start(&cfg, &o, &c, &err) < 0) {
        free(mounts);
        free(env);
        fprintf(stderr, "skiff: %s\n", err.msg);
        return 1;
    }
    int rc = cli_run_in(&c, o.use_entrypoint, argv + optind, o.workdir, o.remap_root, c.holder);
    skiff_trace(o.trace, "cli: command exited");
    skiff_container_stop(&c, &err);
    skiff_trace(o.trace, "cli: stopped");
    free(mounts);
    free(env);
    return rc;
}
