-- name: ClaimBatch :many
-- Claims, inside the batch transaction, up to @max ready messages of @consumer: the oldest runnable
-- rows without an ordering key or at the head of their key (no older queued message of the key), that
-- are not isolated (isolate = 0: suspects are claimed by ClaimSuspects) and not listed in a batch in
-- flight or left behind (inbox_batch: their rows are locked, or wait for the rescuer to charge them).
-- FOR UPDATE SKIP LOCKED: the row lock is the claim, and the fence, until the batch commits or rolls
-- back; nothing is written here. The messages blocked behind an older message of their key are
-- skipped, never locked (SnoozeBlocked puts them off now and then).
-- Ready: run_at up to this statement's start (statement_timestamp()), not its transaction's (now()):
-- the transaction begins before the runner waits for its turn among the pool's runners, and a message
-- received during that wait would be left to the next claim.
-- The claim starts past (@after_run_at, @after_id) in claim order: the pool's cursor, the last row of
-- its last full claim, past the rows of its own batches in flight, so that the index scan does not
-- walk them (each would be tried by FOR UPDATE SKIP LOCKED and skipped); NULL starts at the head. The row comparison is an index condition of inbox_queue_ready (consumer, run_at, id). Rows that
-- become ready behind the cursor are found by the claims from the head that the pool makes now and then
-- (worker/claim.go, "The claim cursor").
-- Plans: a generic plan cannot see @max and guesses that LIMIT keeps 10% of the queue; each inbox row
-- is read by primary key in a LATERAL subquery (OFFSET 0 keeps it from being flattened into a join,
-- which a generic plan ran as a hash join over a scan of inbox). The listed ids are read once
-- (hashed). A paused consumer (inbox_paused, migration 00014) has nothing claimed: one probe of that
-- table's primary key per claim, evaluated once (it does not depend on the row). Routing: every table
-- reference names @consumer, so that a table distributed by consumer runs the whole statement, FOR
-- UPDATE included, on one shard.
WITH listed AS (
    SELECT s.id FROM /* TEMPLATE: schema */inbox_batch b, unnest(b.ids) AS s(id) WHERE b.consumer = @consumer
), heads AS (
    SELECT q.id, q.run_at, q.token, q.attempts_started
    FROM /* TEMPLATE: schema */inbox_queue q
    WHERE q.consumer = @consumer AND q.isolate = 0 AND q.run_at <= statement_timestamp()
      AND (q.run_at, q.id) > (coalesce(sqlc.narg(after_run_at)::timestamptz, '-infinity'), coalesce(sqlc.narg(after_id)::bigint, 0))
      AND (q.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM /* TEMPLATE: schema */inbox_queue h
            WHERE h.consumer = @consumer AND h.ordering_key = q.ordering_key AND h.id < q.id))
      AND q.id NOT IN (SELECT l.id FROM listed l)
      AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */inbox_paused p WHERE p.consumer = @consumer)
    ORDER BY q.run_at, q.id
    LIMIT @max
    FOR UPDATE OF q SKIP LOCKED
)
SELECT m.id, m.consumer, m.key, m.kind, m.payload, m.headers, m.ordering_key, h.token,
       h.attempts_started, m.attempts_failed, m.received_at, m.last_error, h.run_at
FROM heads h
CROSS JOIN LATERAL (
    SELECT i.id, i.consumer, i.key, i.kind, i.payload, i.headers, i.ordering_key, i.attempts_failed,
           i.received_at, i.last_error
    FROM /* TEMPLATE: schema */inbox i
    WHERE i.id = h.id AND i.consumer = @consumer
    OFFSET 0
) m;

