/* See fuzzlib.h. */
#include "fuzzlib.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    fprintf(stderr, "\n==fuzz property== %s:%d: %s: ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void fuzz_check_failure(int rc, const skiff_err *err, const char *what)
{
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "%s: %s%s\n", what, rc < 0 ? "failed: " : "ok", rc < 0 ? err->msg : "");
    if (rc < 0)
        FUZZ_CHECK(err->msg[0] != '\0', "%s failed without a message", what);
}

char *fuzz_str(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

size_t fuzz_split(const uint8_t *data, size_t size, const char *sep, struct fuzz_part *parts, size_t max)
{
    size_t n = 0, sl = strlen(sep), start = 0;
    for (size_t i = 0; n + 1 < max && i + sl <= size;) {
        if (!memcmp(data + i, sep, sl)) {
            parts[n++] = (struct fuzz_part){data + start, i - start};
            i += sl;
            start = i;
        } else {
            i++;
        }
    }
    if (max)
        parts[n++] = (struct fuzz_part){data + start, size - start};
    return n;
}

static char dir[4096];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    if (ftw->level > 0)
        remove(path);
    return 0;
}

void fuzz_empty_dir(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void remove_dir(void)
{
    if (dir[0]) {
        fuzz_empty_dir(dir);
        rmdir(dir);
    }
}

const char *fuzz_dir(void)
{
    if (!dir[0]) {
        /* tests/fuzz/run points FUZZ_SCRATCH at a directory it removes
         * afterwards, also when a crash skipped atexit */
        const char *base = getenv("FUZZ_SCRATCH");
        struct stat st;
        if (!base || !*base)
            base = stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp";
        if ((size_t)snprintf(dir, sizeof(dir), "%s/skiff-fuzz-XXXXXX", base) >= sizeof(dir)) {
            fprintf(stderr, "fuzz: FUZZ_SCRATCH too long\n");
            abort();
        }
        if (!mkdtemp(dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(remove_dir);
    }
    return dir;
}

const char *fuzz_write(int slot, const char *name, const void *data, size_t len)
{
    static char paths[4][4096];
    char *p = paths[slot & 3];
    snprintf(p, sizeof(paths[0]), "%s/%s", fuzz_dir(), name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror(p);
        abort();
    }
    const char *b = data;
    while (len) {
        ssize_t w = write(fd, b, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            perror(p);
            abort();
        }
        b += w;
        len -= (size_t)w;
    }
    close(fd);
    return p;
}

bool fuzz_in(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(s, *list))
            return true;
    return false;
}
