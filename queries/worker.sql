-- name: ClaimBatch :many
-- Claims ready messages of a consumer: of the @max oldest runnable unclaimed rows, those without an
-- ordering key and those that are the oldest queued message of their ordering key (its head). The
-- others, blocked behind an older message of their key, are snoozed: their run_at moves
-- @snooze_seconds ahead, so that claims stop scanning them; the worker that finishes the head of a
-- key makes its next message ready again at once (ReadyNext), the snooze being only a safety net. A
-- row that ReadyNext marked (alone, which means nothing else on an unclaimed row) is never snoozed:
-- if this scan saw an older message that has just finished, the next claim takes it. If the rows
-- scanned were all snoozed, one placeholder row with id 0 says so (the caller claims again).
-- The claim commits on its own, before any handler runs, so that a process killed by its handler has
-- still been charged the attempt (attempts_started of the queue row) and holds a fencing token; run_at
-- of the queue row becomes the lease expiry. The claim writes the queue row only (00004). It commits with synchronous_commit off (set for this transaction
-- only): visible to every session at once, and durable once the WAL writer flushes it (within
-- wal_writer_delay) or the batch transaction commits. Only a crash of the database server itself
-- can forget it, and then the attempt is not charged and its token is gone with it, so the batch
-- transaction (LockClaims) fences itself out: nothing is applied. It saves a WAL flush per claim.
-- Plans: pgx prepares statements, and PostgreSQL soon runs them with a generic plan, which cannot
-- see @max and guesses that LIMIT keeps 10% of the queue; joining that guess back to inbox_queue
-- picked a hash join over a scan of the whole queue on every claim. The redundant `q.id = ANY
-- (ARRAY(...))` makes the updates look the rows up by primary key instead. Array parameters are
-- read with unnest (estimated at their length, or 10 in a generic plan), never generate_subscripts
-- (estimated at 1,000 rows, which made the receive statement scan the whole inbox).
-- Routing: every table reference names @consumer (h.consumer too, not q.consumer), so that a table
-- distributed by consumer runs the whole statement on one shard, FOR UPDATE included; the setting is
-- made in candidates (once per candidate row), which then runs on that shard's node, where the
-- claim commits.
WITH candidates AS (
    SELECT q.id, q.alone,
           (q.ordering_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM /* TEMPLATE: schema */inbox_queue h
                WHERE h.consumer = @consumer AND h.ordering_key = q.ordering_key AND h.id < q.id)) AS head,
           set_config('synchronous_commit', 'off', true) AS synchronous_commit
    FROM /* TEMPLATE: schema */inbox_queue q
    WHERE q.consumer = @consumer AND NOT q.claimed AND q.run_at <= now()
    ORDER BY q.run_at, q.id
    LIMIT @max
    FOR UPDATE OF q SKIP LOCKED
), snoozed AS (
    UPDATE /* TEMPLATE: schema */inbox_queue q
    SET run_at = now() + make_interval(secs => @snooze_seconds::float8)
    FROM candidates c
    WHERE q.id = c.id AND q.consumer = @consumer AND NOT c.head AND NOT c.alone
      AND q.id = ANY (ARRAY(SELECT c2.id FROM candidates c2)) -- by primary key: see the note above
    RETURNING q.id
), grp AS (
    -- The claim's group: its size and lowest id (ClaimSuspects halves the group of a claim that never
    -- finished, and counts such claims by their lead). Read by uncorrelated subqueries, computed once
    -- per statement (a join with it made a generic plan read the candidates once per candidate).
    SELECT count(*)::int AS size, min(c.id) AS lead FROM candidates c WHERE c.head
), claimed AS (
    -- Only the narrow queue row is written: the token, the attempt, the lease and the group. The inbox
    -- row is read (by primary key, see the note above) and written once, by the finish.
    UPDATE /* TEMPLATE: schema */inbox_queue q
    SET claimed = true, alone = false, run_at = now() + make_interval(secs => @lease_seconds::float8),
        token = q.token + 1, attempts_started = q.attempts_started + 1, owner = @owner, started_at = now(),
        group_size = (SELECT g.size FROM grp g), group_lead = q.id = (SELECT g.lead FROM grp g)
    FROM candidates c
    WHERE q.id = c.id AND q.consumer = @consumer AND c.head AND q.id = ANY (ARRAY(SELECT c2.id FROM candidates c2))
    RETURNING q.id, q.token, q.attempts_started
)
-- Each inbox row is read by primary key, once per claimed row: OFFSET 0 keeps the subquery from being
-- flattened into a join, which a generic plan could run as a hash join over a scan of inbox (see
-- the note above).
SELECT m.id, m.consumer, m.key, m.kind, m.payload, m.headers, m.ordering_key, c.token,
       c.attempts_started, m.attempts_failed, m.received_at, m.last_error
