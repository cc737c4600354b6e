-- Package admin's reading and actions on the transactional outbox (migration 00009): the operator's
-- answers about it, which the console and the txinbox command present. Every table name carries the
-- schema template comment, which internal/schemasql replaces with the configured schema, quoted, at run
-- time.
--
-- The outbox table has no index on the state, so that the relay's one write of a row stays a HOT update
-- (00009): the statements that look for events by state (sent, dead) read the whole table; those about
-- queued events read the queue (as large as the backlog) and each queued event by its id (the primary
-- key (id, slot)); those about events named by their event id probe the index outbox_event_id (00012),
-- which the relay's writes never change.

-- name: OutboxQueueStats :many
-- Counts the queued events (neither sent nor dead) per topic from the queue, each queue row's event
-- read by its id (the queue has no topic): pending (waiting, never claimed), retrying (waiting,
-- claimed before: failed, handed back by a stopping relay, or replayed; a queue row's fencing token
-- is above 0 once it has been claimed), claimed (held by a relay, whose lease may have ended), and
-- the age in seconds of the oldest unsent event: since it was published for an event claimed
-- before, since it became due (published, or its NotBefore) for one never claimed; an event never
-- claimed whose NotBefore is ahead is not counted (0 when none is left).
SELECT m.topic,
       count(*) FILTER (WHERE NOT q.claimed AND q.token = 0)::bigint AS pending,
       count(*) FILTER (WHERE NOT q.claimed AND q.token > 0)::bigint AS retrying,
       count(*) FILTER (WHERE q.claimed)::bigint AS claimed,
       coalesce(extract(epoch FROM now() - min(CASE WHEN q.token = 0 THEN greatest(m.created_at, m.next_run_at) ELSE m.created_at END)
                FILTER (WHERE q.token > 0 OR m.next_run_at <= now())), 0)::float8 AS oldest_unsent_seconds
FROM /* TEMPLATE: schema */outbox_queue q
-- Each outbox row by its id, once per queue row (OFFSET 0 keeps the subquery from being flattened
-- into a join that could read the whole outbox table).
CROSS JOIN LATERAL (
    SELECT i.topic, i.created_at, i.next_run_at
    FROM /* TEMPLATE: schema */outbox i
    WHERE i.id = q.id
    OFFSET 0
) m
GROUP BY m.topic
ORDER BY m.topic;

-- name: OutboxStateCounts :many
-- Counts the sent events (kept until a rotation retires them after the retention window) and the dead
-- ones per topic: one scan of the outbox table.
SELECT m.topic,
       count(*) FILTER (WHERE m.state = 'sent')::bigint AS sent,
       count(*) FILTER (WHERE m.state = 'dead')::bigint AS dead
FROM /* TEMPLATE: schema */outbox m
WHERE m.state IN ('sent', 'dead')
GROUP BY m.topic
ORDER BY m.topic;

-- name: ListOutboxDead :many
-- Lists the matching dead events newest first (by the time they died, finished_at, then by id, both
-- descending), at most @max_rows. ListOutboxDead, CountOutboxDead and OutboxDeadIDs are package
-- admin's one reading of the outbox's dead events, for the CLI and the console alike, with the same
-- filters as the inbox's dead letters: @topic and @key exact, @error_contains a substring of the last
-- error in any case (strpos of lower() of both: no wildcard), the time of death at or after since and
-- before until, and (time of death, id) below (before_at, @before_id) when before_at is not NULL (the
-- cursor of the next page); an empty filter does not filter. One scan of the outbox table.
SELECT m.id, m.event_id::text AS event_id, m.topic, coalesce(m.key, '')::text AS key,
       coalesce(m.kind, '')::text AS kind, coalesce(m.content_type, '')::text AS content_type,
       m.finished_at AS died_at, m.attempts_started, m.attempts_failed,
       coalesce(m.last_error, '')::text AS last_error
FROM /* TEMPLATE: schema */outbox m
WHERE m.state = 'dead'
  AND (sqlc.narg(before_at)::timestamptz IS NULL OR (m.finished_at, m.id) < (sqlc.narg(before_at)::timestamptz, @before_id::bigint))
  AND (@topic::text = '' OR m.topic = @topic)
  AND (@key::text = '' OR m.key = @key)
  AND (@error_contains::text = '' OR strpos(lower(coalesce(m.last_error, '')), lower(@error_contains)) > 0)
  AND (sqlc.narg(since)::timestamptz IS NULL OR m.finished_at >= sqlc.narg(since))
  AND (sqlc.narg(until)::timestamptz IS NULL OR m.finished_at < sqlc.narg(until))