-- name: ClaimSuspects :many
-- Claims, inside the batch transaction, a group of suspects of @consumer: messages whose batch never
-- finished (its process died, hung or lost its connection), charged by ChargeBatch, so that one of
-- them may be what killed it. Isolation by halving: a suspect may run with at most isolate messages
-- (half the batch that never finished, rounded up); the group is the longest run of the oldest
-- suspects (by run_at, then id: the messages of one batch side by side) in which no member's limit
-- is exceeded, and at most @max. If this batch does not finish either, ChargeBatch halves its
-- messages' limit again, down to one message alone. A group of one takes the consumer's transaction
-- advisory lock (@lock_key) or is not claimed: at most one message taken alone runs at a time per
-- consumer, across processes, until its batch ends; groups of more run side by side. The scan locks
-- at most as many rows as the first suspect's limit (the others are left for other processes).
-- A paused consumer has nothing claimed, as in ClaimBatch. Routing: as ClaimBatch.
WITH listed AS (
    SELECT s.id FROM /* TEMPLATE: schema */inbox_batch b, unnest(b.ids) AS s(id) WHERE b.consumer = @consumer
), due AS (
    SELECT q.id, q.run_at, q.isolate, q.token, q.attempts_started
    FROM /* TEMPLATE: schema */inbox_queue q
    WHERE q.consumer = @consumer AND q.isolate > 0 AND q.run_at <= now() AND q.id NOT IN (SELECT l.id FROM listed l)
      AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */inbox_paused p WHERE p.consumer = @consumer)
    ORDER BY q.run_at, q.id
    LIMIT least(@max::int, (
        SELECT f.isolate FROM /* TEMPLATE: schema */inbox_queue f
        WHERE f.consumer = @consumer AND f.isolate > 0 AND f.run_at <= now() AND f.id NOT IN (SELECT l.id FROM listed l)
        ORDER BY f.run_at, f.id LIMIT 1))
    FOR UPDATE OF q SKIP LOCKED
), ranked AS (
    SELECT d.id, d.run_at, d.token, d.attempts_started, row_number() OVER w AS n, min(d.isolate) OVER w AS size_limit
    FROM due d
    WINDOW w AS (ORDER BY d.run_at, d.id ROWS UNBOUNDED PRECEDING)
), grp AS (
    -- Computed once per statement (an uncorrelated subquery below). The lock only for a group of one.
    SELECT CASE WHEN count(*) = 1 THEN pg_try_advisory_xact_lock(@lock_key::bigint) ELSE true END AS ok
    FROM ranked r WHERE r.n <= r.size_limit
)
SELECT m.id, m.consumer, m.key, m.kind, m.payload, m.headers, m.ordering_key, r.token,
       r.attempts_started, m.attempts_failed, m.received_at, m.last_error, r.run_at
FROM ranked r
CROSS JOIN LATERAL (
    SELECT i.id, i.consumer, i.key, i.kind, i.payload, i.headers, i.ordering_key, i.attempts_failed,
           i.received_at, i.last_error
    FROM /* TEMPLATE: schema */inbox i
    WHERE i.id = r.id AND i.consumer = @consumer
    OFFSET 0
) m
WHERE r.n <= r.size_limit AND (SELECT g.ok FROM grp g)
ORDER BY m.id;

