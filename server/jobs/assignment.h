/* assignment.h - what GET /v1/agent/assignment answers a node: its tasklet
 * in the current plan of a live job, with everything its agent needs to
 * start (spec, layer range, peers and the keys of its links to them,
 * resume point).
 *
 * One query answers any number of nodes, so the long-poll thread can
 * re-read every waiter a notification concerns in one round trip. */
#ifndef SHOAL_ASSIGNMENT_H
#define SHOAL_ASSIGNMENT_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdint.h>

#include "../../common/err.h"

struct assignment_answer {
    int64_t node_id;
    int64_t job_id;     /* 0: no assignment */
    int64_t epoch;      /* the job's plan epoch; 0 with no assignment */
    int recovering;     /* 1: the job is recovering (the epoch is being replaced) */
    json_t *body;       /* {"assignment": {...} or null}, owned */
};

/* Reads the current assignment of each of the `n` nodes in `nodes` on `c`
 * (a node with none gets job_id 0 and {"assignment": null}).  Fills
 * out[0..n-1] in the order of `nodes`; the caller json_decref's each body.
 * Returns 0, or -1 with `err` set (503 if the connection is gone) and
 * nothing to free. */
int assignment_query(PGconn *c, const int64_t *nodes, int n, struct assignment_answer *out,
                     struct shoal_err *err);

#endif
