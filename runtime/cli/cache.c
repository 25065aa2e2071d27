/* skiff cache list [--system]
 * skiff cache prune [--older-than D] [--max-size S] [--all] [--dry-run] [--system]
 * The image cache (runtime/lib/image/cache.h): what it holds, and making
 * room in it without touching an image in use. --system works on the
 * site's store (system_cache_path) instead, for its owner. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "cli.h"
#include "named.h"

static void human(unsigned long long b, char *out, size_t n)
{
    static const char units[] = "KMGT";
    double v = (double)b;
    int u = -1;
    while (v >= 1024 && u < 3) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(out, n, "%lluB", b);
    else
        snprintf(out, n, "%.1f%c", v, units[u]);
}

/* "30d", "12h", "90m", "45s", "2w" into seconds; -1 for anything else. */
static double parse_duration(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v >= 0) || s[0] < '0' || s[0] > '9')
        return -1;
    static const struct {
        char unit;
        double secs;
    } units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}, {'w', 7 * 86400}};
    if (!*end)
        return v == 0 ? 0 : -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (end[0] == units[i].unit && !end[1])
            return v * units[i].secs;
    return -1;
}

static const char *root_of(const struct skiff_config *cfg, bool system)
{
    return system ? cfg->system_cache_path : cfg->cache_path;
}

/* Where the user's lazy images keep their data files (the site's store
 * holds no lazy images): NULL for none. */
static const char *lazy_path_of(const struct skiff_config *cfg, bool system, char *buf, size_t n)
{
    return system || skiff_config_lazy_path(cfg, buf, n) < 0 ? NULL : buf;
}

static int cache_list(int argc, char **argv)
{
    static const struct option longopts[] = {{"system", no_argument, NULL, 's'}, {NULL, 0, NULL, 0}};
    bool system = false;
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
        if (c != 's')
            return cli_bad_option("cache");
        system = true;
    }
    if (optind != argc)
        return cli_usage_error("cache", "unexpected argument '%s'", argv[optind]);
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    if (system && !cfg.system_cache_path[0]) {
        skiff_err err;
        skiff_error(&err, 0, "system_cache_path is not set (skiff.conf)");
        return cli_fail("cache", &err);
    }
    skiff_err err;
    skiff_err_clear(&err);
    struct skiff_cache_listing l;
    char lazy[SKIFF_PATH_MAX];
    if (skiff_cache_list(root_of(&cfg, system), lazy_path_of(&cfg, system, lazy, sizeof(lazy)), system, &l, &err) < 0)
        return cli_fail("cache", &err);
    printf("%-12s  %8s  %-16s  %-6s  %s\n", "IMAGE", "SIZE", "LAST USED", "IN USE", "REFERENCES");
    for (size_t i = 0; i < l.nimages; i++) {
        const struct skiff_cache_entry *e = &l.images[i];
        char size[32], when[32];
        human(e->size, size, sizeof(size));
        struct tm tm;
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M", localtime_r(&e->last_used, &tm));
        const char *refs = e->tags && e->tags[0] ? e->tags : e->info.ref[0] ? e->info.ref : "-";
        printf("%.12s  %8s  %-16s  %-6s  %s", e->key, size, when, e->in_use ? "yes" : "no", refs);
        if (e->info.digest[0])
            printf(" (%.19s)", e->info.digest);
        if (e->lazy)
            fputs(" [lazy]", stdout);
        putchar('\n');
    }
    char a[32], b[32];
    human(l.images_bytes, a, sizeof(a));
    human(l.blobs_bytes, b, sizeof(b));
    printf("%zu image(s), %s; %zu layer blob(s), %s; in %s\n", l.nimages, a, l.nblobs, b, root_of(&cfg, system));
    skiff_cache_listing_free(&l);
    return 0;
}

static void told(void *ctx, const char *what, unsigned long long bytes, const char *why)
{
    const bool *dry = ctx;
    char size[32];
    human(bytes, size, sizeof(size));
    printf("%s %s (%s): %s\n", *dry ? "would remove" : "removed", what, size, why);
}

static int cache_prune(int argc, char **argv)
{
    static const struct option longopts[] = {{"older-than", required_argument, NULL, 'o'},
                                             {"max-size", required_argument, NULL, 'm'},
                                             {"all", no_argument, NULL, 'a'},
                                             {"dry-run", no_argument, NULL, 'n'},
                                             {"system", no_argument, NULL, 's'},
                                             {NULL, 0, NULL, 0}};
    struct skiff_prune_opts o = {.older_than_s = -1};
    bool system = false;
    int c;
    optind = 0;
    while ((c = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            o.older_than_s = parse_duration(optarg);
            if (o.older_than_s < 0)
                return cli_usage_error("cache", "--older-than %s: give a duration such as 30d, 12h, 90m", optarg);
            break;
        case 'm':
            if (skiff_config_parse_size(optarg, &o.max_size) < 0)
                return cli_usage_error("cache", "--max-size %s: give a size such as 500G, 20G, 800M", optarg);
            o.max_size_set = true;
            break;
        case 'a':
            o.all = true;
            break;
        case 'n':
            o.dry_run = true;
            break;
        case 's':
            system = true;
            break;
        default:
            return cli_bad_option("cache");
        }
    }
    if (optind != argc)
        return cli_usage_error("cache", "unexpected argument '%s'", argv[optind]);
    struct skiff_config cfg;
    if (cli_load_config(&cfg) < 0)
        return 1;
    skiff_err err;
    skiff_err_clear(&err);
    if (system && !cfg.system_cache_path[0]) {
        skiff_error(&err, 0, "system_cache_path is not set (skiff.conf)");
        return cli_fail("cache", &err);
    }
    o.removed = told;
    o.ctx = &o.dry_run;
    char lazy[SKIFF_PATH_MAX];
    o.lazy_path = lazy_path_of(&cfg, system, lazy, sizeof(lazy));
    o.store = system;
    if (!system) {
        o.keep = skiff_named_keeps_image;
        o.keep_ctx = &cfg;
    }
    struct skiff_prune_result r;
    if (skiff_cache_prune(root_of(&cfg, system), &o, &r, &err) < 0)
        return cli_fail("cache", &err);
    char freed[32], left[32];
    human(r.freed, freed, sizeof(freed));
    human(r.left, left, sizeof(left));
    printf("%s %u image(s) and %u layer blob(s), %s; %s left", o.dry_run ? "would remove" : "removed", r.images,
           r.blobs, freed, left);
    if (r.in_use)
        printf("; kept %u image(s) in use", r.in_use);
    putchar('\n');
    return 0;
}

int cmd_cache(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error("cache", "give list or prune");
    /* getopt's messages then read "skiff cache prune: ..." */
    char prog[32];
    if (!strcmp(argv[1], "list") || !strcmp(argv[1], "prune")) {
        snprintf(prog, sizeof(prog), "skiff cache %s", argv[1]);
        argv[1] = prog;
        return prog[12] == 'l' ? cache_list(argc - 1, argv + 1) : cache_prune(argc - 1, argv + 1);
    }
    return cli_usage_error("cache", "unknown cache command '%s' (list, prune)", argv[1]);
}