FROM claimed c
CROSS JOIN LATERAL (
    SELECT i.id, i.consumer, i.key, i.kind, i.payload, i.headers, i.ordering_key, i.attempts_failed,
           i.received_at, i.last_error
    FROM /* TEMPLATE: schema */inbox i
    WHERE i.id = c.id AND i.consumer = @consumer
    OFFSET 0
) m
UNION ALL
SELECT 0, '', '', '', 'null'::jsonb, '{}'::jsonb, NULL, 0, 0, 0, now(), NULL
WHERE NOT EXISTS (SELECT 1 FROM claimed) AND EXISTS (SELECT 1 FROM snoozed);

-- name: ReadyNext :exec
-- Makes the oldest queued message of each of @keys ready at once (its own not-before time permitting)
-- if it was snoozed behind a message that has just completed or died, and marks it (alone) so that no
-- claim snoozes it: a claim whose snapshot still showed the finished message, and that locks the row
-- after this update, sees the mark. Run after the finishing commit, so that it sees every message
-- received before it. The new run_at is its not-before time or now, whichever is later, and never
-- later than it was: a due row keeps its place in claim order. (least/greatest, not CASE: Citus
-- refuses now() inside a CASE of a modification.)
UPDATE /* TEMPLATE: schema */inbox_queue q
SET alone = true, run_at = least(q.run_at, greatest(m.next_run_at, now()))
FROM unnest(@keys::text[]) AS k(ordering_key), /* TEMPLATE: schema */inbox m
WHERE q.consumer = @consumer AND q.ordering_key = k.ordering_key AND NOT q.claimed AND m.id = q.id AND m.consumer = @consumer
  AND q.id = (SELECT min(h.id) FROM /* TEMPLATE: schema */inbox_queue h
              WHERE h.consumer = @consumer AND h.ordering_key = k.ordering_key);

-- name: LockRescue :exec
-- Serialises takeovers (ClaimSuspects) of one consumer across processes (transaction-scoped advisory
-- lock), so that two of them never both see no message running alone and each start one.
SELECT pg_advisory_xact_lock(@lock_key::bigint);

