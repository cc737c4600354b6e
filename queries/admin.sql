-- name: MaxMessageID :one
-- The highest message id stored (0 when none), read from the end of the primary key.
SELECT coalesce(max(id), 0)::bigint AS max_id FROM /* TEMPLATE: schema */inbox;

-- name: NextConsumer :one
-- The first consumer after @after (in text order) that has stored messages, or '' when there is
-- none (a consumer name is never empty): one descent of the unique key (consumer, key). Called in a
-- loop, it lists the consumers without reading their rows (a recursive CTE would do it in one
-- statement, but a distributed table does not run one).
SELECT coalesce(min(m.consumer), '')::text AS consumer FROM /* TEMPLATE: schema */inbox m WHERE m.consumer > @after;

-- name: CleanExpiredRange :one
-- Deletes up to @max_rows completed messages of @consumer whose dedup window has ended, among the ids
-- above @after_id and up to @until_id, in id order (one consumer per statement: it runs on one shard
-- of a table distributed by consumer): a range scan of the primary key, so a statement never
-- reads more than that span of ids. No index beyond the primary key is needed: the inbox table keeps
-- only its primary key and unique key, so that every state change stays a HOT update (see
-- migrations/00001_inbox.sql). Rows locked by someone else (a receiver renewing an expired key) are
-- skipped; a row renewed in the meantime is re-checked by FOR UPDATE and left alone. Reports how many
-- rows were picked and deleted and the highest id picked, where the next batch of the span starts.
WITH picked AS (
    SELECT m.id
    FROM /* TEMPLATE: schema */inbox m
    WHERE m.id > @after_id AND m.id <= @until_id AND m.consumer = @consumer AND m.state = 'completed'
      AND m.expires_at < now()
    ORDER BY m.id
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM /* TEMPLATE: schema */inbox m
    USING picked
    WHERE m.id = picked.id AND m.consumer = @consumer AND m.state = 'completed' AND m.expires_at < now()
    RETURNING m.id
)
SELECT (SELECT count(*) FROM picked)::bigint AS picked,
       (SELECT count(*) FROM deleted)::bigint AS deleted,
       coalesce((SELECT max(id) FROM picked), 0)::bigint AS last_id;

-- name: DiscardOlder :one
-- Deletes up to @max_rows messages in one of @states (completed or dead only) that finished before
-- @older_than_seconds ago, among the ids of @consumer above @after_id and up to @until_id, in id
-- order. Same shape as CleanExpiredRange.
WITH picked AS (
    SELECT m.id
    FROM /* TEMPLATE: schema */inbox m
    WHERE m.id > @after_id AND m.id <= @until_id AND m.consumer = @consumer
      AND m.state = ANY(@states::text[]) AND m.state IN ('completed', 'dead')
      AND m.completed_at < now() - make_interval(secs => @older_than_seconds::float8)
    ORDER BY m.id
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM /* TEMPLATE: schema */inbox m
    USING picked
    WHERE m.id = picked.id AND m.consumer = @consumer AND m.state IN ('completed', 'dead')
    RETURNING m.id
), dequeued AS (
    DELETE FROM /* TEMPLATE: schema */inbox_queue q
    USING deleted
    WHERE q.id = deleted.id AND q.consumer = @consumer
)
SELECT (SELECT count(*) FROM picked)::bigint AS picked,
       (SELECT count(*) FROM deleted)::bigint AS deleted,
       coalesce((SELECT max(id) FROM picked), 0)::bigint AS last_id;

-- name: ListDead :many
-- Lists the matching dead letters newest first (seq descending), at most @max_rows. ListDead,
-- CountDead and DeadIDs are package admin's one reading of dead letters, for the CLI and the console
-- alike, with the same filters: @consumer and @kind exact, @error_contains a substring of the last
-- error in any case (strpos of lower() of both: no wildcard), the time of death (died_at) at or
-- after since and before until, and seq below @before_seq when it is not 0; an empty filter does not
-- filter. The filters read the dead-letter set (inbox_dead, migration 00003: one row per dead
-- message, kept by triggers; seq orders them by when they died), never the inbox table; the inbox
-- rows of a page are then read by primary key.
SELECT d.seq, d.died_at, m.id, m.consumer, m.key, m.kind, m.attempts_started, m.attempts_failed,
       (m.raw IS NOT NULL)::boolean AS undecodable, coalesce(m.last_error, '')::text AS last_error
