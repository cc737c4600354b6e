-- Every table name carries the schema template comment, which internal/schemasql replaces with the
-- configured schema, quoted, at run time.

-- name: ReceiveBatch :many
-- Inserts the messages of @consumer that are new and reports, for every input row, whether it was
-- inserted or which stored row holds its key. One consumer per statement, named in every reference
-- to a table, so that a table distributed by consumer runs it on one shard (00005). One statement, so
-- one round trip for the whole batch. A key that appears more than once in the batch is stored from
-- its first occurrence (first_ord); every row reports whether its fingerprint equals that
-- occurrence's (same_as_first) and the stored row's. A row that is neither inserted nor found was
-- inserted by a transaction that committed after the snapshot of this statement: the caller looks it
-- up again (LookupKeys, with the fingerprint returned here).
--
-- Generations (00006): new rows go into the slot of the consumer's generation, whose unique key
-- rejects a duplicate within the slot; a key with a live row (not an expired completed one) in
-- another slot is not inserted. The consumer's generation row is locked FOR KEY SHARE, so a rotation
-- waits for this transaction, and compared with the statement's snapshot: when they differ (a
-- rotation committed after the snapshot was taken, READ COMMITTED) or the consumer has no row yet,
-- nothing is written and every row reports retry: the caller registers the consumer
-- (RegisterConsumer) and runs the statement again. Under REPEATABLE READ and SERIALIZABLE the lock
-- itself fails (40001) when a rotation committed after the transaction's snapshot.
WITH gl AS (
    SELECT g.gen FROM /* TEMPLATE: schema */inbox_gen g WHERE g.consumer = @consumer FOR KEY SHARE
), gs AS (
    SELECT g.gen FROM /* TEMPLATE: schema */inbox_gen g WHERE g.consumer = @consumer
), cur AS (
    SELECT (gl.gen % 3)::smallint AS slot FROM gl JOIN gs ON gs.gen = gl.gen
), input AS (
    -- ROWS FROM zips the arrays in one pass (a subscript of a text array walks it from its start).
    SELECT s.ord, @consumer::text AS consumer, s.key, s.kind, s.payload::jsonb AS payload, s.headers::jsonb AS headers,
           NULLIF(s.ordering_key, '') AS ordering_key, coalesce(s.run_at, now()) AS run_at
    FROM ROWS FROM (unnest(@keys::text[]), unnest(@kinds::text[]),
                    unnest(@payloads::text[]), unnest(@headers::text[]), unnest(@ordering_keys::text[]),
                    unnest(@run_ats::timestamptz[]))
         WITH ORDINALITY AS s(key, kind, payload, headers, ordering_key, run_at, ord)
), fingerprinted AS (
    -- The fingerprint duplicates are compared by (kind and the payload's jsonb text), defined here
    -- only: LookupKeys and RenewExpired take the fingerprints this statement returns.
    SELECT input.*, sha256(convert_to(input.kind || E'\n' || input.payload::text, 'UTF8')) AS fingerprint
    FROM input
), firsts AS (
    -- Each row with the first occurrence of its key in the batch, and that occurrence's fingerprint.
    SELECT f.*,
           first_value(f.ord) OVER w AS first_ord,
           first_value(f.fingerprint) OVER w AS first_fingerprint
    FROM fingerprinted f
    WINDOW w AS (PARTITION BY f.consumer, f.key ORDER BY f.ord)
), numbered AS (
    -- Ids are drawn in batch order (the receipt order that per-key ordering follows), but rows are
    -- inserted in key order, so that concurrent batches take their unique-key locks in one order
    -- and cannot deadlock. A key with a live row in another slot, under the statement's snapshot,
    -- is left out: one probe of the unique key (consumer, key) per key, a LATERAL with LIMIT, which
    -- a plan can run only once per key. Neither a join by consumer alone (a generic plan made while
    -- the current slot looked empty read every row of the slot for every key:
    -- docs/design/retention-layout.md) nor an anti join with the keys' list inside (a generic plan
    -- that estimated one key ran the probes of every key once per key: docs/design/generic-plans.md,
    -- "ReceiveMany's generic plan").
    SELECT f.*, nextval('/* TEMPLATE: schema */inbox_id_seq') AS id
    FROM firsts f
    LEFT JOIN LATERAL (
        SELECT true AS live FROM /* TEMPLATE: schema */inbox m
        WHERE m.consumer = @consumer AND m.key = f.key AND m.slot <> (SELECT cur.slot FROM cur)
          AND NOT coalesce(m.state = 'completed' AND m.expires_at < now(), false)
        LIMIT 1
    ) l ON true
    WHERE f.ord = f.first_ord AND EXISTS (SELECT 1 FROM cur) AND l.live IS NULL
    ORDER BY f.ord
), inserted AS (
    INSERT INTO /* TEMPLATE: schema */inbox
        (slot, id, consumer, key, kind, payload, headers, fingerprint, ordering_key, next_run_at)
    SELECT cur.slot, f.id, f.consumer, f.key, f.kind, f.payload, f.headers, f.fingerprint, f.ordering_key, f.run_at
    FROM numbered f CROSS JOIN cur
    ORDER BY f.consumer, f.key
    ON CONFLICT (consumer, key, slot) DO NOTHING
    RETURNING id, consumer, key, ordering_key, next_run_at
), queued AS (
    INSERT INTO /* TEMPLATE: schema */inbox_queue (id, consumer, ordering_key, run_at)
    SELECT i.id, i.consumer, i.ordering_key, i.next_run_at FROM inserted i
), notified AS (
    -- Wakes idle workers (LISTEN) of the listed consumers that got a new message; sent
    -- when the transaction commits. The caller debounces: usually the array is empty.
    SELECT count(pg_notify(@notify_channel::text, n.consumer)) AS sent
    FROM unnest(@notify_consumers::text[]) AS n(consumer)
    WHERE EXISTS (SELECT 1 FROM inserted i WHERE i.consumer = n.consumer)
)
SELECT NOT EXISTS (SELECT 1 FROM cur) AS retry,
       f.ord::bigint AS ord,
       f.first_ord::bigint AS first_ord,
       (i.id IS NOT NULL AND f.ord = f.first_ord)::boolean AS inserted,
       coalesce(i.id, m.id, 0)::bigint AS id,
       -- A message in a batch in flight (listed in inbox_batch) is processing; its inbox row stays
       -- pending until the batch's finish.
       coalesce(CASE WHEN q.claimed THEN 'processing' END, m.state, '')::text AS state,
       coalesce(m.fingerprint = f.fingerprint, false)::boolean AS same_fingerprint,
       (f.fingerprint = f.first_fingerprint)::boolean AS same_as_first,
       f.fingerprint::bytea AS fingerprint,
       m.result,
       coalesce(m.expires_at < now(), false)::boolean AS expired
