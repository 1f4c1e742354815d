#include "assignment.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../common/buf.h"
#include "../../common/hex.h"
#include "../../common/wire.h"
#include "../store/db.h"

/* $1: node ids.  A node is in at most one live plan (the scheduler offers
 * no node that another live job's current plan holds); should two ever
 * claim it, the newer job wins.  "pipeline" is the node's replica across
 * all stages, "group" its stage across all replicas.  How each
 * connection is made (018_link_ways.sql, decided in planner.c): a pipeline
 * entry's "next_way" for its link to the next stage ("dials_next": that
 * stage opens it, directly or to the relay), "tie_way" for the tied
 * head's edge from that stage to the other end; a group entry's "up_way"
 * for the ring edge from that replica to the next; "relay" is the plan's
 * relay (null: none).
 * "allreduce" is how the
 * group sums its gradients: "nccl" when every member registered a GPU (an
 * agent built with CUDA has NCCL) and the job syncs every step, else
 * "ring" (TCP, on host memory: diloco's outer steps always take the ring,
 * whose chunks carry its compressed pseudo-gradients), so that every
 * member of a group decides the same way.  "replicas" and
 * "micro_batches" are the epoch's (a re-plan short of nodes may train fewer
 * replicas, each more micro-batches, planner.h).  "resume" is the
 * checkpoint the epoch starts from: the job's own (a re-plan, planner.h),
 * else its spec's resume_from, else null (step 0); with the layers each of
 * its stage files holds, since a re-plan may split the layers otherwise,
 * and how many files a stage it has (one per replica under diloco).
 * "live" replaces "resume" when the epoch goes on from the state its
 * nodes hold (live_resume.h): {step, root: the replica of this stage that
 * hands its state round, or null}. */
