/* Persistent decompressed-block cache; see blockcache.h. */
#include "blockcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BC_MAGIC "skiffbc1"
#define BC_HEADER 4096
#define BC_PREFIX "img-"
#define BC_MAX_SB 128

struct bc_header {
    char magic[8];
    uint32_t block_size;
    uint32_t sb_len;
    uint64_t dev, ino, size, mtime_ns, ctime_ns;
    uint64_t nslots;  /* block slots of block_size bytes */
    uint64_t nindex;  /* index entries, a power of two */
    uint64_t next;    /* the next free slot (atomic) */
    char boot_id[40]; /* a cache from before a crash is not trusted */
    unsigned char sb[BC_MAX_SB];
};

/* key: image offset + 1 (0 = free); val: (slot + 1) << 32 | size, stored
 * once the slot holds the block (0 = not yet, or never). */
struct bc_entry {
    uint64_t key, val;
};

struct skiff_blockcache {
    int fd;
    struct bc_header *h; /* header + index, mapped shared */
    struct bc_entry *index;
    size_t map_len;
    uint64_t data_off, nslots, mask;
    uint32_t block_size;
};

_Static_assert(sizeof(struct bc_header) <= BC_HEADER, "header fits its page");

static uint64_t index_bytes(uint64_t nindex)
{
    return (nindex * sizeof(struct bc_entry) + 4095) & ~(uint64_t)4095;
}

/* The header this image and these limits call for. */
static int expected_header(int image_fd, const void *sb, size_t sb_len, uint32_t block_size, uint64_t max_bytes,
                           struct bc_header *h, skiff_err *err)
{
    struct stat st;
    if (fstat(image_fd, &st) < 0)
        return skiff_error(err, errno, "block cache: stat image");
    if (sb_len > BC_MAX_SB || block_size == 0 || block_size > (1u << 20))
        return skiff_error(err, 0, "block cache: unsupported superblock");
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, BC_MAGIC, 8);
    h->block_size = block_size;
    h->sb_len = (uint32_t)sb_len;
    memcpy(h->sb, sb, sb_len);
    h->dev = st.st_dev;
    h->ino = st.st_ino;
    h->size = (uint64_t)st.st_size;
    h->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
    h->ctime_ns = (uint64_t)st.st_ctim.tv_sec * 1000000000u + (uint64_t)st.st_ctim.tv_nsec;
    h->nslots = max_bytes / block_size;
    if (h->nslots == 0)
        return skiff_error(err, 0, "block cache: smaller than one block");
    if (h->nslots > (1u << 30))
        h->nslots = 1u << 30;
    h->nindex = 1;
    while (h->nindex < 2 * h->nslots) /* at most half full: short probes */
        h->nindex <<= 1;
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, h->boot_id, sizeof(h->boot_id) - 1);
        if (n < 0)
            memset(h->boot_id, 0, sizeof(h->boot_id));
        close(fd);
    }
    return 0;
}

static bool header_matches(const struct bc_header *have, const struct bc_header *want)
{
    /* all but the slot counter, which moves */
    return !memcmp(have, want, offsetof(struct bc_header, next)) &&
           !memcmp(have->boot_id, want->boot_id, sizeof(have->boot_id)) &&
           !memcmp(have->sb, want->sb, sizeof(have->sb));
}

struct entry_age {
    char name[64];
    time_t mtime;
    uint64_t bytes;
};

static int newest_first(const void *a, const void *b)
{
    const struct entry_age *x = a, *y = b;
    return x->mtime < y->mtime ? 1 : x->mtime > y->mtime ? -1 : 0;
}

/* Before a new cache is created: the least recently used caches of other
 * images go until the rest fit in max_bytes; temporary files of creators
 * that died go too. */
static void evict(int dirfd, uint64_t max_bytes)
{
    int dfd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return;
    }
    struct entry_age *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    time_t now = time(NULL);
    while ((e = readdir(d))) {
        bool tmp = !strncmp(e->d_name, ".tmp-", 5);
        size_t nl = strlen(e->d_name);
        if ((!tmp && strncmp(e->d_name, BC_PREFIX, strlen(BC_PREFIX))) || nl >= sizeof(v->name))
            continue;
        struct stat st;
        if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (tmp) {
            if (now - st.st_mtime > 60)
                unlinkat(dirfd, e->d_name, 0);
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            struct entry_age *nv = realloc(v, cap * sizeof(*v));
            if (!nv)
                break;
            v = nv;
        }
        memcpy(v[n].name, e->d_name, nl + 1);
        v[n].mtime = st.st_mtime;
        v[n].bytes = (uint64_t)st.st_blocks * 512;
        n++;
    }
    closedir(d);
    if (n)
        qsort(v, n, sizeof(*v), newest_first);
    uint64_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        kept += v[i].bytes;
        if (kept > max_bytes)
            unlinkat(dirfd, v[i].name, 0);
    }
    free(v);
}

/* A new cache file, published under name (or the one another server
 * published first). */