ORDER BY m.finished_at DESC, m.id DESC
LIMIT @max_rows;

-- name: CountOutboxDead :one
-- Counts the matching dead events (no paging), and returns the latest time of death of all dead
-- events now (NULL when there is none): what bounds an action to the events counted.
SELECT count(*) FILTER (
           WHERE (sqlc.narg(before_at)::timestamptz IS NULL OR (m.finished_at, m.id) < (sqlc.narg(before_at)::timestamptz, @before_id::bigint))
             AND (@topic::text = '' OR m.topic = @topic)
             AND (@key::text = '' OR m.key = @key)
             AND (@error_contains::text = '' OR strpos(lower(coalesce(m.last_error, '')), lower(@error_contains)) > 0)
             AND (sqlc.narg(since)::timestamptz IS NULL OR m.finished_at >= sqlc.narg(since))
             AND (sqlc.narg(until)::timestamptz IS NULL OR m.finished_at < sqlc.narg(until))
       )::bigint AS matching,
       max(m.finished_at)::timestamptz AS newest_at
FROM /* TEMPLATE: schema */outbox m
WHERE m.state = 'dead';

-- name: OutboxDeadIDs :many
-- The ids of the matching dead events, in id order, at most @max_rows.
SELECT m.id
FROM /* TEMPLATE: schema */outbox m
WHERE m.state = 'dead'
  AND (sqlc.narg(before_at)::timestamptz IS NULL OR (m.finished_at, m.id) < (sqlc.narg(before_at)::timestamptz, @before_id::bigint))
  AND (@topic::text = '' OR m.topic = @topic)
  AND (@key::text = '' OR m.key = @key)
  AND (@error_contains::text = '' OR strpos(lower(coalesce(m.last_error, '')), lower(@error_contains)) > 0)
  AND (sqlc.narg(since)::timestamptz IS NULL OR m.finished_at >= sqlc.narg(since))
  AND (sqlc.narg(until)::timestamptz IS NULL OR m.finished_at < sqlc.narg(until))
ORDER BY m.id
LIMIT @max_rows;

-- name: OutboxDeadAmong :many
-- Which of @ids are dead events now, in id order: one probe of the primary key per id.
SELECT m.id FROM /* TEMPLATE: schema */outbox m WHERE m.id = ANY(@ids::bigint[]) AND m.state = 'dead' ORDER BY m.id;

-- name: GetOutboxEvent :one
-- Reads one event by id, with its last failed attempts (history, 00013; [] when none), with its claim from its queue row while it is queued: claimed while a relay
-- holds it, with the claim's owner, lease (run_at), token, attempts and start. The kind and content
-- type are empty when the event takes their defaults (stored NULL).
SELECT m.id, m.event_id::text AS event_id, m.topic, coalesce(m.key, '')::text AS key,
       coalesce(m.kind, '')::text AS kind, coalesce(m.content_type, '')::text AS content_type, m.payload, m.headers,
       (CASE WHEN q.claimed THEN 'claimed' ELSE m.state END)::text AS state,
       coalesce(q.attempts_started, m.attempts_started)::int AS attempts_started, m.attempts_failed,
       coalesce(q.token, m.token)::bigint AS token, coalesce(q.owner, '')::text AS owner,
       (CASE WHEN q.claimed THEN q.run_at END)::timestamptz AS lease_until,
       (CASE WHEN m.state = 'pending' THEN m.next_run_at END)::timestamptz AS next_run_at,
       coalesce(m.last_error, '')::text AS last_error, m.created_at,
       coalesce(q.started_at, m.started_at)::timestamptz AS started_at, m.finished_at,
       coalesce(m.history, '[]'::jsonb)::jsonb AS history
FROM /* TEMPLATE: schema */outbox m
LEFT JOIN /* TEMPLATE: schema */outbox_queue q ON q.id = m.id
WHERE m.id = @id;