#define ASSIGNMENT_SQL \
    "WITH me AS (SELECT node_id, ord FROM unnest($1::bigint[]) WITH ORDINALITY AS t(node_id, ord))," \
    " cur AS (SELECT DISTINCT ON (a.node_id) a.node_id, j.id AS job_id, j.plan_epoch AS epoch, j.state," \
    "   j.spec, j.peer_secret, j.stages, p.replicas, p.micro_batches, a.plan_id, p.resume_step, p.live, p.relay," \
    "   j.data_sha256, j.val_sha256," \
    "   a.stage, a.replica," \
    "   a.layer_start, a.layer_end" \
    "   FROM assignments a JOIN plans p ON p.id = a.plan_id" \
    "   JOIN jobs j ON j.id = p.job_id AND j.plan_epoch = p.epoch" \
    "   WHERE a.node_id IN (SELECT node_id FROM me)" \
    "     AND j.state IN ('scheduled', 'running', 'recovering')" \
    "   ORDER BY a.node_id, j.id DESC)" \
    " SELECT me.node_id, coalesce(c.job_id, 0), coalesce(c.epoch, 0), coalesce(c.state = 'recovering', false)," \
    "  json_build_object('assignment'," \
    "  CASE WHEN c.job_id IS NOT NULL THEN json_build_object(" \
    "   'job_id', c.job_id, 'epoch', c.epoch, 'state', c.state, 'stage', c.stage, 'replica', c.replica," \
    "   'stages', c.stages, 'replicas', c.replicas, 'micro_batches', c.micro_batches," \
    "   'layer_start', c.layer_start, 'layer_end', c.layer_end," \
    "   'peer_secret', c.peer_secret, 'spec', c.spec," \
    "   'dataset', json_build_object('data', c.data_sha256, 'validation', c.val_sha256)," \
    "   'pipeline', (SELECT json_agg(json_build_object('stage', a.stage, 'node_id', a.node_id," \
    "       'peer_address', n.peer_address, 'layer_start', a.layer_start, 'layer_end', a.layer_end," \
    "       'dials_next', a.dials_next, 'next_way', a.next_way, 'tie_way', a.tie_way)" \
    "       ORDER BY a.stage)" \
    "     FROM assignments a JOIN nodes n ON n.id = a.node_id" \
    "     WHERE a.plan_id = c.plan_id AND a.replica = c.replica)," \
    "   'group', (SELECT json_agg(json_build_object('replica', a.replica, 'node_id', a.node_id," \
    "       'peer_address', n.peer_address, 'up_way', a.up_way) ORDER BY a.replica)" \
    "     FROM assignments a JOIN nodes n ON n.id = a.node_id" \
    "     WHERE a.plan_id = c.plan_id AND a.stage = c.stage)," \
    "   'relay', c.relay," \
    "   'allreduce', (SELECT CASE WHEN bool_and(n.gpu_count > 0)" \
    "       AND coalesce(c.spec->'communication'->>'sync', 'every_step') = 'every_step' THEN 'nccl' ELSE 'ring' END" \
    "     FROM assignments a JOIN nodes n ON n.id = a.node_id" \
    "     WHERE a.plan_id = c.plan_id AND a.stage = c.stage)," \
    "   'live', CASE WHEN c.live IS NOT NULL THEN json_build_object('step', c.live->'step'," \
    "     'root', c.live->'roots'->c.stage) END," \
    "   'resume', (SELECT json_build_object('job_id', r.job_id, 'step', r.step, 'stages'," \
    "       (SELECT coalesce(json_agg(json_build_object('stage', k.stage, 'layer_start', k.layer_start," \
    "         'layer_end', k.layer_end) ORDER BY k.stage), '[]') FROM checkpoints k" \
    "        WHERE k.job_id = r.job_id AND k.step = r.step AND k.replica = 0)," \
    "       'replicas', (SELECT count(*) FROM checkpoints k" \
    "        WHERE k.job_id = r.job_id AND k.step = r.step AND k.stage = 0))" \
    "     FROM (SELECT CASE WHEN c.resume_step IS NOT NULL THEN c.job_id" \
    "         ELSE (c.spec->'resume_from'->>'job_id')::bigint END AS job_id," \
    "       coalesce(c.resume_step, (c.spec->'resume_from'->>'step')::bigint) AS step" \
    "       WHERE c.live IS NULL AND (c.resume_step IS NOT NULL" \
    "         OR jsonb_typeof(c.spec->'resume_from') = 'object')) r))" \
    "  END)" \
    " FROM me LEFT JOIN cur c ON c.node_id = me.node_id ORDER BY me.ord"

/* The pipeline or group entry's node at `index`, or 0. */
static int64_t entry_node(const json_t *list, int index)
{
    return (int64_t)json_integer_value(json_object_get(json_array_get(list, (size_t)index), "node_id"));
}

/* 1 when entry e's way `key` is "relay". */
static int relayed(const json_t *e, const char *key)
{
    const char *way = json_string_value(json_object_get(e, key));
    return way && strcmp(way, "relay") == 0;
}

/* The ticket t (its side, channel and ends set) signed, into e[name] as hex. */
static int ticket_set(json_t *e, const char *name, const struct assignment_tickets *tk, struct relay_ticket *t)
{
    char hex[RELAY_TICKET_HEX];
    relay_ticket_sign(&tk->secret, t);
    relay_ticket_hex(t, hex);
    return json_object_set_new(e, name, json_string(hex));
}

/* Gives each relayed link of the assignment's tasklet (its way "relay",
 * the tasklet one of its two ends) the ticket of the tasklet's end, beside
 * the way: a pipeline entry's "next_ticket" (the link from that stage to
 * the next, channel stage) and "tie_ticket" (the tied head's edge from
 * that stage to the other end), a group entry's "up_ticket" (the ring
 * edge from that replica to the next); an edge's dialer sends on it
 * (channel sends: a relayed edge is never turned). */
