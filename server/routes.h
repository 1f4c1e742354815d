/* routes.h - the one route table and the handlers it names. */
#ifndef SHOAL_ROUTES_H
#define SHOAL_ROUTES_H

#include <stddef.h>

#include "router.h"

extern const struct route routes[];
extern const size_t routes_count;

/* h_health.c: probes, metrics and static documents */
void h_healthz(struct request *rq, struct response *rs);
void h_readyz(struct request *rq, struct response *rs);
void h_metrics(struct request *rq, struct response *rs);
void h_openapi(struct request *rq, struct response *rs);
void h_index(struct request *rq, struct response *rs);

/* h_nodes.c: agents registering and the fleet */
void h_register(struct request *rq, struct response *rs);
void h_heartbeat(struct request *rq, struct response *rs);
void h_nodes_list(struct request *rq, struct response *rs);
void h_node_get(struct request *rq, struct response *rs);
void h_node_drain(struct request *rq, struct response *rs);

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

#endif