FROM notified, firsts f
LEFT JOIN inserted i ON i.key = f.key
-- The stored row of the key: a live one before an expired one, the current slot's first (an expired
-- row there is what RenewExpired renews).
LEFT JOIN LATERAL (
    SELECT m.id, m.state, m.fingerprint, m.result, m.expires_at
    FROM /* TEMPLATE: schema */inbox m
    WHERE i.id IS NULL AND m.consumer = @consumer AND m.key = f.key
    ORDER BY coalesce(m.state = 'completed' AND m.expires_at < now(), false),
             m.slot = (SELECT cur.slot FROM cur) DESC, m.id DESC
    LIMIT 1
) m ON true
-- Whether the stored row is claimed (listed in a batch of the consumer in flight, or left behind by
-- one that never finished): for a key that has a stored row only (`m.id IS NOT NULL` is a one-time
-- filter of the probe, so a new message never reads it), a LATERAL with LIMIT, never a join. A join
-- let a generic plan made while the queue was small read every queue row of the consumer once per
-- statement; a LATERAL without the filter, made then, scanned the whole queue once per statement
-- (docs/design/receive-queue-probe.md). inbox_batch holds one row per batch in flight.
LEFT JOIN LATERAL (
    SELECT true AS claimed FROM /* TEMPLATE: schema */inbox_batch b
    WHERE m.id IS NOT NULL AND b.consumer = @consumer AND m.id = ANY (b.ids)
    LIMIT 1
) q ON true
ORDER BY f.ord;