static int relay_tickets(json_t *as, const struct assignment_tickets *tk)
{
    const json_t *pipeline = json_object_get(as, "pipeline"), *group = json_object_get(as, "group");
    int stage = (int)json_integer_value(json_object_get(as, "stage"));
    int replica = (int)json_integer_value(json_object_get(as, "replica"));
    int P = (int)json_array_size(pipeline), D = (int)json_array_size(group);
    struct relay_ticket t = { .job_id = json_integer_value(json_object_get(as, "job_id")),
                              .epoch = (uint32_t)json_integer_value(json_object_get(as, "epoch")) };
    if (!tk || tk->secret.len == 0 || !json_is_string(json_object_get(as, "relay")))
        return 0;
    t.expires = (int64_t)time(NULL) + tk->ttl_s;
    for (int i = 0; i < P; i++) {
        json_t *e = json_array_get(pipeline, (size_t)i);
        int other = i == 0 ? P - 1 : i == P - 1 ? 0 : i;
        t.dialer = (struct relay_end){ i, replica, entry_node(pipeline, i) };
        if (i + 1 < P && (stage == i || stage == i + 1) && relayed(e, "next_way")) {
            t.side = stage == i ? RELAY_SIDE_DIALER : RELAY_SIDE_LISTENER;
            t.channel = WIRE_CHANNEL_STAGE;
            t.listener = (struct relay_end){ i + 1, replica, entry_node(pipeline, i + 1) };
            if (ticket_set(e, "next_ticket", tk, &t) != 0)
                return -1;
        }
        if (other != i && (stage == i || stage == other) && relayed(e, "tie_way")) {
            t.side = stage == i ? RELAY_SIDE_DIALER : RELAY_SIDE_LISTENER;
            t.channel = WIRE_CHANNEL_SENDS;
            t.listener = (struct relay_end){ other, replica, entry_node(pipeline, other) };
            if (ticket_set(e, "tie_ticket", tk, &t) != 0)
                return -1;
        }
    }
    for (int r = 0; r < D && D > 1; r++) {
        json_t *e = json_array_get(group, (size_t)r);
        int up = (r + 1) % D;
        if ((replica == r || replica == up) && relayed(e, "up_way")) {
            t.side = replica == r ? RELAY_SIDE_DIALER : RELAY_SIDE_LISTENER;
            t.channel = WIRE_CHANNEL_SENDS;
            t.dialer = (struct relay_end){ stage, r, entry_node(group, r) };
            t.listener = (struct relay_end){ stage, up, entry_node(group, up) };
            if (ticket_set(e, "up_ticket", tk, &t) != 0)
                return -1;
        }
    }
    return 0;
}

/* The key of this node's link to the tasklet (stage, replica) on `node`,
 * into entry e of the assignment (hex). */
static int link_key_set(json_t *e, const unsigned char *secret, size_t secret_len, const json_t *as,
                        const char *me, int stage, int replica)
{
    char other[WIRE_ROLE_MAX], hex[2 * WIRE_KEY_BYTES + 1];
    unsigned char key[WIRE_KEY_BYTES];
    json_int_t node = json_integer_value(json_object_get(e, "node_id"));
    wire_role(stage, replica, node, other);
    if (strcmp(other, me) == 0)
        return 0;   /* this node's own entry */
    wire_link_key(secret, secret_len, json_integer_value(json_object_get(as, "job_id")),
                  (uint32_t)json_integer_value(json_object_get(as, "epoch")), me, other, key);
    hex_encode(key, sizeof key, hex);
    int rc = json_object_set_new(e, "link_key", json_string(hex));
    OPENSSL_cleanse(key, sizeof key);
    OPENSSL_cleanse(hex, sizeof hex);
    return rc;
}

/* Gives every other tasklet in the assignment's "pipeline" and "group" the
 * key of node_id's link to it (wire_link_key), and each relayed link the
 * ticket of node_id's end (relay_tickets), and takes the job's secret out:
 * it never leaves the server, so a node holds the keys of its own links
 * only and cannot pose as another member of the job. */
