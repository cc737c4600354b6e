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
	EntryID      int64     `json:"entry_id"`
	AccountID    string    `json:"account_id"`
	AmountCents  int64     `json:"amount_cents"`
	BalanceCents int64     `json:"balance_cents"`
	CreditedAt   time.Time `json:"credited_at"`
}

// createNotifications is the notifier's one table. A notification is the effect of one
// AccountCredited event: the inbox (key = the event id) makes the handler below run once per event,
// and the handler writes the row in the transaction that completes the message. Nothing else stops
// a second row for a credit: the demo counts them to show that none ever appears. (A real service
// would add UNIQUE (entry_id) as a second line of defence, as the ledger does with event_id.)
const createNotifications = `
CREATE TABLE IF NOT EXISTS {schema}.notifications (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id     text        NOT NULL, -- the AccountCredited event (the inbox key)
    entry_id     bigint      NOT NULL, -- the ledger entry: the credit notified
    account_id   text        NOT NULL,
    amount_cents bigint      NOT NULL,
    message      text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
)`

const insertNotification = `
INSERT INTO {schema}.notifications (event_id, entry_id, account_id, amount_cents, message)
VALUES ($1, $2, $3, $4, $5)`

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
	if _, err := db.Exec(ctx, qualify(createNotifications, schema)); err != nil {
		return fmt.Errorf("notifier: create notifications: %w", err)
	}
	return nil
}

// Handler returns the AccountCredited handler: it writes the notification in tx, the worker's
// transaction, which also marks the message completed. hook, if not nil, runs after the insert (the
// demo's fault injection).
func Handler(schema string, hook func(m *worker.Message[AccountCredited])) worker.HandlerFunc[AccountCredited] {
	insert := qualify(insertNotification, schema)
	return func(ctx context.Context, tx pgx.Tx, m *worker.Message[AccountCredited]) error {
		ev := m.Payload
		if ev.EntryID <= 0 || ev.AccountID == "" {
			return txinbox.Permanent(fmt.Errorf("not an AccountCredited event: %s", m.RawPayload))
		}
		msg := fmt.Sprintf("Account %s was credited %d.%02d; balance %d.%02d.", ev.AccountID,
			ev.AmountCents/100, ev.AmountCents%100, ev.BalanceCents/100, ev.BalanceCents%100)
		if _, err := tx.Exec(ctx, insert, m.Key, ev.EntryID, ev.AccountID, ev.AmountCents, msg); err != nil {
			return err
		}
		if hook != nil {
			hook(m)
		}
		return nil
	}
}
