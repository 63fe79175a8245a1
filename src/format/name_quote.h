/* Quoting names that come from untrusted files (GGUF keys, tensor names) for error messages:
 * printable ASCII is kept, every other byte becomes \xNN, and long names are cut with "...",
 * so a hostile name can neither garble a terminal nor flood a log. */
#ifndef LS_FORMAT_NAME_QUOTE_H
#define LS_FORMAT_NAME_QUOTE_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of a name shown at most; a buffer of LS_NAME_QUOTED bytes always suffices. */
#define LS_NAME_SHOWN  64
#define LS_NAME_QUOTED (LS_NAME_SHOWN * 4 + 8)

/* Quote the n bytes at s (not necessarily NUL-terminated) into buf (cap bytes, NUL-terminated). */
void ls_name_quote(char *buf, size_t cap, const char *s, uint64_t n);

#endif
