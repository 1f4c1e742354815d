/* h_agent.c - what an agent asks for: its assignment (long-polled, see
 * longpoll.h) and the peers it should measure links to. */
#include <openssl/crypto.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "../jobs/assignment.h"
#include "../http/http.h"
#include "../jobs/longpoll.h"
#include "routes.h"
#include "../store/db.h"

#define PROBES_MAX_TARGETS 64   /* per answer; the agent asks again after probing */
#define PROBE_TICKET_S 600      /* s the relay admits a probe on the answer's ticket */

/* answer's "relay_ticket": the ticket for node's probe of the relay the
 * answer names (hex), or null when it names none. */
static int probe_ticket(struct server *srv, json_t *answer, int64_t node)
{
    struct relay_ticket t = { .side = RELAY_SIDE_PROBE, .dialer = { .node = node },
                              .expires = (int64_t)time(NULL) + PROBE_TICKET_S };
    char hex[RELAY_TICKET_HEX];
    if (!json_is_string(json_object_get(answer, "relay")) || srv->relay_secret.len == 0)
        return json_object_set_new(answer, "relay_ticket", json_null());
    relay_ticket_sign(&srv->relay_secret, &t);
    relay_ticket_hex(&t, hex);
    return json_object_set_new(answer, "relay_ticket", json_string(hex));
}

void h_assignment(struct request *rq, struct response *rs)
{
    struct server *srv = rq->srv;
    struct shoal_err e;
    struct assignment_answer ans;
    long long wait = 0, job = 0, epoch = 0, recovering = -1;
    int has_job, has_epoch;
    if (request_query_int(rq, rs, "wait", 0, LONGPOLL_MAX_WAIT_S, &wait) < 0 ||
        (has_job = request_query_int(rq, rs, "job", 1, INT64_MAX, &job)) < 0 ||
        (has_epoch = request_query_int(rq, rs, "epoch", 0, INT32_MAX, &epoch)) < 0 ||
        request_query_int(rq, rs, "recovering", 0, 1, &recovering) < 0)
        return;
    if (has_job != has_epoch) {
        reply_fail(rs, 400, "invalid_field", has_job ? "epoch" : "job",
                   "job and epoch go together: both name the assignment the node knows, neither means none");
        return;
    }
    /* Read before the query, so a change committed after it is not missed. */
    unsigned long seq = longpoll_seq(srv->longpoll);
    PGconn *c = db_acquire(srv->db, &e);
    struct assignment_tickets tickets = { .secret = srv->relay_secret, .ttl_s = srv->cfg.relay_ticket_ttl_s };
    int rc = c ? assignment_query(c, &rq->node_id, 1, &tickets, &ans, &e) : -1;
    OPENSSL_cleanse(&tickets, sizeof tickets);
    db_release(srv->db, c);
    if (rc != 0) {
        reply_error(rs, &e);
        return;
    }
    reply_json(rs, 200, ans.body);
    /* Full or stopping: the answer above goes out now, which is still correct. */
    /* The node's view is (job, epoch, recovering) as it says (recovering
     * left out: as it is now): a job that starts recovering keeps its
     * epoch, and the node must hear of it. */
    if (recovering < 0)
        recovering = ans.recovering;
    if (wait > 0 && ans.job_id == job && ans.epoch == epoch && ans.recovering == recovering)
        longpoll_wait(srv->longpoll, rq, rq->node_id, job, epoch, ans.recovering, (double)wait, seq);
}

void h_probes(struct request *rq, struct response *rs)
{
    struct shoal_err e;
    char p_self[24], p_timeout[24], p_stale[24], p_max[24];
    const char *params[] = { db_param_i64(p_self, rq->node_id),
                             db_param_i64(p_timeout, rq->srv->cfg.heartbeat_timeout),
                             db_param_i64(p_stale, rq->srv->cfg.link_stale_s),
                             db_param_i64(p_max, PROBES_MAX_TARGETS),
                             rq->srv->cfg.relay[0] ? rq->srv->cfg.relay : NULL };
    /* Live idle peers whose latest link from the caller is missing or older
     * than link_stale_s, and that the caller did not fail to connect to
     * within link_stale_s; never measured first, then the oldest.  A busy peer
     * is training: a probe's bulk transfer would slow its steps and the
     * measurement would be wrong anyway, so it waits until the peer is idle.
     * "relay": the server's relay while the caller's link to it is not
     * measured or older than link_stale_s, or its latest probe of it
     * failed (relay_reach), else null; "relay_ticket" the
     * caller's ticket to probe it. */
    json_t *res = db_query_json(rq->srv->db,
        "SELECT json_build_object('targets', coalesce(json_agg(json_build_object('node_id', t.id,"
        "   'peer_address', t.peer_address) ORDER BY t.measured_at NULLS FIRST, t.id), '[]'),"
        "  'stale_after_s', $3::bigint,"
        "  'relay', (SELECT $5::text WHERE $5::text IS NOT NULL AND (NOT EXISTS (SELECT 1 FROM relay_links r"
        "    WHERE r.node_id = $1 AND r.relay = $5 AND r.measured_at > now() - make_interval(secs => $3::bigint))"
        "    OR NOT relay_usable($1, $5))))"
        " FROM (SELECT n.id, n.peer_address, l.measured_at FROM nodes n"
        "   LEFT JOIN LATERAL (SELECT s.measured_at FROM link_samples s"
        "     WHERE s.from_node = $1 AND s.to_node = n.id ORDER BY s.measured_at DESC, s.id DESC LIMIT 1) l ON true"
        "   WHERE n.id <> $1 AND n.state = 'idle'"
        "     AND n.last_heartbeat_at > now() - make_interval(secs => $2::bigint)"
        "     AND (l.measured_at IS NULL OR l.measured_at < now() - make_interval(secs => $3::bigint))"
        "     AND NOT EXISTS (SELECT 1 FROM link_reach r WHERE r.from_node = $1 AND r.to_node = n.id"
        "       AND NOT r.reachable AND r.checked_at > now() - make_interval(secs => $3::bigint))"
        "   ORDER BY l.measured_at NULLS FIRST, n.id LIMIT $4) t",
        5, params, "probes", &e);
    if (res && probe_ticket(rq->srv, res, rq->node_id) != 0) {
        json_decref(res);
        res = NULL;
        err_set(&e, 500, "internal", NULL, "out of memory");
    }
    if (res)
        reply_json(rs, 200, res);
    else
        reply_error(rs, &e);
}
