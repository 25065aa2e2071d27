/* See proto.h. Pure: no Slurm calls, so it is unit-tested and fuzzed. */
#include "proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "container.h"
#include "state.h"

static const char *const phases[] = {"config", "import", "mount", "hook", "join", "env", "save"};

static void printable(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

static int push(char ***v, size_t *n, const char *s)
{
    char **nv = realloc(*v, (*n + 2) * sizeof(char *));
    if (!nv)
        return -1;
    *v = nv;
    if (!(nv[*n] = strdup(s)))
        return -1;
    nv[++*n] = NULL;
    return 0;
}

int skiff_reply_parse(const char *p, size_t len, struct skiff_reply *r, skiff_err *err)
{
    memset(r, 0, sizeof(*r));
    r->status = -1;
    size_t off = 0, count = 0, ne = 0, np = 0, nc = 0;
    bool have_status = false, ended = false;
    char tag;
    const char *s;
    int more;
    while ((more = skiff_rec_next(p, len, &off, &tag, &s)) != 0) {
        if (more < 0)
            return skiff_error(err, 0, "the answer ends inside a record");
        if (ended)
            return skiff_error(err, 0, "data after the end of the answer");
        if (++count > SKIFF_REPLY_RECORDS_MAX)
            return skiff_error(err, 0, "more than %d records", SKIFF_REPLY_RECORDS_MAX);
        if (!have_status && tag != 'S')
            return skiff_error(err, 0, "the answer does not start with its status");
        int bad = 0;
        switch (tag) {
        case 'S':
            if (have_status || (strcmp(s, "0") && strcmp(s, "-1")))
                return skiff_error(err, 0, "bad status record");
            have_status = true;
            r->status = s[0] == '0' ? 0 : -1;
            break;
        case 'p': {
            bool known = false;
            for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
                known |= !strcmp(s, phases[i]);
            snprintf(r->phase, sizeof(r->phase), "%s", known ? s : "mount");
            break;
        }
        case 'n': {
            char *end;
            long v = strtol(s, &end, 10);
            r->err.code = *end || v < 0 || v > 4095 ? 0 : (int)v;
            break;
        }
        case 'e':
            snprintf(r->err.msg, sizeof(r->err.msg), "%s", s);
            printable(r->err.msg);
            break;
        case 'H':
            if ((r->holder = skiff_rec_pid(s)) < 0)
                return skiff_error(err, 0, "bad holder pid '%.20s'", s);
            break;
        case 'T':
            if (sscanf(s, "%lf %lf", &r->t_resolve_ms, &r->t_start_ms) != 2 || !(r->t_resolve_ms >= 0) ||
                !(r->t_start_ms >= 0) || r->t_resolve_ms > 1e9 || r->t_start_ms > 1e9)
                r->t_resolve_ms = r->t_start_ms = 0;
            break;
        case 'W':
            if (s[0] != '/' || strlen(s) >= sizeof(r->workdir))
                return skiff_error(err, 0, "bad working directory");
            snprintf(r->workdir, sizeof(r->workdir), "%s", s);
            break;
        case 'E':
            if (!strchr(s, '=') || s[0] == '=')
                return skiff_error(err, 0, "bad environment entry");
            bad = push(&r->env, &ne, s);
            break;
        case 'P':
            bad = push(&r->entrypoint, &np, s);
            break;
        case 'C':
            bad = push(&r->cmd, &nc, s);
            break;
        case 'Z':
            ended = true;
            break;
        default:
            return skiff_error(err, 0, "unknown record 0x%02x", (unsigned char)tag);
        }
        if (bad)
            return skiff_error(err, ENOMEM, "out of memory");
    }
    if (!ended)
        return skiff_error(err, 0, "the answer has no end");
    if (r->status < 0) {
        if (!r->err.msg[0])
            snprintf(r->err.msg, sizeof(r->err.msg), "failed without a reason");
        if (!r->phase[0])
            snprintf(r->phase, sizeof(r->phase), "mount");
    }
    return 0;
}

void skiff_reply_free(struct skiff_reply *r)
{
    skiff_strv_free(r->env);
    skiff_strv_free(r->entrypoint);
    skiff_strv_free(r->cmd);
    r->env = r->entrypoint = r->cmd = NULL;
}
