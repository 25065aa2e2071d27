/* The container's command: which argv it runs (the image's Entrypoint and
 * Cmd, or the caller's) and, with opts->spawn, its start from the holder;
 * see container_int.h. */
#include "container_int.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "caps.h"
#include "idfilter.h"

int skiff_command_argv(char *const *entrypoint, char *const *cmd, bool use_entrypoint, const char *const *user_argv,
                       char ***argvp, skiff_err *err)
{
    char **v = calloc(1, sizeof(char *));
    if (!v)
        return skiff_error(err, ENOMEM, "argv");
    bool have_user = user_argv && user_argv[0];
    if (use_entrypoint)
        for (size_t i = 0; entrypoint && entrypoint[i]; i++)
            if (skiff_strv_push(&v, entrypoint[i], err) < 0)
                goto fail;
    for (size_t i = 0; have_user && user_argv[i]; i++)
        if (skiff_strv_push(&v, user_argv[i], err) < 0)
            goto fail;
    for (size_t i = 0; !have_user && cmd && cmd[i]; i++)
        if (skiff_strv_push(&v, cmd[i], err) < 0)
            goto fail;
    if (!v[0]) {
        skiff_error(err, 0, "no command given and the image defines no Entrypoint or Cmd");
        goto fail;
    }
    *argvp = v;
    return 0;
fail:
    skiff_strv_free(v);
    return -1;
}

int skiff_container_argv(const struct skiff_container *c, bool use_entrypoint, char *const *user_argv, char ***argvp,
                         skiff_err *err)
{
    return skiff_command_argv(c->entrypoint, c->cmd, use_entrypoint, (const char *const *)user_argv, argvp, err);
}

/* Writes "skiff: start: WHAT: strerror(e)" to stderr with write(2) alone. */
static void child_fail(const char *what, const char *arg, int e)
{
    char msg[512];
    int n = snprintf(msg, sizeof(msg), "skiff: start: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "", strerror(e));
    if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
}

struct spawn_args {
    const struct skiff_holder *h;
    char **argv, **envp;
    const char *wd;
    const struct skiff_idfilter_prog *filter; /* compiled before the clone */
};

/* The spawned command's side, until exec. It shares the holder's memory
 * (CLONE_VM, the holder waits: CLONE_VFORK) and the holder has another
 * thread (the warm): system calls only, on its own stack, everything it
 * needs prepared before. */
static int spawned(void *arg)
{
    const struct spawn_args *a = arg;
    /* dies with the caller, as a joined child would */
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    if (getppid() != a->h->caller)
        _exit(125);
    skiff_err e;
    if (chdir(a->wd) < 0) {
        child_fail("working directory", a->wd, errno);
        _exit(125);
    }
    if (skiff_caps_drop_all(&e) < 0) {
        child_fail(e.msg, NULL, e.code);
        _exit(125);
    }
    int sr = skiff_idfilter_load(a->filter);
    if (sr < 0) {
        child_fail("install the seccomp filter", NULL, -sr);
        _exit(125);
    }
    close_range(3, ~0U, 0); /* no holder fd into the command */
    sigprocmask(SIG_SETMASK, &a->h->caller_mask, NULL);
    extern char **environ;
    environ = a->envp; /* execvp searches the container's PATH */
    execvp(a->argv[0], a->argv);
    int en = errno;
    child_fail("exec", a->argv[0], en);
    _exit(en == ENOENT ? 127 : 126);
}

/* opts->spawn: the command, cloned from the holder (inside the namespaces,
 * after pivot_root) as a child of the caller (CLONE_PARENT), so that the
 * caller waits for it and its signals reach it as with a join, without the
 * join; like vfork, nothing of the holder is copied for an exec. */
pid_t skiff_command_spawn(const struct skiff_holder *h, char **argv, char **envp, const char *wd, skiff_err *err)
{
    const size_t stack_size = 64 << 10;
    char *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED)
        return skiff_error(err, errno, "start the command: stack");
    /* compiled here: the child shares our memory and may not allocate */
    struct skiff_idfilter_prog filter;
    if (skiff_idfilter_build(getuid(), getgid(), &filter, err) < 0) {
        munmap(stack, stack_size);
        return skiff_err_wrap(err, "start the command");
    }
    struct spawn_args a = {.h = h, .argv = argv, .envp = envp, .wd = wd, .filter = &filter};
    pid_t pid = clone(spawned, stack + stack_size, CLONE_VM | CLONE_VFORK | CLONE_PARENT | SIGCHLD, &a);
    int e = errno;
    munmap(stack, stack_size); /* the child has exec'ed or exited */
    skiff_idfilter_free(&filter);
    if (pid < 0)
        return skiff_error(err, e, "start the command");
    return pid;
}
