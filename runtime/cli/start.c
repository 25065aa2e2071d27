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
#include "clock.h"
#include "container.h"
#include "lazy.h"
#include "env.h"
#include "mountspec.h"
#include "named.h"

static volatile sig_atomic_t child_pid, pending_sig;

/* Forwards signals sent to skiff by a process (kill, Slurm, a batch
 * system). Terminal-generated ones (Ctrl-C: si_code SI_KERNEL) already reach
 * the command, which shares our process group: not sent twice. One that
 * comes before the command exists is sent when it does. */
static void forward(int sig, siginfo_t *si, void *ctx)
{
    (void)ctx;
    if (si && si->si_code > 0)
        return;
    if (child_pid > 0)
        kill((pid_t)child_pid, sig);
    else
        pending_sig = sig;
}

static const int fwd_sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGWINCH};

static void install_forwarding(void)
{
    struct sigaction sa = {.sa_sigaction = forward};
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    for (size_t i = 0; i < sizeof(fwd_sigs) / sizeof(fwd_sigs[0]); i++)
        sigaction(fwd_sigs[i], &sa, NULL);
}

/* Waits for the command (signals forwarded to it); its exit status the
 * shell's way (128 + N for signal N). As a subreaper (skiff start), the
 * orphans that come to us meanwhile are reaped too; *holder is zeroed if
 * the holder is among them. */
static int wait_command(pid_t pid, pid_t *holder)
{
    child_pid = pid;
    if (pending_sig)
        kill(pid, pending_sig);
    int st = 0;
    for (;;) {
        int s2;
        pid_t r = waitpid(holder ? -1 : pid, &s2, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || r == pid) {
            st = s2;
            break;
        }
        if (holder && r == *holder)
            *holder = 0;
    }
    child_pid = 0;
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return WEXITSTATUS(st);
}

/* A -m value the library would refuse at start: refused here, as a usage
 * error, before anything is set up. */
static int check_mount(const char *spec)
{
    skiff_err err;
    struct skiff_mount m;
    skiff_err_clear(&err);
    memset(&m, 0, sizeof(m));
    int rc = skiff_mountspec_parse(spec, &m, &err);
    skiff_mount_free(&m);
    return rc < 0 ? cli_usage_error("start", "%s", err.msg) : 0;
}

/* A terminal's TERM and the user's HOME (/root with --remap-root), for
 * the command when the image sets none: K=V strings in the buffers, listed
 * in out (NULL-terminated). */
static void default_env(bool remap_root, char *term, size_t tn, char *home, size_t hn, const char *out[3])
{
    size_t n = 0;
    const char *t = getenv("TERM"), *h = remap_root ? "/root" : getenv("HOME");
    if (t && (size_t)snprintf(term, tn, "TERM=%s", t) < tn)
        out[n++] = term;
    if (h && (size_t)snprintf(home, hn, "HOME=%s", h) < hn)
        out[n++] = home;
    out[n] = NULL;
}

void cli_start_request_init(struct skiff_start_request *o)
{
    skiff_start_request_init(o);
    o->die_with_parent = true;
    o->trace = getenv("SKIFF_TRACE") != NULL;
    o->no_warm = getenv("SKIFF_NO_WARM") != NULL;
    if (getenv("SKIFF_HOOK_TIMEOUT"))
        o->hook_timeout_s = atoi(getenv("SKIFF_HOOK_TIMEOUT"));
    o->extra_hooks_dir = getenv("SKIFF_HOOKS_DIR"); /* the user's, with the admin's hooks_dir */
    skiff_trace(o->trace, "cli: main");
}