-- name: RenewExpired :many
-- Reuses the rows of expired dedup records of @consumer as new messages: a key whose window has ended is accepted
-- again even if its generation has not been retired yet. Only rows still expired, in the current
-- slot of the consumer, are touched. The fingerprints are those ReceiveBatch returned.
WITH input AS (
    SELECT s.id, s.kind, s.payload::jsonb AS payload, s.headers::jsonb AS headers, s.fingerprint,
           NULLIF(s.ordering_key, '') AS ordering_key, coalesce(s.run_at, now()) AS run_at
    FROM ROWS FROM (unnest(@ids::bigint[]), unnest(@kinds::text[]), unnest(@payloads::text[]),
                    unnest(@headers::text[]), unnest(@fingerprints::bytea[]), unnest(@ordering_keys::text[]),
                    unnest(@run_ats::timestamptz[]))
         AS s(id, kind, payload, headers, fingerprint, ordering_key, run_at)
), renewed AS (
    UPDATE /* TEMPLATE: schema */inbox m
    SET kind = input.kind, payload = input.payload, raw = NULL, headers = input.headers,
        fingerprint = input.fingerprint,
        ordering_key = input.ordering_key, state = 'pending', attempts_started = 0, attempts_failed = 0,
        next_run_at = input.run_at, owner = NULL, lease_until = NULL, last_error = NULL,
        received_at = now(), started_at = NULL, completed_at = NULL, expires_at = NULL, result = NULL, history = NULL
    FROM input
    WHERE m.id = input.id AND m.consumer = @consumer AND m.expires_at < now()
      -- Only the current slot's rows: an expired row of another slot leaves with its slot, and the
      -- key is inserted anew (the caller receives it again).
      AND m.slot = (SELECT (g.gen % 3)::smallint FROM /* TEMPLATE: schema */inbox_gen g WHERE g.consumer = @consumer)
    RETURNING m.id, m.consumer, m.ordering_key, m.next_run_at, m.token
), queued AS (
    INSERT INTO /* TEMPLATE: schema */inbox_queue (id, consumer, ordering_key, run_at, token)
    SELECT r.id, r.consumer, r.ordering_key, r.next_run_at, r.token FROM renewed r
    ON CONFLICT (id, consumer) DO NOTHING
)
SELECT r.id FROM renewed r;

-- name: LookupKeys :many
-- Reads the stored rows of @consumer's keys, comparing them with the fingerprints ReceiveBatch
-- returned: per key, a live row before an expired one (a key may have an expired row in an older
-- slot and a new one in the current slot), the current slot's first, then the newest.
WITH t AS (
    SELECT s.ord, s.key, s.fingerprint
    FROM ROWS FROM (unnest(@keys::text[]), unnest(@fingerprints::bytea[])) WITH ORDINALITY AS s(key, fingerprint, ord)
), cur AS (
    SELECT (g.gen % 3)::smallint AS slot FROM /* TEMPLATE: schema */inbox_gen g WHERE g.consumer = @consumer
)
SELECT t.ord::bigint AS ord, m.id,
       coalesce(CASE WHEN q.claimed THEN 'processing' END, m.state)::text AS state,
       (m.fingerprint = t.fingerprint)::boolean AS same_fingerprint,
       m.result, coalesce(m.expires_at < now(), false)::boolean AS expired