FROM (
    SELECT d.seq, d.id, d.consumer, d.died_at
    FROM /* TEMPLATE: schema */inbox_dead d
    WHERE (@before_seq::bigint = 0 OR d.seq < @before_seq)
      AND (@consumer::text = '' OR d.consumer = @consumer)
      AND (@kind::text = '' OR d.kind = @kind)
      AND (@error_contains::text = '' OR strpos(lower(d.error), lower(@error_contains)) > 0)
      AND (sqlc.narg(since)::timestamptz IS NULL OR d.died_at >= sqlc.narg(since))
      AND (sqlc.narg(until)::timestamptz IS NULL OR d.died_at < sqlc.narg(until))
    ORDER BY d.seq DESC
    LIMIT @max_rows
) d
JOIN /* TEMPLATE: schema */inbox m ON m.id = d.id AND m.consumer = d.consumer
ORDER BY d.seq DESC;

-- name: CountDead :one
-- Counts the matching dead letters (no paging) and returns the highest seq of all dead letters now
-- (0 when there is none): what bounds an action to the letters counted. The two aggregates are
-- joined in FROM, not one a subquery in the other's select list, which Citus refuses on a
-- distributed table ("cannot push down subquery on the target list").
SELECT c.matching, coalesce(x.max_seq, 0)::bigint AS max_seq
FROM (
    SELECT count(*)::bigint AS matching
    FROM /* TEMPLATE: schema */inbox_dead d
    WHERE (@before_seq::bigint = 0 OR d.seq < @before_seq)
      AND (@consumer::text = '' OR d.consumer = @consumer)
      AND (@kind::text = '' OR d.kind = @kind)
      AND (@error_contains::text = '' OR strpos(lower(d.error), lower(@error_contains)) > 0)
      AND (sqlc.narg(since)::timestamptz IS NULL OR d.died_at >= sqlc.narg(since))
      AND (sqlc.narg(until)::timestamptz IS NULL OR d.died_at < sqlc.narg(until))
) c
CROSS JOIN (SELECT max(x.seq) AS max_seq FROM /* TEMPLATE: schema */inbox_dead x) x;

-- name: DeadIDs :many
-- The ids of the matching dead letters, in id order, at most @max_rows.
SELECT d.id
FROM /* TEMPLATE: schema */inbox_dead d
WHERE (@before_seq::bigint = 0 OR d.seq < @before_seq)
  AND (@consumer::text = '' OR d.consumer = @consumer)
  AND (@kind::text = '' OR d.kind = @kind)
  AND (@error_contains::text = '' OR strpos(lower(d.error), lower(@error_contains)) > 0)
  AND (sqlc.narg(since)::timestamptz IS NULL OR d.died_at >= sqlc.narg(since))
  AND (sqlc.narg(until)::timestamptz IS NULL OR d.died_at < sqlc.narg(until))
ORDER BY d.id
LIMIT @max_rows;

-- name: DeadAmong :many
-- Which of @ids are dead letters now, in id order.
SELECT d.id FROM /* TEMPLATE: schema */inbox_dead d WHERE d.id = ANY(@ids::bigint[]) ORDER BY d.id;

-- name: GetMessage :one
-- Reads one stored message by id, with its last failed attempts (history, 00013; [] when none). A queued message's attempts and token are read from its queue row;
-- a message listed in a batch in flight (inbox_batch, 00011) is processing, with that batch's owner
-- and start.
SELECT m.id, m.consumer, m.key, m.kind, m.payload, m.raw, m.headers, m.fingerprint, m.ordering_key,
       (CASE WHEN b.id IS NOT NULL THEN 'processing' ELSE m.state END)::text AS state,
       coalesce(q.attempts_started, m.attempts_started)::int AS attempts_started, m.attempts_failed, m.next_run_at,
       coalesce(CASE WHEN b.id IS NOT NULL THEN b.owner WHEN q.id IS NULL THEN m.owner END, '')::text AS owner,
       (CASE WHEN q.id IS NULL THEN m.lease_until END)::timestamptz AS lease_until,
       coalesce(q.token, m.token)::bigint AS token, m.last_error,
       m.received_at, coalesce(b.started_at, m.started_at)::timestamptz AS started_at, m.completed_at, m.expires_at, m.result,
       coalesce(m.history, '[]'::jsonb)::jsonb AS history
FROM /* TEMPLATE: schema */inbox m
LEFT JOIN /* TEMPLATE: schema */inbox_queue q ON q.id = m.id AND q.consumer = m.consumer
LEFT JOIN LATERAL (
    SELECT b.id, b.owner, b.started_at FROM /* TEMPLATE: schema */inbox_batch b
    WHERE b.consumer = m.consumer AND m.id = ANY (b.ids)
    LIMIT 1
) b ON true
WHERE m.id = @id;

