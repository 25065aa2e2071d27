/* Warming the command's executable while the container is being set up.
 *
 * A container's root is a fresh FUSE mount: its page cache starts empty, and
 * the first exec of the command pays one FUSE round trip and one squashfs
 * block decompression per 128 KiB window it faults in (about 20 for a 2 MB
 * static busybox). skiff_warm_start() finds the executable the command will
 * run (the same PATH search execvp does) and asks the kernel to read it ahead
 * (readahead(2)), plus its ELF interpreter, from a short-lived thread, right
 * after the root is mounted: the FUSE server decompresses those blocks while
 * the holder goes on with the system mounts, hooks and pivot_root, and the
 * exec later finds its pages cached.
 *
 * Best effort by design: a command that cannot be found or read here is
 * simply not warmed (exec reports the real error later), and warming never
 * fails a start. It looks in the image only: a command under a user's bind
 * mount (mounted later, and on a host filesystem with its own page cache) is
 * not warmed. What is read ahead is capped per file (SKIFF_WARM_MAX), so a
 * huge binary cannot hold the FUSE server up. */
#ifndef SKIFF_WARM_H
#define SKIFF_WARM_H

#include <stddef.h>

/* Bytes read ahead per file at most. */
#define SKIFF_WARM_MAX (8u << 20)

/* Starts a detached thread warming argv0 inside the root at rootfd (the fd
 * is duplicated; the caller keeps its own). argv0 is looked up like execvp
 * does: as a path when it contains a '/', relative to workdir when relative;
 * else in each directory of path ("PATH" value, ':'-separated). Returns 0
 * when a thread was started, -1 when nothing is warmed (argv0 empty, out of
 * memory, no thread); never reports an error otherwise. */
int skiff_warm_start(int rootfd, const char *argv0, const char *path, const char *workdir);

/* The ELF interpreter (PT_INTERP) named in an ELF image's first len bytes,
 * copied into out (NUL-terminated), or -1 when there is none or the header
 * is malformed. Exposed for the unit tests. */
int skiff_warm_elf_interp(const unsigned char *head, size_t len, int fd, char *out, size_t outsz);

#endif
