/* See name_quote.h. */
#include "format/name_quote.h"

#include <stdio.h>

void ls_name_quote(char *buf, size_t cap, const char *s, uint64_t n) {
    size_t o = 0;
    uint64_t shown = n < LS_NAME_SHOWN ? n : LS_NAME_SHOWN;
    for (uint64_t i = 0; i < shown && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    if (shown < n && o + 4 < cap) o += (size_t)snprintf(buf + o, cap - o, "...");
    buf[o] = 0;
}
