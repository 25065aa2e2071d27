/* The skiff CLI's help and usage-error contract (runtime/cli/verbs.c,
 * doc/error_handling.md): `skiff VERB --help` and `-h` print the verb's
 * usage on stdout and exit 0 for every verb in the table; usage errors exit
 * 2, say "skiff VERB: ..." on stderr and never end in a strerror text; getopt's
 * messages name the program and the verb. Runs cli_main() in-process; every
 * case below fails before the CLI loads a configuration or touches a file. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

struct run {
    int rc;
    char out[8192], err[8192];
};

static void slurp(FILE *f, char *buf, size_t n)
{
    rewind(f);
    size_t got = fread(buf, 1, n - 1, f);
    buf[got] = '\0';
    fclose(f);
}

/* Runs `skiff ARGS...` (NULL-terminated) with stdout and stderr captured. */
static struct run skiff(const char *arg0, ...)
{
    static struct run r;
    static char prog[] = "skiff";
    char *argv[32] = {prog};
    int argc = 1;
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a && argc < 31; a = va_arg(ap, const char *))
        argv[argc++] = strdup(a); /* the CLI may rewrite its argv */
    va_end(ap);
    argv[argc] = NULL;
    FILE *o = tmpfile(), *e = tmpfile();
    cr_assert(o && e);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    dup2(fileno(o), 1);
    dup2(fileno(e), 2);
    r.rc = cli_main(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    slurp(o, r.out, sizeof(r.out));
    slurp(e, r.err, sizeof(r.err));
    return r;
}

static bool has_strerror_suffix(const char *s)
{
    return strstr(s, ": Invalid argument") || strstr(s, ": No such file or directory") ||
           strstr(s, ": Operation not permitted");
}

/* A usage error of verb: exit 2, "skiff VERB: " first, then the usage line. */
static void assert_usage_error(const struct run *r, const char *verb, const char *says)
{
    char prefix[64], usage[64];
    snprintf(prefix, sizeof(prefix), "skiff %s: ", verb);
    snprintf(usage, sizeof(usage), "\nusage: skiff %s", verb);
    cr_assert_eq(r->rc, 2, "skiff %s: exit %d, stderr: %s", verb, r->rc, r->err);
    cr_assert_eq(strncmp(r->err, prefix, strlen(prefix)), 0, "stderr: %s", r->err);
    cr_assert_not_null(strstr(r->err, usage), "stderr: %s", r->err);
    cr_assert_not_null(strstr(r->err, says), "want '%s' in: %s", says, r->err);
    cr_assert(!has_strerror_suffix(r->err), "stderr: %s", r->err);
    cr_assert_str_empty(r->out);
}

Test(cli, every_verb_answers_help_and_h_on_stdout)
{
    size_t n = 0;
    for (const char *v; (v = cli_verb_name(n)); n++) {
        for (int h = 0; h < 2; h++) {
            struct run r = skiff(v, h ? "-h" : "--help", NULL);
            char want[64];
            snprintf(want, sizeof(want), "usage: skiff %s", v);
            cr_assert_eq(r.rc, 0, "skiff %s %s: exit %d", v, h ? "-h" : "--help", r.rc);
            cr_assert_eq(strncmp(r.out, want, strlen(want)), 0, "skiff %s --help: %s", v, r.out);
            cr_assert_str_empty(r.err, "skiff %s --help: stderr %s", v, r.err);
        }
    }
    cr_assert_geq(n, 10);
    /* --help is handled before the verb: doctor would otherwise run its checks */
    struct run r = skiff("doctor", "--help", NULL);
    cr_assert_null(strstr(r.out, "ok:"));
}

Test(cli, help_lists_every_verb_and_each_usage)
{
    struct run r = skiff("help", NULL);
    cr_assert_eq(r.rc, 0);
    for (size_t i = 0; cli_verb_name(i); i++) {
        char line[64];
        snprintf(line, sizeof(line), "\n  %s ", cli_verb_name(i));
        cr_assert_not_null(strstr(r.out, line), "%s missing from: %s", cli_verb_name(i), r.out);
    }
    r = skiff("help", "start", NULL);
    cr_assert_eq(r.rc, 0);
    cr_assert_not_null(strstr(r.out, "--mount"));
    r = skiff("--help", NULL);
    cr_assert_eq(r.rc, 0);
    assert_usage_error((r = skiff("help", "bogus", NULL), &r), "help", "unknown command 'bogus'");
}