-- name: OutboxIDsOfEventIDs :many
-- The event id (lowercase text) and id of each stored event whose event id is among @event_ids: one
-- probe of the index outbox_event_id per event id, never a scan. An event id that no stored event has
-- returns no row.
SELECT m.event_id::text AS event_id, m.id
FROM /* TEMPLATE: schema */outbox m
WHERE m.event_id = ANY((@event_ids::text[])::uuid[]);

-- name: ReplayOutboxDead :many
-- Puts dead events back to pending with their attempts reset, keeping their row (so their event id,
-- the idempotency key downstream, is unchanged) and their last error, and queues them to go now. The
-- queue row starts with the event's fencing token, as a requeued event's does: the next claim gets a
-- greater token than any claim before, so a relay still holding a claim of the event from before it
-- died records nothing over the new claim. Rows that are no longer dead are left alone. Idle relays
-- are woken with a notification on @notify_channel when the statement commits (none when it is
-- empty).
WITH replayed AS (
    UPDATE /* TEMPLATE: schema */outbox m
    SET state = 'pending', attempts_started = 0, attempts_failed = 0, next_run_at = now(),
        started_at = NULL, finished_at = NULL
    WHERE m.id = ANY(@ids::bigint[]) AND m.state = 'dead'
    RETURNING m.id, m.key, m.token
), queued AS (
    INSERT INTO /* TEMPLATE: schema */outbox_queue (id, key, run_at, token)
    SELECT r.id, r.key, now(), r.token FROM replayed r
    ON CONFLICT (id) DO NOTHING
), notified AS (
    SELECT count(pg_notify(@notify_channel::text, '')) AS sent
    WHERE @notify_channel::text <> '' AND EXISTS (SELECT 1 FROM replayed)
)
SELECT r.id FROM notified, replayed r ORDER BY r.id;

-- name: DiscardOutboxDead :many
-- Deletes dead events; rows that are no longer dead are left alone. A dead event has no queue row.
WITH deleted AS (
    DELETE FROM /* TEMPLATE: schema */outbox m
    WHERE m.id = ANY(@ids::bigint[]) AND m.state = 'dead'
    RETURNING m.id
)
SELECT d.id FROM deleted d ORDER BY d.id;

-- name: ListOutboxInFlight :many
-- Lists the queued events (neither sent nor dead) newest first (id descending), at most @max_rows:
-- package admin's one reading of the outbox's work in flight, with the inbox's ListInFlight shape.
-- State, as OutboxQueueStats counts it: processing (claimed by a relay, whose lease may have ended:
-- with the claim's owner, start and lease), pending (waiting, never claimed: token 0) or retrying
-- (waiting, claimed before). Filters: @topic exact, @state one of the three, and id below @before_id
-- when it is not 0; an empty filter does not filter. Reads the queue by its primary key and each
-- queued event's outbox row by id (OFFSET 0: as in OutboxQueueStats).
SELECT q.id, m.event_id::text AS event_id, m.topic, coalesce(m.key, '')::text AS key,
       coalesce(m.kind, '')::text AS kind,
       (CASE WHEN q.claimed THEN 'processing' WHEN q.token = 0 THEN 'pending' ELSE 'retrying' END)::text AS state,
       q.attempts_started, m.attempts_failed, m.created_at,
       (CASE WHEN NOT q.claimed THEN q.run_at END)::timestamptz AS next_run_at,
       (CASE WHEN q.claimed THEN q.run_at END)::timestamptz AS lease_until,
       coalesce(CASE WHEN q.claimed THEN q.owner END, '')::text AS owner,
       (CASE WHEN q.claimed THEN q.started_at END)::timestamptz AS started_at,
       coalesce(m.last_error, '')::text AS last_error
FROM /* TEMPLATE: schema */outbox_queue q
CROSS JOIN LATERAL (
    SELECT i.event_id, i.topic, i.key, i.kind, i.attempts_failed, i.created_at, i.last_error
    FROM /* TEMPLATE: schema */outbox i
    WHERE i.id = q.id
    OFFSET 0
) m
WHERE (@before_id::bigint = 0 OR q.id < @before_id)
  AND (@topic::text = '' OR m.topic = @topic)
  AND (@state::text = ''
       OR (CASE WHEN q.claimed THEN 'processing' WHEN q.token = 0 THEN 'pending' ELSE 'retrying' END) = @state)
ORDER BY q.id DESC
LIMIT @max_rows;
