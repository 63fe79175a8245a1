/* The chat page's embedded assets (src/server/webui.c + the table cmake/embed_webui.cmake
 * generates): lookups by path, content types, and what the page may load: only its own files,
 * no external reference, no inline script (the Content-Security-Policy forbids it too). The
 * page in a browser: tests/server/test_webui.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "server/webui.h"

static void test_lookup(void **state) {
    (void)state;
    const ls_webui_asset *root = ls_webui_find("/"), *index = ls_webui_find("/index.html");
    assert_non_null(root);
    assert_ptr_equal(root, index);
    assert_string_equal(root->content_type, "text/html; charset=utf-8");
    const ls_webui_asset *js = ls_webui_find("/webui/app.js"), *css = ls_webui_find("/webui/style.css");
    assert_non_null(js);
    assert_non_null(css);
    assert_string_equal(js->content_type, "text/javascript; charset=utf-8");
    assert_string_equal(css->content_type, "text/css; charset=utf-8");
    const char *none[] = {"", "/webui/", "/webui", "/app.js", "/index.htm", "/webui/app.js/", "/v1/models", "//"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) assert_null(ls_webui_find(none[i]));
    assert_null(ls_webui_find(NULL));
}

static void test_contents(void **state) {
    (void)state;
    int n = 0;
    for (const ls_webui_asset *a = ls_webui_assets; a->path; a++, n++) {
        assert_true(a->len > 100);
        /* embedded verbatim, NUL-terminated, no NUL inside (text files) */
        assert_int_equal(a->data[a->len], 0);
        assert_int_equal(strlen((const char *)a->data), a->len);
        const char *t = (const char *)a->data;
        /* nothing from another origin: no absolute or scheme-relative URL at all */
        assert_null(strcasestr(t, "http://"));
        assert_null(strcasestr(t, "https://"));
        assert_null(strstr(t, "src=\"//"));
        assert_null(strstr(t, "href=\"//"));
        assert_null(strcasestr(t, "@import"));
        assert_null(strcasestr(t, "innerHTML"));
        assert_null(strcasestr(t, "outerHTML"));
        assert_null(strcasestr(t, "insertAdjacentHTML"));
        assert_null(strcasestr(t, "document.write"));
        assert_null(strstr(t, "eval("));
    }
    assert_int_equal(n, 3);
    const char *html = (const char *)ls_webui_find("/")->data;
    assert_non_null(strstr(html, "<script src=\"webui/app.js\""));
    assert_non_null(strstr(html, "href=\"webui/style.css\""));
    /* every <script> has a src and no body; no inline event handler, no inline style */
    for (const char *p = html; (p = strcasestr(p, "<script")); p++) {
        const char *end = strchr(p, '>');
        assert_non_null(end);
        assert_non_null(strstr(p, " src="));
        assert_true(strstr(p, " src=") < end);
        assert_int_equal(strncasecmp(end, "></script>", 10), 0);
    }
    assert_null(strcasestr(html, " onclick="));
    assert_null(strcasestr(html, " onload="));
    assert_null(strcasestr(html, " style="));
    assert_null(strcasestr(html, "<style"));
}

static void test_csp(void **state) {
    (void)state;
    const char *csp = LS_WEBUI_CSP;
    assert_non_null(strstr(csp, "default-src 'none'"));
    assert_non_null(strstr(csp, "script-src 'self'"));
    assert_non_null(strstr(csp, "connect-src 'self'"));
    assert_null(strstr(csp, "unsafe-inline"));
    assert_null(strstr(csp, "unsafe-eval"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookup),
        cmocka_unit_test(test_contents),
        cmocka_unit_test(test_csp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
