-- txinbox schema, version 5: every key of the tables that hold messages contains the consumer.
--
-- Table names are unqualified on purpose, as in 00001: the schema is chosen by search_path.
--
-- A distributed PostgreSQL such as Citus spreads a table over nodes by one column, and accepts a
-- primary or unique key only if it contains that column. txinbox's tables are distributed by
-- consumer (SCALING.md): this version adds consumer to the keys that lacked it, and every statement
-- of txinbox names the consumer of the rows it touches, so that each one runs on a single shard.
--
--   inbox         primary key (id)  -> (id, consumer)
--   inbox_queue   primary key (id)  -> (id, consumer)
--   inbox_dead    primary key (seq) -> (seq, consumer); unique (id) -> (id, consumer)
--   inbox_rollup  unchanged: its key (consumer, minute) already has it
--
-- id stays the first column of each key, so that a lookup by id alone and the cleaner's scans of id
-- spans use the index as before; ids are still unique (one identity sequence), the wider key only
-- says so in a form a distributed table accepts. The dead-letter trigger function (00003) follows the
-- new key of inbox_dead. idempotency_keys (00002) holds no messages and keeps its keys.
--
-- Each key is rebuilt in place: ALTER TABLE takes an ACCESS EXCLUSIVE lock on the table while its
-- index is built (about 1 s per million rows here). Migrate while the inbox is quiet.

-- +goose Up
ALTER TABLE inbox DROP CONSTRAINT inbox_pkey, ADD CONSTRAINT inbox_pkey PRIMARY KEY (id, consumer);
ALTER TABLE inbox_queue DROP CONSTRAINT inbox_queue_pkey, ADD CONSTRAINT inbox_queue_pkey PRIMARY KEY (id, consumer);
ALTER TABLE inbox_dead
    DROP CONSTRAINT inbox_dead_pkey, ADD CONSTRAINT inbox_dead_pkey PRIMARY KEY (seq, consumer),
    DROP CONSTRAINT inbox_dead_id_key, ADD CONSTRAINT inbox_dead_id_key UNIQUE (id, consumer);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION inbox_dead_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state = 'dead' THEN
        EXECUTE format('DELETE FROM %I.inbox_dead WHERE id = $1 AND consumer = $2', TG_TABLE_SCHEMA) USING OLD.id, OLD.consumer;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.state = 'dead' THEN
        EXECUTE format('INSERT INTO %I.inbox_dead (id, consumer, kind, died_at, error) VALUES ($1, $2, $3, $4, $5) '
                       'ON CONFLICT (id, consumer) DO NOTHING', TG_TABLE_SCHEMA)
            USING NEW.id, NEW.consumer, NEW.kind, coalesce(NEW.completed_at, now()), coalesce(NEW.last_error, '');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION inbox_dead_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state = 'dead' THEN
        EXECUTE format('DELETE FROM %I.inbox_dead WHERE id = $1', TG_TABLE_SCHEMA) USING OLD.id;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.state = 'dead' THEN
        EXECUTE format('INSERT INTO %I.inbox_dead (id, consumer, kind, died_at, error) VALUES ($1, $2, $3, $4, $5) '
                       'ON CONFLICT (id) DO NOTHING', TG_TABLE_SCHEMA)
            USING NEW.id, NEW.consumer, NEW.kind, coalesce(NEW.completed_at, now()), coalesce(NEW.last_error, '');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

ALTER TABLE inbox_dead
    DROP CONSTRAINT inbox_dead_id_key, ADD CONSTRAINT inbox_dead_id_key UNIQUE (id),
    DROP CONSTRAINT inbox_dead_pkey, ADD CONSTRAINT inbox_dead_pkey PRIMARY KEY (seq);
ALTER TABLE inbox_queue DROP CONSTRAINT inbox_queue_pkey, ADD CONSTRAINT inbox_queue_pkey PRIMARY KEY (id);
ALTER TABLE inbox DROP CONSTRAINT inbox_pkey, ADD CONSTRAINT inbox_pkey PRIMARY KEY (id);
