-- Prototype schemas for the retention study (docs/retention-design.md).
--   t  today's layout: migrations 00001, 00003, 00004, 00005 (Up), loaded by study.go from ../../migrations
--   k  narrow unpartitioned keys table + bodies partitioned in a ring of 3 generation slots
--   g  bodies partitioned in a ring of 3 slots, dedup by current+previous check under a generation-row lock
--   p  as g, but the check runs under per-key advisory locks (no generation-row lock)
-- Generation n lives in slot n % 3; at any time slot gen%3 is current, (gen-1)%3 previous, (gen+1)%3 empty.

-- The part common to k, g and p (run with search_path set to the schema).
CREATE SEQUENCE inbox_id_seq;
CREATE TABLE inbox (
    slot             smallint    NOT NULL,
    id               bigint      NOT NULL DEFAULT nextval('inbox_id_seq'),
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
    CONSTRAINT inbox_pkey PRIMARY KEY (id, consumer, slot),
    CONSTRAINT inbox_state_check CHECK (state IN ('pending', 'processing', 'completed', 'dead'))
) PARTITION BY LIST (slot);
CREATE TABLE inbox_s0 PARTITION OF inbox FOR VALUES IN (0) WITH (fillfactor = 80);
CREATE TABLE inbox_s1 PARTITION OF inbox FOR VALUES IN (1) WITH (fillfactor = 80);
CREATE TABLE inbox_s2 PARTITION OF inbox FOR VALUES IN (2) WITH (fillfactor = 80);

-- The current generation, one row per consumer (distributable by consumer). gen is part of the key,
-- so that a rotation's UPDATE is a key update: it conflicts with FOR KEY SHARE.
CREATE TABLE inbox_gen (
    consumer text   NOT NULL,
    gen      bigint NOT NULL,
    PRIMARY KEY (consumer, gen)
);

CREATE TABLE inbox_queue (
    id           bigint      NOT NULL,
    consumer     text        NOT NULL,
    ordering_key text,
    run_at       timestamptz NOT NULL,
    claimed      boolean     NOT NULL DEFAULT false,
    alone        boolean     NOT NULL DEFAULT false,
    token        bigint      NOT NULL DEFAULT 0,
    attempts_started integer NOT NULL DEFAULT 0,
    owner        text,
    started_at   timestamptz,
    PRIMARY KEY (id, consumer)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 1000);
CREATE INDEX inbox_queue_ready ON inbox_queue (consumer, run_at, id) WHERE NOT claimed;
CREATE INDEX inbox_queue_claimed ON inbox_queue (consumer, run_at) WHERE claimed;
CREATE INDEX inbox_queue_ordering ON inbox_queue (consumer, ordering_key, id) WHERE ordering_key IS NOT NULL;

CREATE TABLE inbox_dead (
    seq      bigint      GENERATED ALWAYS AS IDENTITY,
    id       bigint      NOT NULL,
    consumer text        NOT NULL,
    kind     text        NOT NULL,
    died_at  timestamptz NOT NULL,
    error    text        NOT NULL DEFAULT '',
    PRIMARY KEY (seq, consumer),
    UNIQUE (id, consumer)
);
CREATE INDEX inbox_dead_consumer ON inbox_dead (consumer, seq);
-- 00005's function, unchanged. A survivor copied into the new slot fires the INSERT trigger, whose
-- ON CONFLICT (id, consumer) DO NOTHING keeps the dead letter's row and seq; TRUNCATE fires no row trigger.
CREATE FUNCTION inbox_dead_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state = 'dead' THEN
        EXECUTE format('DELETE FROM %I.inbox_dead WHERE id = $1 AND consumer = $2', TG_TABLE_SCHEMA) USING OLD.id, OLD.consumer;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.state = 'dead' THEN
        EXECUTE format('INSERT INTO %I.inbox_dead (id, consumer, kind, died_at, error) VALUES ($1, $2, $3, $4, $5) '
                       'ON CONFLICT (id, consumer) DO NOTHING', TG_TABLE_SCHEMA)
            USING NEW.id, NEW.consumer, NEW.kind, coalesce(NEW.completed_at, now()), coalesce(NEW.last_error, '');
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER inbox_dead_insert AFTER INSERT ON inbox
    FOR EACH ROW WHEN (NEW.state = 'dead') EXECUTE FUNCTION inbox_dead_sync();
CREATE TRIGGER inbox_dead_update AFTER UPDATE OF state ON inbox
    FOR EACH ROW WHEN ((OLD.state = 'dead') IS DISTINCT FROM (NEW.state = 'dead')) EXECUTE FUNCTION inbox_dead_sync();
CREATE TRIGGER inbox_dead_delete AFTER DELETE ON inbox
    FOR EACH ROW WHEN (OLD.state = 'dead') EXECUTE FUNCTION inbox_dead_sync();
