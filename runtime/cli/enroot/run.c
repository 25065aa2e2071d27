/* enroot start and exec: enroot's options turned into skiff's start
 * options, then the skiff CLI's own start and exec (cli.h): the same
 * holder, hooks, signal forwarding and exit status as `skiff start`.
 * enroot's start defaults come from ENROOT_REMAP_ROOT, ENROOT_ROOTFS_WRITABLE,
 * ENROOT_MOUNT_HOME, ENROOT_UNSHARE_NET and ENROOT_UNSHARE_UTS. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "container.h"
#include "enroot.h"
#include "mountspec.h"
#include "named.h"
#include "squash.h"
#include "strv.h"

/* KEY or KEY=VALUE (KEY alone: its value here, empty when unset, as
 * enroot does) into *env. 0, or the exit status of a usage error. */
static int add_env(const char *verb, const char *kv, char ***env)
{
    size_t klen = strcspn(kv, "=");
    bool ok = klen > 0 && (isalpha((unsigned char)kv[0]) || kv[0] == '_');
    for (size_t i = 0; ok && i < klen; i++)
        ok = isalnum((unsigned char)kv[i]) || kv[i] == '_';
    if (!ok)
        return enroot_usage_error(verb, "--env '%s' is not KEY[=VALUE]", kv);
    skiff_err err;
    cleanup_free char *full = NULL;
    if (!kv[klen]) {
        const char *v = getenv(kv);
        if (asprintf(&full, "%s=%s", kv, v ? v : "") < 0)
            return enroot_usage_error(verb, "out of memory");
        kv = full;
    }
    return skiff_env_set(env, kv, &err) < 0 ? enroot_fail(verb, &err) : 0;
}

/* --env-file: KEY=VALUE lines, blanks and '#' lines skipped, a value in
 * quotes loses them (enroot's environment file format). */
static int add_env_file(const char *path, char ***env)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return enroot_usage_error("start", "--env-file %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) > 0) {
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        char *p = line + strspn(line, " \t");
        if (!*p || *p == '#')
            continue;
        char *eq = strchr(p, '=');
        size_t vl = eq ? strlen(eq + 1) : 0;
        if (eq && vl >= 2 && (eq[1] == '"' || eq[1] == '\'') && eq[vl] == eq[1]) {
            memmove(eq + 1, eq + 2, vl - 2);
            eq[vl - 1] = '\0';
        }
        if (!eq)
            rc = enroot_usage_error("start", "--env-file %s: '%s' is not KEY=VALUE", path, p);
        else
            rc = add_env("start", p, env);
    }
    free(line);
    fclose(f);
    return rc;
}

/* enroot's mount, fstab fields separated by ':' (SRC:DST[:TYPE[:OPTIONS]]),
 * as the spec skiff's start options take (mountspec.h): a relative SRC is
 * from here, a relative DST from the container's root. 0, or the exit
 * status of a usage error. */
static int add_mount(const char *m, char ***mounts)
{
    cleanup_free char *copy = strdup(m);
    if (!copy)
        return enroot_usage_error("start", "out of memory");
    char *f[4] = {NULL, NULL, NULL, NULL};
    int n = 0;
    for (char *s = copy, *c; n < 4; s = c + 1) {
        f[n++] = s;
        if (!(c = strchr(s, ':')))
            break;
        *c = '\0';
    }
    if (n < 2 || !*f[0] || !*f[1] || strchr(m, ' '))
        return enroot_usage_error("start", "--mount '%s' is not SRC:DST[:TYPE[:OPTIONS]]", m);
    bool tmpfs = f[2] && !strcmp(f[2], "tmpfs");
    if (f[2] && !tmpfs && strcmp(f[2], "none") && strcmp(f[2], "bind") && *f[2])
        return enroot_usage_error("start", "--mount '%s': type '%s' is not supported (none, bind or tmpfs)", m, f[2]);
    char src[PATH_MAX], cwd[PATH_MAX - 256];
    if (!tmpfs && f[0][0] != '/') {
        if (!getcwd(cwd, sizeof(cwd)))
            return enroot_usage_error("start", "--mount '%s': the current directory: %s", m, strerror(errno));
        snprintf(src, sizeof(src), "%s/%s", cwd, f[0]);
    } else {
        snprintf(src, sizeof(src), "%s", tmpfs ? "tmpfs" : f[0]);
    }
    cleanup_free char *spec = NULL;
    if (asprintf(&spec, "%s:%s%s%s%s", src, f[1][0] == '/' ? "" : "/", f[1], f[3] && *f[3] ? ":" : "",
                 f[3] ? f[3] : "") < 0)
        return enroot_usage_error("start", "out of memory");
    skiff_err err;
    struct skiff_mount parsed;
    if (skiff_mountspec_parse(spec, &parsed, &err) < 0)
        return enroot_usage_error("start", "--mount '%s': %s", m, err.msg);
    skiff_mount_free(&parsed);
    return skiff_strv_push(mounts, spec, &err) < 0 ? enroot_fail("start", &err) : 0;
}

