-- 001_init.sql: nodes, links, jobs, plans, assignments and job steps.
-- Applied once, in a transaction, by shoal-server at start-up.

CREATE TABLE nodes (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name              text NOT NULL,
    token_hash        text NOT NULL UNIQUE,              -- hex SHA-256 of the node token
    peer_address      text NOT NULL,                     -- host:port other agents dial
    region            text NOT NULL DEFAULT '',
    gpu_model         text NOT NULL DEFAULT '',          -- '' for CPU-only nodes
    gpu_memory_bytes  bigint NOT NULL DEFAULT 0,
    gpu_count         integer NOT NULL DEFAULT 0,
    tflops            double precision NOT NULL,         -- measured dense matmul TFLOP/s
    cpu_cores         integer NOT NULL,
    ram_bytes         bigint NOT NULL DEFAULT 0,
    state             text NOT NULL DEFAULT 'idle'
                      CHECK (state IN ('idle', 'busy', 'draining', 'lost')),
    current_job_id    bigint,
    current_step      bigint,
    registered_at     timestamptz NOT NULL DEFAULT now(),
    last_heartbeat_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX nodes_state ON nodes (state);

-- Every measurement is kept; links_latest is the matrix the scheduler reads.
-- Directional: from_node -> to_node need not equal the reverse.
CREATE TABLE link_samples (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    from_node       bigint NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    to_node         bigint NOT NULL REFERENCES nodes (id) ON DELETE CASCADE,
    latency_ms      double precision NOT NULL CHECK (latency_ms >= 0),
    bandwidth_gbps  double precision NOT NULL CHECK (bandwidth_gbps > 0),
    measured_at     timestamptz NOT NULL DEFAULT now(),
    CHECK (from_node <> to_node)
);
CREATE INDEX link_samples_pair ON link_samples (from_node, to_node, measured_at DESC, id DESC);

CREATE VIEW links_latest AS
    SELECT DISTINCT ON (from_node, to_node)
           from_node, to_node, latency_ms, bandwidth_gbps, measured_at
      FROM link_samples
  ORDER BY from_node, to_node, measured_at DESC, id DESC;

CREATE TABLE jobs (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text NOT NULL,
    spec            jsonb NOT NULL,                       -- the validated, normalised spec
    state           text NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'scheduled', 'running', 'recovering',
                                     'completed', 'failed', 'cancelled')),
    stages          integer NOT NULL CHECK (stages >= 1),
    replicas        integer NOT NULL CHECK (replicas >= 1),
    total_steps     bigint NOT NULL CHECK (total_steps >= 1),
    plan_epoch      integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE INDEX jobs_state ON jobs (state);

ALTER TABLE nodes ADD FOREIGN KEY (current_job_id) REFERENCES jobs (id) ON DELETE SET NULL;

-- One plan per (job, epoch); a later issue's scheduler writes them.
CREATE TABLE plans (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id                bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    epoch                 integer NOT NULL,
    cost_model            text NOT NULL,
    predicted_iteration_s double precision,
    detail                jsonb NOT NULL DEFAULT '{}',
    created_at            timestamptz NOT NULL DEFAULT now(),
    UNIQUE (job_id, epoch)
);

-- A tasklet is (stage, replica); each gets a node and a layer range [layer_start, layer_end).
CREATE TABLE assignments (
    plan_id      bigint NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    stage        integer NOT NULL CHECK (stage >= 0),
    replica      integer NOT NULL CHECK (replica >= 0),
    node_id      bigint NOT NULL REFERENCES nodes (id),
    layer_start  integer NOT NULL,
    layer_end    integer NOT NULL CHECK (layer_end > layer_start),
    PRIMARY KEY (plan_id, stage, replica),
    UNIQUE (plan_id, node_id)
);

-- Per-step progress, one row per tasklet and step; loss only on last stages.
CREATE TABLE job_steps (
    job_id        bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    step          bigint NOT NULL CHECK (step >= 0),
    stage         integer NOT NULL,
    replica       integer NOT NULL,
    epoch         integer NOT NULL,
    node_id       bigint REFERENCES nodes (id) ON DELETE SET NULL,
    loss          double precision,
    iteration_s   double precision,            -- wall time of the step
    compute_s     double precision,
    comm_s        double precision,
    bubble_s      double precision,
    tokens        bigint,
    reported_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, step, stage, replica)
);
