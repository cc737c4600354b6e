-- txinbox schema, version 9: the transactional outbox (package outbox).
--
-- Table names are unqualified on purpose, as in 00001: the schema is chosen by search_path.
--
-- A service writes the events it publishes in its own transaction (outbox.Client.Publish); a relay
-- (outbox.Relay) hands the committed ones to a broker and records their outcome. The tables follow
-- the inbox's shape (00001, 00004, 00006):
--
--   outbox        one row per event: what was published and its outcome. Partitioned by LIST (slot)
--                 into outbox_s0, outbox_s1, outbox_s2, a ring of generations as inbox is (00006):
--                 generation n lives in slot n % 3, and a rotation (outbox_rotate) retires a whole
--                 generation with a TRUNCATE, never a row DELETE. Its only key is the primary key
--                 (id, slot), and no indexed column ever changes, so the relay's one write of a row
--                 (its outcome) is a HOT update (fillfactor 45: room on each page for the new version
--                 of every row, as 00007 explains for inbox).
--   outbox_queue  one narrow row per event neither sent nor dead: relays claim here with SKIP LOCKED,
--                 with a lease, a fencing token and the attempts started; deleted when its event is
--                 sent or dead, so the table stays as small as the backlog.
--   outbox_ring   one row: the current generation, whose slot new events go into, and when it began.
--
-- id, drawn from the sequence outbox_id_seq when an event is written, orders the events: a key's
-- events are published in id order. event_id is the event's public id, its idempotency key
-- downstream: a UUID the publishing process draws (package outbox says why).
--
-- No table here is distributed by migrate.Distribute: the outbox is written in the application's
-- transactions and has no consumer column.

-- +goose Up
CREATE SEQUENCE outbox_id_seq AS bigint;

CREATE TABLE outbox (
    slot             smallint    NOT NULL,
    id               bigint      NOT NULL DEFAULT nextval('outbox_id_seq'),
    event_id         uuid        NOT NULL,
    topic            text        NOT NULL,
    key              text,
    payload          text        NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{}',
    state            text        NOT NULL DEFAULT 'pending',
    attempts_started integer     NOT NULL DEFAULT 0,
    attempts_failed  integer     NOT NULL DEFAULT 0,
    token            bigint      NOT NULL DEFAULT 0,
    last_error       text,
    next_run_at      timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    CONSTRAINT outbox_pkey PRIMARY KEY (id, slot),
    CONSTRAINT outbox_state_check CHECK (state IN ('pending', 'sent', 'dead'))
) PARTITION BY LIST (slot);

ALTER SEQUENCE outbox_id_seq OWNED BY outbox.id;

COMMENT ON TABLE outbox IS 'txinbox: one row per published event (what, and its outcome), in the slot of its generation';
COMMENT ON COLUMN outbox.slot IS 'generation % 3: the partition; a rotation copies the survivors of a retired slot into the new one';
COMMENT ON COLUMN outbox.event_id IS 'the event''s public id: its idempotency key downstream';
COMMENT ON COLUMN outbox.key IS 'ordering key: a key''s events are published one at a time, in id order; NULL: none';
COMMENT ON COLUMN outbox.payload IS 'the JSON payload, byte for byte as published';
COMMENT ON COLUMN outbox.state IS 'pending (queued, claimed or retrying), sent, or dead; outbox_queue holds the claim';
COMMENT ON COLUMN outbox.attempts_started IS 'attempts claimed, as of the last finished attempt (outbox_queue.attempts_started while queued)';
COMMENT ON COLUMN outbox.token IS 'fencing token of the last finished claim (outbox_queue.token while queued)';
COMMENT ON COLUMN outbox.next_run_at IS 'not-before time, then the time of the next retry';
COMMENT ON COLUMN outbox.created_at IS 'start of the publishing transaction';
COMMENT ON COLUMN outbox.finished_at IS 'when the event was sent or became dead';

