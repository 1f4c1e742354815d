#include "routes.h"

/* Every endpoint, once.  The router also accepts versioned paths without
 * their "/v1" prefix (see router.h).  The last column says which threads
 * run the handler (router.h): whatever reads or writes the database runs
 * on a database worker. */
const struct route routes[] = {
    { "GET",    "/",                    AUTH_OPEN,   h_web_index,     LANE_INLINE },
    { "GET",    "/app.js",              AUTH_OPEN,   h_web_js,        LANE_INLINE },
    { "GET",    "/app.css",             AUTH_OPEN,   h_web_css,       LANE_INLINE },
    { "GET",    "/favicon.svg",         AUTH_OPEN,   h_web_icon,      LANE_INLINE },
    { "GET",    "/healthz",             AUTH_OPEN,   h_healthz,       LANE_INLINE },
    { "GET",    "/readyz",              AUTH_OPEN,   h_readyz,        LANE_PROBE },
    { "GET",    "/metrics",             AUTH_OPEN,   h_metrics,       LANE_PROBE },
    { "GET",    "/v1/openapi.yaml",     AUTH_OPEN,   h_openapi,       LANE_INLINE },
    { "POST",   "/v1/agent/register",   AUTH_JOIN,   h_register,      LANE_DATABASE },
    { "POST",   "/v1/agent/heartbeat",  AUTH_NODE,   h_heartbeat,     LANE_DATABASE },
    { "GET",    "/v1/nodes",            AUTH_ADMIN,  h_nodes_list,    LANE_DATABASE },
    { "GET",    "/v1/nodes/{id}",       AUTH_ADMIN,  h_node_get,      LANE_DATABASE },
    { "DELETE", "/v1/nodes/{id}",       AUTH_ADMIN,  h_node_remove,   LANE_DATABASE },
    { "POST",   "/v1/nodes/{id}/drain", AUTH_ADMIN,  h_node_drain,    LANE_DATABASE },
    { "POST",   "/v1/nodes/{id}/undrain", AUTH_ADMIN, h_node_undrain, LANE_DATABASE },
    { "PUT",    "/v1/links",            AUTH_NODE,   h_links_put,     LANE_DATABASE },
    { "GET",    "/v1/links",            AUTH_ADMIN,  h_links_get,     LANE_DATABASE },
    { "POST",   "/v1/jobs",             AUTH_ADMIN,  h_job_create,    LANE_DATABASE },
    { "GET",    "/v1/jobs",             AUTH_ADMIN,  h_jobs_list,     LANE_DATABASE },
    { "GET",    "/v1/jobs/{id}",        AUTH_ADMIN,  h_job_get,       LANE_DATABASE },
    { "DELETE", "/v1/jobs/{id}",        AUTH_ADMIN,  h_job_cancel,    LANE_DATABASE },
    { "POST",   "/v1/jobs/{id}/schedule", AUTH_ADMIN, h_job_schedule,  LANE_DATABASE },
    { "POST",   "/v1/jobs/{id}/plan",   AUTH_ADMIN,  h_job_plan,      LANE_DATABASE },
    { "GET",    "/v1/agent/assignment", AUTH_NODE,   h_assignment,    LANE_DATABASE },
    { "GET",    "/v1/agent/probes",     AUTH_NODE,   h_probes,        LANE_DATABASE },
    { "POST",   "/v1/agent/progress",   AUTH_NODE,   h_progress,      LANE_DATABASE },
    { "POST",   "/v1/agent/failure",    AUTH_NODE,   h_failure,       LANE_DATABASE },
    { "POST",   "/v1/agent/dataset",    AUTH_NODE,   h_dataset,       LANE_DATABASE },
    { "PUT",    "/v1/agent/nccl",       AUTH_NODE,   h_nccl_put,      LANE_DATABASE },
    { "GET",    "/v1/agent/nccl",       AUTH_NODE,   h_nccl_get,      LANE_DATABASE },
    { "GET",    "/v1/jobs/{id}/checkpoints", AUTH_ADMIN, h_checkpoints_list,LANE_DATABASE },
    { "PUT",    "/v1/jobs/{id}/checkpoints/{n}/stages/{n}", AUTH_ADMIN_OR_NODE, h_checkpoint_put,LANE_DATABASE },
    { "GET",    "/v1/jobs/{id}/checkpoints/{n}/stages/{n}", AUTH_ADMIN_OR_NODE, h_checkpoint_get,LANE_DATABASE },
};

const size_t routes_count = sizeof routes / sizeof routes[0];

const struct upload_sink *routes_upload_sink(int index)
{
    return routes[index].fn == h_checkpoint_put ? &checkpoint_upload : NULL;
}
