/* enroot create, list, remove and export: skiff's named containers under
 * the names enroot shows on this node (named.h: the plugin's NAME.NODE is
 * pyxis_NAME, NAME.NODE.jobJOBID is pyxis_JOBID_NAME; another node's
 * containers are not this node's). `list -f` adds each running instance
 * from the CLI's runtime_path and the plugin's (plugin_runtime_path/UID),
 * in enroot's columns; pyxis reads the first two, NAME and PID. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "container.h"
#include "enroot.h"
#include "fdio.h"
#include "named.h"
#include "ns.h"
#include "strv.h"

/* enroot's name (ename) as skiff stores it on this node; a usage error for
 * an invalid one, printed. 0 or the exit status. */
static int stored_name(const char *verb, const struct skiff_config *cfg, const char *ename, char *out, size_t n,
                       bool *node_made)
{
    char node[256];
    skiff_named_this_node(node, sizeof(node));
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_named_from_enroot(cfg, ename, node, out, n, node_made, &err) < 0)
        return err.code ? enroot_fail(verb, &err) : enroot_usage_error(verb, "%s", err.msg);
    return 0;
}

/* "VERB [-f] [-n|-o VALUE] OPERAND": the shape of create and export. */
static int parse_one(int argc, char **argv, const char *verb, char opt, const char *long_opt, const char **value,
                     bool *force, const char **operand)
{
    const struct option longopts[] = {{long_opt, required_argument, NULL, opt},
                                      {"force", no_argument, NULL, 'f'},
                                      {"help", no_argument, NULL, 'h'},
                                      {NULL, 0, NULL, 0}};
    const char shortopts[] = {'+', opt, ':', 'f', 'h', '\0'};
    *value = NULL;
    *force = enroot_env_true("ENROOT_FORCE_OVERRIDE");
    int ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        if (ch == opt)
            *value = optarg;
        else if (ch == 'f')
            *force = true;
        else if (ch == 'h') {
            enroot_usage(verb, stdout);
            return 0;
        } else
            return enroot_bad_option(verb);
    }
    if (optind == argc)
        return enroot_usage_error(verb, "no %s given", !strcmp(verb, "create") ? "image" : "container name");
    if (optind + 1 != argc)
        return enroot_usage_error(verb, "unexpected argument '%s'", argv[optind + 1]);
    *operand = argv[optind];
    return -1;
}

int enroot_create(int argc, char **argv)
{
    const char *name, *image;
    bool force;
    int rc = parse_one(argc, argv, "create", 'n', "name", &name, &force, &image);
    if (rc >= 0)
        return rc;
    char deflt[256];
    if (!name) {
        /* enroot's default: the image's file name without .sqsh */
        const char *b = strrchr(image, '/') ? strrchr(image, '/') + 1 : image;
        size_t l = strlen(b);
        if (l > 5 && !strcmp(b + l - 5, ".sqsh"))
            l -= 5;
        snprintf(deflt, sizeof(deflt), "%.*s", (int)(l < sizeof(deflt) ? l : sizeof(deflt) - 1), b);
        name = deflt;
    }
    struct skiff_config cfg;
    if (enroot_config("create", &cfg) < 0)
        return 1;
    char stored[SKIFF_PATH_MAX], node[256];
    bool node_made;
    if ((rc = stored_name("create", &cfg, name, stored, sizeof(stored), &node_made)) != 0)
        return rc;
    skiff_named_this_node(node, sizeof(node));
    skiff_err err;
    skiff_err_clear(&err);
    if (force && skiff_named_exists(&cfg, stored) && skiff_named_remove(&cfg, stored, &err) < 0)
        return enroot_fail("create", &err);
    if (skiff_named_create(&cfg, stored, image, node_made ? node : NULL, false, &err) < 0) {
        if (err.code == EEXIST)
            fprintf(stderr, "%s: create: container '%s' exists (-f replaces it)\n", enroot_prog(), name);
        else
            enroot_fail("create", &err);
        return 1;
    }
    return 0;
}