-- name: ReplayDead :many
-- Puts dead messages back to pending with their attempts reset, keeping their row (so their key, and
-- dedup, are unchanged) and their last error, and queues them to run now. Rows that are no longer dead,
-- and undecodable messages (raw bytes kept), are left alone. The queue row starts with the fencing
-- token of the message, as every queue row does. Idle workers of the replayed consumers are woken
-- with a notification on @notify_channel when the statement commits (none when it is empty).
WITH replayed AS (
    UPDATE /* TEMPLATE: schema */inbox m
    SET state = 'pending', attempts_started = 0, attempts_failed = 0, next_run_at = now(),
        owner = NULL, lease_until = NULL, started_at = NULL, completed_at = NULL, expires_at = NULL,
        result = NULL
    WHERE m.id = ANY(@ids::bigint[]) AND m.state = 'dead' AND m.raw IS NULL
    RETURNING m.id, m.consumer, m.ordering_key, m.token
), queued AS (
    INSERT INTO /* TEMPLATE: schema */inbox_queue (id, consumer, ordering_key, run_at, token)
    SELECT r.id, r.consumer, r.ordering_key, now(), r.token FROM replayed r
    ON CONFLICT (id, consumer) DO NOTHING
), notified AS (
    SELECT count(pg_notify(@notify_channel::text, c.consumer)) AS sent
    FROM (SELECT DISTINCT r.consumer FROM replayed r) AS c
    WHERE @notify_channel::text <> ''
)
SELECT r.id FROM notified, replayed r ORDER BY r.id;

-- name: DiscardDead :many
-- Deletes dead messages; rows that are no longer dead are left alone. Their keys are then accepted
-- again as new messages.
WITH deleted AS (
    DELETE FROM /* TEMPLATE: schema */inbox m
    WHERE m.id = ANY(@ids::bigint[]) AND m.state = 'dead'
    RETURNING m.id, m.consumer
), dequeued AS (
    DELETE FROM /* TEMPLATE: schema */inbox_queue q
    USING deleted
    WHERE q.id = deleted.id AND q.consumer = deleted.consumer
)
SELECT d.id FROM deleted d ORDER BY d.id;

-- name: ConsumerStats :many
-- Counts messages per consumer and state, with the wait of the oldest due pending message (seconds),
-- the completions of the last minute and the completed rows past their dedup window. One scan of the
-- inbox table, joined to the messages of the batches in flight (inbox_batch, 00011), which are
-- processing.
WITH listed AS (
    SELECT b.consumer, u.id FROM /* TEMPLATE: schema */inbox_batch b, unnest(b.ids) AS u(id)
), s AS (
    SELECT m.consumer, (CASE WHEN l.id IS NOT NULL THEN 'processing' ELSE m.state END)::text AS state,
           m.next_run_at, m.completed_at, m.expires_at
    FROM /* TEMPLATE: schema */inbox m
    LEFT JOIN listed l ON l.id = m.id AND l.consumer = m.consumer
)
SELECT s.consumer, s.state, count(*)::bigint AS messages,
       coalesce(extract(epoch FROM now() - min(s.next_run_at) FILTER (WHERE s.state = 'pending' AND s.next_run_at <= now())), 0)::float8 AS oldest_due_seconds,
       count(*) FILTER (WHERE s.state = 'completed' AND s.completed_at >= now() - interval '1 minute')::bigint AS last_minute,
       count(*) FILTER (WHERE s.state = 'completed' AND s.expires_at < now())::bigint AS expired
FROM s
GROUP BY s.consumer, s.state
ORDER BY s.consumer, s.state;

