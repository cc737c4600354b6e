package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/worker"
)

// Names in the notifier's inbox.
const (
	// Consumer is the notifier's inbox consumer (and its worker pool's).
	Consumer = "notifier"
	// KindAccountCredited is the kind of the AccountCredited messages.
	KindAccountCredited = "AccountCredited"
)

// AccountCredited is the ledger's event (examples/ledger, package ledger), as far as the notifier
// reads it.
type AccountCredited struct {
	EntryID   int64  `json:"entry_id"`
	AccountID string `json:"account_id"`
	// AccountSeq is the credit's place among the account's credits (1, 2, ...): the order in which
	// the ledger made them, and published their events (outbox key and CloudEvents partitionkey =
	// the account).
	AccountSeq   int64     `json:"account_seq"`
	AmountCents  int64     `json:"amount_cents"`
	BalanceCents int64     `json:"balance_cents"`
	CreditedAt   time.Time `json:"credited_at"`
}

// createNotifications is the notifier's one table. A notification is the effect of one
// AccountCredited event: the inbox (key = the event id) makes the handler below run once per event,
// and the handler writes the row in the transaction that completes the message. Nothing else stops
// a second row for a credit: the demo counts them to show that none ever appears. (A real service
// would add UNIQUE (entry_id) as a second line of defence, as the ledger does with event_id.)
//
// Each row also records the order in which the notifier handled the account's credits: account_seq
// is the credit's place among the account's credits (from the event), prev_seq the highest
// account_seq of the account's notifications committed when this one was written (0 for none). The
// events of an account share an ordering key (the envelope's partitionkey), so they are handled one
// at a time in the order they were published: every row has prev_seq = account_seq - 1, which the
// demo checks.
const createNotifications = `
CREATE TABLE IF NOT EXISTS {schema}.notifications (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id     text        NOT NULL, -- the AccountCredited event (the inbox key)
    entry_id     bigint      NOT NULL, -- the ledger entry: the credit notified
    account_id   text        NOT NULL,
    account_seq  bigint      NOT NULL, -- the credit's place among the account's credits: 1, 2, ...
    prev_seq     bigint      NOT NULL, -- the account's highest account_seq notified before this one
    amount_cents bigint      NOT NULL,
    message      text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
)`

const createNotificationsIndex = `CREATE INDEX IF NOT EXISTS notifications_account ON {schema}.notifications (account_id, account_seq)`

// insertNotification writes a notification; prev_seq is read by the same statement (READ COMMITTED:
// the notifications committed when it starts).
const insertNotification = `
INSERT INTO {schema}.notifications (event_id, entry_id, account_id, account_seq, prev_seq, amount_cents, message)
SELECT $1, $2, $3, $4, coalesce(max(account_seq), 0), $5, $6
FROM {schema}.notifications WHERE account_id = $3`

func qualify(sql, schema string) string {
	return strings.ReplaceAll(sql, "{schema}", pgx.Identifier{schema}.Sanitize())
}

// Migrate creates txinbox's tables (migrate.Up) and the notifications table in schema.
func Migrate(ctx context.Context, db *pgxpool.Pool, schema string) error {
	m, err := migrate.New(ctx, db.Config().ConnConfig, txinbox.Store{Schema: schema}, nil)
	if err != nil {
		return err
	}
	_, err = m.Up(ctx)
	_ = m.Close()
	if err != nil {
		return fmt.Errorf("notifier: txinbox migrations: %w", err)
	}
	for _, sql := range []string{createNotifications, createNotificationsIndex} {
		if _, err := db.Exec(ctx, qualify(sql, schema)); err != nil {
			return fmt.Errorf("notifier: create notifications: %w", err)
		}
	}
	return nil
}

// Handler returns the AccountCredited handler: it writes the notification in tx, the worker's
// transaction, which also marks the message completed. An event without entry_id, account_id or
// account_seq is a dead letter. hook, if not nil, runs after the insert (the demo's fault injection).
func Handler(schema string, hook func(m *worker.Message[AccountCredited])) worker.HandlerFunc[AccountCredited] {
	insert := qualify(insertNotification, schema)
	return func(ctx context.Context, tx pgx.Tx, m *worker.Message[AccountCredited]) error {
		ev := m.Payload
		if ev.EntryID <= 0 || ev.AccountID == "" || ev.AccountSeq <= 0 {
			return txinbox.Permanent(fmt.Errorf("not an AccountCredited event: %s", m.RawPayload))
		}
		msg := fmt.Sprintf("Account %s was credited %d.%02d; balance %d.%02d.", ev.AccountID,
			ev.AmountCents/100, ev.AmountCents%100, ev.BalanceCents/100, ev.BalanceCents%100)
		if _, err := tx.Exec(ctx, insert, m.Key, ev.EntryID, ev.AccountID, ev.AccountSeq, ev.AmountCents, msg); err != nil {
			return err
		}
		if hook != nil {
			hook(m)
		}
		return nil
	}
}
