/* Shared by tools.c, tool_native.c and tool_prompt.c (docs/tool_calls.md). */
#ifndef LS_SERVER_TOOL_INTERNAL_H
#define LS_SERVER_TOOL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "tools.h"

typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} tl_sb;

void ls_tl_put(tl_sb *b, const char *s, size_t n);
void ls_tl_puts(tl_sb *b, const char *s);

struct cJSON;
/* Gemma 4 native format (tool_native.c). */
void ls_tl_format_argument(tl_sb *b, const struct cJSON *v, bool escape_keys);
void ls_tl_format_declaration(tl_sb *b, const struct cJSON *function);
/* At *p: "call:NAME{...}" [<tool_call|>]. 0 with *name and *args (JSON text) malloc'ed and *p
 * past the call, or -1 with why (and *name / *args to free). */
int ls_tl_parse_native_call(const char **p, const char *e, char **name, char **args, char *why, size_t whylen);

#endif
