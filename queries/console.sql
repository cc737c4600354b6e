-- The worker pools' writes of the per-minute rollup (inbox_rollup), which Admin.Overview reads
-- (queries/admin.sql, RollupMinutes).

-- name: RollupAdd :exec
-- Adds per-minute counts of @consumer's finished attempts to the rollup (one row per consumer and
-- minute), and deletes its rows older than @keep_minutes minutes.
WITH added AS (
    INSERT INTO /* TEMPLATE: schema */inbox_rollup AS r (consumer, minute, completed, failed, dead)
    SELECT @consumer::text, a.minute, a.completed, a.failed, a.dead
    FROM ROWS FROM (unnest(@minutes::timestamptz[]), unnest(@completed::bigint[]),
                    unnest(@failed::bigint[]), unnest(@dead::bigint[])) AS a(minute, completed, failed, dead)
    ORDER BY a.minute
    ON CONFLICT (consumer, minute) DO UPDATE
    SET completed = r.completed + excluded.completed, failed = r.failed + excluded.failed, dead = r.dead + excluded.dead
)
DELETE FROM /* TEMPLATE: schema */inbox_rollup o
WHERE o.consumer = @consumer AND o.minute < now() - make_interval(mins => @keep_minutes::int);