static int link_keys(json_t *body, int64_t node_id, const struct assignment_tickets *tk, struct shoal_err *err)
{
    json_t *as = json_object_get(body, "assignment"), *e;
    unsigned char secret[32];
    char me[WIRE_ROLE_MAX];
    size_t i;
    int rc = -1;
    if (!json_is_object(as))
        return 0;   /* no job */
    if (hex_decode(json_string_value(json_object_get(as, "peer_secret")), secret, sizeof secret) != 0) {
        err_set(err, 500, "internal", NULL, "job %lld has no valid peer secret",
                (long long)json_integer_value(json_object_get(as, "job_id")));
        goto out;
    }
    int stage = (int)json_integer_value(json_object_get(as, "stage"));
    int replica = (int)json_integer_value(json_object_get(as, "replica"));
    wire_role(stage, replica, node_id, me);
    json_array_foreach(json_object_get(as, "pipeline"), i, e)
        if (link_key_set(e, secret, sizeof secret, as, me, (int)json_integer_value(json_object_get(e, "stage")),
                         replica) != 0)
            goto oom;
    json_array_foreach(json_object_get(as, "group"), i, e)
        if (link_key_set(e, secret, sizeof secret, as, me, stage,
                         (int)json_integer_value(json_object_get(e, "replica"))) != 0)
            goto oom;
    if (relay_tickets(as, tk) != 0)
        goto oom;
    json_object_del(as, "peer_secret");
    rc = 0;
    goto out;
oom:
    err_set(err, 500, "internal", NULL, "out of memory");
out:
    OPENSSL_cleanse(secret, sizeof secret);
    return rc;
}

int assignment_query(PGconn *c, const int64_t *nodes, int n, const struct assignment_tickets *tickets,
                     struct assignment_answer *out, struct shoal_err *err)
{
    struct buf ids;
    PGresult *r = NULL;
    int rc = -1, filled = 0;
    buf_init(&ids, (size_t)n * 21 + 3);   /* up to 19 digits and a comma per id, braces */
    for (int i = 0; i < n; i++) {
        if (buf_printf(&ids, "%s%lld", i ? "," : "{", (long long)nodes[i]) != 0) {
            err_set(err, 500, "internal", NULL, "out of memory");
            goto out;
        }
    }
    if (buf_append(&ids, n ? "}" : "{}", n ? 1 : 2) != 0) {
        err_set(err, 500, "internal", NULL, "out of memory");
        goto out;
    }
    const char *params[] = { ids.data };
    r = db_exec(c, ASSIGNMENT_SQL, 1, params, err);
    if (!r)
        goto out;
    if (PQntuples(r) != n) {
        err_set(err, 500, "internal", NULL, "the assignment query answered %d rows for %d nodes", PQntuples(r), n);
        goto out;
    }
    for (filled = 0; filled < n; filled++) {
        struct assignment_answer *a = &out[filled];
        json_error_t je;
        a->node_id = strtoll(PQgetvalue(r, filled, 0), NULL, 10);
        a->job_id = strtoll(PQgetvalue(r, filled, 1), NULL, 10);
        a->epoch = strtoll(PQgetvalue(r, filled, 2), NULL, 10);
        a->recovering = PQgetvalue(r, filled, 3)[0] == 't';
        a->body = json_loads(PQgetvalue(r, filled, 4), 0, &je);
        if (!a->body) {
            err_set(err, 500, "internal", NULL, "database returned bad JSON: %s", je.text);
            goto out;
        }
        if (link_keys(a->body, a->node_id, tickets, err) != 0) {
            json_decref(a->body);
            goto out;
        }
    }
    rc = 0;
out:
    if (rc != 0)
        for (int i = 0; i < filled; i++)
            json_decref(out[i].body);
    PQclear(r);
    buf_free(&ids);
    return rc;
}
