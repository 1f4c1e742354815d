/* fault_judge.c - judging failure reports (fault_judge.h). */
#include "fault_judge.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "../store/db.h"
#include "peer_probe.h"
#include "../base/server.h"

/* s: a node the server cannot reach from outside that heartbeated this
 * recently is alive, whatever its probe says (fault_judge.h). */
#define JUDGE_HEARD_S "10"

/* $1 job: the unjudged reports of its oldest epoch that has some, and the
 * nodes of that epoch's plan with their peer addresses, and whether the
 * probe of each is no evidence ("unseen"); no row when every report is
 * judged. */
#define UNJUDGED_SQL \
    "WITH e AS (SELECT min(epoch) AS epoch FROM job_faults WHERE job_id = $1::bigint AND judged_at IS NULL)" \
    " SELECT json_build_object('epoch', e.epoch," \
    " 'faults', (SELECT coalesce(json_agg(json_build_object('id', f.id, 'reporter', f.reporter_node," \
    "   'suspect', f.suspect_node) ORDER BY f.id), '[]') FROM job_faults f" \
    "   WHERE f.job_id = $1::bigint AND f.epoch = e.epoch AND f.judged_at IS NULL)," \
    " 'nodes', (SELECT coalesce(json_agg(json_build_object('id', n.id, 'peer_address', n.peer_address," \
    "     'unseen', coalesce(n.peer_reachable = false AND n.peer_checked_address = n.peer_address" \
    "       AND n.last_heartbeat_at > now() - make_interval(secs => " JUDGE_HEARD_S "), false))" \
    "   ORDER BY n.id), '[]') FROM plans p JOIN assignments a ON a.plan_id = p.id JOIN nodes n ON n.id = a.node_id" \
    "   WHERE p.job_id = $1::bigint AND p.epoch = e.epoch))" \
    " FROM e WHERE e.epoch IS NOT NULL"

/* $1 job, $2 epoch, $3 node, $4 the judgement in words: a node of that
 * epoch's plan that the probe found gone, kept as a judged fault of its
 * own unless it is a culprit of that epoch already (two agents killed at
 * once: the reports may all name one of them). */
#define GONE_SQL \
    "INSERT INTO job_faults (job_id, epoch, stage, replica, reason, verdict, culprit_node, judgement, judged_at)" \
    " SELECT $1::bigint, $2::int, a.stage, a.replica, 'gone when the server probed the failed plan', 'node'," \
    "   $3::bigint, $4, now() FROM plans p JOIN assignments a ON a.plan_id = p.id" \
    " WHERE p.job_id = $1::bigint AND p.epoch = $2::int AND a.node_id = $3::bigint" \
    "   AND NOT EXISTS (SELECT 1 FROM job_faults f WHERE f.job_id = $1::bigint AND f.epoch = $2::int" \
    "     AND f.culprit_node = $3::bigint)" \
    " LIMIT 1 RETURNING id"

/* The jobs with reports not judged yet. */
#define UNJUDGED_JOBS_SQL \
    "SELECT coalesce(json_agg(DISTINCT job_id), '[]') FROM job_faults WHERE judged_at IS NULL"

/* Epochs judged per job and sweep at most (late reports of old epochs). */
#define JUDGE_EPOCHS_MAX 8

/* $1 fault, $2 verdict, $3 culprit or NULL, $4 the judgement in words. */
#define VERDICT_SQL \
    "UPDATE job_faults SET verdict = $2, culprit_node = $3::bigint, judgement = $4, judged_at = now()" \
    " WHERE id = $1::bigint AND judged_at IS NULL RETURNING id"

/* A node whose peer port the server already knew it cannot reach (behind
 * NAT or a closed firewall: reach.c) and that still heartbeats: its probe
 * is not counted either way. */
#define PROBE_UNSEEN 2

/* The probe results of the plan's nodes (PEER_PROBE_* or PROBE_UNSEEN). */
struct probed {
    int n, answered;          /* nodes, and how many answered */
    int64_t *id;
    int *ok;
    char (*why)[PEER_PROBE_WHY_MAX];
    const char **addr;
};

/* Index of node `id` among the probed, or -1. */
static int probed_at(const struct probed *p, int64_t id)
{
    for (int i = 0; i < p->n; i++)
        if (p->id[i] == id)
            return i;
    return -1;
}

/* 1 when node `id` of the plan is gone (its host refused the probe) or
 * did not answer while others did (the server sees the peer network). */
static int silent(const struct probed *p, int64_t id)
{
    int i = probed_at(p, id);
    return i >= 0 && p->ok[i] != PROBE_UNSEEN &&
           (p->ok[i] == PEER_PROBE_REFUSED || (p->answered > 0 && p->ok[i] != PEER_PROBE_ANSWERED));
}

/* Judges one report (fault_judge.h's rules) into verdict, culprit (0:
 * none) and words. */
static void judge_one(const struct probed *p, int64_t reporter, int64_t suspect, const char **verdict,
                      int64_t *culprit, char *words, size_t len)
{
    int i;
    *verdict = "node";
    if (suspect && silent(p, suspect)) {
        i = probed_at(p, suspect);
        *culprit = suspect;
        snprintf(words, len, "node %lld, the neighbour named, did not answer at %s: %s", (long long)suspect,
                 p->addr[i], p->why[i]);
        return;
    }
    if (reporter && silent(p, reporter)) {
        i = probed_at(p, reporter);
        *culprit = reporter;
        snprintf(words, len, "node %lld, the reporter, did not answer at %s: %s", (long long)reporter, p->addr[i],
                 p->why[i]);
        return;
    }
    for (i = 0; i < p->n; i++) {
        if (p->ok[i] == PEER_PROBE_REFUSED) {
            *culprit = p->id[i];
            snprintf(words, len, "node %lld of the plan is gone from %s: %s", (long long)p->id[i], p->addr[i],
                     p->why[i]);
            return;
        }
    }
    const char *seen = p->answered ? "every node of the plan answered the server's probe"
                                   : "the server reaches no peer port of the plan";
    if (suspect) {
        *verdict = "link";
        *culprit = 0;
        snprintf(words, len, "%s: the link between nodes %lld and %lld", seen, (long long)reporter,
                 (long long)suspect);
        return;
    }
    *culprit = reporter;
    snprintf(words, len, "%s; no neighbour named: node %lld failed by itself", seen, (long long)reporter);
}

