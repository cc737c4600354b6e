-- The transactional outbox (package outbox, migration 00009). Every table name carries the schema
-- template comment, which internal/schemasql replaces with the configured schema, quoted, at run time.
-- The outbox has no consumer column and is never distributed (00009).

-- name: OutboxPublish :one
-- Writes a batch of events in the caller's transaction (an empty kind or content type is stored as
-- NULL: the default, see 00012): each gets an id from outbox_id_seq, in the
-- order of the arrays (a key's events are published in id order), goes into the slot of the current
-- generation (outbox_ring, read without a lock: see outbox_rotate), and is queued at its not-before
-- time (NULL: now). With @notify, a notification on @notify_channel wakes the relays when the
-- transaction commits (never if it rolls back); the caller debounces, so it is usually false.
-- Returns the number of events written.
WITH input AS (
    -- ROWS FROM zips the arrays in one pass, in order (a subscript of a text array walks it from
    -- its start).
    SELECT s.ord, s.event_id::uuid AS event_id, s.topic, NULLIF(s.key, '') AS key, NULLIF(s.kind, '') AS kind,
           NULLIF(s.content_type, '') AS content_type, s.payload, s.headers::jsonb AS headers,
           coalesce(s.not_before, now()) AS next_run_at
    FROM ROWS FROM (unnest(@event_ids::text[]), unnest(@topics::text[]), unnest(@keys::text[]),
                    unnest(@kinds::text[]), unnest(@content_types::text[]),
                    unnest(@payloads::text[]), unnest(@headers::text[]), unnest(@not_befores::timestamptz[]))
         WITH ORDINALITY AS s(event_id, topic, key, kind, content_type, payload, headers, not_before, ord)
), numbered AS (
    -- Ids are drawn in batch order: the volatile nextval is evaluated after the sort. The slot is
    -- read once (an InitPlan).
    SELECT i.*, nextval('/* TEMPLATE: schema */outbox_id_seq') AS id,
           (SELECT (r.gen % 3)::smallint FROM /* TEMPLATE: schema */outbox_ring r) AS slot
    FROM input i
    ORDER BY i.ord
), inserted AS (
    INSERT INTO /* TEMPLATE: schema */outbox (slot, id, event_id, topic, key, kind, content_type, payload, headers, next_run_at)
    SELECT n.slot, n.id, n.event_id, n.topic, n.key, n.kind, n.content_type, n.payload, n.headers, n.next_run_at
    FROM numbered n
    RETURNING id, key, next_run_at
), queued AS (
    INSERT INTO /* TEMPLATE: schema */outbox_queue (id, key, run_at)
    SELECT i.id, i.key, i.next_run_at FROM inserted i
    RETURNING id
), notified AS (
    SELECT count(pg_notify(@notify_channel::text, '')) AS sent
    WHERE @notify::boolean AND EXISTS (SELECT 1 FROM queued)
)
SELECT (SELECT count(*) FROM queued)::bigint AS written
FROM notified;

-- name: OutboxClaimLock :exec
-- Serialises the claims of a schema's relays (a transaction-scoped advisory lock, taken in the claim's
-- transaction before OutboxClaim), so that each claim's snapshot sees the claims committed before it:
-- two claims at once could otherwise each take an event of one key (one of them an event committed
-- after the other's snapshot), and the key would have two events in flight.
-- It also makes the rest of the transaction (OutboxClaim) run with a custom plan and without JIT. The
-- claim's generic plan cannot see @max and guesses that LIMIT keeps 10% of the queue: on a queue of
-- 100,000 events its estimated cost passes jit_above_cost, and each run compiled it (60 ms of JIT
-- for a claim that runs in 2 ms); and a generic plan made while the queue was nearly empty reads the
-- whole queue once per event when a backlog comes. A custom plan sees @max and the queue as it is.
SELECT pg_advisory_xact_lock(@lock_key::bigint),
       set_config('plan_cache_mode', 'force_custom_plan', true),
       set_config('jit', 'off', true);

-- name: OutboxClaim :many
-- Claims due events: of the @max oldest due queue rows (unclaimed ones whose not-before or backoff
-- time has passed, and claimed ones whose lease has ended: their relay died or hung), those that may
-- go now. An event without a key may always go; one with a key may go if it is claimed already (a
-- claim whose lease ended is taken over before anything else of its key), or if no older event of
-- its key is queued and no other event of its key is claimed. So a key has at most one event in
-- flight, the oldest first. The others, blocked behind an event of their key, are snoozed: their
-- run_at moves @snooze_seconds ahead, so that claims stop scanning them; the relay that finishes an
-- event makes the next of its key ready at once (OutboxReadyNext), the snooze being only a safety net.
-- A row that OutboxReadyNext marked (ready) is never snoozed: if this claim's snapshot still showed
-- the event that has just left the queue, the next claim takes it. If the rows scanned were all
-- snoozed, one placeholder row with id 0 says so (the caller claims again).
-- Due: run_at up to this statement's start (statement_timestamp()), not its transaction's (now()):
-- the transaction begins before the claim lock is granted, and an event published while the claim
-- waited for it would be left to the next claim. The attempt's start and its lease count from there
-- too, so that no event's recorded start precedes its not-before time.
-- The claim stamps owner, lease (run_at), a new fencing token and the attempt, and commits before
-- anything of it is published (its transaction may also record the relay's previous batch:
-- OutboxFinish before OutboxClaimLock, OutboxReadyNext after it). Run it in a transaction holding
-- OutboxClaimLock.
-- A claim that takes over an event whose lease ended appends that attempt to the event's history
-- (migration 00013): reason taken_over, the previous claim's start, owner and attempt, no duration.
-- Plans: the redundant `q.id = ANY (ARRAY(...))` makes the updates look the rows up by primary key
-- even in a generic plan, which cannot see @max (the worker's ClaimBatch says why). The redundant
-- `h.id <> q.id` (q is not claimed where it is evaluated) keeps "no other event of its key is
-- claimed" a probe of outbox_queue_key_claimed per keyed row: a subquery correlated by equality alone
-- may be hashed, and the hashed one read the whole queue at every claim.
-- Paused topics (outbox_paused, migration 00014): a queued event of one is parked, never claimed (a
-- claim of it whose lease ended is not taken over either) nor snoozed: its run_at becomes infinity,
-- out of the due rows every claim scans, and its outbox row (next_run_at: its not-before or retry
-- time; its attempts) is left as it was; ResumeTopic makes it due again at that time. Parked, it
-- stays queued, so later events of its key still wait behind it, whatever their topic. The queue has
-- no topic: while no topic is paused, the first test of "paused" (evaluated once per claim) spares
-- every lookup; while one is, each row scanned is looked up by id in the outbox (one probe of each
-- slot's primary key). If the rows scanned were all snoozed or parked, the placeholder row says so.
WITH candidates AS (
    SELECT q.id, q.claimed, q.ready, q.owner AS old_owner, q.started_at AS old_started_at,
           q.attempts_started AS old_attempts,
           (q.key IS NULL OR q.claimed OR (
                NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */outbox_queue h
                            WHERE h.key = q.key AND h.id < q.id)
                AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */outbox_queue h
                                WHERE h.key = q.key AND h.claimed AND h.id <> q.id))) AS head,
           (EXISTS (SELECT 1 FROM /* TEMPLATE: schema */outbox_paused)
            AND EXISTS (SELECT 1 FROM /* TEMPLATE: schema */outbox_paused p
                        WHERE p.topic = (SELECT t.topic FROM /* TEMPLATE: schema */outbox t WHERE t.id = q.id))) AS paused
    FROM /* TEMPLATE: schema */outbox_queue q
    WHERE q.run_at <= statement_timestamp()
    ORDER BY q.run_at, q.id
    LIMIT @max
    FOR UPDATE OF q SKIP LOCKED
), parked AS (
    UPDATE /* TEMPLATE: schema */outbox_queue q
    SET run_at = 'infinity'
    FROM candidates c
    WHERE q.id = c.id AND c.paused
      AND q.id = ANY (ARRAY(SELECT c2.id FROM candidates c2)) -- by primary key: see the note above
    RETURNING q.id
), snoozed AS (
    UPDATE /* TEMPLATE: schema */outbox_queue q
    SET run_at = now() + make_interval(secs => @snooze_seconds::float8)
    FROM candidates c
    WHERE q.id = c.id AND NOT c.head AND NOT c.ready AND NOT c.paused
      AND q.id = ANY (ARRAY(SELECT c2.id FROM candidates c2)) -- by primary key: see the note above
    RETURNING q.id
), claimed AS (
    UPDATE /* TEMPLATE: schema */outbox_queue q
    SET claimed = true, ready = false, run_at = statement_timestamp() + make_interval(secs => @lease_seconds::float8),
        token = q.token + 1, attempts_started = q.attempts_started + 1, owner = @owner, started_at = statement_timestamp()
    FROM candidates c
    WHERE q.id = c.id AND c.head AND NOT c.paused
      AND q.id = ANY (ARRAY(SELECT c2.id FROM candidates c2)) -- by primary key: see the note above
    RETURNING q.id, q.token, q.attempts_started, c.claimed AS taken_over, c.old_owner, c.old_started_at, c.old_attempts
), entries AS MATERIALIZED (
    -- Each entry is built here, not in the UPDATE, as in ChargeBatch.
    SELECT c.id, jsonb_build_array(jsonb_build_object(
            'n', c.old_attempts, 'at', c.old_started_at, 'ms', 0, 'reason', 'taken_over',
            'error', 'its lease ended before an outcome was recorded: the relay died, hung or lost its connection',
            'owner', coalesce(c.old_owner, ''))) AS entry
    FROM claimed c
    WHERE c.taken_over
), logged AS (
    UPDATE /* TEMPLATE: schema */outbox m
    SET history = jsonb_path_query_array(coalesce(m.history, '[]'::jsonb) || e.entry, '$[last-9 to last]')
    FROM entries e
    WHERE m.id = e.id
      AND m.id = ANY (ARRAY(SELECT c2.id FROM claimed c2 WHERE c2.taken_over)) -- by primary key: see the note above
)
-- Each outbox row is read by its id, once per claimed row (OFFSET 0 keeps the subquery from being
-- flattened into a join, as in the worker's ClaimBatch).
SELECT m.id, m.event_id::text AS event_id, m.topic, coalesce(m.key, '')::text AS key,
       coalesce(m.kind, '')::text AS kind, coalesce(m.content_type, '')::text AS content_type, m.payload, m.headers,
       m.created_at, c.token, c.attempts_started, m.attempts_failed, c.taken_over
FROM claimed c
CROSS JOIN LATERAL (
    SELECT i.id, i.event_id, i.topic, i.key, i.kind, i.content_type, i.payload, i.headers, i.created_at, i.attempts_failed
    FROM /* TEMPLATE: schema */outbox i
    WHERE i.id = c.id
    OFFSET 0
) m
UNION ALL
SELECT 0, '', '', '', '', '', '', '{}'::jsonb, now(), 0, 0, 0, false
WHERE NOT EXISTS (SELECT 1 FROM claimed) AND (EXISTS (SELECT 1 FROM snoozed) OR EXISTS (SELECT 1 FROM parked))
ORDER BY 1;

-- name: OutboxFinish :many
-- Records the outcome of each claimed event in one statement: sent and dead leave the queue; retry
-- goes back to it after its delay (seconds, server clock); release goes back to it at once without
-- charging the attempt (@uncount) and leaves the outbox row as it was. Rows whose fencing token is
-- no longer the caller's (another relay took the claim over after its lease ended), or that are no
-- longer claimed, are left alone. It returns the ids whose outcome it recorded (earlier false), and
-- those whose outcome this claim had recorded before (earlier true: the outbox row holds the claim's
-- token, written only with its outcome). The relay runs it at the start of its next claim's
-- transaction, before OutboxClaimLock, or on its own: then it may be the second record of a batch
-- (the claim that carried the first committed, but its answer was lost), and "still claimed" is what
-- keeps it from counting a failed attempt twice and pushing its retry back again.
-- Times are computed in c, never inside a CASE (as in FinishBatch).
-- History (migration 00013): a failed attempt (retry or dead) appends {n, at, ms, reason, error, owner}
-- to the event's history (the claim's start, @elapsed_ms, @reasons, @errors, @owner), which keeps its
-- last 10 entries; a sent event's is left as it was.
WITH c AS (
    SELECT s.id, s.token, s.outcome, s.error, now() + make_interval(secs => s.delay) AS run_at, s.uncount,
           s.reason, s.elapsed_ms, now() AS finished_at
    FROM ROWS FROM (unnest(@ids::bigint[]), unnest(@tokens::bigint[]), unnest(@outcomes::text[]),
                    unnest(@errors::text[]), unnest(@delays::float8[]), unnest(@uncount::int[]),
                    unnest(@reasons::text[]), unnest(@elapsed_ms::float8[]))
         AS s(id, token, outcome, error, delay, uncount, reason, elapsed_ms)
), fenced AS (
    -- The queue rows still claimed with the caller's token, locked: one probe of the primary key per
    -- event (a LATERAL with a locking clause is never flattened into a join).
    SELECT l.id, l.attempts_started, l.started_at, c.token, c.outcome, c.error, c.run_at, c.uncount, c.finished_at,
           -- A failed attempt's history entry, built for the failures only (as in FinishBatch).
           CASE WHEN c.outcome IN ('retry', 'dead') THEN
               jsonb_build_array(jsonb_build_object('n', l.attempts_started, 'at', l.started_at, 'ms', c.elapsed_ms,
                   'reason', c.reason, 'error', c.error, 'owner', @owner::text)) END AS entry
    FROM c
    CROSS JOIN LATERAL (
        SELECT q.id, q.attempts_started, q.started_at FROM /* TEMPLATE: schema */outbox_queue q
        WHERE q.id = c.id AND q.token = c.token AND q.claimed IS TRUE
        FOR UPDATE
    ) l
), dequeued AS (
    DELETE FROM /* TEMPLATE: schema */outbox_queue q
    USING fenced f
    WHERE q.id = f.id AND f.outcome IN ('sent', 'dead')
), requeued AS (
    UPDATE /* TEMPLATE: schema */outbox_queue q
    SET claimed = false, ready = false, run_at = f.run_at, owner = NULL,
        attempts_started = q.attempts_started - f.uncount
    FROM fenced f
    WHERE q.id = f.id AND f.outcome IN ('retry', 'release')
), recorded AS (
    -- The only write of the outbox row per attempt: the outcome, and the claim's token, attempts and
    -- start from the queue row. A released claim leaves it alone.
    UPDATE /* TEMPLATE: schema */outbox m
    SET state = CASE WHEN f.outcome = 'retry' THEN 'pending' ELSE f.outcome END,
        token = f.token,
        attempts_started = f.attempts_started,
        attempts_failed = m.attempts_failed + CASE WHEN f.outcome = 'sent' THEN 0 ELSE 1 END,
        last_error = CASE WHEN f.outcome = 'sent' THEN m.last_error ELSE f.error END,
        history = CASE WHEN f.outcome = 'sent' THEN m.history
                       ELSE jsonb_path_query_array(coalesce(m.history, '[]'::jsonb) || f.entry, '$[last-9 to last]') END,
        next_run_at = CASE WHEN f.outcome = 'retry' THEN f.run_at ELSE m.next_run_at END,
        started_at = f.started_at,
        finished_at = CASE WHEN f.outcome = 'retry' THEN NULL ELSE f.finished_at END
    FROM fenced f
    WHERE m.id = f.id AND f.outcome <> 'release'
)
SELECT f.id, false AS earlier FROM fenced f
UNION ALL
-- The events not recorded now (usually none, and nothing is looked up), each looked up by id (OFFSET
-- 0 keeps the lookup from being flattened into a join that could read the whole outbox).
SELECT c.id, true FROM c
CROSS JOIN LATERAL (
    SELECT 1 FROM /* TEMPLATE: schema */outbox m WHERE m.id = c.id AND m.token = c.token OFFSET 0
) m
WHERE NOT EXISTS (SELECT 1 FROM fenced f WHERE f.id = c.id)
ORDER BY 1;

-- name: OutboxReadyNext :exec
-- Makes the oldest queued event of each of @keys ready at once (its own next-run time permitting) if
-- it was snoozed behind an event that has just been sent or become dead, and marks it (ready) so that
-- no claim snoozes it: a claim whose snapshot still showed the finished event, and that locks the row
-- after this update, sees the mark. Run it after the finishing statement committed, or in the
-- finishing statement's transaction after OutboxClaimLock, so that every claim that may have snoozed
-- an event of a key while it saw the finished one has committed before this statement's snapshot
-- (otherwise a claim could see an event committed after this snapshot, with the finished event still
-- queued, and snooze it unseen). The new run_at is never later than it was: a due row keeps its place. The
-- relay passes the keys of all the events it reports sent or dead, recorded or not (a claim's
-- pipeline cannot wait for OutboxFinish's answer): for a key whose event another relay took over,
-- the oldest queued event is that claimed one (nothing changes), or the next one, which the other
-- relay makes ready too, or an event committed late behind the claimed one, which claims then do not
-- snooze but still never claim before the claimed one has left.
UPDATE /* TEMPLATE: schema */outbox_queue q
SET ready = true, run_at = least(q.run_at, greatest(m.next_run_at, now()))
FROM unnest(@keys::text[]) AS k(key), /* TEMPLATE: schema */outbox m
WHERE q.key = k.key AND NOT q.claimed AND m.id = q.id
  AND q.id = (SELECT min(h.id) FROM /* TEMPLATE: schema */outbox_queue h WHERE h.key = k.key);

-- name: OutboxRotate :one
-- Begins a new generation of the outbox if the current one began at least @period ago, or at once
-- when @period is NULL; sent events are kept @keep after they were sent (outbox_rotate, migration
-- 00009). Run it in a transaction of its own with a lock_timeout.
SELECT r.rotated::boolean AS rotated, r.generation::bigint AS generation, r.copied::bigint AS copied
FROM /* TEMPLATE: schema */outbox_rotate(sqlc.narg(period)::interval, sqlc.arg(keep)::interval) r;

-- name: OutboxTables :one
-- Whether the outbox tables exist, by their schema-qualified, quoted names, and whether this session
-- may read and write them. Checked by Relay.Start.
SELECT coalesce(has_table_privilege(to_regclass(@outbox_table::text), 'SELECT, INSERT, UPDATE'), false)::bool AS events,
       coalesce(has_table_privilege(to_regclass(@queue_table::text), 'SELECT, INSERT, UPDATE, DELETE'), false)::bool AS queue;