-- name: ClaimSuspects :many
-- Takes over a group of suspects: messages of @consumer still claimed after their lease ended, whose
-- claim never finished (its worker died, hung or lost its connection), so that one of them may be what
-- killed it. Run inside a transaction holding LockRescue.
--
-- Isolation by halving: a suspect runs in a group of at most half the group its unfinished claim ran
-- (group_size, rounded up; @max when unknown, 0). The group is the longest run of the oldest suspects
-- (by lease end, then id: the rows of one claim side by side) in which no member's limit is exceeded,
-- and at most @max. If the group does not finish either, each of its messages is taken over next in
-- groups of half its size, down to one message alone. A group of one is alone (alone = true): at most
-- one such message of the consumer runs at a time, across processes; the others wait, while groups
-- of more than one go on.
--
-- Attempts: like a claim, a takeover counts an attempt (attempts_started), except after a claim of
-- more than one message that never finished, when the message had already lost one such claim
-- (group_crashes): a message is charged for the crashes of groups it shared with others only once,
-- and for every crash while it ran alone. So only a message that keeps ending its worker while it
-- runs alone is dead after MaxAttempts (the worker decides, from the returned attempts).
-- group_lead marks one row per claim (its lowest id): the rows taken over that had it count the
-- unfinished claims found (crashed_claims of the caller).
WITH due AS (
    SELECT q.id, q.run_at, q.group_lead, q.owner,
           CASE WHEN q.group_size = 0 THEN @max::int ELSE (q.group_size + 1) / 2 END AS size_limit
    FROM /* TEMPLATE: schema */inbox_queue q
    WHERE q.consumer = @consumer AND q.claimed AND q.run_at <= now()
      AND (q.group_size NOT IN (1, 2) OR NOT EXISTS (
            SELECT 1 FROM /* TEMPLATE: schema */inbox_queue a
            WHERE a.consumer = @consumer AND a.claimed AND a.alone AND a.run_at > now()))
    ORDER BY q.run_at, q.id
    LIMIT @max
    FOR UPDATE SKIP LOCKED
), ranked AS (
    SELECT d.id, d.group_lead, d.owner, row_number() OVER w AS n, min(d.size_limit) OVER w AS size_limit
    FROM due d
    WINDOW w AS (ORDER BY d.run_at, d.id ROWS UNBOUNDED PRECEDING)
), grp AS (
    -- The group's size and lowest id, read by uncorrelated subqueries: computed once per statement.
    SELECT count(*)::int AS size, min(r.id) AS lead FROM ranked r WHERE r.n <= r.size_limit
), picked AS (
    SELECT r.id, r.group_lead, r.owner
    FROM ranked r
    WHERE r.n <= r.size_limit
      AND ((SELECT g.size FROM grp g) > 1 OR NOT EXISTS (
            SELECT 1 FROM /* TEMPLATE: schema */inbox_queue a
            WHERE a.consumer = @consumer AND a.claimed AND a.alone AND a.run_at > now()))
), taken AS (
    UPDATE /* TEMPLATE: schema */inbox_queue q
    SET alone = (SELECT g.size FROM grp g) = 1, run_at = now() + make_interval(secs => @lease_seconds::float8),
        token = q.token + 1,
        attempts_started = q.attempts_started + CASE WHEN q.group_size <> 1 AND q.group_crashes > 0 THEN 0 ELSE 1 END,
        group_crashes = q.group_crashes + CASE WHEN q.group_size <> 1 THEN 1 ELSE 0 END,
        group_size = (SELECT g.size FROM grp g), group_lead = q.id = (SELECT g.lead FROM grp g),
        owner = @owner, started_at = now()
    FROM picked p
    WHERE q.id = p.id AND q.consumer = @consumer
    RETURNING q.id, q.token, q.attempts_started, q.group_crashes, p.group_lead AS unfinished_claim, p.owner AS previous_owner
)
-- Each inbox row is read by primary key (OFFSET 0, as in ClaimBatch).
SELECT m.id, m.consumer, m.key, m.kind, m.payload, m.headers, m.ordering_key, t.token,
       t.attempts_started, m.attempts_failed, m.received_at, m.last_error,
       t.unfinished_claim, coalesce(t.previous_owner, '')::text AS previous_owner, t.group_crashes
FROM taken t
CROSS JOIN LATERAL (
    SELECT i.id, i.consumer, i.key, i.kind, i.payload, i.headers, i.ordering_key, i.attempts_failed,
           i.received_at, i.last_error
    FROM /* TEMPLATE: schema */inbox i
    WHERE i.id = t.id AND i.consumer = @consumer
    OFFSET 0
) m
ORDER BY m.id;