FROM t
JOIN LATERAL (
    SELECT m.id, m.state, m.fingerprint, m.result, m.expires_at
    FROM /* TEMPLATE: schema */inbox m
    WHERE m.consumer = @consumer AND m.key = t.key
    ORDER BY coalesce(m.state = 'completed' AND m.expires_at < now(), false),
             m.slot = (SELECT cur.slot FROM cur) DESC, m.id DESC
    LIMIT 1
) m ON true
-- Whether the row is claimed, as in ReceiveBatch.
LEFT JOIN LATERAL (
    SELECT true AS claimed FROM /* TEMPLATE: schema */inbox_batch b
    WHERE b.consumer = @consumer AND m.id = ANY (b.ids)
    LIMIT 1
) q ON true
ORDER BY t.ord;

-- name: InsertDead :one
-- Stores a message that could not be decoded, already dead, keeping its raw bytes, in the slot of
-- @consumer's generation (locked and compared as in ReceiveBatch: retry when the consumer has no
-- generation row or a rotation committed after the snapshot). A key with a stored row (an expired
-- one of the current slot included) is left alone: id 0.
WITH gl AS (
    SELECT g.gen FROM /* TEMPLATE: schema */inbox_gen g WHERE g.consumer = @consumer FOR KEY SHARE
), gs AS (
    SELECT g.gen FROM /* TEMPLATE: schema */inbox_gen g WHERE g.consumer = @consumer
), cur AS (
    SELECT (gl.gen % 3)::smallint AS slot FROM gl JOIN gs ON gs.gen = gl.gen
), live AS (
    -- A live row of the key in another slot (no correlated subquery: Citus refuses them here).
    SELECT m.id
    FROM /* TEMPLATE: schema */inbox m CROSS JOIN cur
    WHERE m.consumer = @consumer AND m.key = @key AND m.slot <> cur.slot
      AND NOT coalesce(m.state = 'completed' AND m.expires_at < now(), false)
    LIMIT 1
), inserted AS (
    INSERT INTO /* TEMPLATE: schema */inbox
        (slot, consumer, key, kind, payload, raw, headers, fingerprint, state, last_error, completed_at)
    SELECT cur.slot, @consumer, @key, @kind, 'null'::jsonb, @raw, (@headers::text)::jsonb, sha256(@raw), 'dead', @last_error, now()
    FROM cur LEFT JOIN live ON true
    WHERE live.id IS NULL
    ON CONFLICT (consumer, key, slot) DO NOTHING
    RETURNING id
)
SELECT NOT EXISTS (SELECT 1 FROM cur) AS retry, coalesce((SELECT i.id FROM inserted i), 0)::bigint AS id;

-- name: LockRing :one
-- The current generation, locked FOR KEY SHARE until the end of the transaction: a rotation, which
-- locks inbox_ring's row FOR UPDATE NOWAIT, gives up while a consumer is being registered, and a
-- registration waits for a rotation that holds it. A statement of its own: on Citus inbox_ring stays
-- a table of the coordinator, and a statement mixing it with a distributed table would be planned
-- through the coordinator.
SELECT gen FROM /* TEMPLATE: schema */inbox_ring FOR KEY SHARE;

-- name: RegisterConsumer :exec
-- Gives @consumer its generation row at @gen, the generation LockRing returned in this transaction,
-- if it has none: the rotation's update of every consumer's row, which waits for that lock, sees it.
INSERT INTO /* TEMPLATE: schema */inbox_gen (consumer, gen) VALUES (@consumer, @gen)
ON CONFLICT DO NOTHING;

-- name: GenericPlan :exec
-- Sent ahead of a ReceiveBatch of a few messages outside a transaction, in the same pipeline (one
-- implicit transaction, which the setting ends with): the statement runs its generic plan, made once
-- per connection, instead of a custom plan made at every call. PostgreSQL keeps choosing custom plans
-- for ReceiveBatch (they look cheaper to it), and planning it costs the server more than running it
-- for one message (about 0.6 ms against 0.4). Its generic plan is linear in the batch (inbox/plan_test.go).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true);