-- name: DiscardPending :many
-- Deletes pending messages of @consumer that no worker has claimed, with their queue rows. It
-- considers the queued messages (one queue row per pending or claimed message; completed and dead
-- rows are never read) with an id above @after_id that match the non-empty filters (@kind, @ids), the
-- first @max_rows of them in id order. A queue row is locked FOR UPDATE SKIP LOCKED before its
-- message is deleted, as claims lock it: a claim that locked it first wins (its batch runs it), a
-- claim that comes later skips it; a message listed in a batch in flight or left behind (inbox_batch)
-- is left alone.
-- Returns every message considered, whether it was deleted, and the consumer and ordering key of
-- those deleted.
WITH matched AS (
    SELECT q.id
    FROM /* TEMPLATE: schema */inbox_queue q
    JOIN /* TEMPLATE: schema */inbox m ON m.id = q.id AND m.consumer = q.consumer
    WHERE q.id > @after_id
      AND q.consumer = @consumer
      AND (@kind::text = '' OR m.kind = @kind)
      AND (cardinality(@ids::bigint[]) = 0 OR q.id = ANY(@ids::bigint[]))
    ORDER BY q.id
    LIMIT @max_rows
), locked AS (
    SELECT q.id, q.consumer
    FROM /* TEMPLATE: schema */inbox_queue q
    -- = ANY (ARRAY(...)), not IN (SELECT ...): Citus 13 fails to read the CTE's result in the IN form
    -- ("invalid input syntax for type bigint: PGCOPY").
    WHERE q.id = ANY (ARRAY(SELECT matched.id FROM matched)) AND q.consumer = @consumer
      AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */inbox_batch b WHERE b.consumer = @consumer AND q.id = ANY (b.ids))
    FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM /* TEMPLATE: schema */inbox m
    USING locked
    WHERE m.id = locked.id AND m.consumer = locked.consumer AND m.state = 'pending'
    RETURNING m.id, m.consumer, m.ordering_key
), dequeued AS (
    DELETE FROM /* TEMPLATE: schema */inbox_queue q
    USING deleted
    WHERE q.id = deleted.id AND q.consumer = deleted.consumer
)
SELECT mt.id, (d.id IS NOT NULL)::boolean AS discarded, coalesce(d.consumer, '')::text AS consumer,
       d.ordering_key
FROM matched mt
LEFT JOIN deleted d ON d.id = mt.id
ORDER BY mt.id;

-- name: PreviewDiscardPending :many
-- What DiscardPending would do with the same arguments, without locking or deleting anything:
-- every message it would consider and whether it is pending and unclaimed now.
SELECT q.id, (m.state = 'pending' AND NOT EXISTS (
           SELECT 1 FROM /* TEMPLATE: schema */inbox_batch b WHERE b.consumer = @consumer AND q.id = ANY (b.ids)))::boolean AS discarded
FROM /* TEMPLATE: schema */inbox_queue q
JOIN /* TEMPLATE: schema */inbox m ON m.id = q.id AND m.consumer = q.consumer
WHERE q.id > @after_id
  AND q.consumer = @consumer
  AND (@kind::text = '' OR m.kind = @kind)
  AND (cardinality(@ids::bigint[]) = 0 OR q.id = ANY(@ids::bigint[]))
ORDER BY q.id
LIMIT @max_rows;

-- name: Rotate :one
-- Begins a new generation of the inbox if the current one began at least @period ago, or at once
-- when @period is NULL (inbox_rotate, migration 00006). Run it in a transaction of its own with a
-- lock_timeout. busy: it gave up because a consumer was being registered; run it again.
SELECT r.rotated::boolean AS rotated, r.generation::bigint AS generation, r.copied::bigint AS copied,
       r.busy::boolean AS busy
FROM /* TEMPLATE: schema */inbox_rotate(sqlc.narg(period)::interval) r;

-- name: QueueCounts :many
-- QueueCounts, DeadCounts and RollupMinutes are Admin.Overview's reads, after it lists the consumers
-- (schemasql.ConsumersUpTo: one descent of the unique key (consumer, key) per consumer): none of them scans
-- the inbox table (plans and times at 10M retained rows: README, "Console").
-- Counts the queued messages per consumer from the queue alone: pending (waiting, never claimed),
-- retrying (waiting, claimed before: failed, handed back by a stopping pool, or replayed; the queue
-- row's fencing token is above 0 once a message has been claimed), claimed (held by a worker), and
-- the wait of the oldest due waiting message (seconds).
WITH listed AS (
    SELECT b.consumer, u.id FROM /* TEMPLATE: schema */inbox_batch b, unnest(b.ids) AS u(id)
)
SELECT q.consumer,
       count(*) FILTER (WHERE l.id IS NULL AND q.token = 0)::bigint AS pending,
       count(*) FILTER (WHERE l.id IS NULL AND q.token > 0)::bigint AS retrying,
       count(l.id)::bigint AS claimed,
       coalesce(extract(epoch FROM now() - min(q.run_at) FILTER (WHERE l.id IS NULL AND q.run_at <= now())), 0)::float8 AS oldest_due_seconds
FROM /* TEMPLATE: schema */inbox_queue q
LEFT JOIN listed l ON l.id = q.id AND l.consumer = q.consumer
GROUP BY q.consumer
ORDER BY q.consumer;

-- name: DeadCounts :many
-- Counts the dead letters per consumer (exact: the dead-letter set).
SELECT d.consumer, count(*)::bigint AS dead
FROM /* TEMPLATE: schema */inbox_dead d
GROUP BY d.consumer
ORDER BY d.consumer;

-- name: RollupMinutes :many
-- The per-minute counts of finished attempts (inbox_rollup) of the last window_minutes minutes (the
-- current one included), per consumer, oldest first.
SELECT r.consumer, r.minute, r.completed, r.failed, r.dead
FROM /* TEMPLATE: schema */inbox_rollup r
WHERE r.minute > date_trunc('minute', now()) - sqlc.arg(window_minutes)::int * interval '1 minute'
ORDER BY r.consumer, r.minute;

-- name: MessageIDByKey :one
-- The id of the message stored under (@consumer, @key): the live one when the key also has an expired
-- row in an older generation (00006), else the newest.
SELECT m.id FROM /* TEMPLATE: schema */inbox m WHERE m.consumer = @consumer AND m.key = @key
ORDER BY coalesce(m.state = 'completed' AND m.expires_at < now(), false), m.id DESC
LIMIT 1;

-- name: CountUnclaimed :one
-- Counts @consumer's queued messages that no worker holds (pending or waiting for a retry) and returns
-- the highest id among them: what bounds a discard to the messages counted. Reads the ready index.
SELECT count(*)::bigint AS matching, coalesce(max(q.id), 0)::bigint AS max_id
FROM /* TEMPLATE: schema */inbox_queue q
WHERE q.consumer = @consumer
  AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */inbox_batch b WHERE b.consumer = @consumer AND q.id = ANY (b.ids));

