-- Ledger example schema, version 1 (goose, version table ledger_db_version).
--
-- Table names are unqualified: the schema is chosen by search_path (ledger.Migrate sets it).
--
--   accounts        one row per account: its balance and number of entries, kept up to date by the
--                   transaction that inserts an entry (the balance is the sum of the account's entries).
--   ledger_entries  one row per credit. event_id is UNIQUE: a second credit for the same OrderPaid event
--                   is refused by the ledger itself, whatever the inbox did (defence in depth).

-- +goose Up
CREATE TABLE accounts (
    account_id    text        PRIMARY KEY,
    balance_cents bigint      NOT NULL DEFAULT 0,
    entries       bigint      NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE ledger_entries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id      text        NOT NULL,
    amount_cents    bigint      NOT NULL CHECK (amount_cents > 0),
    source          text        NOT NULL CHECK (source IN ('event', 'credit')),
    event_id        text        UNIQUE,
    order_id        text,
    idempotency_key text,
    occurred_at     timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ledger_entries_event_check CHECK ((source = 'event') = (event_id IS NOT NULL))
);

CREATE INDEX ledger_entries_account ON ledger_entries (account_id, id);

-- +goose Down
DROP TABLE ledger_entries;
DROP TABLE accounts;
