/* patience.h - how long an agent waits for the server, and how long the
 * server may take to answer it: one relation, in one place.
 *
 * The server answers every request that needs the database within
 * --db-timeout + PATIENCE_DB_GRACE_S, a 503 (database_busy or
 * database_unavailable) at worst: a request waits at most --db-timeout
 * for a database worker and has that plus the grace in all (http.c's
 * lanes), every statement is cancelled by the database after --db-timeout
 * and given up by the server PATIENCE_DB_GRACE_S later (db.c).  An agent
 * waits PATIENCE_AGENT_CALL_S for the answer to any call it makes
 * (heartbeat, failure, links, probes, dataset, NCCL id) and
 * PATIENCE_AGENT_POLL_S for its assignment long-poll, which asks the
 * server to wait PATIENCE_POLL_WAIT_S and is answered after up to that,
 * with a database query before and one after (longpoll.h).  So that an
 * agent always hears the server's 503 instead of timing out on its own
 * (and tells a frozen database from a server that is gone), these hold:
 *
 *   answer = --db-timeout + PATIENCE_DB_GRACE_S
 *   answer + PATIENCE_MARGIN_S                          <= PATIENCE_AGENT_CALL_S
 *   PATIENCE_POLL_WAIT_S + 2 answer + PATIENCE_MARGIN_S <= PATIENCE_AGENT_POLL_S
 *
 * and so that a heartbeat the database serves slowly, but within its
 * time, does not make its node lost (the next one follows an agent's
 * heartbeat interval after the answer):
 *
 *   answer + PATIENCE_HEARTBEAT_INTERVAL_S < --heartbeat-timeout
 *
 * The defaults keep them (checked below, at compile time); the server
 * warns at start-up about options that break them (config.h,
 * config_contradictions).  An agent cannot know the server's options: its
 * patience is fixed here, and --db-timeout may grow up to
 * PATIENCE_DB_TIMEOUT_MAX_S before it stops fitting. */
#ifndef SHOAL_PATIENCE_H
#define SHOAL_PATIENCE_H

#define PATIENCE_DB_GRACE_S 2          /* s the server waits past --db-timeout for the database's own answer */
#define PATIENCE_DB_TIMEOUT_S 5        /* s: --db-timeout's default */
#define PATIENCE_MARGIN_S 3            /* s of slack for a loaded server and the network between */
#define PATIENCE_AGENT_CALL_S 15       /* s an agent waits for the answer to one call */
#define PATIENCE_POLL_WAIT_S 25        /* s the agent's assignment long-poll asks the server to wait */
#define PATIENCE_AGENT_POLL_S 55       /* s an agent waits for its long-poll's answer */
#define PATIENCE_HEARTBEAT_INTERVAL_S 2   /* s: the agent's --heartbeat-interval default */
#define PATIENCE_HEARTBEAT_TIMEOUT_S 10   /* s: the server's --heartbeat-timeout default */

/* s a request that needs the database may take, with --db-timeout `db_timeout_s` */
#define PATIENCE_SERVER_ANSWER_S(db_timeout_s) ((db_timeout_s) + PATIENCE_DB_GRACE_S)
/* s: the largest --db-timeout whose answers still reach an agent before it gives up */
#define PATIENCE_DB_TIMEOUT_MAX_S (PATIENCE_AGENT_CALL_S - PATIENCE_MARGIN_S - PATIENCE_DB_GRACE_S)

_Static_assert(PATIENCE_DB_TIMEOUT_S <= PATIENCE_DB_TIMEOUT_MAX_S,
               "--db-timeout's default must be answered inside an agent's patience");
_Static_assert(PATIENCE_POLL_WAIT_S + 2 * PATIENCE_SERVER_ANSWER_S(PATIENCE_DB_TIMEOUT_MAX_S) + PATIENCE_MARGIN_S <=
                   PATIENCE_AGENT_POLL_S,
               "a long-poll must be answered inside the agent's patience for every --db-timeout that fits a call");
_Static_assert(PATIENCE_SERVER_ANSWER_S(PATIENCE_DB_TIMEOUT_S) + PATIENCE_HEARTBEAT_INTERVAL_S <
                   PATIENCE_HEARTBEAT_TIMEOUT_S,
               "a slow heartbeat at the default --db-timeout must not make its node lost");

#endif
