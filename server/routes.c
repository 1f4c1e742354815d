#include "routes.h"

/* Every endpoint, once.  The router also accepts versioned paths without
 * their "/v1" prefix (see router.h). */
const struct route routes[] = {
    { "GET",    "/",                    AUTH_OPEN,   h_web_index },
    { "GET",    "/app.js",              AUTH_OPEN,   h_web_js },
    { "GET",    "/app.css",             AUTH_OPEN,   h_web_css },
    { "GET",    "/favicon.svg",         AUTH_OPEN,   h_web_icon },
    { "GET",    "/healthz",             AUTH_OPEN,   h_healthz },
    { "GET",    "/readyz",              AUTH_OPEN,   h_readyz },
    { "GET",    "/metrics",             AUTH_OPEN,   h_metrics },
    { "GET",    "/v1/openapi.yaml",     AUTH_OPEN,   h_openapi },
    { "POST",   "/v1/agent/register",   AUTH_JOIN,   h_register },
    { "POST",   "/v1/agent/heartbeat",  AUTH_NODE,   h_heartbeat },
    { "GET",    "/v1/nodes",            AUTH_ADMIN,  h_nodes_list },
    { "GET",    "/v1/nodes/{id}",       AUTH_ADMIN,  h_node_get },
    { "DELETE", "/v1/nodes/{id}",       AUTH_ADMIN,  h_node_drain },
    { "PUT",    "/v1/links",            AUTH_NODE,   h_links_put },
    { "GET",    "/v1/links",            AUTH_ADMIN,  h_links_get },
    { "POST",   "/v1/jobs",             AUTH_ADMIN,  h_job_create },
    { "GET",    "/v1/jobs",             AUTH_ADMIN,  h_jobs_list },
    { "GET",    "/v1/jobs/{id}",        AUTH_ADMIN,  h_job_get },
    { "DELETE", "/v1/jobs/{id}",        AUTH_ADMIN,  h_job_cancel },
    { "POST",   "/v1/jobs/{id}/schedule", AUTH_ADMIN, h_job_schedule },
    { "POST",   "/v1/jobs/{id}/plan",   AUTH_ADMIN,  h_job_plan },
    { "GET",    "/v1/agent/assignment", AUTH_NODE,   h_assignment },
    { "GET",    "/v1/agent/probes",     AUTH_NODE,   h_probes },
    { "POST",   "/v1/agent/progress",   AUTH_NODE,   h_progress },
    { "POST",   "/v1/agent/failure",    AUTH_NODE,   h_failure },
    { "POST",   "/v1/agent/dataset",    AUTH_NODE,   h_dataset },
    { "PUT",    "/v1/agent/nccl",       AUTH_NODE,   h_nccl_put },
    { "GET",    "/v1/agent/nccl",       AUTH_NODE,   h_nccl_get },
    { "GET",    "/v1/jobs/{id}/checkpoints", AUTH_ADMIN, h_checkpoints_list },
    { "PUT",    "/v1/jobs/{id}/checkpoints/{n}/stages/{n}", AUTH_ADMIN_OR_NODE, h_checkpoint_put },
    { "GET",    "/v1/jobs/{id}/checkpoints/{n}/stages/{n}", AUTH_ADMIN_OR_NODE, h_checkpoint_get },
};

const size_t routes_count = sizeof routes / sizeof routes[0];

const struct upload_sink *routes_upload_sink(int index)
{
    return routes[index].fn == h_checkpoint_put ? &checkpoint_upload : NULL;
}