/* Probes every node of the plan in `doc`; 0, or -1 out of memory. */
static int probe_plan(const json_t *nodes, struct probed *p)
{
    p->n = (int)json_array_size(nodes);
    p->id = calloc((size_t)p->n + 1, sizeof *p->id);
    p->ok = calloc((size_t)p->n + 1, sizeof *p->ok);
    p->why = calloc((size_t)p->n + 1, sizeof *p->why);
    p->addr = calloc((size_t)p->n + 1, sizeof *p->addr);
    if (!p->id || !p->ok || !p->why || !p->addr)
        return -1;
    for (int i = 0; i < p->n; i++) {
        const json_t *node = json_array_get(nodes, (size_t)i);
        const char *addr = json_string_value(json_object_get(node, "peer_address"));
        p->id[i] = json_integer_value(json_object_get(node, "id"));
        p->addr[i] = addr ? addr : "";
    }
    peer_probe_all(p->addr, p->n, PEER_PROBE_TIMEOUT_MS, p->ok, p->why);
    for (int i = 0; i < p->n; i++) {
        if (json_is_true(json_object_get(json_array_get(nodes, (size_t)i), "unseen")) &&
            p->ok[i] != PEER_PROBE_ANSWERED) {
            p->ok[i] = PROBE_UNSEEN;
            snprintf(p->why[i], PEER_PROBE_WHY_MAX, "the server cannot reach it from outside (NAT, a firewall), "
                     "and it heartbeats");
        }
        p->answered += p->ok[i] == PEER_PROBE_ANSWERED;
    }
    return 0;
}

/* Judges the unjudged reports of job `job`'s oldest epoch that has some:
 * 1 when there were some, 0 when none, -1 when they cannot be (the
 * database, memory; logged). */
static int judge_epoch(struct server *srv, int64_t job)
{
    struct shoal_err e;
    struct probed p = { 0 };
    char p_job[24];
    const char *params[] = { db_param_i64(p_job, job) };
    json_t *doc = db_query_json(srv->db, UNJUDGED_SQL, 1, params, "job", &e);
    json_t *faults = json_object_get(doc, "faults");
    int rc = -1;
    if (!doc) {
        if (e.status == 404)
            rc = 0;
        else if (e.status != 503)
            log_warn("recovery: cannot read the failure reports of job %lld: %s", (long long)job, e.message);
        goto out;
    }
    if (probe_plan(json_object_get(doc, "nodes"), &p) != 0) {
        log_error("recovery: out of memory judging job %lld", (long long)job);
        goto out;
    }
    size_t i;
    json_t *f;
    json_array_foreach(faults, i, f) {
        const char *verdict;
        int64_t culprit;
        char words[400], v[2][24];
        judge_one(&p, json_integer_value(json_object_get(f, "reporter")),
                  json_integer_value(json_object_get(f, "suspect")), &verdict, &culprit, words, sizeof words);
        const char *vp[] = { db_param_i64(v[0], json_integer_value(json_object_get(f, "id"))), verdict,
                             culprit ? db_param_i64(v[1], culprit) : NULL, words };
        json_t *res = db_query_json(srv->db, VERDICT_SQL, 4, vp, "failure report", &e);
        if (res)
            log_warn("recovery: job %lld epoch %lld failure judged: %s", (long long)job,
                     (long long)json_integer_value(json_object_get(doc, "epoch")), words);
        else if (e.status != 404)
            log_warn("recovery: cannot store the judgement of a failure of job %lld: %s", (long long)job, e.message);
        json_decref(res);
        if (!res && e.status != 404)
            goto out;
    }
    for (int k = 0; k < p.n; k++) {
        if (p.ok[k] != PEER_PROBE_REFUSED)
            continue;
        char words[400], v[3][24];
        snprintf(words, sizeof words, "node %lld of the plan is gone from %s: %s", (long long)p.id[k], p.addr[k],
                 p.why[k]);
        const char *gp[] = { p_job, db_param_i64(v[0], json_integer_value(json_object_get(doc, "epoch"))),
                             db_param_i64(v[1], p.id[k]), words };
        json_t *res = db_query_json(srv->db, GONE_SQL, 4, gp, "plan node", &e);
        if (res)
            log_warn("recovery: job %lld epoch %s: %s", (long long)job, v[0], words);
        json_decref(res);
    }
    rc = 1;
out:
    free(p.id);
    free(p.ok);
    free(p.why);
    free(p.addr);
    json_decref(doc);
    return rc;
}

void fault_judge(struct server *srv, int64_t job)
{
    for (int k = 0; k < JUDGE_EPOCHS_MAX && judge_epoch(srv, job) == 1; k++)
        ;
}

void fault_judge_all(struct server *srv)
{
    struct shoal_err e;
    json_t *jobs = db_query_json(srv->db, UNJUDGED_JOBS_SQL, 0, NULL, "failure reports", &e);
    size_t i;
    json_t *id;
    if (!jobs && e.status != 503)
        log_warn("recovery: cannot list the failure reports to judge: %s", e.message);
    json_array_foreach(jobs, i, id)
        fault_judge(srv, json_integer_value(id));
    json_decref(jobs);
}
