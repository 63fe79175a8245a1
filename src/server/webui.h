/* The chat page of `lockstep serve` (GET /): static files from src/server/webui, embedded in
 * the binary at build time (cmake/embed_webui.cmake writes ls_webui_assets into the build
 * directory), so the page needs no network, no CDN and no files next to the binary. Pure
 * lookups (no I/O): unit-tested in tests/test_server_webui.c. */
#ifndef LS_SERVER_WEBUI_H
#define LS_SERVER_WEBUI_H

#include <stddef.h>

typedef struct {
    const char *path;         /* as served: "/index.html", "/webui/app.js", ... */
    const char *content_type; /* with charset for text */
    const unsigned char *data;
    size_t len;
} ls_webui_asset;

/* Generated: every file of src/server/webui, then an entry with path NULL. */
extern const ls_webui_asset ls_webui_assets[];

/* The asset served at `url` (a request path without its query): "/" is "/index.html".
 * NULL when there is none. */
const ls_webui_asset *ls_webui_find(const char *url);

/* Response headers of every asset: the page loads only its own files (no inline script or
 * style, no other origin), talks only to this server, and may not be framed. */
#define LS_WEBUI_CSP                                                                                                   \
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "              \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

#endif
