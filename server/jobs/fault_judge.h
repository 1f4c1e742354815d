/* fault_judge.h - who is at fault when a tasklet reports a failure.
 *
 * A report names the reporting tasklet's node and the neighbour it waited
 * for (by node id; the hello proves which node a connection comes from).
 * Neither is trusted alone: the reporter may itself be the one cut off, or
 * two hops from the node at fault (its neighbour was waiting on that node
 * too).  So before a recovering job is re-planned, the recovery thread
 * probes the peer port of every node of the failed plan (peer_probe.h),
 * all at once, and judges each report of that epoch (later reports of
 * the epoch on its next sweep):
 *   - the named neighbour did not answer: it is the culprit ('node');
 *   - else the reporter did not answer: the reporter is;
 *   - else another node of the plan is gone (its host refused the probe:
 *     nothing listens there): that one is;
 *   - else, with a neighbour named, the link between the two ('link');
 *   - else (no neighbour: the reporter's own device or data) the reporter.
 * Every node of the plan whose host refused the probe is a culprit as well,
 * in a fault of its own when no report blamed it (two agents killed at
 * once, every report naming the same one).  When no node of the plan answers, the server cannot see the peer
 * network at all (agents behind NAT): only a refused probe blames a node,
 * and a report naming a neighbour blames the link.  A node whose peer
 * port the server knew it could not reach before (behind NAT or a closed
 * firewall, reach.c) is judged by its heartbeats instead: while they come
 * (the last within 10 s) its probe, silent or refused, is no evidence and
 * a report naming it blames the link; once they stop, its probe counts as
 * any other's.
 *
 * A culprit is left out of the re-plan of the epoch it failed, and out of
 * every later plan of the job once it was the culprit in two epochs; so is
 * the node the link verdicts of two epochs point to (cut off from its
 * peers, not from the server: job_link_suspect in
 * sql/017_read_models.sql).  A
 * blamed link is avoided (priced as unusable, so the search routes around
 * it where it can); the survivors' repair, which has no route to choose,
 * prices one that came back since at its measured values (planner.h,
 * planner_repair_problem).  job_excluded_nodes (sql/017_read_models.sql) says which; the planner
 * takes an excluded node back when too few are left without it and its
 * peer port answers; the job detail shows the faults and the excluded
 * nodes. */
#ifndef SHOAL_FAULT_JUDGE_H
#define SHOAL_FAULT_JUDGE_H

#include <stdint.h>

struct server;

/* Judges the reports of job `job` not judged yet, epoch by epoch, each
 * against the nodes of its own epoch's plan (a report that came while its
 * epoch was being re-planned is judged after); nothing when there are
 * none.  Blocks for up to PEER_PROBE_TIMEOUT_MS per epoch: for the
 * recovery thread.  Failures (the database) are logged; the reports are
 * judged on a later sweep. */
void fault_judge(struct server *srv, int64_t job);

/* fault_judge of every job with reports not judged yet. */
void fault_judge_all(struct server *srv);

#endif
