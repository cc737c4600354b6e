-- The cross-slot check of ReceiveBatch (migration 00006, queries/receive.sql, CTE "live") under a
-- generic plan made while the current slot's statistics say it is empty (after TRUNCATE or before
-- its first ANALYZE): the plan probes inbox_consumer_key on consumer alone and filters the key, so
-- every key of a batch reads every row of that slot. Run with psql against a scratch database
-- migrated to version 6 (schema public), autovacuum off or nothing else running:
--   psql -X -v ON_ERROR_STOP=1 -f bench/retention/plan-repro.sql
\set consumer '''ledger'''
INSERT INTO inbox_gen (consumer, gen) SELECT :consumer, gen FROM inbox_ring ON CONFLICT DO NOTHING;
-- Two rotations: the current generation's slot is empty (TRUNCATEd, never analyzed).
SELECT * FROM inbox_rotate(NULL);
SELECT * FROM inbox_rotate(NULL);
SELECT gen, gen % 3 AS current_slot FROM inbox_ring;
SELECT relname, relpages, reltuples FROM pg_class WHERE relname LIKE 'inbox_s_' ORDER BY 1;

SET plan_cache_mode = force_generic_plan;
PREPARE live(text, text[]) AS
WITH gl AS (SELECT g.gen FROM inbox_gen g WHERE g.consumer = $1 FOR KEY SHARE),
gs AS (SELECT g.gen FROM inbox_gen g WHERE g.consumer = $1),
cur AS (SELECT (gl.gen % 3)::smallint AS slot FROM gl JOIN gs ON gs.gen = gl.gen),
f AS (SELECT k AS key FROM unnest($2) k)
SELECT DISTINCT m.key FROM f JOIN inbox m ON m.consumer = $1 AND m.key = f.key CROSS JOIN cur
WHERE m.slot <> cur.slot AND NOT coalesce(m.state = 'completed' AND m.expires_at < now(), false);
-- The generic plan is made now, with the current slot empty.
EXECUTE live(:consumer, ARRAY['x']);

-- 20,000 messages arrive in the current slot (as receives would put them there).
INSERT INTO inbox (slot, consumer, key, kind, payload, fingerprint)
SELECT (SELECT gen % 3 FROM inbox_ring), :consumer, 'evt-' || lpad(g::text, 9, '0'), 'credit', '{}', '\x00'
FROM generate_series(1, 20000) g;

-- A batch of 20 new keys: every key reads the 20,000 rows (Rows Removed by Filter: 20000, loops=20).
SELECT array_agg('new-' || g)::text AS keys FROM generate_series(1, 20) g \gset
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE live(:consumer, :'keys');

-- Once autovacuum (or this) ANALYZEs the slot, the plan is made again and probes (consumer, key).
ANALYZE inbox;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE live(:consumer, :'keys');