static int create_file(int dirfd, const char *name, const struct bc_header *want, uint64_t total, skiff_err *err)
{
    char tmp[64];
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(tmp, sizeof(tmp), ".tmp-%d-%ld", (int)getpid(), (long)ts.tv_nsec);
    int fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return skiff_error(err, errno, "block cache: create");
    char page[BC_HEADER] = {0};
    memcpy(page, want, sizeof(*want));
    /* sparse: slots take memory (or disk) only once written */
    if (ftruncate(fd, (off_t)total) < 0 || pwrite(fd, page, sizeof(page), 0) != (ssize_t)sizeof(page)) {
        int e = errno;
        close(fd);
        unlinkat(dirfd, tmp, 0);
        return skiff_error(err, e, "block cache: initialise");
    }
    if (linkat(dirfd, tmp, dirfd, name, 0) < 0) {
        int e = errno;
        close(fd);
        unlinkat(dirfd, tmp, 0);
        if (e != EEXIST)
            return skiff_error(err, e, "block cache: publish");
        fd = openat(dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
            return skiff_error(err, errno, "block cache: open");
        return fd;
    }
    unlinkat(dirfd, tmp, 0);
    return fd;
}

struct skiff_blockcache *skiff_blockcache_open(int dirfd, int image_fd, const void *sb, size_t sb_len,
                                               uint32_t block_size, uint64_t max_bytes, skiff_err *err)
{
    struct bc_header want;
    if (expected_header(image_fd, sb, sb_len, block_size, max_bytes, &want, err) < 0)
        return NULL;
    char name[64];
    snprintf(name, sizeof(name), BC_PREFIX "%llx-%llx", (unsigned long long)want.dev, (unsigned long long)want.ino);
    uint64_t map_len = BC_HEADER + index_bytes(want.nindex);
    uint64_t total = map_len + want.nslots * block_size;
    int fd = -1;
    for (int attempt = 0; attempt < 2 && fd < 0; attempt++) {
        fd = openat(dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 && errno == ENOENT) {
            evict(dirfd, max_bytes);
            fd = create_file(dirfd, name, &want, total, err);
            if (fd < 0)
                return NULL;
        } else if (fd < 0) {
            skiff_error(err, errno, "block cache: open %s", name);
            return NULL;
        }
        struct bc_header have;
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (uint64_t)st.st_size != total ||
            pread(fd, &have, sizeof(have), 0) != (ssize_t)sizeof(have) || !header_matches(&have, &want)) {
            /* another image that got this inode, a changed image, other
             * limits, a crash: start over */
            close(fd);
            fd = -1;
            unlinkat(dirfd, name, 0);
        }
    }
    if (fd < 0) {
        skiff_error(err, EAGAIN, "block cache: %s keeps changing", name);
        return NULL;
    }
    futimens(fd, NULL); /* recently used: evicted last */
    struct skiff_blockcache *c = calloc(1, sizeof(*c));
    void *map = MAP_FAILED;
    if (c)
        map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!c || map == MAP_FAILED) {
        skiff_error(err, c ? errno : ENOMEM, "block cache: map %s", name);
        free(c);
        close(fd);
        return NULL;
    }
    c->fd = fd;
    c->h = map;
    c->index = (struct bc_entry *)((char *)map + BC_HEADER);
    c->map_len = map_len;
    c->data_off = map_len;
    c->nslots = want.nslots;
    c->mask = want.nindex - 1;
    c->block_size = block_size;
    return c;
}

static uint64_t slot_of(const struct skiff_blockcache *c, uint64_t pos)
{
    uint64_t x = pos * 0x9e3779b97f4a7c15ull;
    return (x ^ (x >> 29)) & c->mask;
}

int skiff_blockcache_find(struct skiff_blockcache *c, uint64_t pos, size_t off, size_t len, off_t *at)
{
    if (!c)
        return -1;
    for (uint64_t i = slot_of(c, pos), probes = 0; probes <= c->mask; i = (i + 1) & c->mask, probes++) {
        uint64_t key = __atomic_load_n(&c->index[i].key, __ATOMIC_ACQUIRE);
        if (key == 0)
            return -1;
        if (key != pos + 1)
            continue;
        uint64_t val = __atomic_load_n(&c->index[i].val, __ATOMIC_ACQUIRE);
        uint64_t slot = (val >> 32) - 1, size = val & 0xffffffffu;
        if (val == 0 || slot >= c->nslots || size > c->block_size || off + len > size)
            return -1;
        *at = (off_t)(c->data_off + slot * c->block_size + off);
        return 0;
    }
    return -1;
}

int skiff_blockcache_fd(const struct skiff_blockcache *c)
{
    return c ? c->fd : -1;
}

void skiff_blockcache_put(struct skiff_blockcache *c, uint64_t pos, const void *data, size_t size)
{
    if (!c || size == 0 || size > c->block_size)
        return;
    /* full: claiming index entries that can get no slot would only make
     * the misses' probes longer */
    if (__atomic_load_n(&c->h->next, __ATOMIC_RELAXED) >= c->nslots)
        return;
    for (uint64_t i = slot_of(c, pos), probes = 0; probes <= c->mask; i = (i + 1) & c->mask, probes++) {
        uint64_t key = 0;
        if (!__atomic_compare_exchange_n(&c->index[i].key, &key, pos + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            if (key == pos + 1)
                return; /* stored, or being stored, by someone else */
            continue;
        }
        /* the entry is ours: a slot, the data, then the value */
        uint64_t slot = __atomic_fetch_add(&c->h->next, 1, __ATOMIC_RELAXED);
        if (slot >= c->nslots)
            return; /* filled meanwhile: the entry stays a miss */
        off_t at = (off_t)(c->data_off + slot * c->block_size);
        if (pwrite(c->fd, data, size, at) != (ssize_t)size)
            return;
        __atomic_store_n(&c->index[i].val, (slot + 1) << 32 | size, __ATOMIC_RELEASE);
        return;
    }
}

void skiff_blockcache_close(struct skiff_blockcache *c)
{
    if (!c)
        return;
    munmap(c->h, c->map_len);
    close(c->fd);
    free(c);
}
