/* queries.h - SQL that more than one handler runs, so that what the API
 * shows and what the scheduler reads are the same facts in the same shape. */
#ifndef SHOAL_QUERIES_H
#define SHOAL_QUERIES_H

/* A node as the API shows it; the token hash never leaves the database.
 * NODE_FIELDS are its json_build_object arguments, for views that add some. */
#define NODE_FIELDS \
    "'id', id, 'name', name, 'peer_address', peer_address, 'region', region," \
    " 'state', state, 'hardware', json_build_object('gpu_model', gpu_model," \
    " 'gpu_memory_bytes', gpu_memory_bytes, 'gpu_count', gpu_count, 'tflops', tflops," \
    " 'cpu_cores', cpu_cores, 'ram_bytes', ram_bytes)," \
    " 'current_job_id', current_job_id, 'current_step', current_step," \
    " 'registered_at', registered_at, 'last_heartbeat_at', last_heartbeat_at"
#define NODE_JSON "json_build_object(" NODE_FIELDS ")"

/* The latest link matrix over every node: row i is from nodes[i], column j
 * to nodes[j]; null where never measured.  GET /v1/links answers with it. */
#define LINKS_MATRIX_SQL \
    "WITH ids AS (SELECT id FROM nodes)," \
    " ll AS MATERIALIZED (SELECT * FROM links_latest)," \
    " cells AS (SELECT a.id AS a, b.id AS b, ll.latency_ms, ll.bandwidth_gbps, ll.measured_at" \
    "   FROM ids a CROSS JOIN ids b" \
    "   LEFT JOIN ll ON ll.from_node = a.id AND ll.to_node = b.id)," \
    " rows AS (SELECT a, json_agg(latency_ms ORDER BY b) AS lat," \
    "   json_agg(bandwidth_gbps ORDER BY b) AS bw, json_agg(measured_at ORDER BY b) AS at" \
    "   FROM cells GROUP BY a)" \
    " SELECT json_build_object(" \
    "  'nodes', (SELECT coalesce(json_agg(id ORDER BY id), '[]') FROM ids)," \
    "  'latency_ms', (SELECT coalesce(json_agg(lat ORDER BY a), '[]') FROM rows)," \
    "  'bandwidth_gbps', (SELECT coalesce(json_agg(bw ORDER BY a), '[]') FROM rows)," \
    "  'measured_at', (SELECT coalesce(json_agg(at ORDER BY a), '[]') FROM rows))"

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
    " recoveries = recoveries + (recoveries < " max ")::int, updated_at = now()"

#endif
