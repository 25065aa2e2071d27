/* Warming the command's executable; see warm.h. */
#include "warm.h"
#include "fdio.h"
#include "rootfs.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

#define WARM_WINDOW (128u << 10)

struct warm_job {
    int rootfd;
    char *argv0, *path, *workdir;
};

/* Reads the open file ahead (capped), so FUSE serves it now; true when it
 * is a regular file the caller may go on inspecting. */
static bool read_ahead(int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return false;
    size_t n = st.st_size < (off_t)SKIFF_WARM_MAX ? (size_t)st.st_size : SKIFF_WARM_MAX;
    /* the kernel trims one readahead(2) to the readahead window (128 KiB on
     * FUSE): one call per window, each queued without waiting */
    for (size_t off = 0; off < n; off += WARM_WINDOW)
        if (readahead(fd, (off_t)off, WARM_WINDOW) < 0)
            break;
    return true;
}

int skiff_warm_elf_interp(const unsigned char *head, size_t len, int fd, char *out, size_t outsz)
{
    Elf64_Ehdr eh;
    if (len < sizeof(eh) || outsz < 2)
        return -1;
    memcpy(&eh, head, sizeof(eh));
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff > len)
        return -1;
    size_t nph = eh.e_phnum;
    if (nph > (len - eh.e_phoff) / sizeof(Elf64_Phdr))
        return -1; /* program headers beyond what was read: not worth a second read */
    for (size_t i = 0; i < nph; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, head + eh.e_phoff + i * sizeof(ph), sizeof(ph));
        if (ph.p_type != PT_INTERP)
            continue;
        if (ph.p_filesz < 2 || ph.p_filesz > outsz || ph.p_offset > (Elf64_Off)INT64_MAX)
            return -1;
        size_t n = (size_t)ph.p_filesz;
        if (ph.p_offset + n <= len)
            memcpy(out, head + ph.p_offset, n);
        else if (pread(fd, out, n, (off_t)ph.p_offset) != (ssize_t)n)
            return -1;
        if (out[n - 1] != '\0' || strlen(out) != n - 1 || out[0] != '/')
            return -1;
        return 0;
    }
    return -1;
}

/* Opens the file execvp would run, or -1. */
static int find_command(const struct warm_job *j)
{
    skiff_err err;
    char p[SKIFF_PATH_MAX];
    if (strchr(j->argv0, '/')) {
        if (j->argv0[0] == '/')
            return skiff_root_open(j->rootfd, j->argv0, O_RDONLY, &err);
        if ((size_t)snprintf(p, sizeof(p), "%s/%s", j->workdir, j->argv0) >= sizeof(p))
            return -1;
        return skiff_root_open(j->rootfd, p, O_RDONLY, &err);
    }
    for (const char *d = j->path; d && *d;) {
        const char *end = strchrnul(d, ':');
        size_t dl = (size_t)(end - d);
        /* an empty entry means the working directory, as for execvp */
        int w = dl ? snprintf(p, sizeof(p), "%.*s/%s", (int)dl, d, j->argv0)
                   : snprintf(p, sizeof(p), "%s/%s", j->workdir, j->argv0);
        if (w > 0 && (size_t)w < sizeof(p)) {
            int fd = skiff_root_open(j->rootfd, p, O_RDONLY, &err);
            if (fd >= 0) {
                struct stat st;
                if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111))
                    return fd;
                close(fd);
            }
        }
        d = *end ? end + 1 : end;
    }
    return -1;
}

static void job_free(struct warm_job *j)
{
    if (j->rootfd >= 0)
        close(j->rootfd);
    free(j->argv0);
    free(j->path);
    free(j->workdir);
    free(j);
}

static void *warm_main(void *arg)
{
    struct warm_job *j = arg;
    int fd = find_command(j);
    if (fd >= 0 && read_ahead(fd)) {
        unsigned char head[4096];
        char interp[SKIFF_PATH_MAX];
        ssize_t n = pread(fd, head, sizeof(head), 0);
        if (n > 0 && skiff_warm_elf_interp(head, (size_t)n, fd, interp, sizeof(interp)) == 0) {
            skiff_err err;
            int ifd = skiff_root_open(j->rootfd, interp, O_RDONLY, &err);
            if (ifd >= 0) {
                read_ahead(ifd);
                close(ifd);
            }
        }
    }
    if (fd >= 0)
        close(fd);
    job_free(j);
    return NULL;
}

int skiff_warm_start(int rootfd, const char *argv0, const char *path, const char *workdir)
{
    if (!argv0 || !*argv0)
        return -1;
    struct warm_job *j = calloc(1, sizeof(*j));
    if (!j)
        return -1;
    j->rootfd = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
    j->argv0 = strdup(argv0);
    j->path = strdup(path ? path : "");
    j->workdir = strdup(workdir && *workdir ? workdir : "/");
    pthread_attr_t a;
    pthread_t t;
    int rc = -1;
    if (j->rootfd >= 0 && j->argv0 && j->path && j->workdir && pthread_attr_init(&a) == 0) {
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&a, 256 << 10);
        rc = pthread_create(&t, &a, warm_main, j) == 0 ? 0 : -1;
        pthread_attr_destroy(&a);
    }
    if (rc < 0)
        job_free(j);
    return rc;
}