/* ---- list ---- */

struct row {
    char *cols[9];
};

struct listing {
    const struct skiff_config *cfg;
    const char *node;
    char **stored, **shown; /* the containers of this node, in order */
    struct row *rows;
    size_t nrows;
    bool fancy;
};

static void add_named(const char *name, const char *image, void *arg)
{
    (void)image;
    struct listing *l = arg;
    char shown[SKIFF_PATH_MAX];
    skiff_err e;
    if (skiff_named_to_enroot(l->cfg, name, l->node, shown, sizeof(shown)) != 1)
        return;
    /* (out of memory: the two lists stay the same length) */
    if (skiff_strv_push(&l->stored, name, &e) == 0 && skiff_strv_push(&l->shown, shown, &e) < 0)
        l->stored[skiff_strv_len(l->stored) - 1][0] = '\0';
}

/* The running instances, as (stored name, holder pid) pairs. */
struct instance {
    char name[256];
    pid_t holder;
};
static struct instance *instances;
static size_t ninstances;

static void add_running(const char *key, const struct skiff_container *c, void *arg)
{
    (void)key;
    (void)arg;
    if (!c->name[0])
        return;
    struct instance *ni = realloc(instances, (ninstances + 1) * sizeof(*ni));
    if (!ni)
        return;
    instances = ni;
    snprintf(instances[ninstances].name, sizeof(instances[ninstances].name), "%s", c->name);
    instances[ninstances++].holder = c->holder;
}

/* /proc/PID/FILE's first line (at most n-1 bytes), NULs as spaces. */
static void proc_text(pid_t pid, const char *file, char *out, size_t n)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/%s", (int)pid, file);
    out[0] = '\0';
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t r = read(fd, out, n - 1);
    close(fd);
    if (r <= 0) {
        out[0] = '\0';
        return;
    }
    while (r > 0 && (out[r - 1] == '\0' || out[r - 1] == '\n'))
        r--;
    for (ssize_t i = 0; i < r; i++)
        if (out[i] == '\0' || out[i] == '\n')
            out[i] = ' ';
    out[r] = '\0';
}

