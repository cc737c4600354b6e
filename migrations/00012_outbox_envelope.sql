-- txinbox schema, version 12: what an outbox event carries across the broker (package outbox).
--
-- An event is sent as a CloudEvents 1.0 event (see package outbox): its type is the event's kind and
-- its datacontenttype the payload's media type. Both are stored with the event; NULL means the
-- default, resolved when the event is sent (the kind: the topic; the content type:
-- application/json), so that rows written before this version, and events that take the defaults,
-- store nothing more.
--
-- event_id, the only id a consumer sees, gets an index, so that an operator can find an event by
-- it (admin, the console, the CLI). It never changes, so the relay's write of an event's outcome
-- stays a HOT update. Building it reads the whole outbox and holds back publishing transactions
-- meanwhile (CREATE INDEX on a partitioned table cannot be CONCURRENTLY).

-- +goose Up
ALTER TABLE outbox ADD COLUMN kind text, ADD COLUMN content_type text;
COMMENT ON COLUMN outbox.kind IS 'the event''s kind (CloudEvents type); NULL: its topic';
COMMENT ON COLUMN outbox.content_type IS 'the payload''s media type (CloudEvents datacontenttype); NULL: application/json';

CREATE INDEX outbox_event_id ON outbox (event_id);

-- +goose StatementBegin
-- outbox_rotate as in 00009, copying the new columns too.
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

-- +goose Down
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
        INSERT INTO outbox (slot, id, event_id, topic, key, payload, headers, state, attempts_started,
                            attempts_failed, token, last_error, next_run_at, created_at, started_at, finished_at)
        SELECT $1, id, event_id, topic, key, payload, headers, state, attempts_started,
               attempts_failed, token, last_error, next_run_at, created_at, started_at, finished_at
        FROM %I
        WHERE NOT coalesce(state = 'sent' AND finished_at < now() - $2, false)$q$, 'outbox_s' || retired)
        USING (g % 3)::smallint, keep;
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE format('TRUNCATE %I', 'outbox_s' || retired);
    RETURN QUERY SELECT true, g, n;
END
$$;
-- +goose StatementEnd
DROP INDEX outbox_event_id;
ALTER TABLE outbox DROP COLUMN content_type, DROP COLUMN kind;
