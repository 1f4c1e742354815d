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
#include "../../common/relay_ticket.h"

struct assignment_answer {
    int64_t node_id;
    int64_t job_id;     /* 0: no assignment */
    int64_t epoch;      /* the job's plan epoch; 0 with no assignment */
    int recovering;     /* 1: the job is recovering (the epoch is being replaced) */
    json_t *body;       /* {"assignment": {...} or null}, owned */
};

/* What the relay tickets of the answers are signed with
 * (common/relay_ticket.h): the secret the server shares with its --relay
 * and how long a ticket admits its end; secret.len 0: no tickets. */
struct assignment_tickets {
    struct relay_secret secret;
    long ttl_s;                 /* s from the answer */
};

/* Reads the current assignment of each of the `n` nodes in `nodes` on `c`
 * (a node with none gets job_id 0 and {"assignment": null}).  Fills
 * out[0..n-1] in the order of `nodes`; the caller json_decref's each body.
 * Each relayed link of a node's tasklet carries, beside its way, the
 * ticket for the node's end ("next_ticket", "tie_ticket", "up_ticket",
 * hex), signed under `tickets` (NULL or no secret: none).  Returns 0, or -1
 * with `err` set (503 if the connection is gone) and nothing to free. */
int assignment_query(PGconn *c, const int64_t *nodes, int n, const struct assignment_tickets *tickets,
                     struct assignment_answer *out, struct shoal_err *err);

#endif
