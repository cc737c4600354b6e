-- txinbox schema, version 11: the batch transaction claims its own messages.
--
-- Table names are unqualified on purpose, as in 00001: the schema is chosen by search_path.
--
-- Until this version a claim was a transaction of its own that wrote every claimed queue row (claimed,
-- owner, lease, token, attempt) and committed before the batch transaction locked those rows again.
-- From this version on the batch transaction claims its rows itself (SELECT ... FOR UPDATE SKIP
-- LOCKED): the row lock is the fence while the batch runs, and nothing is written per message until
-- the finish. What a crash must still be charged with is one row per batch, committed before the
-- handlers run and deleted by the batch's own commit:
--
--   inbox_batch        a batch in flight: its transaction's id (xid), its messages (ids), the pool
--                      that runs it (owner) and when it began. A row whose transaction is no longer
--                      in progress was left by a batch that never committed (its process died, or its
--                      session was ended): the rescuer charges its messages and deletes it, once.
--                      Claims never take a message listed in a row of this table.
--   inbox_queue.isolate  the most messages a message may run with next (0: any, a normal claim); set
--                      when its batch never finished (half that batch's size, rounded up), so that a
--                      message that kills its process is isolated by halving (package worker).
--
-- The queue row's claim columns go: claimed (a claimed message is now a locked row, or one listed in
-- inbox_batch), owner and started_at (in inbox_batch), group_lead (one inbox_batch row per claim).
-- Readers call a message processing while it is listed in inbox_batch.
--
-- Stop every worker of an older version before migrating (either way), as for 00004. A message
-- claimed by an older worker when this runs becomes a suspect (isolate), its attempt already counted:
-- the rescuer runs it in a group of half its claim. Going down, the messages of the batches in flight
-- (stop the workers first) and the suspects become claims whose lease has ended, which the rescuer of
-- version 10 takes over.

-- +goose Up
CREATE TABLE inbox_batch (
    consumer   text        NOT NULL,
    id         bigint      GENERATED ALWAYS AS IDENTITY,
    xid        xid8        NOT NULL,
    ids        bigint[]    NOT NULL,
    owner      text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, id)
);

COMMENT ON TABLE inbox_batch IS 'txinbox: batches in flight, one row each, deleted by the batch''s commit; a row whose transaction ended otherwise is charged by the rescuer';

ALTER TABLE inbox_queue ADD COLUMN isolate integer NOT NULL DEFAULT 0;
COMMENT ON COLUMN inbox_queue.isolate IS 'most messages it may run with next (0: any); set when its batch never finished';

UPDATE inbox_queue
SET isolate = CASE WHEN group_size = 0 THEN 250 ELSE (group_size + 1) / 2 END, run_at = now()
WHERE claimed;

ALTER TABLE inbox_queue
    DROP COLUMN claimed,
    DROP COLUMN owner,
    DROP COLUMN started_at,
    DROP COLUMN group_lead;

COMMENT ON COLUMN inbox_queue.run_at IS 'earliest claim time: not-before, backoff or ordering snooze';
COMMENT ON COLUMN inbox_queue.alone IS 'made the head of its ordering key by ReadyNext: never snoozed';
COMMENT ON COLUMN inbox_queue.token IS 'fencing token, incremented by every finish and charge: what a worker recorded outside its batch transaction only applies to the claim it read';
COMMENT ON COLUMN inbox_queue.group_size IS 'messages its last batch that never finished ran together';

-- Ready messages, in claim order; suspects apart.
CREATE INDEX inbox_queue_ready ON inbox_queue (consumer, run_at, id) WHERE isolate = 0;
CREATE INDEX inbox_queue_suspects ON inbox_queue (consumer, run_at, id) WHERE isolate > 0;

-- +goose Down
ALTER TABLE inbox_queue
    ADD COLUMN claimed    boolean NOT NULL DEFAULT false,
    ADD COLUMN owner      text,
    ADD COLUMN started_at timestamptz,
    ADD COLUMN group_lead boolean NOT NULL DEFAULT false;

-- The messages of batches in flight were not charged yet: charge them, as version 10's claim had.
UPDATE inbox_queue q
SET claimed = true, owner = b.owner, started_at = b.started_at, run_at = now(),
    attempts_started = q.attempts_started + 1, group_size = cardinality(b.ids), token = q.token + 1
FROM inbox_batch b, unnest(b.ids) AS s(id)
WHERE q.id = s.id AND q.consumer = b.consumer;

UPDATE inbox_queue
SET claimed = true, owner = 'suspect', run_at = now(), group_size = 2 * isolate - 1
WHERE isolate > 0 AND NOT claimed;

DROP INDEX inbox_queue_suspects;
DROP INDEX inbox_queue_ready;
ALTER TABLE inbox_queue DROP COLUMN isolate;
DROP TABLE inbox_batch;

COMMENT ON COLUMN inbox_queue.run_at IS 'earliest claim time: not-before/backoff when unclaimed, lease expiry when claimed';
COMMENT ON COLUMN inbox_queue.alone IS 'claimed as a suspect (its previous attempt never finished): runs in a transaction of its own';
COMMENT ON COLUMN inbox_queue.token IS 'fencing token, incremented by every claim; copied to inbox by every finish';
COMMENT ON COLUMN inbox_queue.group_size IS 'messages the current claim runs together; a takeover halves it (0: unknown)';

CREATE INDEX inbox_queue_ready ON inbox_queue (consumer, run_at, id) WHERE NOT claimed;
CREATE INDEX inbox_queue_claimed ON inbox_queue (consumer, run_at) WHERE claimed;
