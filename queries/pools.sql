-- The worker pools' heartbeats (inbox_pools, migration 00010), a table of a Citus coordinator, and the
-- look for consumers that have messages waiting and no pool.

-- name: PoolHeartbeat :exec
-- Records that the pool @owner of @consumer runs (its first call sets started_at).
INSERT INTO /* TEMPLATE: schema */inbox_pools AS p (consumer, owner, started_at, seen_at)
VALUES (@consumer, @owner, now(), now())
ON CONFLICT (consumer, owner) DO UPDATE SET seen_at = now();

-- name: PoolGone :exec
-- Deletes the heartbeat of the pool @owner of @consumer (it stopped).
DELETE FROM /* TEMPLATE: schema */inbox_pools p WHERE p.consumer = @consumer AND p.owner = @owner;

-- name: ServedConsumers :many
-- The consumers that a pool seen in the last @seconds seconds serves.
SELECT DISTINCT p.consumer FROM /* TEMPLATE: schema */inbox_pools p
WHERE p.seen_at > now() - make_interval(secs => @seconds::float8)
ORDER BY p.consumer;

-- name: NextWaitingConsumer :one
-- The first consumer after @after (in text order) with messages in the queue that no worker holds
-- (due or not), or an empty string when there is none: one descent of the queue's ready index. Called in a loop,
-- it lists those consumers without reading their rows.
SELECT coalesce(min(q.consumer), '')::text AS consumer
FROM /* TEMPLATE: schema */inbox_queue q
WHERE NOT q.claimed AND q.consumer > @after;
