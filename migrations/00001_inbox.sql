-- txinbox schema, version 1.
--
-- Table names are unqualified on purpose: the schema is chosen by search_path. Migrate (Go) creates
-- the configured schema and runs these files with search_path set to it; with the goose CLI, add
-- `search_path=<schema>` to the connection string (or use the default, public).
--
-- Two tables:
--   inbox        one row per received message for as long as its dedup record is kept: the
--                UNIQUE (consumer, key) constraint rejects duplicates, and the row records the state,
--                attempts, errors, result and expiry. Its only indexes are the primary key and the
--                unique key, and no indexed column ever changes, so every state change is a HOT update
--                (fillfactor leaves room on the page) and millions of completed rows cost the claim
--                path nothing.
--   inbox_queue  one small row per message that still needs work (pending, retrying, or claimed).
--                Workers claim from here; a row is deleted when its message completes or dies, so
--                this table stays as small as the backlog and vacuums in milliseconds.

-- +goose Up
CREATE TABLE inbox (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer         text        NOT NULL,
    key              text        NOT NULL,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    raw              bytea,
    headers          jsonb       NOT NULL DEFAULT '{}',
    fingerprint      bytea       NOT NULL,
    ordering_key     text,
    state            text        NOT NULL DEFAULT 'pending',
    attempts_started integer     NOT NULL DEFAULT 0,
    attempts_failed  integer     NOT NULL DEFAULT 0,
    next_run_at      timestamptz NOT NULL DEFAULT now(),
    owner            text,
    lease_until      timestamptz,
    token            bigint      NOT NULL DEFAULT 0,
    last_error       text,
    received_at      timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    completed_at     timestamptz,
    expires_at       timestamptz,
    result           jsonb,
    CONSTRAINT inbox_consumer_key UNIQUE (consumer, key),
    CONSTRAINT inbox_state_check CHECK (state IN ('pending', 'processing', 'completed', 'dead'))
) WITH (fillfactor = 80);

COMMENT ON TABLE inbox IS 'txinbox: one row per received message (dedup record, state, result)';
COMMENT ON COLUMN inbox.consumer IS 'subscription/handler group; dedup is per (consumer, key)';
COMMENT ON COLUMN inbox.fingerprint IS 'sha256 of kind and canonical (jsonb) payload';
COMMENT ON COLUMN inbox.raw IS 'original bytes of a message that could not be decoded (stored dead)';
COMMENT ON COLUMN inbox.attempts_started IS 'attempts claimed; more than attempts_failed while one is in flight or never finished';
COMMENT ON COLUMN inbox.token IS 'fencing token, incremented by every claim';
COMMENT ON COLUMN inbox.expires_at IS 'end of the dedup window; after it the key is accepted as new';

CREATE TABLE inbox_queue (
    id           bigint      PRIMARY KEY,
    consumer     text        NOT NULL,
    ordering_key text,
    run_at       timestamptz NOT NULL,
    claimed      boolean     NOT NULL DEFAULT false,
    alone        boolean     NOT NULL DEFAULT false,
    token        bigint      NOT NULL DEFAULT 0
) WITH (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 1000
);

COMMENT ON TABLE inbox_queue IS 'txinbox: messages that still need work; claimed here with SKIP LOCKED';
COMMENT ON COLUMN inbox_queue.run_at IS 'earliest claim time: not-before/backoff when unclaimed, lease expiry when claimed';
COMMENT ON COLUMN inbox_queue.alone IS 'claimed as a suspect (its previous attempt never finished): runs in a transaction of its own';

-- Ready messages, in claim order. Claimed rows leave this index, so its head stays live.
CREATE INDEX inbox_queue_ready ON inbox_queue (consumer, run_at, id) WHERE NOT claimed;
-- Claimed messages by lease expiry: stale claims (suspects) are found here.
CREATE INDEX inbox_queue_claimed ON inbox_queue (consumer, run_at) WHERE claimed;
-- Per-key ordering: the head of each ordering key.
CREATE INDEX inbox_queue_ordering ON inbox_queue (consumer, ordering_key, id) WHERE ordering_key IS NOT NULL;

-- +goose Down
DROP TABLE inbox_queue;
DROP TABLE inbox;
