/* The chat page's assets by request path (see webui.h). */
#include <string.h>

#include "webui.h"

const ls_webui_asset *ls_webui_find(const char *url) {
    if (!url) return NULL;
    if (!strcmp(url, "/")) url = "/index.html";
    for (const ls_webui_asset *a = ls_webui_assets; a->path; a++)
        if (!strcmp(a->path, url)) return a;
    return NULL;
}
