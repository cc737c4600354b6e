-- Paused consumers and topics (migration 00014): package admin's Pause, Resume and ListPaused, and
-- the metrics' gauge. The claims read the tables themselves (worker.sql, outbox.sql). Every table
-- name carries the schema template comment, which internal/schemasql replaces with the configured
-- schema, quoted, at run time.

-- name: PauseConsumer :one
-- Pauses @consumer: no worker pool claims its messages from the next claim on. Returns whether it
-- was paused here (false: it was paused already, and its row, who and why, is left as it was).
-- Routing: names @consumer (inbox_paused is distributed by consumer on Citus).
WITH ins AS (
    INSERT INTO /* TEMPLATE: schema */inbox_paused (consumer, paused_by, reason)
    VALUES (@consumer, @paused_by, @reason)
    ON CONFLICT (consumer) DO NOTHING
    RETURNING consumer
)
SELECT EXISTS (SELECT 1 FROM ins)::bool AS paused;

-- name: ResumeConsumer :one
-- Resumes @consumer and, when its row was deleted and @notify_channel is not empty, wakes its pools
-- with a notification (payload: the consumer) at the commit. Returns whether it was paused.
WITH del AS (
    DELETE FROM /* TEMPLATE: schema */inbox_paused p
    WHERE p.consumer = @consumer
    RETURNING p.consumer
), notified AS (
    SELECT count(pg_notify(@notify_channel::text, d.consumer)) AS sent
    FROM del d
    WHERE @notify_channel::text <> ''
)
SELECT EXISTS (SELECT 1 FROM del)::bool AS resumed FROM notified;

-- name: PauseTopic :one
-- Pauses the outbox topic @topic: no relay claims its events from the next claim on. Returns
-- whether it was paused here (false: it was paused already, and its row is left as it was).
WITH ins AS (
    INSERT INTO /* TEMPLATE: schema */outbox_paused (topic, paused_by, reason)
    VALUES (@topic, @paused_by, @reason)
    ON CONFLICT (topic) DO NOTHING
    RETURNING topic
)
SELECT EXISTS (SELECT 1 FROM ins)::bool AS paused;

-- name: ResumeTopic :one
-- Resumes the outbox topic @topic: deletes its row and makes its parked events (run_at infinity: see
-- OutboxClaim) due again at their own time, their not-before or retry time (outbox.next_run_at), or
-- now if that has passed; and, when its row was deleted and @notify_channel is not empty, wakes the
-- relays with a notification at the commit. Run it in a transaction holding OutboxClaimLock, taken
-- before this statement: every claim that parked an event of the topic has committed before this
-- statement's snapshot, and no claim after it sees the topic paused. Returns whether it was paused.
-- The parked rows are found by the due index (run_at = infinity), each looked up by id for its topic.
WITH del AS (
    DELETE FROM /* TEMPLATE: schema */outbox_paused p
    WHERE p.topic = @topic
    RETURNING p.topic
), unparked AS (
    UPDATE /* TEMPLATE: schema */outbox_queue q
    SET run_at = greatest(m.next_run_at, now())
    FROM /* TEMPLATE: schema */outbox m
    WHERE q.run_at = 'infinity' AND m.id = q.id AND m.topic = @topic
), notified AS (
    SELECT count(pg_notify(@notify_channel::text, '')) AS sent
    FROM del d
    WHERE @notify_channel::text <> ''
)
SELECT EXISTS (SELECT 1 FROM del)::bool AS resumed FROM notified;

-- name: ListPausedConsumers :many
-- The paused consumers, in name order.
SELECT p.consumer, p.paused_by, p.paused_at, p.reason
FROM /* TEMPLATE: schema */inbox_paused p
ORDER BY p.consumer;

-- name: ListPausedTopics :many
-- The paused outbox topics, in name order.
SELECT p.topic, p.paused_by, p.paused_at, p.reason
FROM /* TEMPLATE: schema */outbox_paused p
ORDER BY p.topic;