static unsigned long long ns_inode(pid_t pid, const char *ns)
{
    char p[64];
    struct stat st;
    snprintf(p, sizeof(p), "/proc/%d/ns/%s", (int)pid, ns);
    return stat(p, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* The process the user runs in the container: the first one after the
 * holder in its mount namespace that is not the holder's own child (its
 * FUSE server), else the holder. */
static pid_t main_process(pid_t holder)
{
    unsigned long long want = ns_inode(holder, "mnt");
    char state;
    int ppid;
    for (pid_t p = holder + 1; want && p < holder + 4096; p++)
        if (ns_inode(p, "mnt") == want && skiff_proc_stat(p, &state, &ppid) == 0 && ppid != (int)holder)
            return p;
    return holder;
}

static void fill_row(struct row *r, const char *name, pid_t holder)
{
    char stat[512], buf[4096];
    proc_text(holder, "stat", stat, sizeof(stat));
    const char *paren = strrchr(stat, ')');
    char state = '?';
    unsigned long long start = 0;
    if (paren)
        sscanf(paren + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &state,
               &start);
    /* start is in clock ticks after boot: the wall clock then is now less
     * the time since (both clocks read as doubles: no second of jitter) */
    struct timespec up, real;
    clock_gettime(CLOCK_BOOTTIME, &up);
    clock_gettime(CLOCK_REALTIME, &real);
    long hz = sysconf(_SC_CLK_TCK);
    double started_ago = (double)up.tv_sec + up.tv_nsec / 1e9 - (double)start / (double)(hz > 0 ? hz : 100);
    time_t at = (time_t)((double)real.tv_sec + real.tv_nsec / 1e9 - started_ago);
    struct tm tm;
    localtime_r(&at, &tm);
    long el = started_ago > 0 ? (long)started_ago : 0;
    char started[32], elapsed[32], pid[16], mntns[24], userns[24], st[2] = {state, '\0'};
    strftime(started, sizeof(started), "%H:%M:%S", &tm);
    if (el >= 86400)
        snprintf(elapsed, sizeof(elapsed), "%ld-%02ld:%02ld:%02ld", el / 86400, el % 86400 / 3600, el % 3600 / 60,
                 el % 60);
    else if (el >= 3600)
        snprintf(elapsed, sizeof(elapsed), "%02ld:%02ld:%02ld", el / 3600, el % 3600 / 60, el % 60);
    else
        snprintf(elapsed, sizeof(elapsed), "%02ld:%02ld", el / 60, el % 60);
    snprintf(pid, sizeof(pid), "%d", (int)holder);
    snprintf(mntns, sizeof(mntns), "%llu", ns_inode(holder, "mnt"));
    snprintf(userns, sizeof(userns), "%llu", ns_inode(holder, "user"));
    char comm[64];
    proc_text(holder, "comm", comm, sizeof(comm));
    proc_text(main_process(holder), "cmdline", buf, sizeof(buf));
    const char *vals[9] = {name, pid, comm, st, started, elapsed, mntns, userns, buf};
    for (int i = 0; i < 9; i++)
        r->cols[i] = strdup(vals[i]);
}

static void add_row(struct listing *l, const char *name, pid_t holder)
{
    struct row *nr = realloc(l->rows, (l->nrows + 1) * sizeof(*nr));
    if (!nr)
        return;
    l->rows = nr;
    struct row *r = &l->rows[l->nrows++];
    memset(r, 0, sizeof(*r));
    if (holder > 0)
        fill_row(r, name, holder);
    else
        r->cols[0] = strdup(name);
}

static void print_table(struct listing *l)
{
    static const char *const head[9] = {"NAME", "PID",   "COMM",   "STATE",  "STARTED",
                                        "TIME", "MNTNS", "USERNS", "COMMAND"};
    size_t w[9];
    for (int c = 0; c < 9; c++) {
        w[c] = strlen(head[c]);
        for (size_t i = 0; i < l->nrows; i++)
            if (l->rows[i].cols[c] && strlen(l->rows[i].cols[c]) > w[c])
                w[c] = strlen(l->rows[i].cols[c]);
    }
    for (int c = 0; c < 9; c++)
        printf("%-*s%s", (int)(c < 8 ? w[c] : 0), head[c], c < 8 ? "  " : "\n");
    for (size_t i = 0; i < l->nrows; i++) {
        /* no trailing blanks after the last column that has something */
        int last = 0;
        for (int c = 0; c < 9; c++)
            if (l->rows[i].cols[c] && l->rows[i].cols[c][0])
                last = c;
        for (int c = 0; c <= last; c++)
            printf("%-*s%s", (int)(c < last ? w[c] : 0), l->rows[i].cols[c] ? l->rows[i].cols[c] : "",
                   c < last ? "  " : "");
        putchar('\n');
    }
}

int enroot_list(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"fancy", no_argument, NULL, 'f'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    struct listing l = {.fancy = false};
    int ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "+fh", longopts, NULL)) != -1) {
        if (ch == 'f')
            l.fancy = true;
        else if (ch == 'h') {
            enroot_usage("list", stdout);
            return 0;
        } else
            return enroot_bad_option("list");
    }
    if (optind != argc)
        return enroot_usage_error("list", "unexpected argument '%s'", argv[optind]);
    struct skiff_config cfg;
    if (enroot_config("list", &cfg) < 0)
        return 1;
    char node[256];
    skiff_named_this_node(node, sizeof(node));
    l.cfg = &cfg;
    l.node = node;
    skiff_err err;
    skiff_err_clear(&err);
    skiff_container_prune(&cfg);
    if (skiff_named_list(&cfg, add_named, &l, &err) < 0)
        return enroot_fail("list", &err);
    size_t n = skiff_strv_len(l.shown);
    if (!l.fancy) {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", l.shown[i]);
        return 0;
    }
    struct skiff_config steps = cfg;
    (void)skiff_container_each(&cfg, add_running, NULL, &err);
    if (skiff_config_plugin_runtime(&cfg, (unsigned)getuid(), steps.runtime_path, sizeof(steps.runtime_path)) == 0 &&
        strcmp(steps.runtime_path, cfg.runtime_path))
        (void)skiff_container_each(&steps, add_running, NULL, &err);
    for (size_t i = 0; i < n; i++) {
        size_t rows = 0;
        for (size_t k = 0; k < ninstances; k++)
            if (!strcmp(instances[k].name, l.stored[i]))
                add_row(&l, rows++ ? "" : l.shown[i], instances[k].holder);
        if (!rows)
            add_row(&l, l.shown[i], 0);
    }
    print_table(&l);
    return 0;
}