-- name: UnclaimedIDs :many
-- The ids of @consumer's queued messages that no worker holds, up to @max_id, in id order, at most
-- @max_rows.
SELECT q.id
FROM /* TEMPLATE: schema */inbox_queue q
WHERE q.consumer = @consumer AND q.id <= @max_id
  AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */inbox_batch b WHERE b.consumer = @consumer AND q.id = ANY (b.ids))
ORDER BY q.id
LIMIT @max_rows;

-- name: ListInFlight :many
-- Lists the queued messages (neither completed nor dead) newest first (id descending), at most
-- @max_rows: package admin's one reading of the inbox's work in flight, for the CLI and the console
-- alike. State, as QueueCounts counts it: processing (listed in a batch in flight or left behind,
-- inbox_batch: with that batch's owner and start), pending (waiting, never claimed: the queue row's
-- fencing token is 0) or retrying (waiting, claimed before: failed, charged, handed back by a stopping
-- pool, or replayed). Filters: @consumer exact, @state one of the three, and id below @before_id when
-- it is not 0 (the cursor of the next page); an empty filter does not filter. Reads the queue (as large
-- as the backlog) by its primary key, then each listed message's inbox row by id and consumer (the
-- page is materialized first: at most @max_rows probes; on Citus an intermediate result joined on
-- the distribution column).
WITH listed AS (
    SELECT b.consumer, u.id, b.owner, b.started_at
    FROM /* TEMPLATE: schema */inbox_batch b, unnest(b.ids) AS u(id)
    WHERE (@consumer::text = '' OR b.consumer = @consumer)
), page AS MATERIALIZED (
    SELECT q.id, q.consumer, q.run_at, q.attempts_started, l.owner, l.started_at,
           (CASE WHEN l.id IS NOT NULL THEN 'processing' WHEN q.token = 0 THEN 'pending' ELSE 'retrying' END)::text AS state
    FROM /* TEMPLATE: schema */inbox_queue q
    LEFT JOIN listed l ON l.id = q.id AND l.consumer = q.consumer
    WHERE (@consumer::text = '' OR q.consumer = @consumer)
      AND (@before_id::bigint = 0 OR q.id < @before_id)
      AND (@state::text = ''
           OR (CASE WHEN l.id IS NOT NULL THEN 'processing' WHEN q.token = 0 THEN 'pending' ELSE 'retrying' END) = @state)
    ORDER BY q.id DESC
    LIMIT @max_rows
)
SELECT p.id, p.consumer, m.key, m.kind, p.state, p.attempts_started, m.attempts_failed, m.received_at,
       (CASE WHEN p.state <> 'processing' THEN p.run_at END)::timestamptz AS next_run_at,
       coalesce(p.owner, '')::text AS owner, p.started_at::timestamptz AS started_at,
       coalesce(m.last_error, '')::text AS last_error
FROM page p
JOIN /* TEMPLATE: schema */inbox m ON m.id = p.id AND m.consumer = p.consumer
ORDER BY p.id DESC;
