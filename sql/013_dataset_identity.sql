-- 013_dataset_identity.sql: the dataset a job trains on, by the SHA-256 of
-- its manifest (agent/data.h): given with the job (data.sha256,
-- validation.sha256) or recorded from the first agent that opens it
-- (POST /v1/agent/dataset); every other agent proves its copy against it
-- before its first step.  NULL: not yet known (or not a manifest).
-- Applied once, in a transaction, by shoal-server at start-up.

ALTER TABLE jobs ADD COLUMN data_sha256 text CHECK (data_sha256 ~ '^[0-9a-f]{64}$');
ALTER TABLE jobs ADD COLUMN val_sha256 text CHECK (val_sha256 ~ '^[0-9a-f]{64}$');

UPDATE jobs SET data_sha256 = spec #>> '{data,sha256}', val_sha256 = spec #>> '{validation,sha256}';
