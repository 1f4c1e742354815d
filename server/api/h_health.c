/* h_health.c - liveness and readiness probes, and the documents the server
 * serves as they are (OpenAPI).  /metrics is h_metrics.c. */
#include <stdlib.h>
#include <string.h>

#include "../store/embedded.h"
#include "../http/http.h"
#include "../store/migrate.h"
#include "routes.h"
#include "../store/db.h"

void h_healthz(struct request *rq, struct response *rs)
{
    (void)rq;
    reply_json(rs, 200, json_pack("{s:s}", "status", "ok"));
}

void h_readyz(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    PGconn *c = db_acquire(rq->srv->db, &e);
    if (!c) {
        reply_error(rs, &e);
        return;
    }
    int current = migrate_is_current(c, &e);
    db_release(rq->srv->db, c);
    if (current < 0)
        reply_error(rs, &e);
    else if (current)
        reply_json(rs, 200, json_pack("{s:s}", "status", "ready"));
    else
        reply_fail(rs, 503, "not_ready", NULL, "the database schema is not migrated yet");
}

void h_static(struct response *rs, const char *name, const char *type)
{
    for (size_t i = 0; i < embedded_static_count; i++) {
        if (strcmp(embedded_static[i].name, name) == 0) {
            buf_append(&rs->text, embedded_static[i].data, embedded_static[i].len);
            rs->status = 200;
            rs->content_type = type;
            return;
        }
    }
    reply_fail(rs, 404, "not_found", NULL, "%s is not built into this server", name);
}

void h_openapi(struct request *rq, struct response *rs)
{
    (void)rq;
    h_static(rs, "openapi.yaml", "application/yaml");
}