-- name: NextLeaseEnd :one
-- Seconds until the earliest running lease of @consumer's claims held by another owner than @owner
-- ends, or -1 if none runs: the rescuer sleeps no longer, so that it takes over the messages of a
-- worker that died as soon as their lease ends. (Its own pool's claims end with its runners.)
SELECT coalesce(extract(epoch FROM min(q.run_at) - now()), -1)::float8 AS seconds
FROM /* TEMPLATE: schema */inbox_queue q
WHERE q.consumer = @consumer AND q.claimed AND q.run_at > now() AND q.owner IS DISTINCT FROM @owner::text;

-- name: IsolateClaims :execrows
-- Marks claimed messages to be taken over alone (group_size 1) after their lease: the messages of a
-- batch handler call that left the batch transaction unusable, which cannot be told apart. Fenced by
-- token, like ReleaseClaims.
UPDATE /* TEMPLATE: schema */inbox_queue q
SET group_size = 1
FROM ROWS FROM (unnest(@ids::bigint[]), unnest(@tokens::bigint[])) AS s(id, token)
WHERE q.id = s.id AND q.token = s.token AND q.consumer = @consumer AND q.claimed IS TRUE;

-- name: LockClaims :many
-- Locks the queue rows of a claimed batch inside the batch transaction, keeping only those whose
-- fencing token is still ours: rows another worker took over after our lease ended are dropped. While
-- the lock is held nobody else can claim them (claims skip locked rows). It also bounds the
-- transaction on the server side: a statement that runs too long is cancelled, and a session left
-- idle inside the transaction (a frozen or cut-off worker) is terminated, which releases the locks so
-- that the messages can be taken over when their lease ends. The transaction's id comes from
-- CurrentXact.
WITH limits AS (
    SELECT set_config('statement_timeout', @statement_timeout::text, true) AS statement_timeout,
           set_config('idle_in_transaction_session_timeout', @idle_timeout::text, true) AS idle_timeout
)
SELECT l.id
FROM limits, ROWS FROM (unnest(@ids::bigint[]), unnest(@tokens::bigint[])) AS s(id, token)
-- One probe of the primary key per id, in the order of @ids (the caller sorts them, so that rows are
-- locked in id order): a LATERAL with a locking clause is never flattened into a join, so no plan can
-- read all n ids again for each of the n rows (a join of the ids with the queue rows did, in a
-- generic plan: n² rows per batch). `claimed IS TRUE` rather than `claimed`, so that no plan walks
-- the partial index of claimed rows, which grows while vacuum lags.
CROSS JOIN LATERAL (
    SELECT q.id FROM /* TEMPLATE: schema */inbox_queue q
    WHERE q.id = s.id AND q.consumer = @consumer AND q.token = s.token AND q.claimed IS TRUE
    FOR UPDATE
) l
ORDER BY l.id;

-- name: CurrentXact :one
-- The id of the current transaction (assigned now if it has none), so that a batch whose handler
-- ended the transaction itself can learn whether it committed (XactStatus). A statement of its own,
-- run after LockClaims (one round trip per batch): inside a statement on a shard, a distributed
-- database runs the function on that shard's node, whose transaction ids mean nothing where
-- XactStatus is asked (a Citus coordinator); a statement without tables runs where the client's
-- transaction lives.
SELECT pg_current_xact_id()::text AS xid;

-- name: FinishBatch :execrows
-- Records the outcome of every message of a batch in one statement: completed and dead leave the
-- queue, retry goes back to it after its delay (seconds, server clock); the inbox row gets the
-- outcome and the claim's token, attempts and start (from the queue row) in one update. Rows whose
-- fencing token is no longer ours, or that are no longer claimed (released), are left alone (the
-- caller compares the count). @uncount undoes the attempt counted by the claim for
-- messages that were never run. The outcomes recorded are counted for the console in the same
-- statement, so in the same transaction: one row appended to inbox_rollup_batch (migration 00010),
-- in the minute of completed_at; the maintainer folds those rows into inbox_rollup.
-- Plans: each CTE reads the one before it, driven by the batch's rows, so that every join is one
-- index probe per message. (A final join of the outcomes with the fenced queue rows, both estimated
-- at a few rows, ran as a nested loop reading all the outcomes again for every message in a generic
-- plan: n² rows per batch.)
WITH c AS (
    -- The arrays are read side by side, each once from start to end (ROWS FROM): a subscript of a
    -- text array walks it from its first element, so reading element i of each by subscript cost
    -- n²/2 element steps per array and batch (5 µs per message at a batch of 500).
    SELECT s.id, s.key, s.token, s.outcome, s.error, s.result,
           now() + make_interval(secs => s.delay) AS run_at, s.uncount,
           now() AS finished_at, now() + make_interval(secs => @retention_seconds::float8) AS expires_at
    FROM ROWS FROM (unnest(@ids::bigint[]), unnest(@keys::text[]), unnest(@tokens::bigint[]),
                    unnest(@outcomes::text[]), unnest(@errors::text[]), unnest(@results::text[]),
                    unnest(@delays::float8[]), unnest(@uncount::int[]))
         AS s(id, key, token, outcome, error, result, delay, uncount)
), fenced AS (
    -- The queue rows still claimed with our token, locked (a batch transaction holds them already,
    -- from LockClaims), with their outcome: one probe of the primary key per message (a LATERAL with
    -- a locking clause, as in LockClaims). `claimed IS TRUE`, as in LockClaims.
    SELECT l.id, l.attempts_started, l.started_at, c.key, c.token, c.outcome, c.error, c.result, c.run_at,
           c.uncount, c.finished_at, c.expires_at
    FROM c
    CROSS JOIN LATERAL (
        SELECT q.id, q.attempts_started, q.started_at FROM /* TEMPLATE: schema */inbox_queue q
        WHERE q.id = c.id AND q.consumer = @consumer AND q.token = c.token AND q.claimed IS TRUE
        FOR UPDATE
    ) l
), dequeued AS (
    DELETE FROM /* TEMPLATE: schema */inbox_queue q
    USING fenced f
    WHERE q.id = f.id AND q.consumer = @consumer AND f.outcome IN ('completed', 'dead')
), requeued AS (
    UPDATE /* TEMPLATE: schema */inbox_queue q
    SET claimed = false, alone = false, run_at = f.run_at, owner = NULL,
        attempts_started = q.attempts_started - f.uncount
    FROM fenced f
    WHERE q.id = f.id AND q.consumer = @consumer AND f.outcome = 'retry'
), counted AS (
    -- One row per finish, appended: no row that concurrent batches would all update.
    INSERT INTO /* TEMPLATE: schema */inbox_rollup_batch (consumer, minute, completed, failed, dead)
    SELECT @consumer, date_trunc('minute', min(f.finished_at)),
           count(*) FILTER (WHERE f.outcome = 'completed'), count(*) FILTER (WHERE f.outcome <> 'completed'),
           count(*) FILTER (WHERE f.outcome = 'dead')
    FROM fenced f
    HAVING count(*) > 0
)
-- The only write of the inbox row per attempt: the claim's token, attempts (less the uncounted one)
-- and start come from the queue row. The row is found by its id and by its key (@keys, the messages'
-- keys): with both, any index of inbox is a probe of one row, whatever the statistics say (by id and
-- consumer alone, a plan made while a partition had no statistics walked the unique key by consumer,
-- reading every message of the consumer for each message of the batch). Times are computed in c,
-- never inside a CASE, and every CASE is of the searched form: Citus refuses a non-immutable function
-- in a CASE of a modification and mis-deparses `CASE x WHEN`.
UPDATE /* TEMPLATE: schema */inbox m
SET state = CASE WHEN f.outcome = 'retry' THEN 'pending' ELSE f.outcome END,
    token = f.token,
    attempts_started = f.attempts_started - f.uncount,
    attempts_failed = m.attempts_failed + CASE WHEN f.outcome = 'completed' OR f.uncount > 0 THEN 0 ELSE 1 END,
    last_error = CASE WHEN f.outcome = 'completed' THEN m.last_error ELSE f.error END,
    result = NULLIF(f.result, '')::jsonb,
    next_run_at = CASE WHEN f.outcome = 'retry' THEN f.run_at ELSE m.next_run_at END,
    started_at = f.started_at,
    completed_at = CASE WHEN f.outcome = 'retry' THEN NULL ELSE f.finished_at END,
    expires_at = CASE WHEN f.outcome = 'completed' THEN f.expires_at END
FROM fenced f
WHERE m.id = f.id AND m.consumer = @consumer AND m.key = f.key;

-- name: ReleaseClaims :execrows
-- Gives claimed messages back without charging an attempt (a batch that was stopped or lost its
-- connection before these ran, or ran and rolled back). Fenced by token. Writes the queue rows only.
-- The rows are found as LockClaims finds them, one probe per id.
WITH c AS (
    SELECT l.id, m.attempts_failed
    FROM ROWS FROM (unnest(@ids::bigint[]), unnest(@tokens::bigint[])) AS s(id, token)
    CROSS JOIN LATERAL (
        SELECT q.id FROM /* TEMPLATE: schema */inbox_queue q
        WHERE q.id = s.id AND q.token = s.token AND q.consumer = @consumer AND q.claimed IS TRUE
        FOR UPDATE
    ) l
    JOIN /* TEMPLATE: schema */inbox m ON m.id = l.id AND m.consumer = @consumer
)
UPDATE /* TEMPLATE: schema */inbox_queue q
SET claimed = false, alone = false, run_at = now(), owner = NULL,
    attempts_started = greatest(q.attempts_started - 1, c.attempts_failed)
FROM c
WHERE q.id = c.id AND q.consumer = @consumer;

-- name: QueueStats :many
-- Per consumer with queued messages: how many are ready to run now, waiting for a later time (not
-- before, backoff, or snoozed behind their ordering key) and claimed, and when the oldest queued
-- message (lowest id) was received. Reads the whole queue (for metrics scrapes).
WITH g AS (
    SELECT q.consumer,
           count(*) FILTER (WHERE NOT q.claimed AND q.run_at <= now()) AS ready,
           count(*) FILTER (WHERE NOT q.claimed AND q.run_at > now()) AS waiting,
           count(*) FILTER (WHERE q.claimed) AS claimed,
           min(q.id) AS oldest_id
    FROM /* TEMPLATE: schema */inbox_queue q
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
-- The status of a transaction by its id (as LockClaims returns it): committed, aborted or in progress;
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
