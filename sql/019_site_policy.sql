-- 019_site_policy.sql: what a site owner allows its agent (issue 45), and
-- datasets proven by every member rather than by the first to speak.
-- Applied once, in a transaction, by shoal-server at start-up.

-- The owner's policy as the agent sends it in its registration and in a
-- restarted agent's first heartbeat (agent/config.c): {"data_roots":
-- [absolute paths], "max_memory_bytes": n or null, "threads": n or null}.
-- NULL: an agent from before, which said nothing.
ALTER TABLE nodes ADD COLUMN policy jsonb;

-- A node as the API shows it (017_read_models.sql's, with the policy):
-- "hardware" is what the node offers the planner, the machine's within
-- its owner's policy: the device's memory (the GPU's, else RAM) capped
-- at max_memory_bytes, the cores at threads.
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
      ELSE json_build_object('from_server', NULL, 'why', NULL, 'checked_at', NULL) END)
$$;

-- Whether a node of `policy` may read `path` (a job's data.path or
-- validation.path; NULL: none): it lies beneath one of the data roots as
-- text.  The agent resolves it (symlinks, "..") when it opens it; a node
-- that said nothing (NULL) is not held to anything here.
CREATE OR REPLACE FUNCTION policy_reads(policy jsonb, path text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT path IS NULL OR policy IS NULL OR jsonb_typeof(policy -> 'data_roots') IS DISTINCT FROM 'array'
    OR EXISTS (SELECT 1 FROM jsonb_array_elements_text(policy -> 'data_roots') r(root)
      WHERE rtrim(root, '/') = '' OR path = rtrim(root, '/') OR starts_with(path, rtrim(root, '/') || '/'))
$$;

-- Whether a node of `policy` may read every path job `job` names.  The
-- planner offers a job only the nodes that may (planner.c).
CREATE OR REPLACE FUNCTION policy_reads_job(policy jsonb, job bigint) RETURNS boolean LANGUAGE sql STABLE AS $$
  SELECT policy_reads(policy, j.spec #>> '{data,path}') AND policy_reads(policy, j.spec #>> '{validation,path}')
  FROM jobs j WHERE j.id = job
$$;

-- What each member of an epoch said it opened for a source: the SHA-256
-- of the manifest, or NULL (no manifest).  Kept for the failure reason.
CREATE TABLE dataset_claims (
    job_id     bigint NOT NULL REFERENCES jobs ON DELETE CASCADE,
    epoch      int NOT NULL,
    source     text NOT NULL CHECK (source IN ('data', 'validation')),
    node_id    bigint NOT NULL REFERENCES nodes ON DELETE CASCADE,
    sha256     text CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, epoch, source, node_id)
);

-- A member's claim (POST /v1/agent/dataset): {verdict, ...}.
--   ok: {sha256 (NULL: no manifest), by}: the job's own digest (by "job",
--     data.sha256 / validation.sha256), one every member of an earlier
--     epoch agreed on ("agreed"), or this epoch's members' now that all of
--     them (the nodes of its first and last stages) have said the same
--     ("members"); the caller compares it with its own;
--   waiting: {claimed, members}: not every member has spoken; ask again;
--   disagree: {reason}: they differ; the job has failed with a reason that
--     names the nodes on each side and blames none;
--   no_split: the job has no such path (validation without a path);
--   no_manifest: a digest for a text source, which has no manifest;
--   stale_epoch, not_assigned, not_running, not_found: as the handler says.
-- One claim at a time per job (the job's row lock).
CREATE OR REPLACE FUNCTION dataset_claim(job bigint, ep int, node bigint, src text, sha text)
RETURNS json LANGUAGE plpgsql AS $$
DECLARE
    j jobs;
    given text;
    recorded text;
    members int;
    claimed int;
    kinds int;
    sides text;
    why text;
BEGIN
    SELECT * INTO j FROM jobs WHERE id = job FOR UPDATE;
    IF NOT FOUND OR NOT EXISTS (SELECT 1 FROM plans p JOIN assignments a ON a.plan_id = p.id
                                WHERE p.job_id = job AND a.node_id = node) THEN
        RETURN json_build_object('verdict', 'not_found');
    END IF;
    IF ep <> j.plan_epoch THEN
        RETURN json_build_object('verdict', 'stale_epoch', 'plan_epoch', j.plan_epoch);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM plans p JOIN assignments a ON a.plan_id = p.id
                   WHERE p.job_id = job AND p.epoch = ep AND a.node_id = node) THEN
        RETURN json_build_object('verdict', 'not_assigned');
    END IF;
    IF j.state NOT IN ('scheduled', 'running', 'recovering') THEN
        RETURN json_build_object('verdict', 'not_running', 'state', j.state);
    END IF;
    IF src = 'validation' AND j.spec #>> '{validation,path}' IS NULL THEN
        RETURN json_build_object('verdict', 'no_split');
    END IF;
    IF sha IS NOT NULL AND coalesce(CASE WHEN src = 'validation' THEN j.spec #>> '{validation,format}' END,
                                    j.spec #>> '{data,format}', 'llmc') = 'text' THEN
        RETURN json_build_object('verdict', 'no_manifest');
    END IF;
    given := CASE WHEN src = 'data' THEN j.spec #>> '{data,sha256}' ELSE j.spec #>> '{validation,sha256}' END;
    IF given IS NOT NULL THEN
        RETURN json_build_object('verdict', 'ok', 'sha256', lower(given), 'by', 'job');
    END IF;
    recorded := CASE WHEN src = 'data' THEN j.data_sha256 ELSE j.val_sha256 END;
    IF recorded IS NOT NULL THEN
        RETURN json_build_object('verdict', 'ok', 'sha256', recorded, 'by', 'agreed');
    END IF;
    INSERT INTO dataset_claims (job_id, epoch, source, node_id, sha256) VALUES (job, ep, src, node, sha)
        ON CONFLICT (job_id, epoch, source, node_id) DO UPDATE SET sha256 = excluded.sha256, claimed_at = now();
    -- the members: the nodes of the epoch's first and last stages, which read the data
    WITH m AS (SELECT DISTINCT a.node_id FROM plans p JOIN assignments a ON a.plan_id = p.id
               WHERE p.job_id = job AND p.epoch = ep AND (a.stage = 0 OR a.stage = j.stages - 1))
    SELECT count(*), count(c.node_id), count(DISTINCT coalesce(c.sha256, '-'))
        INTO members, claimed, kinds
        FROM m LEFT JOIN dataset_claims c ON c.job_id = job AND c.epoch = ep AND c.source = src
                                          AND c.node_id = m.node_id;
    IF claimed < members THEN
        RETURN json_build_object('verdict', 'waiting', 'claimed', claimed, 'members', members);
    END IF;
    IF kinds = 1 THEN
        IF sha IS NOT NULL THEN
            UPDATE jobs SET data_sha256 = CASE WHEN src = 'data' THEN sha ELSE data_sha256 END,
                            val_sha256 = CASE WHEN src = 'validation' THEN sha ELSE val_sha256 END
                WHERE id = job;
        END IF;
        RETURN json_build_object('verdict', 'ok', 'sha256', sha, 'by', 'members');
    END IF;
    SELECT string_agg(side, '; ' ORDER BY side) INTO sides FROM (
        SELECT coalesce('manifest ' || c.sha256, 'no manifest') || ' at node'
               || CASE WHEN count(*) > 1 THEN 's ' ELSE ' ' END || string_agg(c.node_id::text, ', ' ORDER BY c.node_id)
               AS side
        FROM dataset_claims c
        WHERE c.job_id = job AND c.epoch = ep AND c.source = src
          AND c.node_id IN (SELECT a.node_id FROM plans p JOIN assignments a ON a.plan_id = p.id
                            WHERE p.job_id = job AND p.epoch = ep AND (a.stage = 0 OR a.stage = j.stages - 1))
        GROUP BY c.sha256) s;
    why := format('the members'' copies of %s differ, so no node is blamed: %s; give the job %s.sha256 to say '
                  'which copy is the dataset', CASE WHEN src = 'data' THEN 'data.path' ELSE 'validation.path' END,
                  sides, src);
    UPDATE jobs SET state = 'failed', failure_reason = why, finished_at = now(), updated_at = now()
        WHERE id = job;
    RETURN json_build_object('verdict', 'disagree', 'reason', why);
END;
$$;