int cli_run_in(struct skiff_container *c, char *const *user_argv, int join_pid, const char *const *extra_env)
{
    skiff_err err;
    skiff_err_clear(&err);
    char **argv = NULL, **envp = NULL;
    char term[256], home[SKIFF_PATH_MAX + 8];
    const char *defaults[3];
    default_env(false, term, sizeof(term), home, sizeof(home), defaults);
    /* enroot exec -e K=V: over the container's own (env.h's rule) */
    struct skiff_start_request extra;
    skiff_start_request_init(&extra);
    extra.env = extra_env;
    if (skiff_container_argv(c, false, user_argv, &argv, &err) < 0 ||
        skiff_env_compose(defaults, (const char *const *)c->env, extra_env ? &extra : NULL, &envp, &err) < 0) {
        skiff_strv_free(argv);
        skiff_strv_free(envp);
        return cli_fail("exec", &err);
    }
    sigset_t block, old;
    sigemptyset(&block);
    for (size_t i = 0; i < sizeof(fwd_sigs) / sizeof(fwd_sigs[0]); i++)
        sigaddset(&block, fwd_sigs[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        skiff_error(&err, errno, "fork");
        return cli_fail("exec", &err);
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        if (skiff_container_join(join_pid, c->workdir, 0, &err) < 0) {
            fprintf(stderr, "skiff: exec: %s\n", err.msg);
            _exit(125);
        }
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != parent)
            _exit(125);
        close_range(3, ~0U, 0); /* no stray fds into the container */
        extern char **environ;
        environ = envp; /* execvp searches the container's PATH */
        execvp(argv[0], argv);
        int e = errno;
        fprintf(stderr, "skiff: exec: exec %s: %s\n", argv[0], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }
    child_pid = pid;
    install_forwarding();
    sigprocmask(SIG_SETMASK, &old, NULL);
    skiff_strv_free(argv);
    skiff_strv_free(envp);
    return wait_command(pid, NULL);
}

/* cmd_start without the mounts/env arrays' allocation (freed by it) */
static int start_with(int argc, char **argv, const char **mounts, const char **env)
{
    static const struct option longopts[] = {{"mount", required_argument, NULL, 'm'},
                                             {"env", required_argument, NULL, 'e'},
                                             {"rw", no_argument, NULL, 'W'},
                                             {"remap-root", no_argument, NULL, 'R'},
                                             {"workdir", required_argument, NULL, 'w'},
                                             {"no-entrypoint", no_argument, NULL, 'N'},
                                             {"mount-home", no_argument, NULL, 'H'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    size_t nm = 0, ne = 0;
    struct skiff_start_request o;
    cli_start_request_init(&o);
    int ch;
    optind = 0; /* glibc: a full restart, whatever a parse before left */
    while ((ch = getopt_long(argc, argv, "+m:e:w:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'm':
            if (check_mount(optarg) != 0)
                return 2;
            mounts[nm++] = optarg;
            break;
        case 'e':
            if (!strchr(optarg, '=') || optarg[0] == '=')
                return cli_usage_error("start", "--env '%s' is not KEY=VALUE", optarg);
            env[ne++] = optarg;
            break;
        case 'W':
            o.writable = true;
            break;
        case 'R':
            o.remap_root = true;
            break;
        case 'w':
            if (optarg[0] != '/')
                return cli_usage_error("start", "--workdir '%s' is not an absolute path", optarg);
            o.workdir = optarg;
            break;
        case 'N':
            o.use_entrypoint = false;
            break;
        case 'H':
            o.mount_home = true;
            break;
        case 'h':
            cli_usage("start", stdout);
            return 0;
        default:
            return cli_bad_option("start");
        }
    }
    if (optind >= argc)
        return cli_usage_error("start", "no image or container name given");
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_container_prune(&cfg);
    const char *target = argv[optind++];
    struct stat st;
    if (stat(target, &st) == 0 && (S_ISREG(st.st_mode) || (S_ISDIR(st.st_mode) && skiff_lazy_is_image(target))))
        o.image = target;
    else if (!strchr(target, '/') && skiff_named_exists(&cfg, target))
        o.name = target;
    else {
        fprintf(stderr,
                "skiff: start: '%s' is neither a squashfs file, a lazy image nor a named container (see 'skiff "
                "list')\n",
                target);
        return 1;
    }
    o.mounts = mounts;
    o.env = env;
    o.command = (const char *const *)(argv + optind);
    return cli_start(&cfg, &o, o.name);
}

int cli_start(const struct skiff_config *cfg, struct skiff_start_request *o, const char *shown_name)
{
    /* enroot_compat: enroot's environment is ours, and the user's enroot
     * configuration adds to the site's */
    extern char **environ;
    o->enroot_env = (const char *const *)environ;
    o->enroot_user_dir = cfg->enroot_config_path;
    /* the holder starts the command (no join) */
    char term[256], home[SKIFF_PATH_MAX + 8];
    const char *defaults[3];
    default_env(o->remap_root, term, sizeof(term), home, sizeof(home), defaults);
    o->spawn = true;
    o->default_env = defaults;
    /* the container's orphans (and the FUSE server, once the holder is
     * gone) become our children: stop kills and reaps them, no /proc scan */
    o->subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
    install_forwarding();
    skiff_err err;
    skiff_err_clear(&err);
    /* a lazy image: its span fetcher is bin/skiff-import fetch, beside us */
    struct skiff_lazy_run lazy;
    char fetcher[SKIFF_PATH_MAX];
    if (cli_sibling("skiff-import", fetcher, sizeof(fetcher)) < 0 ||
        skiff_lazy_run_begin(cfg, o, fetcher, "fetch", 3, NULL, 0, &lazy, &err) < 0) {
        fprintf(stderr, "skiff: %s\n", err.msg[0] ? err.msg : "start: cannot find skiff-import");
        return 1;
    }
    struct skiff_container c;
    if (skiff_container_start(cfg, o, &c, &err) < 0) {
        skiff_lazy_run_end(&lazy);
        fprintf(stderr, "skiff: %s\n", err.msg);
        return 1;
    }
    if (c.shared)
        fprintf(stderr,
                "skiff: container '%s' is in use: this one starts from its files, but its own changes will "
                "not be kept\n",
                shown_name ? shown_name : o->name);
    int rc = wait_command(c.command, &c.holder);
    skiff_trace(o->trace, "cli: command exited");
    skiff_container_stop(&c, &err);
    skiff_lazy_run_end(&lazy);
    skiff_trace(o->trace, "cli: stopped");
    return rc;
}

int cmd_start(int argc, char **argv)
{
    const char **mounts = calloc((size_t)argc + 1, sizeof(char *));
    const char **env = calloc((size_t)argc + 1, sizeof(char *));
    int rc = 1;
    if (mounts && env)
        rc = start_with(argc, argv, mounts, env);
    else
        fprintf(stderr, "skiff: start: out of memory\n");
    free(mounts);
    free(env);
    return rc;
}
