-- txinbox schema, version 13: the last failed attempts of each message and event (package admin).
--
-- Table names are unqualified on purpose, as in 00001: the schema is chosen by search_path.
--
--   inbox.history    the message's last failed attempts, at most 10, oldest first: a JSON array of
--   outbox.history   objects {"n": attempt number, "at": start of the attempt's batch or claim,
--                    "ms": how long the handler or Publisher call ran (0: unknown, the attempt never
--                    finished), "reason": why it failed, "error": its error, "owner": the worker or
--                    relay that ran it}. NULL: no attempt has failed.
--
-- Only failures write it, in the statement that already writes the row on a failure: the finish of
-- a failed attempt (error, panic, timeout, permanent, undecodable, unknown kind, out of attempts:
-- FinishBatch, OutboxFinish), the charge of a batch that never finished (ChargeBatch), the messages
-- held when a batch handler call broke its transaction (SettleBatch), and the claim that takes over
-- an outbox event whose lease ended (OutboxClaim). A completed message or sent event keeps its
-- column as it was: the success path writes nothing more. The array is trimmed to its last 10
-- entries by the statement that appends to it. A new column of the row, so the rotations (copying
-- the survivors of a retired generation) carry it: inbox_rotate and outbox_rotate copy it from this
-- version on. No new table, no new index: finishes stay HOT updates (00007), and on Citus the column
-- is distributed with its row.
--
-- Adding a column without a default rewrites nothing. A renewed key (RenewExpired) starts with no
-- history; a replayed dead letter keeps its own.
--
-- On Citus the ALTER TABLEs run on every shard; the functions' DDL may follow them in one transaction
-- only if the shards were altered one connection at a time: SET LOCAL citus.multi_shard_modify_mode
-- (a placeholder setting, without effect, on a server without Citus).

-- +goose Up
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
ALTER TABLE inbox ADD COLUMN history jsonb;
ALTER TABLE outbox ADD COLUMN history jsonb;
COMMENT ON COLUMN inbox.history IS 'the last 10 failed attempts, oldest first: [{n, at, ms, reason, error, owner}]; NULL: none';
COMMENT ON COLUMN outbox.history IS 'the last 10 failed attempts, oldest first: [{n, at, ms, reason, error, owner}]; NULL: none';

-- +goose StatementBegin
-- inbox_rotate as in 00006, copying history too.
CREATE OR REPLACE FUNCTION inbox_rotate(period interval)
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
                           last_error, received_at, started_at, completed_at, expires_at, result, history)
        SELECT $1, id, consumer, key, kind, payload, raw, headers, fingerprint, ordering_key,
               state, attempts_started, attempts_failed, next_run_at, owner, lease_until, token,
               last_error, received_at, started_at, completed_at, expires_at, result, history
        FROM %I
        WHERE NOT coalesce(state = 'completed' AND expires_at < now(), false)$q$, 'inbox_s' || retired) USING (g % 3)::smallint;
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE format('TRUNCATE %I', 'inbox_s' || retired);
    RETURN QUERY SELECT true, g, n, false;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- outbox_rotate as in 00012, copying history too.
CREATE OR REPLACE FUNCTION outbox_rotate(period interval, keep interval)
RETURNS TABLE (rotated boolean, generation bigint, copied bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    g       bigint;
    now_g   bigint;
    began   timestamptz;
    retired int;
    n       bigint;
BEGIN
    SELECT r.gen, r.rotated_at INTO g, began FROM outbox_ring r;
    IF period IS NOT NULL AND now() - began < period THEN
        RETURN QUERY SELECT false, g, 0::bigint;
        RETURN;
    END IF;
    retired := (g + 2) % 3;
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', 'outbox_s' || retired);
    SELECT r.gen INTO now_g FROM outbox_ring r FOR UPDATE;
    IF now_g <> g THEN -- another rotation committed since the first read
        RETURN QUERY SELECT false, now_g, 0::bigint;
        RETURN;
    END IF;
    g := g + 1;
    UPDATE outbox_ring SET gen = g, rotated_at = now();
    -- The survivors are read in a CTE of their own (MATERIALIZED), then copied.
    EXECUTE format($q$
        WITH survivors AS MATERIALIZED (
            SELECT id, event_id, topic, key, kind, content_type, payload, headers, state,
                   attempts_started, attempts_failed, token, last_error, next_run_at, created_at,
                   started_at, finished_at, history
            FROM %I
            WHERE NOT coalesce(state = 'sent' AND finished_at < now() - $2, false))
        INSERT INTO outbox (slot, id, event_id, topic, key, kind, content_type, payload, headers, state,
                            attempts_started, attempts_failed, token, last_error, next_run_at, created_at,
                            started_at, finished_at, history)
        SELECT $1, id, event_id, topic, key, kind, content_type, payload, headers, state,
               attempts_started, attempts_failed, token, last_error, next_run_at, created_at,
               started_at, finished_at, history
        FROM survivors$q$, 'outbox_s' || retired)
        USING (g % 3)::smallint, keep;
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE format('TRUNCATE %I', 'outbox_s' || retired);
    RETURN QUERY SELECT true, g, n;
END
$$;
-- +goose StatementEnd

-- +goose Down
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION inbox_rotate(period interval)
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_rotate(period interval, keep interval)
RETURNS TABLE (rotated boolean, generation bigint, copied bigint)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    g       bigint;
    now_g   bigint;
    began   timestamptz;
    retired int;
    n       bigint;
BEGIN
    SELECT r.gen, r.rotated_at INTO g, began FROM outbox_ring r;
    IF period IS NOT NULL AND now() - began < period THEN
        RETURN QUERY SELECT false, g, 0::bigint;
        RETURN;
    END IF;
    retired := (g + 2) % 3;
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', 'outbox_s' || retired);
    SELECT r.gen INTO now_g FROM outbox_ring r FOR UPDATE;
    IF now_g <> g THEN -- another rotation committed since the first read
        RETURN QUERY SELECT false, now_g, 0::bigint;
        RETURN;
    END IF;
    g := g + 1;
    UPDATE outbox_ring SET gen = g, rotated_at = now();
    EXECUTE format($q$
        INSERT INTO outbox (slot, id, event_id, topic, key, kind, content_type, payload, headers, state,
                            attempts_started, attempts_failed, token, last_error, next_run_at, created_at,
                            started_at, finished_at)
        SELECT $1, id, event_id, topic, key, kind, content_type, payload, headers, state,
               attempts_started, attempts_failed, token, last_error, next_run_at, created_at,
               started_at, finished_at
        FROM %I
        WHERE NOT coalesce(state = 'sent' AND finished_at < now() - $2, false)$q$, 'outbox_s' || retired)
        USING (g % 3)::smallint, keep;
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE format('TRUNCATE %I', 'outbox_s' || retired);
    RETURN QUERY SELECT true, g, n;
END
$$;
-- +goose StatementEnd

ALTER TABLE outbox DROP COLUMN history;
ALTER TABLE inbox DROP COLUMN history;
