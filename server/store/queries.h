/* queries.h - SQL that more than one handler runs, so that what the API
 * shows and what the scheduler reads are the same facts in the same shape. */
#ifndef SHOAL_QUERIES_H
#define SHOAL_QUERIES_H

#include "checkpoints.h"   /* CKPT_FILES_AT_SQL */

/* Read models (the JSON documents the API answers with) are functions
 * in the database, sql/017_read_models.sql: node_json(nodes),
 * node_view_json(nodes), job_json(jobs), job_detail_json(id),
 * links_matrix_json() (GET /v1/links, the planner's links), and the
 * rules they show (job_excluded_nodes, job_avoided_links, job_val_losses,
 * job_traffic, job_tasklets_measured).  What stays here is SQL that
 * decides (recovery, progress, checkpoints) and is spliced into the
 * statements that act on it. */

/* True when job `job` (an SQL expression not naming an alias j) has stored its final checkpoint
 * (step total_steps) whole: CKPT_FILES_AT_SQL files a stage.  A job
 * succeeds once this holds and every tasklet of its current epoch has
 * reported its last step, whichever comes second (h_progress.c,
 * h_checkpoints.c). */
#define JOB_FINAL_STORED_SQL(job) \
    "coalesce((SELECT count(*) >= j.stages * " CKPT_FILES_AT_SQL("j.total_steps") " FROM jobs j" \
    "   JOIN checkpoints c ON c.job_id = j.id AND c.step = j.total_steps AND c.stage < j.stages" \
    "     AND c.replica < " CKPT_FILES_AT_SQL("j.total_steps") \
    "   WHERE j.id = " job " GROUP BY j.id), false)"

/* The tasklets of job row `j`'s current plan epoch (stages x its replicas). */
#define JOB_TASKLETS_SQL(j) \
    "(" j ".stages * (SELECT p.replicas FROM plans p WHERE p.job_id = " j ".id AND p.epoch = " j ".plan_epoch))"

/* True when live job row `r` (an alias other than j) is done: every
 * tasklet of its epoch reported its last step (or it was re-planned at its
 * last step, planner.c), and its final checkpoint is stored
 * (checkpoints_job_done, and the recovery thread's sweep). */
#define JOB_DONE_WHERE_SQL(r) \
    r ".state IN ('scheduled', 'running') AND " r ".tasklets_finished >= " JOB_TASKLETS_SQL(r) \
    " AND " JOB_FINAL_STORED_SQL(r ".id")

/* True when node `node` (an SQL expression) has held a tasklet of job row
 * `j` in any of its epochs.  A node's routes find a job only when it is
 * one of the job's: to any other node the job does not exist, and its
 * answers say nothing of its state, shape or epoch. */
#define JOB_MEMBER_SQL(j, node) \
    "EXISTS (SELECT 1 FROM plans mp JOIN assignments ma ON ma.plan_id = mp.id" \
    " WHERE mp.job_id = " j ".id AND ma.node_id = " node ")"

/* True when step `step` of job `job` is whole: every tasklet of the epoch
 * that trained it (stages x that plan's replicas: a re-plan short of nodes
 * may train fewer, planner.h) reported it.  The arguments are SQL
 * expressions. */
#define STEP_WHOLE_SQL(job, step) \
    "(SELECT count(*) >= coalesce(max(sj.stages * sp.replicas), 1) FROM job_steps ss" \
    " JOIN plans sp ON sp.job_id = ss.job_id AND sp.epoch = ss.epoch JOIN jobs sj ON sj.id = ss.job_id" \
    " WHERE ss.job_id = " job " AND ss.step = " step ")"

/* The loss that replica `replica`'s last stage (`stage`) passed round the
 * ring at step `step` of epoch `epoch` before the all-reduce: the next
 * replica's report carries it (ring_prev_loss).  A scalar subquery, NULL
 * when no such report has it.  The arguments are SQL expressions. */
#define PASSED_LOSS_SQL(job, step, stage, replica, replicas, epoch) \
    "(SELECT x.ring_prev_loss FROM job_steps x WHERE x.job_id = " job " AND x.step = " step \
    " AND x.stage = " stage " AND x.replica = (" replica " + 1) % " replicas " AND x.epoch = " epoch ")"

/* The SET list of an UPDATE of jobs that sends a live job to recovery:
 * 'recovering' because of `reason`, re-planned once `after` has passed, or
 * 'failed' when it has been re-planned `max` times already.  The arguments
 * are SQL expressions (parameters, columns). */
#define JOB_RECOVER_SET(reason, max, after) \
    " state = CASE WHEN recoveries >= " max " THEN 'failed' ELSE 'recovering' END," \
    " failure_reason = CASE WHEN recoveries >= " max \
    "   THEN " reason " || ' (after ' || recoveries || ' recoveries)' END," \
    " finished_at = CASE WHEN recoveries >= " max " THEN now() END," \
    " recovery_reason = " reason ", recovery_waiting = NULL, recover_after = " after "," \
    " recovery_started_at = now(), recovery_moved = false," \
    " recoveries = recoveries + (recoveries < " max ")::int, updated_at = now()"

/* The SET list of an UPDATE of jobs that moves a live job off a node that
 * stays alive (a drain): 'recovering' because of `reason`, re-planned at
 * once, from the survivors' memory where it can (live_resume.h); nothing
 * failed, so no recovery is counted (015_drain_moves.sql). */
#define JOB_MOVE_SET(reason) \
    " state = 'recovering', recovery_reason = " reason ", recovery_waiting = NULL, recover_after = now()," \
    " recovery_started_at = now(), recovery_moved = true, updated_at = now()"

/* True when job `j` of current plan `p` still needs the node at its
 * assignment `a`: it trains, or that place's part of its final checkpoint
 * is still to be stored (a trained job waits for it). */
#define JOB_NEEDS_PLACE_SQL(j, p, a) \
    "(" j ".tasklets_finished < " j ".stages * " p ".replicas" \
    " OR (" a ".replica < " CKPT_FILES_AT_SQL(j ".total_steps") " AND NOT EXISTS (SELECT 1 FROM checkpoints c" \
    "   WHERE c.job_id = " j ".id AND c.step = " j ".total_steps AND c.stage = " a ".stage" \
    "   AND c.replica = " a ".replica)))"

#endif
