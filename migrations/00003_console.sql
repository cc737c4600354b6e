-- txinbox schema, version 3: what the operator console (package console) reads without scanning the
-- inbox table.
--
-- Table names are unqualified on purpose, as in 00001: the schema is chosen by search_path.
--
-- inbox_dead    one row per dead message (the dead-letter set), kept by triggers on inbox: a row is
--               added when a message becomes dead (inserted dead, or updated to dead) and removed when
--               it stops being dead (replayed) or is deleted (discarded, purged). The inbox table
--               itself gets no new index, so its state changes stay HOT updates (00001); the triggers'
--               WHEN conditions are false for every change that neither makes nor unmakes a dead
--               letter, so the hot path pays one comparison per row. seq orders the set by the time a
--               message entered it: the console pages by it, and a bulk action confirmed up to a seq
--               never touches a message that died after the confirmation.
-- inbox_rollup  per-minute counts of finished attempts per consumer (completed, failed, of which
--               dead), added by worker pools from memory every few seconds and when they stop, never
--               inside a handler's transaction. A pool that crashes loses its last few seconds of
--               counts (a chart a little low); rows older than two days are deleted by the pools.

-- +goose Up
CREATE TABLE inbox_dead (
    seq      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id       bigint      NOT NULL UNIQUE,
    consumer text        NOT NULL,
    kind     text        NOT NULL,
    died_at  timestamptz NOT NULL,
    error    text        NOT NULL DEFAULT ''
);

COMMENT ON TABLE inbox_dead IS 'txinbox: the dead messages of inbox (id), kept by triggers; seq orders them by when they died';
COMMENT ON COLUMN inbox_dead.error IS 'the last error of the message when it died (a dead message''s error never changes), so that filtering by error text reads this table only';

-- Dead letters of one consumer, newest first.
CREATE INDEX inbox_dead_consumer ON inbox_dead (consumer, seq);

-- The trigger function qualifies inbox_dead with the schema of the table that fired it, so that it
-- works whatever the caller's search_path.
-- +goose StatementBegin
CREATE FUNCTION inbox_dead_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state = 'dead' THEN
        EXECUTE format('DELETE FROM %I.inbox_dead WHERE id = $1', TG_TABLE_SCHEMA) USING OLD.id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.state = 'dead' THEN
        EXECUTE format('INSERT INTO %I.inbox_dead (id, consumer, kind, died_at, error) VALUES ($1, $2, $3, $4, $5) '
                       'ON CONFLICT (id) DO NOTHING', TG_TABLE_SCHEMA)
            USING NEW.id, NEW.consumer, NEW.kind, coalesce(NEW.completed_at, now()), coalesce(NEW.last_error, '');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER inbox_dead_insert AFTER INSERT ON inbox
    FOR EACH ROW WHEN (NEW.state = 'dead') EXECUTE FUNCTION inbox_dead_sync();
CREATE TRIGGER inbox_dead_update AFTER UPDATE OF state ON inbox
    FOR EACH ROW WHEN ((OLD.state = 'dead') IS DISTINCT FROM (NEW.state = 'dead')) EXECUTE FUNCTION inbox_dead_sync();
CREATE TRIGGER inbox_dead_delete AFTER DELETE ON inbox
    FOR EACH ROW WHEN (OLD.state = 'dead') EXECUTE FUNCTION inbox_dead_sync();

-- The dead letters stored before this version (one scan of inbox, at migration time only).
INSERT INTO inbox_dead (id, consumer, kind, died_at, error)
SELECT id, consumer, kind, coalesce(completed_at, received_at), coalesce(last_error, '') FROM inbox WHERE state = 'dead' ORDER BY id;

CREATE TABLE inbox_rollup (
    consumer  text        NOT NULL,
    minute    timestamptz NOT NULL,
    completed bigint      NOT NULL DEFAULT 0,
    failed    bigint      NOT NULL DEFAULT 0,
    dead      bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (consumer, minute)
);

-- The last hour of every consumer (the overview's chart), and the deletion of old rows.
CREATE INDEX inbox_rollup_minute ON inbox_rollup (minute);

COMMENT ON TABLE inbox_rollup IS 'txinbox: finished attempts per consumer and minute (completed, failed, of which dead), added by worker pools; approximate (a crashed pool loses its last seconds)';

-- +goose Down
DROP TABLE inbox_rollup;
DROP TRIGGER inbox_dead_delete ON inbox;
DROP TRIGGER inbox_dead_update ON inbox;
DROP TRIGGER inbox_dead_insert ON inbox;
DROP FUNCTION inbox_dead_sync();
DROP TABLE inbox_dead;