/* start with the lists allocated (freed by enroot_start) */
static int start_with(int argc, char **argv, char ***mounts, char ***env)
{
    enum { OPT_ENV_FILE = 256, OPT_RC };
    static const struct option longopts[] = {{"root", no_argument, NULL, 'r'},
                                             {"rw", no_argument, NULL, 'w'},
                                             {"mount", required_argument, NULL, 'm'},
                                             {"env", required_argument, NULL, 'e'},
                                             {"env-file", required_argument, NULL, OPT_ENV_FILE},
                                             {"conf", required_argument, NULL, 'c'},
                                             {"rc", required_argument, NULL, OPT_RC},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    struct skiff_start_request o;
    cli_start_request_init(&o);
    o.remap_root = enroot_env_true("ENROOT_REMAP_ROOT");
    o.writable = enroot_env_true("ENROOT_ROOTFS_WRITABLE");
    o.mount_home = enroot_env_true("ENROOT_MOUNT_HOME");
    o.unshare_flags = (enroot_env_true("ENROOT_UNSHARE_NET") ? CLONE_NEWNET : 0) |
                      (enroot_env_true("ENROOT_UNSHARE_UTS") ? CLONE_NEWUTS : 0);
    int ch, rc;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "+rwm:e:c:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'r':
            o.remap_root = true;
            break;
        case 'w':
            o.writable = true;
            break;
        case 'm':
            if ((rc = add_mount(optarg, mounts)) != 0)
                return rc;
            break;
        case 'e':
            if ((rc = add_env("start", optarg, env)) != 0)
                return rc;
            break;
        case OPT_ENV_FILE:
            if ((rc = add_env_file(optarg, env)) != 0)
                return rc;
            break;
        case 'c':
        case OPT_RC:
            return enroot_usage_error("start",
                                      "%s is not supported: enroot's configuration and command scripts are bash, "
                                      "and skiff runs no shell (use -m, -e, --env-file and a COMMAND)",
                                      ch == 'c' ? "--conf" : "--rc");
        case 'h':
            enroot_usage("start", stdout);
            return 0;
        default:
            return enroot_bad_option("start");
        }
    }
    if (optind >= argc)
        return enroot_usage_error("start", "no container name or image given");
    struct skiff_config cfg;
    if (enroot_config("start", &cfg) < 0)
        return 1;
    skiff_container_prune(&cfg);
    const char *target = argv[optind++];
    char stored[SKIFF_PATH_MAX], node[256];
    struct stat st;
    skiff_err err;
    skiff_err_clear(&err);
    bool node_made;
    skiff_named_this_node(node, sizeof(node));
    if (stat(target, &st) == 0 && S_ISREG(st.st_mode) && skiff_squash_is_image(target)) {
        o.image = target;
    } else if (!strchr(target, '/') &&
               skiff_named_from_enroot(&cfg, target, node, stored, sizeof(stored), &node_made, &err) == 0 &&
               skiff_named_exists(&cfg, stored)) {
        o.name = stored;
    } else {
        fprintf(stderr, "%s: start: '%s' is neither a squashfs image nor a container of this node (see '%s list')\n",
                enroot_prog(), target, enroot_prog());
        return 1;
    }
    o.mounts = (const char *const *)*mounts;
    o.env = (const char *const *)*env;
    o.command = (const char *const *)(argv + optind);
    return cli_start(&cfg, &o, target);
}

int enroot_start(int argc, char **argv)
{
    char **mounts = NULL, **env = NULL;
    int rc = start_with(argc, argv, &mounts, &env);
    skiff_strv_free(mounts);
    skiff_strv_free(env);
    return rc;
}

int enroot_exec(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"env", required_argument, NULL, 'e'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    char **env = NULL;
    int ch, rc = 0;
    optind = 0;
    while (rc == 0 && (ch = getopt_long(argc, argv, "+e:h", longopts, NULL)) != -1) {
        if (ch == 'e')
            rc = add_env("exec", optarg, &env);
        else if (ch == 'h') {
            enroot_usage("exec", stdout);
            skiff_strv_free(env);
            return 0;
        } else
            rc = enroot_bad_option("exec");
    }
    if (rc == 0 && argc - optind < 2)
        rc = enroot_usage_error("exec", argc == optind ? "no process id and command given" : "no command given");
    char *end = NULL;
    long pid = 0;
    if (rc == 0) {
        errno = 0;
        pid = strtol(argv[optind], &end, 10);
        if (*end || end == argv[optind] || pid <= 0 || pid > INT_MAX || errno)
            rc = enroot_usage_error("exec", "'%s' is not a process id", argv[optind]);
    }
    struct skiff_config cfg;
    if (rc == 0 && enroot_config("exec", &cfg) < 0)
        rc = 1;
    if (rc == 0)
        rc = cli_exec(&cfg, (pid_t)pid, argv + optind + 1, (const char *const *)env);
    skiff_strv_free(env);
    return rc;
}