CREATE TABLE outbox_s0 PARTITION OF outbox FOR VALUES IN (0) WITH (fillfactor = 45);
CREATE TABLE outbox_s1 PARTITION OF outbox FOR VALUES IN (1) WITH (fillfactor = 45);
CREATE TABLE outbox_s2 PARTITION OF outbox FOR VALUES IN (2) WITH (fillfactor = 45);

CREATE TABLE outbox_queue (
    id               bigint      PRIMARY KEY,
    key              text,
    run_at           timestamptz NOT NULL,
    claimed          boolean     NOT NULL DEFAULT false,
    ready            boolean     NOT NULL DEFAULT false,
    token            bigint      NOT NULL DEFAULT 0,
    attempts_started integer     NOT NULL DEFAULT 0,
    owner            text,
    started_at       timestamptz
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

COMMENT ON TABLE outbox_queue IS 'txinbox: events neither sent nor dead; relays claim here with SKIP LOCKED';
COMMENT ON COLUMN outbox_queue.run_at IS 'earliest claim time: not-before, backoff or snooze when unclaimed, lease expiry when claimed';
COMMENT ON COLUMN outbox_queue.ready IS 'made ready when the previous event of its key left the queue: a claim never snoozes it';
COMMENT ON COLUMN outbox_queue.token IS 'fencing token, incremented by every claim';
COMMENT ON COLUMN outbox_queue.attempts_started IS 'attempts claimed so far, counted by the claim';
COMMENT ON COLUMN outbox_queue.owner IS 'the relay holding the claim; NULL when unclaimed';

-- Due events, in claim order: unclaimed ones by not-before/backoff time, claimed ones by lease expiry
-- (a claim whose lease ended is due again). Claimed rows with a running lease sort after now().
CREATE INDEX outbox_queue_due ON outbox_queue (run_at, id);
-- Per-key order: the oldest queued event of a key, and whether an older one exists.
CREATE INDEX outbox_queue_key ON outbox_queue (key, id) WHERE key IS NOT NULL;
-- The claimed event of a key, if any (at most one).
CREATE INDEX outbox_queue_key_claimed ON outbox_queue (key) WHERE claimed AND key IS NOT NULL;

CREATE TABLE outbox_ring (
    gen        bigint      NOT NULL,
    rotated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outbox_ring_pkey PRIMARY KEY (gen)
);
CREATE UNIQUE INDEX outbox_ring_one ON outbox_ring ((true));
INSERT INTO outbox_ring (gen) VALUES (0);
COMMENT ON TABLE outbox_ring IS 'txinbox: the current generation of outbox (one row) and when it began';

-- +goose StatementBegin
-- outbox_rotate starts generation g+1 if the current generation g began at least period ago (or
-- always, when period is NULL): it copies the survivors of generation g-1 into slot (g+1) % 3, which
-- the previous rotation emptied, and TRUNCATEs slot (g-1) % 3. A survivor is every event except one
-- sent more than keep ago: queued events (pending, claimed, retrying) and dead ones are always
-- copied. So a sent event stays at least keep after it was sent, and leaves at the first rotation
-- after that which retires its slot (one every two rotations, for a row of the current generation).
--
-- Publishing reads outbox_ring without a lock and inserts into the slot of the generation it read, a
-- stale one too (a transaction at REPEATABLE READ): whatever slot a row is in, it is only ever
-- removed by a TRUNCATE of that slot, under the lock below, after a copy that reads every row of it.
--
-- One transaction; the caller sets lock_timeout. Locks, in this order:
--   1. the retired slot, ACCESS EXCLUSIVE: waits for every transaction that has read or written it
--      (each relay statement on outbox reads every partition; a publishing transaction writes the
--      slot of its generation) and holds new ones back until the commit;
--   2. outbox_ring's row, FOR UPDATE: of two rotations at once, the second finds the generation
--      changed and does nothing.
-- Returns whether it rotated (false: not due, or another rotation committed first), the generation
-- now current, and the rows copied.
CREATE FUNCTION outbox_rotate(period interval, keep interval)
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

-- +goose Down
DROP FUNCTION outbox_rotate(interval, interval);
DROP TABLE outbox_ring;
DROP TABLE outbox_queue;
DROP TABLE outbox;