Test(cli, getopt_errors_name_the_program_and_the_verb)
{
    struct run r = skiff("start", "--bogus", NULL);
    assert_usage_error(&r, "start", "unrecognized option '--bogus'");
    r = skiff("import", "--bogus", "x", NULL);
    assert_usage_error(&r, "import", "unrecognized option '--bogus'");
    r = skiff("create", "-n", NULL);
    assert_usage_error(&r, "create", "option requires an argument -- 'n'");
    r = skiff("export", "-x", NULL);
    assert_usage_error(&r, "export", "invalid option -- 'x'");
}

Test(cli, argument_errors_are_usage_errors)
{
    struct run r;
    r = skiff("create", "-n", "bad name", "x.sqsh", NULL);
    assert_usage_error(&r, "create", "container name 'bad name' may only contain");
    r = skiff("create", "x.sqsh", NULL);
    assert_usage_error(&r, "create", "-n/--name is required");
    r = skiff("create", "-n", "ok", NULL);
    assert_usage_error(&r, "create", "no IMAGE.sqsh given");
    r = skiff("create", "-n", "ok", "a.sqsh", "b.sqsh", NULL);
    assert_usage_error(&r, "create", "unexpected argument 'b.sqsh'");
    r = skiff("export", "-o", "out.sqsh", "-bad", NULL);
    cr_assert_eq(r.rc, 2);
    r = skiff("export", "-o", "out.sqsh", "a/b", NULL);
    assert_usage_error(&r, "export", "container name 'a/b'");
    r = skiff("remove", NULL);
    assert_usage_error(&r, "remove", "no container name given");
    r = skiff("remove", "ok", "../x", NULL);
    assert_usage_error(&r, "remove", "container name '../x'");
    r = skiff("start", NULL);
    assert_usage_error(&r, "start", "no image or container name given");
    r = skiff("start", "-m", "relative:/x", "img.sqsh", NULL);
    assert_usage_error(&r, "start", "mount spec 'relative:/x'");
    r = skiff("start", "-m", "/a:/b:c:d", "img.sqsh", NULL);
    assert_usage_error(&r, "start", "too many ':' fields");
    r = skiff("start", "-m", "/a:/b:x-create=maybe", "img.sqsh", NULL);
    assert_usage_error(&r, "start", "x-create");
    r = skiff("start", "-e", "NOEQUALS", "img.sqsh", NULL);
    assert_usage_error(&r, "start", "--env 'NOEQUALS' is not KEY=VALUE");
    r = skiff("start", "-w", "rel", "img.sqsh", NULL);
    assert_usage_error(&r, "start", "--workdir 'rel' is not an absolute path");
    r = skiff("exec", NULL);
    assert_usage_error(&r, "exec", "no process id and command given");
    r = skiff("exec", "12", NULL);
    assert_usage_error(&r, "exec", "no command given");
    r = skiff("exec", "12x", "sh", NULL);
    assert_usage_error(&r, "exec", "'12x' is not a process id");
    r = skiff("exec", "99999999999", "sh", NULL);
    assert_usage_error(&r, "exec", "is not a process id");
    r = skiff("list", "extra", NULL);
    assert_usage_error(&r, "list", "unexpected argument 'extra'");
    r = skiff("doctor", "extra", NULL);
    assert_usage_error(&r, "doctor", "unexpected argument 'extra'");
    r = skiff("version", "extra", NULL);
    assert_usage_error(&r, "version", "unexpected argument 'extra'");
    r = skiff("import", NULL);
    assert_usage_error(&r, "import", "no image URI given");
    r = skiff("resolve", NULL);
    assert_usage_error(&r, "resolve", "no image given");
    r = skiff("resolve", "a", "b", NULL);
    assert_usage_error(&r, "resolve", "unexpected argument 'b'");
}

Test(cli, unknown_or_missing_command_exits_2)
{
    struct run r = skiff("bogus", NULL);
    cr_assert_eq(r.rc, 2);
    cr_assert_not_null(strstr(r.err, "unknown command 'bogus'"));
    r = skiff(NULL);
    cr_assert_eq(r.rc, 2);
    cr_assert_not_null(strstr(r.err, "usage: skiff COMMAND"));
}

Test(cli, version)
{
    struct run r = skiff("version", NULL);
    cr_assert_eq(r.rc, 0);
    cr_assert_eq(strncmp(r.out, "skiff ", 6), 0);
    r = skiff("--version", NULL);
    cr_assert_eq(r.rc, 0);
}
