/* File bytes in anonymous memory backed by transparent huge pages (2 MiB).
 *
 * Why: decode streams every weight once per token. From a file mapping the kernel serves
 * 4 KiB pages, and a one-thread decode of the default model then pays a TLB miss every
 * 4 KiB of its ~230 MiB stream: measured on the project machine, the same binary decodes
 * at 42.5 tok/s from the file mapping and 53-56 tok/s from a huge-page copy
 * (docs/benchmarks.md, session 8). Page-cache pages of a regular file are not made huge,
 * so the loader reads the file into anonymous memory advised MADV_HUGEPAGE instead. */
#ifndef LS_CORE_HUGEMAP_H
#define LS_CORE_HUGEMAP_H

#include <stddef.h>

/* The `size` bytes of the open file fd, read into an anonymous mapping of *map_len bytes
 * (size rounded up to 2 MiB) advised for huge pages; NULL (nothing mapped, errno kept from
 * the failing call) when the copy would take more than half of the machine's physical
 * memory, or when mapping or reading fails: the caller then maps the file as before. Free
 * with munmap(p, *map_len). */
void *ls_hugemap_read(int fd, size_t size, size_t *map_len);
/* The most bytes ls_hugemap_read copies in one call: half of the physical memory (0 when
 * unknown). A loader of several files (safetensors shards) keeps their sum under it too. */
size_t ls_hugemap_limit(void);

#endif
