-- txinbox schema, version 6: the inbox is a ring of three generation partitions, and retention
-- retires a whole generation at a time (TRUNCATE) instead of deleting rows (docs/retention-design.md,
-- option G).
--
-- Table names are unqualified on purpose, as in 00001: the schema is chosen by search_path.
--
--   inbox         partitioned by LIST (slot): inbox_s0, inbox_s1, inbox_s2. Generation n lives in
--                 slot n % 3. Keys: primary (id, consumer, slot), unique (consumer, key, slot): a
--                 unique key of a partitioned table must contain the partition key, so the unique key
--                 rejects duplicates within a slot only. Across slots, the receive statement checks
--                 the other slots under a FOR KEY SHARE lock of its consumer's generation row, which
--                 a rotation key-updates (see inbox_rotate). Every key still contains consumer
--                 (00005), so the tables stay distributable by consumer.
--   inbox_gen     one row per consumer: the generation its receives insert into. Locked FOR KEY SHARE
--                 by every receive; a rotation updates its key.
--   inbox_ring    one row: the current generation and when it began. A consumer's first receive
--                 copies it into inbox_gen under a FOR KEY SHARE lock of this row, which a rotation
--                 locks FOR UPDATE.
--   inbox_rotate  the rotation (one transaction; see the function's comment).
--
-- ids come from the sequence inbox_id_seq (PostgreSQL 15 has no identity column on a partitioned
-- table); it continues where the identity sequence of 00001 stopped.
--
-- Up keeps every row (they become generation 0, slot 0); it rebuilds the keys of inbox under an
-- ACCESS EXCLUSIVE lock (about 1 s per million rows): migrate while the inbox is quiet. Down keeps
-- every row too, except an expired completed row whose key has a newer row in another slot (the key
-- was received again after its window): one row per key is all the flat table can hold.

-- +goose Up
CREATE SEQUENCE inbox_id_seq_6 AS bigint;
SELECT setval('inbox_id_seq_6', greatest((SELECT last_value FROM inbox_id_seq), (SELECT coalesce(max(id), 0) FROM inbox), 1));
ALTER TABLE inbox ALTER COLUMN id DROP IDENTITY;
ALTER SEQUENCE inbox_id_seq_6 RENAME TO inbox_id_seq;
ALTER TABLE inbox ALTER COLUMN id SET DEFAULT nextval('inbox_id_seq');

DROP TRIGGER inbox_dead_insert ON inbox;
DROP TRIGGER inbox_dead_update ON inbox;
DROP TRIGGER inbox_dead_delete ON inbox;

ALTER TABLE inbox ADD COLUMN slot smallint NOT NULL DEFAULT 0;
ALTER TABLE inbox
    DROP CONSTRAINT inbox_pkey, ADD CONSTRAINT inbox_s0_pkey PRIMARY KEY (id, consumer, slot),
    DROP CONSTRAINT inbox_consumer_key, ADD CONSTRAINT inbox_s0_consumer_key UNIQUE (consumer, key, slot);
ALTER TABLE inbox RENAME TO inbox_s0;

CREATE TABLE inbox (LIKE inbox_s0 INCLUDING DEFAULTS INCLUDING COMMENTS) PARTITION BY LIST (slot);
ALTER TABLE inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (id, consumer, slot),
    ADD CONSTRAINT inbox_consumer_key UNIQUE (consumer, key, slot),
    ADD CONSTRAINT inbox_state_check CHECK (state IN ('pending', 'processing', 'completed', 'dead'));
ALTER SEQUENCE inbox_id_seq OWNED BY inbox.id;
COMMENT ON TABLE inbox IS 'txinbox: one row per received message (dedup record, state, result), in the slot of its generation';
COMMENT ON COLUMN inbox.slot IS 'generation % 3: the partition; a rotation copies survivors of a retired slot into the new one';
COMMENT ON COLUMN inbox.consumer IS 'subscription/handler group; dedup is per (consumer, key) across all slots';

-- The slot 0 check lets ATTACH skip its scan; the partition bound says it afterwards.
ALTER TABLE inbox_s0 ADD CONSTRAINT inbox_s0_slot CHECK (slot = 0);
ALTER TABLE inbox ATTACH PARTITION inbox_s0 FOR VALUES IN (0);
ALTER TABLE inbox_s0 DROP CONSTRAINT inbox_s0_slot;
CREATE TABLE inbox_s1 PARTITION OF inbox FOR VALUES IN (1) WITH (fillfactor = 80);
CREATE TABLE inbox_s2 PARTITION OF inbox FOR VALUES IN (2) WITH (fillfactor = 80);

-- 00003's triggers, on the parent (each partition gets a clone). A rotation's copy of a dead row
-- fires the insert trigger, whose ON CONFLICT keeps the inbox_dead row (and its seq); TRUNCATE fires
-- no row trigger.
CREATE TRIGGER inbox_dead_insert AFTER INSERT ON inbox
    FOR EACH ROW WHEN (NEW.state = 'dead') EXECUTE FUNCTION inbox_dead_sync();
CREATE TRIGGER inbox_dead_update AFTER UPDATE OF state ON inbox
    FOR EACH ROW WHEN ((OLD.state = 'dead') IS DISTINCT FROM (NEW.state = 'dead')) EXECUTE FUNCTION inbox_dead_sync();
CREATE TRIGGER inbox_dead_delete AFTER DELETE ON inbox
    FOR EACH ROW WHEN (OLD.state = 'dead') EXECUTE FUNCTION inbox_dead_sync();

CREATE TABLE inbox_ring (
    gen        bigint      NOT NULL,
    rotated_at timestamptz NOT NULL DEFAULT now(),
    -- gen is a key, so that a rotation's update of it conflicts with FOR KEY SHARE.
    CONSTRAINT inbox_ring_pkey PRIMARY KEY (gen)
);
CREATE UNIQUE INDEX inbox_ring_one ON inbox_ring ((true));
INSERT INTO inbox_ring (gen) VALUES (0);
COMMENT ON TABLE inbox_ring IS 'txinbox: the current generation of inbox (one row) and when it began';

CREATE TABLE inbox_gen (
    consumer text   NOT NULL,
    gen      bigint NOT NULL,
    -- gen is in the key, so that a rotation's update of it conflicts with the receives' FOR KEY SHARE.
    CONSTRAINT inbox_gen_pkey PRIMARY KEY (consumer, gen)
);
INSERT INTO inbox_gen (consumer, gen) SELECT DISTINCT consumer, 0 FROM inbox_s0;
COMMENT ON TABLE inbox_gen IS 'txinbox: per consumer, the generation its receives insert into (slot gen % 3)';

-- +goose StatementBegin
-- inbox_rotate starts generation g+1 if the current generation g began at least period ago (or
-- always, when period is NULL): it copies the survivors of generation g-2 (pending, dead, and completed
-- rows still in their window) into slot (g+1) % 3, which the previous rotation emptied, and TRUNCATEs
-- slot (g-2) % 3. One transaction; the caller sets lock_timeout. Locks, in this order:
--   1. the retired slot, ACCESS EXCLUSIVE: waits for every transaction that has touched inbox (each
--      statement on inbox locks every partition) and holds new ones back until the commit;
--   2. inbox_ring's row, FOR UPDATE NOWAIT: a consumer being registered holds it FOR KEY SHARE and
--      may be waiting for 1; then the rotation gives up at once (busy) instead of deadlocking, and is
--      run again later. A registration that comes after 2 waits for the commit and copies the new
--      generation;
--   3. every inbox_gen row (key update): receives that locked a row have ended (1), and receives
--      whose snapshot predates this commit see another generation under their lock and run again
--      (READ COMMITTED) or fail with 40001 (REPEATABLE READ, SERIALIZABLE).
-- Returns whether it rotated (false: not due, busy, or another rotation committed first), the
-- generation now current, the rows copied, and whether it gave up because of a registration (busy).
CREATE FUNCTION inbox_rotate(period interval)
RETURNS TABLE (rotated boolean, generation bigint, copied bigint, busy boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    g       bigint;
    now_g   bigint;
    began   timestamptz;
    retired int;
    n       bigint;
BEGIN
    SELECT r.gen, r.rotated_at INTO g, began FROM inbox_ring r;
    IF period IS NOT NULL AND now() - began < period THEN
        RETURN QUERY SELECT false, g, 0::bigint, false;
        RETURN;
    END IF;
    retired := (g + 2) % 3;
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', 'inbox_s' || retired);
    BEGIN
        SELECT r.gen INTO now_g FROM inbox_ring r FOR UPDATE NOWAIT;
    EXCEPTION WHEN lock_not_available THEN
        RETURN QUERY SELECT false, g, 0::bigint, true;
        RETURN;
    END;
    IF now_g <> g THEN -- another rotation committed since the first read
        RETURN QUERY SELECT false, now_g, 0::bigint, false;
        RETURN;
    END IF;
    g := g + 1;
    UPDATE inbox_ring SET gen = g, rotated_at = now();
    UPDATE inbox_gen SET gen = g WHERE gen <> g;
    EXECUTE format($q$
        INSERT INTO inbox (slot, id, consumer, key, kind, payload, raw, headers, fingerprint, ordering_key,
                           state, attempts_started, attempts_failed, next_run_at, owner, lease_until, token,
                           last_error, received_at, started_at, completed_at, expires_at, result)
        SELECT $1, id, consumer, key, kind, payload, raw, headers, fingerprint, ordering_key,
               state, attempts_started, attempts_failed, next_run_at, owner, lease_until, token,
               last_error, received_at, started_at, completed_at, expires_at, result
        FROM %I
        WHERE NOT coalesce(state = 'completed' AND expires_at < now(), false)$q$, 'inbox_s' || retired) USING (g % 3)::smallint;
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE format('TRUNCATE %I', 'inbox_s' || retired);
    RETURN QUERY SELECT true, g, n, false;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION inbox_rotate(interval);
DROP TABLE inbox_gen;
DROP TABLE inbox_ring;

-- One row per key: a live row before an expired one, then the newest.
CREATE TABLE inbox_flat (LIKE inbox INCLUDING DEFAULTS INCLUDING COMMENTS) WITH (fillfactor = 80);
INSERT INTO inbox_flat
SELECT DISTINCT ON (consumer, key) *
FROM inbox
ORDER BY consumer, key, (state = 'completed' AND expires_at < now()), id DESC;
ALTER SEQUENCE inbox_id_seq OWNED BY NONE;
DROP TABLE inbox;
ALTER TABLE inbox_flat DROP COLUMN slot;
ALTER TABLE inbox_flat RENAME TO inbox;
ALTER TABLE inbox ALTER COLUMN id DROP DEFAULT;
ALTER SEQUENCE inbox_id_seq RENAME TO inbox_id_seq_6;
ALTER TABLE inbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY;
SELECT setval('inbox_id_seq', greatest((SELECT last_value FROM inbox_id_seq_6), (SELECT coalesce(max(id), 0) FROM inbox), 1));
DROP SEQUENCE inbox_id_seq_6;
ALTER TABLE inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (id, consumer),
    ADD CONSTRAINT inbox_consumer_key UNIQUE (consumer, key),
    ADD CONSTRAINT inbox_state_check CHECK (state IN ('pending', 'processing', 'completed', 'dead'));
COMMENT ON TABLE inbox IS 'txinbox: one row per received message (dedup record, state, result)';
COMMENT ON COLUMN inbox.consumer IS 'subscription/handler group; dedup is per (consumer, key)';

CREATE TRIGGER inbox_dead_insert AFTER INSERT ON inbox
    FOR EACH ROW WHEN (NEW.state = 'dead') EXECUTE FUNCTION inbox_dead_sync();
CREATE TRIGGER inbox_dead_update AFTER UPDATE OF state ON inbox
    FOR EACH ROW WHEN ((OLD.state = 'dead') IS DISTINCT FROM (NEW.state = 'dead')) EXECUTE FUNCTION inbox_dead_sync();
CREATE TRIGGER inbox_dead_delete AFTER DELETE ON inbox
    FOR EACH ROW WHEN (OLD.state = 'dead') EXECUTE FUNCTION inbox_dead_sync();
