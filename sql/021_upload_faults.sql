-- 021_upload_faults.sql: a node's own disk that refuses its checkpoints
-- (issue 46).  An agent that cannot write a checkpoint in its data
-- directory (full, read-only, failing) goes on training and says so in
-- the step's progress report (checkpoint_error): a fault of that node's
-- uploads, shown on the node and counted on the job beside the server
-- store's own failures, never a failure of the job or a link.  Applied
-- once, in a transaction, by shoal-server at start-up.

-- Checkpoints this node could not write, and the latest reason until one
-- of its uploads is stored again.
ALTER TABLE nodes ADD COLUMN upload_failures integer NOT NULL DEFAULT 0 CHECK (upload_failures >= 0);
ALTER TABLE nodes ADD COLUMN upload_error text;

-- Whose failure jobs.checkpoint_error says: the node whose disk refused
-- the checkpoint, or NULL for the server's store (a 507).  The store's is
-- healed by any checkpoint of the job stored, a node's only by one that
-- node uploads (h_checkpoints.c).
ALTER TABLE jobs ADD COLUMN checkpoint_error_node bigint REFERENCES nodes ON DELETE SET NULL;

-- A node as the API shows it (019_site_policy.sql's, with its uploads'
-- fault): "upload_failures" and "upload_error" (null: none, or healed).
CREATE OR REPLACE FUNCTION node_json(n nodes) RETURNS json LANGUAGE sql STABLE AS $$
  SELECT json_build_object('id', n.id, 'name', n.name, 'peer_address', n.peer_address, 'region', n.region,
    'state', n.state, 'hardware', json_build_object('gpu_model', n.gpu_model,
      'gpu_memory_bytes', CASE WHEN n.gpu_memory_bytes > 0
        THEN least(n.gpu_memory_bytes, (n.policy ->> 'max_memory_bytes')::bigint) ELSE n.gpu_memory_bytes END,
      'gpu_count', n.gpu_count, 'tflops', n.tflops,
      'cpu_cores', least(n.cpu_cores, (n.policy ->> 'threads')::int),
      'ram_bytes', CASE WHEN coalesce(n.gpu_memory_bytes, 0) = 0 AND n.ram_bytes > 0
        THEN least(n.ram_bytes, (n.policy ->> 'max_memory_bytes')::bigint) ELSE n.ram_bytes END),
    'policy', n.policy,
    'current_job_id', n.current_job_id, 'current_step', n.current_step,
    'registered_at', n.registered_at, 'last_heartbeat_at', n.last_heartbeat_at,
    'reachable', CASE WHEN n.peer_checked_address = n.peer_address THEN
        json_build_object('from_server', n.peer_reachable, 'why', n.peer_reach_why, 'checked_at', n.peer_checked_at)
      ELSE json_build_object('from_server', NULL, 'why', NULL, 'checked_at', NULL) END,
    'upload_failures', n.upload_failures, 'upload_error', n.upload_error)
$$;
