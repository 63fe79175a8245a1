/* src/core/hugemap.h explains why. */
#include "core/hugemap.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_BYTES ((size_t)2 << 20)

size_t ls_hugemap_limit(void) {
    const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (size_t)pages / 2 * (size_t)psz : 0;
}

void *ls_hugemap_read(int fd, size_t size, size_t *map_len) {
    *map_len = 0;
    /* a copy of a model near the memory size would push it out of RAM; the file mapping
     * can page instead */
    if (size == 0 || size > ls_hugemap_limit()) return NULL;
    if (size > SIZE_MAX - HUGE_BYTES) return NULL;
    const size_t len = (size + HUGE_BYTES - 1) & ~(HUGE_BYTES - 1);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE); /* advice only: without it the copy still works */
#endif
    size_t done = 0;
    while (done < size) {
        const ssize_t n = pread(fd, (char *)p + done, size - done, (off_t)done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { /* error or the file shrank: fall back to the mapping */
            const int e = n < 0 ? errno : EIO;
            munmap(p, len);
            errno = e;
            return NULL;
        }
        done += (size_t)n;
    }
    (void)mprotect(p, len, PROT_READ); /* weights are read-only, as in the file mapping */
    *map_len = len;
    return p;
}
