-- The schema's maintainer (package maintain, migration 00010): its election, the record of its jobs'
-- runs, and the roll-up fold. inbox_leader, inbox_maintenance and inbox_pools are tables of a Citus
-- coordinator; the fold names its consumer (inbox_rollup_batch and inbox_rollup are distributed by
-- consumer). Every time is the server's.

-- name: MaintainerTables :one
-- Whether this session may read and write the maintainer's tables (@leader_table, @runs_table: their
-- schema-qualified, quoted names). Checked by Maintainer.Start.
SELECT coalesce(has_table_privilege(to_regclass(@leader_table::text), 'SELECT, INSERT, UPDATE'), false)::bool AS leader,
       coalesce(has_table_privilege(to_regclass(@runs_table::text), 'SELECT, INSERT, UPDATE'), false)::bool AS runs;

-- name: LeaderRead :one
-- The lease of @name as it stands: its owner and term (empty and 0 when nobody ever led), and the
-- seconds until it ends (negative once ended).
SELECT coalesce(l.owner, '')::text AS owner, coalesce(l.term, 0)::bigint AS term,
       coalesce(extract(epoch FROM l.expires_at - now()), -1)::float8 AS seconds_left
FROM (SELECT 1) AS one
LEFT JOIN /* TEMPLATE: schema */inbox_leader l ON l.name = @name;

-- name: LeaderElect :many
-- Takes the lease of @name for @owner when nobody holds it (no row, or its lease has ended): a new
-- term, returned; no row when another maintainer holds it. Of two candidates at once, the second
-- waits for the first's row lock and then finds the lease taken.
INSERT INTO /* TEMPLATE: schema */inbox_leader AS l (name, owner, term, elected_at, renewed_at, expires_at)
VALUES (@name, @owner, 1, now(), now(), now() + make_interval(secs => @lease_seconds::float8))
ON CONFLICT (name) DO UPDATE
SET owner = excluded.owner, term = l.term + 1, elected_at = excluded.elected_at,
    renewed_at = excluded.renewed_at, expires_at = excluded.expires_at
WHERE l.expires_at <= now()
RETURNING l.term;

-- name: LeaderRenew :execrows
-- Extends @owner's lease of @name by @lease_seconds from now, if it still holds it in @term and the
-- lease has not ended: 0 rows means it lost it.
UPDATE /* TEMPLATE: schema */inbox_leader l
SET renewed_at = now(), expires_at = now() + make_interval(secs => @lease_seconds::float8)
WHERE l.name = @name AND l.owner = @owner AND l.term = @term AND l.expires_at > now();

-- name: LeaderResign :execrows
-- Ends @owner's lease of @name in @term now, so that another maintainer takes it at its next look.
UPDATE /* TEMPLATE: schema */inbox_leader l
SET expires_at = now()
WHERE l.name = @name AND l.owner = @owner AND l.term = @term AND l.expires_at > now();

-- name: ClaimRun :one
-- Claims the run of @job for its current period, for the leader @owner of @term: the period is the
-- start of the slot of @interval_ms milliseconds (counted from the Unix epoch) that now() falls in.
-- It is claimed (claimed true) only if @owner still holds the lease of 'maintainer' in @term, the
-- lease has not ended, and no run of @job is recorded for this period or a later one: no period of a
-- job runs twice, whichever maintainer ran the last. next_seconds is the time until the next period.
WITH slot AS (
    SELECT (floor(extract(epoch FROM now()) * 1000 / @interval_ms::bigint)::bigint * @interval_ms::bigint) AS start_ms
), leader AS (
    SELECT l.term FROM /* TEMPLATE: schema */inbox_leader l
    WHERE l.name = 'maintainer' AND l.owner = @owner AND l.term = @term AND l.expires_at > now()
), claimed AS (
    INSERT INTO /* TEMPLATE: schema */inbox_maintenance AS m (job, period, owner, term, started_at)
    SELECT @job, to_timestamp(s.start_ms / 1000.0), @owner, @term, now()
    FROM slot s, leader
    ON CONFLICT (job) DO UPDATE
    SET period = excluded.period, owner = excluded.owner, term = excluded.term, started_at = excluded.started_at,
        finished_at = NULL, error = NULL
    WHERE m.period < excluded.period
    RETURNING m.period
)
SELECT EXISTS (SELECT 1 FROM claimed) AS claimed, EXISTS (SELECT 1 FROM leader) AS leading,
       to_timestamp(s.start_ms / 1000.0)::timestamptz AS period,
       ((s.start_ms + @interval_ms::bigint) / 1000.0 - extract(epoch FROM now()))::float8 AS next_seconds
FROM slot s;

-- name: FinishRun :exec
-- Records the end of @owner's run of @job for @period, and its error (empty when it succeeded).
UPDATE /* TEMPLATE: schema */inbox_maintenance m
SET finished_at = now(), error = nullif(@error::text, '')
WHERE m.job = @job AND m.period = @period AND m.owner = @owner;

-- name: RollupConsumers :many
-- The consumers with finished attempts not yet folded into inbox_rollup.
SELECT DISTINCT b.consumer FROM /* TEMPLATE: schema */inbox_rollup_batch b ORDER BY b.consumer;

-- name: RollupFold :one
-- Moves @consumer's per-batch counts into inbox_rollup, added per minute, in one statement (the rows
-- deleted are those added: a batch that commits meanwhile is folded next time), and deletes its
-- inbox_rollup rows older than @keep_minutes minutes (counts older than that are dropped, not
-- added). Returns the number of per-batch rows folded.
WITH moved AS (
    DELETE FROM /* TEMPLATE: schema */inbox_rollup_batch b
    WHERE b.consumer = @consumer
    RETURNING b.minute, b.completed, b.failed, b.dead
), added AS (
    INSERT INTO /* TEMPLATE: schema */inbox_rollup AS r (consumer, minute, completed, failed, dead)
    SELECT @consumer, m.minute, sum(m.completed), sum(m.failed), sum(m.dead)
    FROM moved m
    WHERE m.minute >= now() - make_interval(mins => @keep_minutes::int)
    GROUP BY m.minute
    ORDER BY m.minute
    ON CONFLICT (consumer, minute) DO UPDATE
    SET completed = r.completed + excluded.completed, failed = r.failed + excluded.failed, dead = r.dead + excluded.dead
), old AS (
    DELETE FROM /* TEMPLATE: schema */inbox_rollup o
    WHERE o.consumer = @consumer AND o.minute < now() - make_interval(mins => @keep_minutes::int)
)
SELECT count(*)::bigint AS folded FROM moved;

-- name: DeleteGonePools :execrows
-- Deletes the heartbeats of pools not seen for @seconds seconds (they died without stopping).
DELETE FROM /* TEMPLATE: schema */inbox_pools p WHERE p.seen_at < now() - make_interval(secs => @seconds::float8);
