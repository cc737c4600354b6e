-- txinbox schema, version 4: the claim's state lives in the narrow queue row.
--
-- Table names are unqualified on purpose, as in 00001: the schema is chosen by search_path.
--
-- Before this version a claim updated both rows of a message (inbox: state processing, owner, token,
-- attempts_started, lease_until, started_at; inbox_queue: claimed, token, run_at) and its finish
-- updated the inbox row again. From this version on, a claim (and a rescue, and a release) writes only
-- the queue row, and the finish writes the wide inbox row once:
--
--   inbox_queue.attempts_started  attempts claimed so far; the authoritative count while the message
--                                 is queued (crash-loop isolation counts here, at claim time)
--   inbox_queue.owner             the worker holding the claim (NULL when unclaimed)
--   inbox_queue.started_at        start of the latest attempt
--   inbox_queue.token             the fencing token, incremented by every claim (as before)
--   inbox_queue.run_at            the lease expiry while claimed (as before)
--
-- The inbox row of a queued message therefore stays in state pending while it is claimed, and its
-- attempts_started, token and started_at are those of its last finished attempt; every finish copies
-- them from the queue row. Readers get "processing" from a claimed queue row (package admin, the CLI).
-- inbox.owner and inbox.lease_until are no longer written by workers (kept for receive's renewal).
--
-- Stop every worker of an older version before migrating (either way): an old worker's finish is
-- fenced out by the new layout (its claims are taken over when their lease ends), not applied twice.

-- +goose Up
ALTER TABLE inbox_queue
    ADD COLUMN attempts_started integer NOT NULL DEFAULT 0,
    ADD COLUMN owner            text,
    ADD COLUMN started_at       timestamptz;

COMMENT ON COLUMN inbox_queue.attempts_started IS 'attempts claimed; authoritative while queued, copied to inbox by every finish';
COMMENT ON COLUMN inbox_queue.owner IS 'the worker holding the claim; NULL when unclaimed';
COMMENT ON COLUMN inbox_queue.started_at IS 'start of the latest attempt, copied to inbox by its finish';
COMMENT ON COLUMN inbox_queue.token IS 'fencing token, incremented by every claim; copied to inbox by every finish';
COMMENT ON COLUMN inbox.attempts_started IS 'attempts claimed, as of the last finish (inbox_queue.attempts_started while queued)';
COMMENT ON COLUMN inbox.token IS 'fencing token of the last finished claim (inbox_queue.token while queued)';

-- Queued messages, claimed or not, take their claim state from their inbox row.
UPDATE inbox_queue q
SET attempts_started = m.attempts_started,
    owner = CASE WHEN q.claimed THEN m.owner END,
    started_at = m.started_at,
    token = greatest(q.token, m.token)
FROM inbox m
WHERE m.id = q.id;

-- Claimed messages are pending in inbox from now on.
UPDATE inbox
SET state = 'pending', owner = NULL, lease_until = NULL
WHERE state = 'processing';

-- +goose Down
-- Claimed queue rows make their message processing again, with the claim's owner, token, attempts and
-- lease; unclaimed ones give their attempts and token back to inbox.
UPDATE inbox m
SET state = CASE WHEN q.claimed THEN 'processing' ELSE m.state END,
    owner = CASE WHEN q.claimed THEN q.owner END,
    lease_until = CASE WHEN q.claimed THEN q.run_at END,
    attempts_started = q.attempts_started,
    started_at = q.started_at,
    token = greatest(q.token, m.token)
FROM inbox_queue q
WHERE m.id = q.id;

COMMENT ON COLUMN inbox_queue.token IS NULL;
COMMENT ON COLUMN inbox.attempts_started IS 'attempts claimed; more than attempts_failed while one is in flight or never finished';
COMMENT ON COLUMN inbox.token IS 'fencing token, incremented by every claim';

ALTER TABLE inbox_queue
    DROP COLUMN started_at,
    DROP COLUMN owner,
    DROP COLUMN attempts_started;
