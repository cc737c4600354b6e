-- The operator console's reads (package console). None of them
-- scans the inbox table: they read the queue (as large as the backlog), the dead-letter set
-- (inbox_dead), the per-minute rollup, or rows of inbox by a unique index (one message, or the 50 of
-- a page of dead letters).
-- Plans and times at 10M retained rows: README, "Console".

-- name: ConsoleConsumers :many
-- Lists the consumers that have stored messages, in order, at most @max_rows: a loose index scan of
-- the unique key (consumer, key), one index descent per consumer, however many rows each has.
WITH RECURSIVE c AS (
    SELECT min(i.consumer) AS consumer FROM /* TEMPLATE: schema */inbox i
    UNION ALL
    SELECT (SELECT min(n.consumer) FROM /* TEMPLATE: schema */inbox n WHERE n.consumer > c.consumer)
    FROM c
    WHERE c.consumer IS NOT NULL
)
SELECT c.consumer::text AS consumer FROM c WHERE c.consumer IS NOT NULL LIMIT sqlc.arg(max_rows)::int;

-- name: ConsoleQueueCounts :many
-- Counts the queued messages per consumer from the queue alone: pending (waiting, never claimed),
-- retrying (waiting, claimed before: failed, handed back by a stopping pool, or replayed; the queue
-- row's fencing token is above 0 once a message has been claimed), claimed (held by a worker), and
-- the wait of the oldest due waiting message (seconds).
SELECT q.consumer,
       count(*) FILTER (WHERE NOT q.claimed AND q.token = 0)::bigint AS pending,
       count(*) FILTER (WHERE NOT q.claimed AND q.token > 0)::bigint AS retrying,
       count(*) FILTER (WHERE q.claimed)::bigint AS claimed,
       coalesce(extract(epoch FROM now() - min(q.run_at) FILTER (WHERE NOT q.claimed AND q.run_at <= now())), 0)::float8 AS oldest_due_seconds
FROM /* TEMPLATE: schema */inbox_queue q
GROUP BY q.consumer
ORDER BY q.consumer;

-- name: ConsoleDeadCounts :many
-- Counts the dead letters per consumer (exact: the dead-letter set).
SELECT d.consumer, count(*)::bigint AS dead
FROM /* TEMPLATE: schema */inbox_dead d
GROUP BY d.consumer
ORDER BY d.consumer;

-- name: ConsoleRollup :many
-- The per-minute counts of the last window_minutes minutes (the current one included), per consumer.
SELECT r.consumer, r.minute, r.completed, r.failed, r.dead
FROM /* TEMPLATE: schema */inbox_rollup r
WHERE r.minute > date_trunc('minute', now()) - sqlc.arg(window_minutes)::int * interval '1 minute'
ORDER BY r.consumer, r.minute;

-- name: ConsoleMessageID :one
-- The id of the message stored under (@consumer, @key): the live one when the key also has an expired
-- row in an older generation (00006), else the newest.
SELECT m.id FROM /* TEMPLATE: schema */inbox m WHERE m.consumer = @consumer AND m.key = @key
ORDER BY coalesce(m.state = 'completed' AND m.expires_at < now(), false), m.id DESC
LIMIT 1;

-- name: ConsoleListDead :many
-- Lists dead letters newest first (by seq, the order they died in), before @before_seq when it is not
-- 0, matching the non-empty filters: consumer, kind, a substring of the last error (case-insensitive),
-- and the time it died within since and until. The filters read the dead-letter set only; the inbox
-- rows of the page's messages are then read by primary key.
SELECT d.seq, d.died_at, m.id, m.consumer, m.key, m.kind, m.attempts_failed, (m.raw IS NOT NULL)::boolean AS undecodable,
       left(coalesce(m.last_error, ''), 300)::text AS last_error
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

-- name: ConsoleMatchDead :one
-- Counts the dead letters matching the filters of ConsoleListDead (all of them, no paging) and
-- returns the highest seq among all dead letters now: the snapshot a bulk action is confirmed for.
SELECT count(*)::bigint AS matching,
       coalesce((SELECT max(x.seq) FROM /* TEMPLATE: schema */inbox_dead x), 0)::bigint AS max_seq
FROM /* TEMPLATE: schema */inbox_dead d
WHERE true
  AND (@consumer::text = '' OR d.consumer = @consumer)
  AND (@kind::text = '' OR d.kind = @kind)
  AND (@error_contains::text = '' OR strpos(lower(d.error), lower(@error_contains)) > 0)
  AND (sqlc.narg(since)::timestamptz IS NULL OR d.died_at >= sqlc.narg(since))
  AND (sqlc.narg(until)::timestamptz IS NULL OR d.died_at < sqlc.narg(until));

-- name: ConsoleDeadIDs :many
-- The ids of the dead letters matching the filters of ConsoleListDead with seq up to @max_seq, in id
-- order, at most @max_rows.
SELECT d.id
FROM /* TEMPLATE: schema */inbox_dead d
WHERE d.seq <= @max_seq
  AND (@consumer::text = '' OR d.consumer = @consumer)
  AND (@kind::text = '' OR d.kind = @kind)
  AND (@error_contains::text = '' OR strpos(lower(d.error), lower(@error_contains)) > 0)
  AND (sqlc.narg(since)::timestamptz IS NULL OR d.died_at >= sqlc.narg(since))
  AND (sqlc.narg(until)::timestamptz IS NULL OR d.died_at < sqlc.narg(until))
ORDER BY d.id
LIMIT @max_rows;

-- name: ConsoleDeadSelected :many
-- Which of @ids are dead letters now, in id order.
SELECT d.id FROM /* TEMPLATE: schema */inbox_dead d WHERE d.id = ANY(@ids::bigint[]) ORDER BY d.id;

-- name: ConsoleMatchPending :one
-- Counts @consumer's queued messages that no worker holds (pending or waiting for a retry) and returns
-- the highest id among them: the snapshot a discard is confirmed for. Reads the ready index.
SELECT count(*)::bigint AS matching, coalesce(max(q.id), 0)::bigint AS max_id
FROM /* TEMPLATE: schema */inbox_queue q
WHERE q.consumer = @consumer AND NOT q.claimed;

-- name: ConsolePendingIDs :many
-- The ids of @consumer's queued messages that no worker holds, up to @max_id, in id order, at most
-- @max_rows.
SELECT q.id
FROM /* TEMPLATE: schema */inbox_queue q
WHERE q.consumer = @consumer AND NOT q.claimed AND q.id <= @max_id
ORDER BY q.id
LIMIT @max_rows;
