-- 012_model_costs.sql: a job's model in the terms the straggler rule's
-- predicted compute needs (server/queries.h, TASKLET_PREDICTED_COMPUTE_S_SQL),
-- computed by the server from the model family's row (common/model.c,
-- jobspec_model_costs) when the job is created, so that no family's formula
-- is written in SQL.  Parameters are floats of one block, the embedding
-- (stage 0) and the head (the last stage); FLOPs are a forward+backward per
-- token of one block and of the head.
-- Applied once, in a transaction, by shoal-server at start-up.

ALTER TABLE jobs ADD COLUMN model_costs jsonb;

-- Jobs from before it are GPT-2's: 12 C^2 + 13 C a block, 72 C^2 + 6 C T
-- FLOPs a token, wte and wpe, the final LayerNorm and the head.
UPDATE jobs SET model_costs = jsonb_build_object(
        'layer_params', 12 * m.c * m.c + 13 * m.c, 'first_params', m.v * m.c + m.t * m.c,
        'last_params', 2 * m.c + m.v * m.c, 'layer_flops', 72 * m.c * m.c + 6 * m.c * m.t,
        'last_flops', 6 * m.c * m.v)
    FROM (SELECT id, (spec #>> '{model,d_model}')::float8 AS c, (spec #>> '{model,context_length}')::float8 AS t,
                 (spec #>> '{model,vocab_size}')::float8 AS v FROM jobs) m
    WHERE jobs.id = m.id;

ALTER TABLE jobs ALTER COLUMN model_costs SET NOT NULL;