/* ---- remove ---- */

static bool confirm(const char *name)
{
    fprintf(stderr, "Do you really want to delete %s? [y/N] ", name);
    char line[64];
    if (!fgets(line, sizeof(line), stdin))
        return false;
    return line[0] == 'y' || line[0] == 'Y';
}

int enroot_remove(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"force", no_argument, NULL, 'f'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    bool force = enroot_env_true("ENROOT_FORCE_OVERRIDE");
    int ch;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "+fh", longopts, NULL)) != -1) {
        if (ch == 'f')
            force = true;
        else if (ch == 'h') {
            enroot_usage("remove", stdout);
            return 0;
        } else
            return enroot_bad_option("remove");
    }
    if (optind == argc)
        return enroot_usage_error("remove", "no container name given");
    struct skiff_config cfg;
    if (enroot_config("remove", &cfg) < 0)
        return 1;
    /* every name checked before any container is removed */
    char **stored = NULL;
    skiff_err err;
    skiff_err_clear(&err);
    for (int i = optind; i < argc; i++) {
        char s[SKIFF_PATH_MAX];
        bool node_made;
        int rc = stored_name("remove", &cfg, argv[i], s, sizeof(s), &node_made);
        if (rc || skiff_strv_push(&stored, s, &err) < 0) {
            skiff_strv_free(stored);
            return rc ? rc : enroot_fail("remove", &err);
        }
    }
    int rc = 0;
    for (int i = optind; i < argc; i++) {
        const char *s = stored[i - optind];
        if (!skiff_named_exists(&cfg, s)) {
            fprintf(stderr, "%s: remove: no container named '%s' (see '%s list')\n", enroot_prog(), argv[i],
                    enroot_prog());
            rc = 1;
            continue;
        }
        if (!force && !confirm(argv[i]))
            continue;
        skiff_err_clear(&err);
        if (skiff_named_remove(&cfg, s, &err) < 0)
            rc = enroot_fail("remove", &err);
    }
    skiff_strv_free(stored);
    return rc;
}

/* ---- export ---- */

int enroot_export(int argc, char **argv)
{
    const char *out, *name;
    bool force;
    int rc = parse_one(argc, argv, "export", 'o', "output", &out, &force, &name);
    if (rc >= 0)
        return rc;
    char deflt[300];
    if (!out) {
        snprintf(deflt, sizeof(deflt), "%s.sqsh", name);
        out = deflt;
    }
    struct skiff_config cfg;
    if (enroot_config("export", &cfg) < 0)
        return 1;
    char stored[SKIFF_PATH_MAX];
    bool node_made;
    if ((rc = stored_name("export", &cfg, name, stored, sizeof(stored), &node_made)) != 0)
        return rc;
    struct stat st;
    if (!force && lstat(out, &st) == 0) {
        fprintf(stderr, "%s: export: %s exists (-f replaces it)\n", enroot_prog(), out);
        return 1;
    }
    skiff_err err;
    skiff_err_clear(&err);
    if (skiff_container_export(&cfg, stored, out, &err) < 0)
        return enroot_fail("export", &err);
    return 0;
}