-- name: ClaimLimits :exec
-- Sent in the batch transaction ahead of its claim (in the same round trip): the claim is bounded on
-- the server by @claim_timeout (the claim bound; BatchLimits sets the batch's own bound after it), and a
-- session left idle inside the transaction (a frozen or cut-off worker) is terminated after
-- @idle_timeout, which releases its locks and leaves its batch to the rescuer.
-- The claim is planned with its values (force_custom_plan, until BatchLimits gives the transaction the
-- session's plan_cache_mode back, kept meanwhile in txinbox.plan_cache_mode): a generic plan of it
-- made while the current inbox partition looked empty read each claimed message's inbox row through
-- the unique key (consumer, key, slot) by consumer alone, filtering on the id, so that each claim read
-- the whole partition once per message when it had grown (docs/design/generic-plans.md, "The claims'
-- and the finish's lookup of inbox rows: custom plans"). The subquery (OFFSET 0: not flattened) saves
-- the session's mode before it is changed.
SELECT set_config('statement_timeout', @claim_timeout::text, true),
       set_config('idle_in_transaction_session_timeout', @idle_timeout::text, true),
       set_config('plan_cache_mode', 'force_custom_plan', true)
FROM (SELECT set_config('txinbox.plan_cache_mode', current_setting('plan_cache_mode'), true) OFFSET 0) saved;

-- name: BatchLimits :one
-- Sent in the batch transaction right behind its claim (in the same round trip): bounds each further
-- statement of the batch (a statement that runs too long is cancelled), and returns the transaction's
-- id (for its inbox_batch row and XactStatus) and start: this statement's, after the claim (whose
-- messages are due by its own statement's start), so that no message's recorded start precedes the
-- time it was due. A statement without tables: on Citus it runs
-- where the client's transaction lives (the coordinator), whose transaction ids XactStatus asks about.
-- It also gives the transaction back the session's plan_cache_mode (ClaimLimits saved it), for the
-- handlers' statements.
SELECT set_config('statement_timeout', @statement_timeout::text, true) AS statement_timeout,
       set_config('plan_cache_mode', current_setting('txinbox.plan_cache_mode'), true) AS plan_cache_mode,
       pg_current_xact_id()::text AS xid, statement_timestamp()::timestamptz AS started_at;

-- name: CustomPlans :exec
-- Sent ahead of FinishBatch (in the batch transaction, after the handlers) and ReadyNext (in the
-- implicit transaction of their pipeline): the rest of the transaction is planned with its values, as
-- the claim is (ClaimLimits says why: their generic plans read the inbox rows of the batch the same way).
SELECT set_config('plan_cache_mode', 'force_custom_plan', true);

-- name: RecordBatch :one
-- Records a batch in flight (its transaction's id and messages), committed on its own before any
-- handler runs, so that a process killed by a handler has its batch charged (ChargeBatch). With
-- synchronous_commit off for this statement's transaction: visible to every session at once, durable
-- once the WAL writer flushes it or the batch commits. Only a crash of the database server can forget
-- it, and then the batch's transaction is gone with it: nothing of the batch was applied.
INSERT INTO /* TEMPLATE: schema */inbox_batch (consumer, xid, ids, owner)
SELECT @consumer, CAST(sqlc.arg(xid) AS text)::xid8, @ids::bigint[], @owner
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS s
RETURNING id;

-- name: FinishBatch :execrows
-- Records the outcome of every message of a batch in one statement, in the batch transaction (or, for
-- a message whose handler broke it, after its rollback): completed and dead leave the queue, retry
-- goes back to it after its delay (seconds, server clock), no longer isolated; the inbox row gets the
-- outcome, the attempt (counted here: the claim wrote nothing), the new token and @started_at, the
-- batch's start; a completed message's last error is cleared (it failed before, a replayed dead letter
-- too: the error is no longer its state). Rows whose fencing token is no longer ours (charged by the rescuer, or finished by
-- another worker, after our rollback) are left alone (the caller compares the count). @uncount: the
-- message was not run (out of attempts): its attempt is not counted. The batch's inbox_batch row
-- (@batch, 0 for none) is deleted with it: a batch that commits leaves nothing to charge. The
-- outcomes recorded are counted for the console in the same statement, so in the same transaction:
-- one row appended to inbox_rollup_batch (migration 00010), in the minute of completed_at; the
-- maintainer folds those rows into inbox_rollup.
-- History (migration 00013): a failed attempt (retry or dead) appends {n, at, ms, reason, error, owner}
-- to the row's history (@started_at, @elapsed_ms, @reasons, @errors, @owner), which keeps its last 10
-- entries; a completed one leaves it as it was (no more to write on the success path).
-- Times: the finish's own (statement_timestamp(), not the batch transaction's start): a retry's delay
-- counts from the failure, and completed_at is never before the batch's start (BatchLimits).
-- Plans: each CTE reads the one before it, driven by the batch's rows, so that every join is one
-- index probe per message. (A final join of the outcomes with the fenced queue rows, both estimated
-- at a few rows, ran as a nested loop reading all the outcomes again for every message in a generic
-- plan: n² rows per batch.)
WITH c AS (
    -- The arrays are read side by side, each once from start to end (ROWS FROM): a subscript of a
    -- text array walks it from its first element, so reading element i of each by subscript cost
    -- n²/2 element steps per array and batch (5 µs per message at a batch of 500).
    SELECT s.id, s.key, s.token, s.outcome, s.error, s.result,
           statement_timestamp() + make_interval(secs => s.delay) AS run_at, s.uncount, s.reason, s.elapsed_ms,
           statement_timestamp() AS finished_at,
           statement_timestamp() + make_interval(secs => @retention_seconds::float8) AS expires_at
    FROM ROWS FROM (unnest(@ids::bigint[]), unnest(@keys::text[]), unnest(@tokens::bigint[]),
                    unnest(@outcomes::text[]), unnest(@errors::text[]), unnest(@results::text[]),
                    unnest(@delays::float8[]), unnest(@uncount::int[]), unnest(@reasons::text[]),
                    unnest(@elapsed_ms::float8[]))
         AS s(id, key, token, outcome, error, result, delay, uncount, reason, elapsed_ms)
), fenced AS (
    -- The queue rows with our token, locked (a batch transaction holds them already, from its
    -- claim), with their outcome: one probe of the primary key per message (a LATERAL with a locking
    -- clause is never flattened into a join).
    SELECT l.id, l.attempts_started + 1 - c.uncount AS attempts_started, l.token + 1 AS token, c.key,
           c.outcome, c.error, c.result, c.run_at, c.finished_at, c.expires_at, c.uncount,
           -- A failed attempt's history entry, built for the failures only: building one costs the
           -- server about 6 µs, a fifth of a completed message's whole cost in a drain.
           CASE WHEN c.outcome IN ('retry', 'dead') THEN
               jsonb_build_array(jsonb_build_object('n', l.attempts_started + 1 - c.uncount, 'at', @started_at::timestamptz,
                   'ms', c.elapsed_ms, 'reason', c.reason, 'error', c.error, 'owner', @owner::text)) END AS entry
    FROM c
    CROSS JOIN LATERAL (
        SELECT q.id, q.attempts_started, q.token FROM /* TEMPLATE: schema */inbox_queue q
        WHERE q.id = c.id AND q.consumer = @consumer AND q.token = c.token
        FOR UPDATE
    ) l
), dequeued AS (
    DELETE FROM /* TEMPLATE: schema */inbox_queue q
    USING fenced f
    WHERE q.id = f.id AND q.consumer = @consumer AND f.outcome IN ('completed', 'dead')
), requeued AS (
    UPDATE /* TEMPLATE: schema */inbox_queue q
    SET alone = false, isolate = 0, run_at = f.run_at, attempts_started = f.attempts_started, token = f.token
    FROM fenced f
    WHERE q.id = f.id AND q.consumer = @consumer AND f.outcome = 'retry'
), unrecorded AS (
    DELETE FROM /* TEMPLATE: schema */inbox_batch b
    WHERE b.consumer = @consumer AND b.id = @batch::bigint
), counted AS (
    -- One row per finish, appended: no row that concurrent batches would all update.
    INSERT INTO /* TEMPLATE: schema */inbox_rollup_batch (consumer, minute, completed, failed, dead)
    SELECT @consumer, date_trunc('minute', min(f.finished_at)),
           count(*) FILTER (WHERE f.outcome = 'completed'), count(*) FILTER (WHERE f.outcome <> 'completed'),
           count(*) FILTER (WHERE f.outcome = 'dead')
    FROM fenced f
    HAVING count(*) > 0
)
-- The only write of the inbox row per attempt. The row is found by its id and by its key (@keys, the
-- messages' keys): with both, any index of inbox is a probe of one row, whatever the statistics say
-- (by id and consumer alone, a plan made while a partition had no statistics walked the unique key
-- by consumer, reading every message of the consumer for each message of the batch). Times are
-- computed in c, never inside a CASE, and every CASE is of the searched form: Citus refuses a
-- non-immutable function in a CASE of a modification and mis-deparses `CASE x WHEN`.
UPDATE /* TEMPLATE: schema */inbox m
SET state = CASE WHEN f.outcome = 'retry' THEN 'pending' ELSE f.outcome END,
    token = f.token,
    attempts_started = f.attempts_started,
    attempts_failed = m.attempts_failed + CASE WHEN f.outcome = 'completed' OR f.uncount > 0 THEN 0 ELSE 1 END,
    last_error = CASE WHEN f.outcome = 'completed' THEN NULL ELSE f.error END,
    history = CASE WHEN f.outcome = 'completed' THEN m.history
                   ELSE jsonb_path_query_array(coalesce(m.history, '[]'::jsonb) || f.entry, '$[last-9 to last]') END,
    result = NULLIF(f.result, '')::jsonb,
    next_run_at = CASE WHEN f.outcome = 'retry' THEN f.run_at ELSE m.next_run_at END,
    started_at = @started_at::timestamptz,
    completed_at = CASE WHEN f.outcome = 'retry' THEN NULL ELSE f.finished_at END,
    expires_at = CASE WHEN f.outcome = 'completed' THEN f.expires_at END
FROM fenced f
WHERE m.id = f.id AND m.consumer = @consumer AND m.key = f.key;

-- name: SettleBatch :execrows
-- After a batch rolled back (a handler broke its transaction, or the pool stopped), in a
-- transaction with the FinishBatch of its culprit's failure: deletes the batch's inbox_batch row (so
-- that it is not charged as a crash) and charges the messages held (@held_ids, @held_tokens: a batch
-- handler call that left the transaction unusable with several messages, which cannot be told apart)
-- their attempt and isolates them: each runs alone next (ClaimSuspects). The others of the batch were
-- not run to an outcome and are free again, uncharged. Fenced by token: if the rescuer charged the
-- batch first (its row gone), the held messages are not charged twice. Each held message's history
-- (00013) gets the attempt: @started_at (the batch's start), @owner and @held_error, reason error.
-- Returns 1 if the row was deleted here.
WITH unrecorded AS (
    DELETE FROM /* TEMPLATE: schema */inbox_batch b
    WHERE b.consumer = @consumer AND b.id = @batch::bigint
    RETURNING b.id
), held AS (
    UPDATE /* TEMPLATE: schema */inbox_queue q
    SET isolate = 1, group_size = 1, attempts_started = q.attempts_started + 1, token = q.token + 1
    FROM ROWS FROM (unnest(@held_ids::bigint[]), unnest(@held_tokens::bigint[])) AS s(id, token)
    WHERE q.id = s.id AND q.token = s.token AND q.consumer = @consumer AND EXISTS (SELECT 1 FROM unrecorded)
    RETURNING q.id, q.attempts_started
), entries AS MATERIALIZED (
    -- Each entry is built here, not in the UPDATE: Citus refuses a STABLE function
    -- (jsonb_build_object) with column references in a modification of a distributed table.
    SELECT h.id, jsonb_build_array(jsonb_build_object(
            'n', h.attempts_started, 'at', @started_at::timestamptz, 'ms', 0, 'reason', 'error',
            'error', @held_error::text, 'owner', @owner::text)) AS entry
    FROM held h
), logged AS (
    UPDATE /* TEMPLATE: schema */inbox m
    SET history = jsonb_path_query_array(coalesce(m.history, '[]'::jsonb) || e.entry, '$[last-9 to last]')
    FROM entries e
    WHERE m.id = e.id AND m.consumer = @consumer
      AND m.id = ANY (ARRAY(SELECT h2.id FROM held h2)) -- by primary key, whatever the plan
)
SELECT u.id FROM unrecorded u;

-- name: ListBatches :many
-- The batches of @consumer in flight or left behind, with their transaction's id, for the rescuer
-- (XactStatuses tells which are still in progress).
SELECT b.id, b.xid::text AS xid, b.owner
FROM /* TEMPLATE: schema */inbox_batch b
WHERE b.consumer = @consumer
ORDER BY b.id;

-- name: XactStatuses :many
-- The status of each transaction of @xids: committed, aborted or in progress; empty when too old to be
-- known (older than the commit log PostgreSQL keeps). A statement without tables: on Citus it runs on
-- the coordinator, whose transaction ids these are.
SELECT coalesce(pg_xact_status(x.xid::xid8)::text, '')::text AS status
FROM unnest(@xids::text[]) WITH ORDINALITY AS x(xid, n)
ORDER BY x.n;

-- name: ChargeBatch :many
-- Charges a batch that never committed (@batch: its transaction is no longer in progress, and its
-- commit would have deleted its row, so it rolled back or its process died; a transaction too old for
-- pg_xact_status is not in progress either) and deletes its row, once: two rescuers charging the same
-- row serialize on the delete, and the second finds nothing. Each of its messages still queued (a
-- message replayed or discarded since is left alone) is isolated: it runs next in a group of at most
-- half the batch (rounded up; see ClaimSuspects), with a new token. Attempts: the batch's attempt
-- counts, except that a batch of more than one message counts only the first time a message is in
-- such a batch (group_crashes): a message is charged for the crashes of groups it shared with others
-- once, and for every crash while it ran alone. Each message charged gets the attempt in its history
-- (00013): reason crashed, the batch's start and owner, no duration. Returns the messages charged.
WITH b AS (
    DELETE FROM /* TEMPLATE: schema */inbox_batch b
    WHERE b.consumer = @consumer AND b.id = @batch::bigint
    RETURNING b.ids, cardinality(b.ids) AS n, b.owner, b.started_at
), s AS (
    SELECT u.id, b.n, b.owner, b.started_at FROM b, unnest(b.ids) AS u(id)
), charged AS (
    UPDATE /* TEMPLATE: schema */inbox_queue q
    SET attempts_started = q.attempts_started + CASE WHEN s.n <> 1 AND q.group_crashes > 0 THEN 0 ELSE 1 END,
        group_crashes = q.group_crashes + CASE WHEN s.n <> 1 THEN 1 ELSE 0 END,
        group_size = s.n, isolate = (s.n + 1) / 2, token = q.token + 1
    FROM s
    WHERE q.id = s.id AND q.consumer = @consumer
    RETURNING q.id, q.group_crashes, q.attempts_started, s.n, s.owner, s.started_at
), entries AS MATERIALIZED (
    -- Built here, not in the UPDATE (Citus: see SettleBatch).
    SELECT c.id, jsonb_build_array(jsonb_build_object(
            'n', c.attempts_started, 'at', c.started_at, 'ms', 0, 'reason', 'crashed',
            'error', 'its batch of ' || c.n || ' never finished: the worker died, hung or lost its connection',
            'owner', c.owner)) AS entry
    FROM charged c
), logged AS (
    UPDATE /* TEMPLATE: schema */inbox m
    SET history = jsonb_path_query_array(coalesce(m.history, '[]'::jsonb) || e.entry, '$[last-9 to last]')
    FROM entries e
    WHERE m.id = e.id AND m.consumer = @consumer
      AND m.id = ANY (ARRAY(SELECT c2.id FROM charged c2)) -- by primary key, whatever the plan
)
SELECT c.id, c.group_crashes FROM charged c;

-- name: ReadyNext :exec
-- Makes the oldest queued message of each of @keys ready at once (its own not-before time permitting)
-- if it was snoozed behind a message that has just completed or died, and marks it (alone) so that no
-- snooze puts it off: a snooze whose snapshot still showed the finished message, and that locks the
-- row after this update, sees the mark. Run after the finishing commit, so that it sees every message
-- received before it. The new run_at is its not-before time or now, whichever is later, and never
-- later than it was: a due row keeps its place in claim order. A row locked by a batch is skipped:
-- that batch claimed it (it is the key's head now). (least/greatest, not CASE: Citus refuses now()
-- inside a CASE of a modification.)
UPDATE /* TEMPLATE: schema */inbox_queue q
SET alone = true, run_at = least(q.run_at, greatest(m.next_run_at, now()))
FROM unnest(@keys::text[]) AS k(ordering_key), /* TEMPLATE: schema */inbox m
WHERE q.consumer = @consumer AND q.ordering_key = k.ordering_key AND m.id = q.id AND m.consumer = @consumer
  AND q.id = (SELECT min(h.id) FROM /* TEMPLATE: schema */inbox_queue h
              WHERE h.consumer = @consumer AND h.ordering_key = k.ordering_key)
  AND q.id IN (SELECT l.id FROM /* TEMPLATE: schema */inbox_queue l
               WHERE l.consumer = @consumer AND l.ordering_key = k.ordering_key
               FOR UPDATE SKIP LOCKED);

-- name: LockSnooze :exec
-- Sent ahead of SnoozeBlocked, in the same implicit transaction (one pipeline): the consumer's snooze
-- lock (@lock_key), exclusive. A batch finishing messages of ordering keys (FinishBatch) takes it
-- shared until it commits, and so does ReadyNext after that commit. So no snooze is open across a
-- finishing commit: one whose snapshot still shows the finished message committed before it, and no
-- claim sees the key's next message due before ReadyNext (a claim that locked that row on the
-- recheck of a snooze, without taking it, would keep the lock, and ReadyNext would skip the row); a
-- snooze's snapshot, taken after the lock, sees every finish and every ReadyNext made before it; and
-- ReadyNext never finds the row it must make ready locked by a snooze that has not committed yet.
SELECT pg_advisory_xact_lock(@lock_key::bigint);

-- name: LockSnoozeShared :exec
-- Sent ahead of FinishBatch when messages of ordering keys leave the queue, in the batch transaction,
-- and ahead of ReadyNext after its commit, in the same implicit transaction: the consumer's snooze
-- lock, shared (see LockSnooze). Finishing batches and ReadyNexts do not wait for each other.
SELECT pg_advisory_xact_lock_shared(@lock_key::bigint);

-- name: SnoozeBlocked :execrows
-- Puts off (@snooze_seconds) up to @max ready messages of @consumer blocked behind an older message
-- of their ordering key, so that claims stop scanning them; the worker that finishes a key's message
-- makes the next one ready at once (ReadyNext), the snooze being only a safety net. A row ReadyNext
-- marked (alone) is never snoozed; rows locked (claimed by a batch) are skipped.
UPDATE /* TEMPLATE: schema */inbox_queue q
SET run_at = now() + make_interval(secs => @snooze_seconds::float8)
WHERE q.consumer = @consumer AND q.id IN (
    SELECT b.id FROM /* TEMPLATE: schema */inbox_queue b
    WHERE b.consumer = @consumer AND b.isolate = 0 AND b.run_at <= now() AND b.ordering_key IS NOT NULL
      AND NOT b.alone AND EXISTS (
            SELECT 1 FROM /* TEMPLATE: schema */inbox_queue h
            WHERE h.consumer = @consumer AND h.ordering_key = b.ordering_key AND h.id < b.id)
    ORDER BY b.run_at, b.id
    LIMIT @max
    FOR UPDATE SKIP LOCKED);

-- name: QueueStats :many
-- Per consumer with queued messages: how many are ready to run now, waiting for a later time (not
-- before, backoff, or snoozed behind their ordering key) and claimed (listed in a batch in flight or
-- left behind), and when the oldest queued message (lowest id) was received. Reads the whole queue
-- (for metrics scrapes).
WITH listed AS (
    SELECT b.consumer, s.id FROM /* TEMPLATE: schema */inbox_batch b, unnest(b.ids) AS s(id)
), g AS (
    SELECT q.consumer,
           count(*) FILTER (WHERE l.id IS NULL AND q.run_at <= now()) AS ready,
           count(*) FILTER (WHERE l.id IS NULL AND q.run_at > now()) AS waiting,
           count(l.id) AS claimed,
           min(q.id) AS oldest_id
    FROM /* TEMPLATE: schema */inbox_queue q
    LEFT JOIN listed l ON l.id = q.id AND l.consumer = q.consumer
    GROUP BY q.consumer
)
SELECT g.consumer, g.ready::bigint AS ready, g.waiting::bigint AS waiting, g.claimed::bigint AS claimed,
       coalesce(extract(epoch FROM now() - m.received_at), 0)::float8 AS oldest_age_seconds
FROM g
LEFT JOIN /* TEMPLATE: schema */inbox m ON m.id = g.oldest_id AND m.consumer = g.consumer
ORDER BY g.consumer;

-- name: QueueDeadRows :one
-- The number of dead row versions PostgreSQL's statistics count (n_dead_tup) for the queue table (@queue_table, its
-- schema-qualified, quoted name), or -1 if the statistics have no row for it. Read by the
-- maintainer's vacuum safety net (package maintain).
SELECT coalesce(pg_stat_get_dead_tuples(to_regclass(@queue_table::text)), -1)::bigint AS dead;

-- name: SchemaTables :one
-- Whether the inbox tables exist, by their schema-qualified, quoted names (@inbox_table, @queue_table),
-- and whether this session may read and write them. Checked by Pool.Start.
SELECT coalesce(has_table_privilege(to_regclass(@inbox_table::text), 'SELECT, INSERT, UPDATE, DELETE'), false)::bool AS inbox,
       coalesce(has_table_privilege(to_regclass(@queue_table::text), 'SELECT, INSERT, UPDATE, DELETE'), false)::bool AS queue;

-- name: XactStatus :one
-- The status of a transaction by its id (as BatchLimits returns it): committed, aborted or in progress;
-- empty if too old to be known.
SELECT coalesce(pg_xact_status(CAST(sqlc.arg(xid) AS text)::xid8)::text, '')::text AS status;

-- name: StaleTables :many
-- The tables among @tables (schema-qualified, quoted names) that PostgreSQL's statistics describe at
-- less than a quarter of their size: more than 4 times the pages the statistics counted (relpages,
-- set by ANALYZE and VACUUM), and at least 128 pages (1 MiB) more. A prepared statement's generic
-- plan is made from the statistics of that moment and kept until they change: made while a table
-- held a few hundred rows, it reads the whole table for each message once the table has grown. Read
-- by the maintainer's statistics safety net, which analyzes these tables.
SELECT t.name::text AS name
FROM unnest(@tables::text[]) AS t(name)
JOIN pg_catalog.pg_class c ON c.oid = to_regclass(t.name)
WHERE pg_relation_size(c.oid) / current_setting('block_size')::bigint > 4 * greatest(c.relpages, 0)::bigint + 128;
