/* planner.h - plans a job: the scheduler over the live nodes and the latest
 * links, stored as the job's next plan epoch with one assignment per
 * tasklet.  POST /v1/jobs/{id}/schedule (h_schedule.c) runs it for an
 * operator; the recovery thread (recovery.c) runs it for a job that lost a
 * node.
 *
 * Where the new epoch starts: a job that has run resumes from its own
 * latest complete checkpoint whose files still match their SHA-256 (older
 * ones are tried when the newest is damaged); a job that has not run, or
 * has no such checkpoint, starts from its initial weights (its step-0
 * checkpoint, uploaded by the admin: checkpoints.h) when it has them, else
 * as its spec says (step 0 from the seed, or its resume_from).  The steps from there on are dropped from job_steps when the plan is
 * stored: they will be trained again, so each step is recorded once. */
#ifndef SHOAL_PLANNER_H
#define SHOAL_PLANNER_H

#include <jansson.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../sched/sched.h"

struct server;

struct plan_request {
    char cost_model[8];           /* "shoal" or "dtfm" */
    int64_t seed;
    int64_t budget_ms;            /* search time */
    int64_t candidates;           /* 0: no limit */
    int dry_run;                  /* show the plan, store nothing */
    double fill_latency_ms;       /* for links never measured; INPUT_NO_FILL: they are an error */
    double fill_bandwidth_gbps;
    int only_if_recovering;       /* store only while the job is still recovering (the recovery thread) */
    int fewer_replicas;           /* too few nodes: plan fewer replicas with more micro-batches each, the
                                     global batch kept (sync every_step), rather than none */
    int replan;                   /* a running job may be re-planned (and retrain since its checkpoint) */
};

/* Everything one planning run needs; owned by its caller. */
struct plan_work;

/* Checks the job (pending, scheduled, running or recovering), loads the
 * live nodes (registered, heartbeat within --heartbeat-timeout, not draining
 * or lost, not planned for another live job) and their links, picks the
 * resume point, and builds the problem.  Quick: no search.  Returns 0 with
 * *out set (free with planner_free), or -1 with e set: 404, 409 conflict
 * (state, or initial weights incomplete or damaged), 409 not_enough_nodes,
 * 422 (links), 503. */
int planner_prepare(struct server *srv, int64_t job_id, const struct plan_request *req, struct plan_work **out,
                    struct shoal_err *e);

/* Searches, computes the baselines and, unless a dry run, stores the plan
 * as the next epoch (state 'scheduled').  Returns the plan's detail as the
 * schedule endpoint answers it (a new reference), or NULL with e set (409 if
 * the job changed state meanwhile).  Takes about budget_ms.  The detail's
 * `predictions` cost the plan (its nodes and layers) under both models. */
json_t *planner_run(struct server *srv, struct plan_work *w, struct shoal_err *e);

/* An assignment given by the operator (POST /v1/jobs/{id}/plan). */
struct plan_force {
    int stages, replicas;          /* as given; must match the job's */
    const int64_t *node_ids;       /* [stage * replicas + replica] */
    const int *layer_start;        /* [stage], with layer_end; NULL: the cost model splits the layers */
    const int *layer_end;
};

/* Checks the forced assignment against the job and the live nodes
 * (planner_prepare's), costs it with the requested model (the layers as
 * given, or split by the model) and, unless a dry run, stores it as the
 * next epoch like a scheduled plan.  Answers like planner_run, with
 * "forced": true and no baselines.  Returns NULL with e set: 422 for a
 * shape that is not the job's, a node that is not available, a node
 * twice, bad layer ranges or a plan that does not fit in memory; 409 as
 * planner_run. */
json_t *planner_force(struct server *srv, struct plan_work *w, const struct plan_force *f, struct shoal_err *e);

/* A live resume offered to planner_run by the recovery thread
 * (live_resume.h): the current epoch's layers and surviving nodes, their
 * empty places filled with spares, starting at `step` from the state the
 * survivors hold. */
struct plan_repair {
    struct sched_plan plan;     /* node indices into the problem's nodes */
    int64_t step;
    int *roots;                 /* [stage]: the replica that hands its state round, -1: none needed */
};

const struct sched_problem *planner_problem(const struct plan_work *w);
/* The problem a repair is priced in: planner_problem's, except that the
 * links blamed for the failure that have come back since (measured again,
 * or the relay they go through answering again: recovery only) are priced
 * as measured instead of unusable.  Valid as long as w. */
const struct sched_problem *planner_repair_problem(const struct plan_work *w);
/* When the failure being recovered from went through the server's relay
 * (a link it blamed is relayed) and the relay did not answer just now,
 * what a re-plan would wait for ("relay HOST:PORT to answer again (why)",
 * owned by w): the repair is better waited for (live_resume.h); else NULL. */
const char *planner_relay_down(const struct plan_work *w);
/* The checkpoint step the work would resume from; -1: the start. */
int64_t planner_resume_step(const struct plan_work *w);
/* The job's total steps. */
int64_t planner_total_steps(const struct plan_work *w);

/* Hands r to w (freed with it).  planner_run then costs both its search's
 * plan (in planner_problem) and r's (in planner_repair_problem) under the
 * job's cost model and stores r when, over the steps left, r trains no
 * slower than the search's plan does with the steps a checkpoint resume
 * trains again: c_r (T - s) <= c_s (T - s + s - checkpoint); a move off a
 * drained node stores r whenever it fits in memory (planner.c,
 * choose_repair).  Its detail says so in "live_resume". */
void planner_offer_repair(struct plan_work *w, struct plan_repair *r);
/* 1 when planner_run stored the repair: the epoch goes on from the survivors. */
int planner_resume_live(const struct plan_work *w);

/* The cost model the work was prepared with (for metrics). */
enum sched_cost planner_cost(const struct plan_work *w);

void planner_free(struct plan_work *w);

#endif
