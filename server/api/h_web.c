/* h_web.c - the dashboard: web/index.html at /, and the script, style sheet
 * and icon it loads, compiled into the binary (server/store/embed.sh).  The files
 * are static; the page reads everything else from the API with the admin
 * token the operator types in, which stays in the browser's session
 * storage and is sent only in the Authorization header. */
#include <stdio.h>

#include "../http/http.h"
#include "routes.h"

/* Everything the page loads comes from this server: no inline script or
 * style, no other origin, no framing, no form submitted anywhere (the
 * page's forms are handled by its script).  Fits response.header_value. */
#define WEB_CSP "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
_Static_assert(sizeof WEB_CSP <= sizeof(((struct response *)0)->header_value),
               "the policy must fit the response's one extra header");

/* Serves embedded file `name` with the dashboard's security policy.  The
 * responses are "Cache-Control: no-store" like every other (http.c): the
 * files are small and an upgraded server is seen at the next reload. */
static void h_web_file(struct response *rs, const char *name, const char *type)
{
    h_static(rs, name, type);
    if (rs->status != 200)
        return;
    rs->header_name = "Content-Security-Policy";
    snprintf(rs->header_value, sizeof rs->header_value, "%s", WEB_CSP);
}

void h_web_index(struct request *rq, struct response *rs)
{
    (void)rq;
    h_web_file(rs, "index.html", "text/html; charset=utf-8");
}

void h_web_js(struct request *rq, struct response *rs)
{
    (void)rq;
    h_web_file(rs, "app.js", "text/javascript; charset=utf-8");
}

void h_web_css(struct request *rq, struct response *rs)
{
    (void)rq;
    h_web_file(rs, "app.css", "text/css; charset=utf-8");
}

void h_web_icon(struct request *rq, struct response *rs)
{
    (void)rq;
    h_web_file(rs, "favicon.svg", "image/svg+xml");
}
