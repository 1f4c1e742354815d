/* routes.h - the one route table and the handlers it names. */
#ifndef SHOAL_ROUTES_H
#define SHOAL_ROUTES_H

#include <stddef.h>

#include "../http/router.h"

extern const struct route routes[];
extern const size_t routes_count;

struct upload_sink;
/* The sink of a route whose body is streamed (see http.h), or NULL for a
 * route whose body is read whole. */
const struct upload_sink *routes_upload_sink(int index);

/* h_health.c: probes and static documents */
void h_healthz(struct request *rq, struct response *rs);
void h_readyz(struct request *rq, struct response *rs);
void h_openapi(struct request *rq, struct response *rs);
/* Answers 200 with the embedded static file `name` (a base name, see
 * embedded.h) as `type`, or 404 if it is not built in.  `type` must outlive
 * the response (a string literal). */
void h_static(struct response *rs, const char *name, const char *type);

/* h_web.c: the dashboard's files (web/), compiled in */
void h_web_index(struct request *rq, struct response *rs);
void h_web_js(struct request *rq, struct response *rs);
void h_web_css(struct request *rq, struct response *rs);
void h_web_icon(struct request *rq, struct response *rs);

/* h_metrics.c: the Prometheus exposition, from memory and the database */
void h_metrics(struct request *rq, struct response *rs);

/* h_nodes.c: agents registering and the fleet */
void h_register(struct request *rq, struct response *rs);
void h_heartbeat(struct request *rq, struct response *rs);
void h_nodes_list(struct request *rq, struct response *rs);
void h_node_get(struct request *rq, struct response *rs);
void h_node_drain(struct request *rq, struct response *rs);
void h_node_undrain(struct request *rq, struct response *rs);
void h_node_remove(struct request *rq, struct response *rs);

/* h_links.c: the measured link matrix */
void h_links_put(struct request *rq, struct response *rs);
void h_links_get(struct request *rq, struct response *rs);

/* h_jobs.c: training jobs */
void h_job_create(struct request *rq, struct response *rs);
void h_jobs_list(struct request *rq, struct response *rs);
void h_job_get(struct request *rq, struct response *rs);
void h_job_cancel(struct request *rq, struct response *rs);

/* h_schedule.c: the scheduler over the live fleet */
void h_job_schedule(struct request *rq, struct response *rs);
void h_job_plan(struct request *rq, struct response *rs);

/* h_agent.c: a node's assignment (long-polled) and its probe targets */
void h_assignment(struct request *rq, struct response *rs);
void h_probes(struct request *rq, struct response *rs);

/* h_progress.c: per-step progress and failures reported by agents */
void h_progress(struct request *rq, struct response *rs);
void h_failure(struct request *rq, struct response *rs);
void h_dataset(struct request *rq, struct response *rs);

/* h_nccl.c: the NCCL unique id a stage's replicas share */
void h_nccl_put(struct request *rq, struct response *rs);
void h_nccl_get(struct request *rq, struct response *rs);

/* h_checkpoints.c: the checkpoint store; uploads are streamed to disk */
extern const struct upload_sink checkpoint_upload;
void h_checkpoint_put(struct request *rq, struct response *rs);
void h_checkpoint_get(struct request *rq, struct response *rs);
void h_checkpoints_list(struct request *rq, struct response *rs);

#endif
