-- What keeps the txinbox tables clean: PostgreSQL's statistics of the tables (dead row versions,
-- vacuums) and what holds back the xmin horizon (the oldest snapshot still open, below which vacuum
-- may remove nothing). Read through internal/pgstats by admin.Health (which the console and the CLI
-- render), package metrics' gauges and the maintainer's health warnings. Every statement reads statistics
-- views only (pg_catalog): its cost does not grow with the tables. The views are named with their schema, pg_catalog, which is
-- how sqlc's catalog knows them.

-- name: TableHealth :many
-- The statistics of the tables of schema @schema_name named in @table_names that exist, in name
-- order. The figures are PostgreSQL's cumulative statistics: estimates, reset by pg_stat_reset and
-- lost by a crash; vacuum times are NULL for a table never vacuumed (since the statistics began). A
-- partitioned table (inbox, 00006) reports the sums of its partitions, and their latest vacuums.
SELECT coalesce(p.relname, s.relname)::text AS table_name,
       coalesce(sum(s.n_live_tup), 0)::bigint AS live_rows,
       coalesce(sum(s.n_dead_tup), 0)::bigint AS dead_rows,
       coalesce(sum(s.n_tup_upd), 0)::bigint AS updates,
       coalesce(sum(s.n_tup_hot_upd), 0)::bigint AS hot_updates,
       coalesce(sum(s.n_tup_del), 0)::bigint AS deletes,
       max(s.last_vacuum)::timestamptz AS last_vacuum,
       max(s.last_autovacuum)::timestamptz AS last_autovacuum,
       coalesce(sum(s.vacuum_count), 0)::bigint AS vacuums,
       coalesce(sum(s.autovacuum_count), 0)::bigint AS autovacuums,
       coalesce(sum(pg_total_relation_size(s.relid)), 0)::bigint AS total_bytes
FROM pg_catalog.pg_stat_all_tables s
LEFT JOIN pg_catalog.pg_inherits i ON i.inhrelid = s.relid
LEFT JOIN pg_catalog.pg_class p ON p.oid = i.inhparent
WHERE s.schemaname = @schema_name::text AND coalesce(p.relname, s.relname) = ANY(@table_names::text[])
GROUP BY 1
ORDER BY 1;

-- name: XminHolder :many
-- The other session (not this one) holding the oldest snapshot (pg_stat_activity.backend_xmin, the
-- oldest transaction it may still see) that holds back the cleanup of this database's tables: one
-- connected to this database, or to none (a walsender relaying a standby's hot_standby_feedback);
-- sessions of other databases do not. No row when none holds one. Ties go to the oldest transaction.
-- Without superuser or pg_read_all_stats, PostgreSQL hides the state, times and query of other
-- roles' sessions (empty, NULL or 0 here; details_visible is false); the pid, role, application name
-- and xmin are shown to every role. A session outside a transaction (a walsender relaying a standby's
-- hot_standby_feedback) has no xact_start (NULL, xact_age_seconds 0).
SELECT a.pid::int AS pid,
       coalesce(a.usename::text, '')::text AS role_name,
       coalesce(a.application_name, '')::text AS application_name,
       coalesce(a.backend_type, '')::text AS backend_type,
       coalesce(a.state, '')::text AS state,
       a.xact_start,
       a.query_start,
       age(a.backend_xmin)::bigint AS xmin_age,
       coalesce(extract(epoch FROM now() - a.xact_start), 0)::float8 AS xact_age_seconds,
       (coalesce(pg_has_role(a.usesysid, 'USAGE'), false) OR pg_has_role('pg_read_all_stats', 'USAGE'))::bool AS details_visible
FROM pg_catalog.pg_stat_activity a
WHERE a.backend_xmin IS NOT NULL AND a.pid <> pg_backend_pid()
  AND (a.datid IS NULL OR a.datid = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database()))
ORDER BY age(a.backend_xmin) DESC, a.xact_start NULLS LAST
LIMIT 1;

-- name: XminRetainers :one
-- The other holders of the xmin horizon: the replication slot whose xmin (or catalog_xmin, which holds
-- back the system catalogs only) is oldest (its name, empty when no slot holds one, and the age in
-- transactions), the oldest prepared transaction of this database (its gid, its age in transactions
-- and seconds since PREPARE TRANSACTION), and the age of the
-- database's datfrozenxid (wraparound: vacuum's freezing falls behind while the horizon is held).
SELECT coalesce((SELECT r.slot_name::text FROM pg_catalog.pg_replication_slots r
                 WHERE r.xmin IS NOT NULL OR r.catalog_xmin IS NOT NULL
                 ORDER BY greatest(age(r.xmin), age(r.catalog_xmin)) DESC LIMIT 1), '')::text AS slot_name,
       coalesce((SELECT max(greatest(age(r.xmin), age(r.catalog_xmin))) FROM pg_catalog.pg_replication_slots r), 0)::bigint AS slot_xmin_age,
       coalesce((SELECT p.gid FROM pg_catalog.pg_prepared_xacts p WHERE p.database = current_database() ORDER BY age(p.transaction) DESC LIMIT 1), '')::text AS prepared_gid,
       coalesce((SELECT max(age(p.transaction)) FROM pg_catalog.pg_prepared_xacts p WHERE p.database = current_database()), 0)::bigint AS prepared_xmin_age,
       coalesce((SELECT extract(epoch FROM now() - min(p.prepared)) FROM pg_catalog.pg_prepared_xacts p WHERE p.database = current_database()), 0)::float8 AS prepared_age_seconds,
       coalesce((SELECT age(d.datfrozenxid) FROM pg_catalog.pg_database d WHERE d.datname = current_database()), 0)::bigint AS frozen_xid_age;

-- name: CurrentGeneration :one
-- The current generation of the inbox (migration 00006) and when it began.
SELECT r.gen, r.rotated_at FROM /* TEMPLATE: schema */inbox_ring r;
