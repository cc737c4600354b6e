-- txinbox schema, version 10: one maintainer per schema (package maintain), roll-ups counted in the
-- batches' own transactions, and the pools' heartbeats.
--
-- Table names are unqualified on purpose, as in 00001: the schema is chosen by search_path.
--
-- inbox_leader        the lease of the schema's maintainer: one row (name 'maintainer'). A maintainer
--                     takes it when it is free or its lease has ended (term + 1), renews it while it
--                     leads, and gives it up when it stops. Every time is the server's (now()).
-- inbox_maintenance   one row per maintenance job: the period of its last run (the start of a slot of
--                     its interval, on the server's clock), who ran it and how it ended. A job runs only
--                     for a period later than the last one recorded, and only for the leader of the
--                     term it names: no period of a job runs twice, even across a change of leader.
-- inbox_rollup_batch  finished attempts counted by each batch's finish (FinishBatch), in the
--                     transaction that records their outcome: one row per finish, appended, never
--                     updated (concurrent batches never wait for one another here). The maintainer moves
--                     them into inbox_rollup (00003), one statement per consumer, once a minute: the
--                     console's counts are those of the outcomes committed, whatever process died.
-- inbox_pools         the worker pools running, by consumer and owner: a pool writes its row when it
--                     starts and every 15 s, and deletes it when it stops; a row not renewed for a
--                     minute is a pool that died (the maintainer deletes such rows after an hour). A pool
--                     that finds nothing to do reads it to name the consumers that have messages
--                     waiting and no pool.
--
-- On a Citus cluster inbox_rollup_batch is distributed by consumer with the message tables
-- (migrate.Distribute), so that a batch's finish stays on one shard; the other three are tables of
-- the coordinator, read and written by statements of their own.

-- +goose Up
CREATE TABLE inbox_leader (
    name       text        PRIMARY KEY,
    owner      text        NOT NULL,
    term       bigint      NOT NULL,
    elected_at timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

COMMENT ON TABLE inbox_leader IS 'txinbox: the lease of the schema''s maintainer (package maintain); term counts its elections';

CREATE TABLE inbox_maintenance (
    job         text        PRIMARY KEY,
    period      timestamptz NOT NULL,
    owner       text        NOT NULL,
    term        bigint      NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    error       text
);

COMMENT ON TABLE inbox_maintenance IS 'txinbox: the last run of each maintenance job: its period (the start of a slot of its interval), the maintainer (owner, term) that ran it and its end';

CREATE TABLE inbox_rollup_batch (
    consumer  text        NOT NULL,
    minute    timestamptz NOT NULL,
    completed integer     NOT NULL,
    failed    integer     NOT NULL,
    dead      integer     NOT NULL
);

-- The maintainer folds one consumer at a time.
CREATE INDEX inbox_rollup_batch_consumer ON inbox_rollup_batch (consumer);

COMMENT ON TABLE inbox_rollup_batch IS 'txinbox: finished attempts of one batch (completed, failed, of which dead), appended by its finish in its transaction; folded into inbox_rollup by the maintainer';

COMMENT ON TABLE inbox_rollup IS 'txinbox: finished attempts per consumer and minute (completed, failed, of which dead), folded from inbox_rollup_batch by the maintainer: exact once folded';

CREATE TABLE inbox_pools (
    consumer   text        NOT NULL,
    owner      text        NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    PRIMARY KEY (consumer, owner)
);

COMMENT ON TABLE inbox_pools IS 'txinbox: the worker pools running, by consumer and owner; seen_at is renewed every 15 s';

-- +goose Down
DROP TABLE inbox_pools;
COMMENT ON TABLE inbox_rollup IS 'txinbox: finished attempts per consumer and minute (completed, failed, of which dead), added by worker pools; approximate (a crashed pool loses its last seconds)';
DROP TABLE inbox_rollup_batch;
DROP TABLE inbox_maintenance;
DROP TABLE inbox_leader;
