-- txinbox schema, version 14: pausing a consumer (inbox) or a topic (outbox).
--
-- Table names are unqualified on purpose, as in 00001: the schema is chosen by search_path.
--
-- An operator pauses the work of a consumer or of a topic while something downstream is broken
-- (package admin: Pause, Resume, ListPaused). A paused one is not claimed: its messages or events
-- stay queued as they are (no attempt charged, no retry time moved, nothing lost); the batches in
-- flight finish. Every claim reads these tables, so every pool and relay of every process honours a
-- pause from its next claim on; a resume notifies the pools or relays (their wake-up channel).
--
--   inbox_paused   one row per paused consumer, with who paused it, when and why. The worker's claims
--                  (ClaimBatch, ClaimSuspects) take nothing of a consumer that has a row here. On a
--                  Citus cluster it is distributed by consumer with the message tables
--                  (migrate.DistributedTables): a claim's probe of it stays on its consumer's shard.
--   outbox_paused  one row per paused topic, likewise. The relay's claim (OutboxClaim) parks the
--                  queued events of a paused topic it scans, never claiming nor snoozing them: their
--                  outbox_queue.run_at becomes infinity (out of the due rows claims scan; the event's
--                  own next_run_at is kept), and a resume makes them due again at that time. The
--                  outbox is never distributed (00009), nor is this table.
--
-- Both stay as small as the number of things paused; a claim reads them by primary key.

-- +goose Up
CREATE TABLE inbox_paused (
    consumer  text        PRIMARY KEY,
    paused_by text        NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    reason    text        NOT NULL DEFAULT ''
);

COMMENT ON TABLE inbox_paused IS 'txinbox: paused consumers: worker pools claim none of their messages until the row is deleted (resume)';

CREATE TABLE outbox_paused (
    topic     text        PRIMARY KEY,
    paused_by text        NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    reason    text        NOT NULL DEFAULT ''
);

COMMENT ON TABLE outbox_paused IS 'txinbox: paused outbox topics: relays claim none of their events until the row is deleted (resume)';
COMMENT ON COLUMN outbox_queue.run_at IS 'earliest claim time: not-before, backoff or snooze when unclaimed, lease expiry when claimed; infinity: parked, its topic paused (outbox_paused)';

-- +goose Down
-- Parked events go back to their own time (older relays know nothing of pauses).
UPDATE outbox_queue q SET run_at = greatest(m.next_run_at, now())
FROM outbox m
WHERE q.run_at = 'infinity' AND m.id = q.id;
COMMENT ON COLUMN outbox_queue.run_at IS 'earliest claim time: not-before, backoff or snooze when unclaimed, lease expiry when claimed';
DROP TABLE outbox_paused;
DROP TABLE inbox_paused;
