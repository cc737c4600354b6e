// Package ledger is the business side of the ledger example: accounts, ledger entries, and the worker
// handler that credits an account for an OrderPaid event.
//
// A credit inserts one ledger entry and adds its amount to the account's balance (a running total,
// accounts.balance_cents) in one statement, inside the caller's transaction (the worker's batch
// transaction, or the idempotency middleware's), so an account's balance is always the sum of its
// entries; Account checks that equality on every read. Entries made for an event
// carry its event_id, which is UNIQUE: even if the inbox let a duplicate through, the ledger would
// not credit the same event twice (defence in depth).
package ledger

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
)

// Names used in the inbox.
const (
	// Consumer is the inbox consumer of the ledger's workers.
	Consumer = "ledger"
	// KindOrderPaid is the kind of OrderPaid messages.
	KindOrderPaid = "OrderPaid"
)

// Limits of the values the ledger accepts.
const (
	// MaxAmountCents is the largest amount of one credit: 10 billion cents.
	MaxAmountCents = 10_000_000_000
	// MaxIDBytes is the longest event or order id accepted, in bytes.
	MaxIDBytes = 200
)

// OrderPaid is the event that credits an account: the payment of an order. It is the inbox payload
// of kind KindOrderPaid, keyed by EventID.
type OrderPaid struct {
	EventID     string    `json:"event_id"`
	OrderID     string    `json:"order_id"`
	AccountID   string    `json:"account_id"`
	AmountCents int64     `json:"amount_cents"`
	OccurredAt  time.Time `json:"occurred_at"`
}

// Source says where a ledger entry comes from.
type Source string

// The sources of entries.
const (
	SourceEvent  Source = "event"  // an OrderPaid event, through the inbox and a worker
	SourceCredit Source = "credit" // POST /v1/credits, through the Idempotency-Key middleware
)

// Credit is one credit to apply.
type Credit struct {
	AccountID   string
	AmountCents int64
	Source      Source
	// EventID is required for SourceEvent and must be empty otherwise.
	EventID string
	OrderID string
	// IdempotencyKey is the request's key, for SourceCredit.
	IdempotencyKey string
	// OccurredAt is when the credit happened in the business sense. Zero means now.
	OccurredAt time.Time
}

// Applied is the result of a credit, stored as the inbox message's result.
type Applied struct {
	EntryID      int64  `json:"entry_id"`
	AccountID    string `json:"account_id"`
	AmountCents  int64  `json:"amount_cents"`
	BalanceCents int64  `json:"balance_cents"`
	// AccountSeq is the credit's place among its account's entries: 1 for the account's first credit,
	// n for its nth (the accounts row, locked by the credit, counts them). 0 when AlreadyApplied.
	AccountSeq int64 `json:"account_seq,omitempty"`
	// AlreadyApplied is true when the ledger already held an entry for this event: nothing was
	// credited (the UNIQUE event_id caught a duplicate the inbox had not). BalanceCents is then 0.
	AlreadyApplied bool `json:"already_applied,omitempty"`
}

// Account is an account's balance.
type Account struct {
	AccountID    string    `json:"account_id"`
	BalanceCents int64     `json:"balance_cents"`
	Entries      int64     `json:"entry_count"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// Entry is one ledger entry.
type Entry struct {
	ID             int64     `json:"id"`
	AmountCents    int64     `json:"amount_cents"`
	Source         Source    `json:"source"`
	EventID        string    `json:"event_id,omitempty"`
	OrderID        string    `json:"order_id,omitempty"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	OccurredAt     time.Time `json:"occurred_at"`
	CreatedAt      time.Time `json:"created_at"`
}

// ErrInvalid is matched (errors.Is) by every validation error of this package.
var ErrInvalid = errors.New("ledger: invalid value")

// ErrAccountNotFound is returned for an account that has no entry yet.
var ErrAccountNotFound = errors.New("ledger: account not found")

// ErrBalanceMismatch is returned (wrapped) by Account when an account's running total differs from
// the sum of its entries, which no code path of this package can cause.
var ErrBalanceMismatch = errors.New("ledger: balance differs from the sum of the entries")

// FieldError is a validation error about one field.
type FieldError struct {
	Field  string `json:"field"`
	Detail string `json:"detail"`
}

func (e *FieldError) Error() string { return fmt.Sprintf("ledger: %s: %s", e.Field, e.Detail) }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

var accountRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

// ValidateAccountID returns a *FieldError unless id is 1 to 64 letters, digits or . _ : - starting
// with a letter or digit (account ids appear in URL paths).
func ValidateAccountID(id string) error {
	if !accountRE.MatchString(id) {
		return &FieldError{Field: "account_id", Detail: "must be 1 to 64 letters, digits or . _ : - starting with a letter or digit"}
	}
	return nil
}

// ValidateAmount returns a *FieldError unless 0 < cents <= MaxAmountCents.
func ValidateAmount(cents int64) error {
	if cents <= 0 || cents > MaxAmountCents {
		return &FieldError{Field: "amount_cents", Detail: fmt.Sprintf("must be a positive integer of at most %d", int64(MaxAmountCents))}
	}
	return nil
}

// ValidateID returns a *FieldError (naming field) unless id is 1 to MaxIDBytes bytes of UTF-8
// without control characters.
func ValidateID(field, id string) error {
	if err := txinbox.ValidateKey(id); err != nil {
		return &FieldError{Field: field, Detail: err.Error()}
	}
	if len(id) > MaxIDBytes {
		return &FieldError{Field: field, Detail: fmt.Sprintf("is %d bytes, more than %d", len(id), MaxIDBytes)}
	}
	return nil
}

// Validate checks every field of e and returns all the problems found (nil if none).
func (e *OrderPaid) Validate() []*FieldError {
	var out []*FieldError
	add := func(err error) {
		var fe *FieldError
		if errors.As(err, &fe) {
			out = append(out, fe)
		}
	}
	add(ValidateID("event_id", e.EventID))
	add(ValidateID("order_id", e.OrderID))
	add(ValidateAccountID(e.AccountID))
	add(ValidateAmount(e.AmountCents))
	if e.OccurredAt.IsZero() {
		out = append(out, &FieldError{Field: "occurred_at", Detail: "must be an RFC 3339 time"})
	}
	return out
}

// Ledger runs the ledger's statements against one schema. It is safe for concurrent use.
type Ledger struct {
	schema                                         string
	apply, applyEvents, existing, account, entries string
	outbox                                         *outbox.Client // the schema's outbox: AccountCredited events
}

// New returns a Ledger for store's schema (a plain identifier, see txinbox.ValidateSchema; "" is
// txinbox.DefaultSchema) whose credits publish their AccountCredited events in the outbox of that
// schema, traced by store's Tracer if it has one (the caller's trace context is recorded with each
// event); store's DB is the service's pool (the credits themselves run in the caller's transactions).
func New(store txinbox.Store) (*Ledger, error) {
	schema := store.Schema
	if schema == "" {
		schema = txinbox.DefaultSchema
	}
	if err := txinbox.ValidateSchema(schema); err != nil {
		return nil, err
	}
	store.Schema = schema
	out, err := outbox.New(store, outbox.Config{})
	if err != nil {
		return nil, err
	}
	q := func(sql string) string { return strings.ReplaceAll(sql, "{schema}", pgx.Identifier{schema}.Sanitize()) }
	return &Ledger{
		schema:      schema,
		outbox:      out,
		apply:       q(sqlApply),
		applyEvents: q(sqlApplyEvents),
		existing:    q(sqlExisting),
		account:     q(sqlAccount),
		entries:     q(sqlEntries),
	}, nil
}

// Schema returns the ledger's schema.
func (l *Ledger) Schema() string { return l.schema }

// sqlApply inserts the entry and adds it to the account in one statement. An entry whose event_id is
// stored already inserts nothing and returns no row.
const sqlApply = `
WITH entry AS (
    INSERT INTO {schema}.ledger_entries (account_id, amount_cents, source, event_id, order_id, idempotency_key, occurred_at)
    VALUES ($1, $2, $3, NULLIF($4, ''), NULLIF($5, ''), NULLIF($6, ''), $7)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING id, account_id, amount_cents
), account AS (
    INSERT INTO {schema}.accounts AS a (account_id, balance_cents, entries)
    SELECT account_id, amount_cents, 1 FROM entry
    ON CONFLICT (account_id) DO UPDATE
        SET balance_cents = a.balance_cents + EXCLUDED.balance_cents, entries = a.entries + 1, updated_at = now()
    RETURNING balance_cents, entries
)
SELECT entry.id, account.balance_cents, account.entries FROM entry, account`

// sqlApplyEvents is sqlApply for a set of event credits, in one statement: the entries are inserted
// from the arrays (events whose event_id is stored already insert nothing), the accounts get the sum
// and number of their new entries in one upsert (in account order, so that concurrent calls lock them
// in the same order), and each new entry comes back with the balance right after it and its place
// among the account's entries.
const sqlApplyEvents = `
WITH entry AS (
    INSERT INTO {schema}.ledger_entries (account_id, amount_cents, source, event_id, order_id, occurred_at)
    SELECT e.account_id, e.amount_cents, 'event', e.event_id, NULLIF(e.order_id, ''), e.occurred_at
    FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::timestamptz[])
         WITH ORDINALITY AS e(account_id, amount_cents, event_id, order_id, occurred_at, i)
    ORDER BY e.i
    ON CONFLICT (event_id) DO NOTHING
    RETURNING id, account_id, amount_cents, event_id
), account AS (
    INSERT INTO {schema}.accounts AS a (account_id, balance_cents, entries)
    SELECT account_id, sum(amount_cents), count(*) FROM entry GROUP BY account_id ORDER BY account_id
    ON CONFLICT (account_id) DO UPDATE
        SET balance_cents = a.balance_cents + EXCLUDED.balance_cents, entries = a.entries + EXCLUDED.entries, updated_at = now()
    RETURNING account_id, balance_cents, entries
)
SELECT entry.event_id, entry.id, entry.account_id, entry.amount_cents,
       account.balance_cents - coalesce(sum(entry.amount_cents) OVER later, 0)::bigint,
       account.entries - count(*) OVER later
FROM entry JOIN account USING (account_id)
WINDOW later AS (PARTITION BY entry.account_id ORDER BY entry.id ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)`

const sqlExisting = `SELECT id, account_id, amount_cents FROM {schema}.ledger_entries WHERE event_id = $1`

// sqlAccount reads the account's running total and, in the same statement (so the same snapshot),
// the sum and number of its entries, which Account checks against it.
const sqlAccount = `
SELECT a.account_id, a.balance_cents, a.entries, a.updated_at, e.sum_cents, e.n
FROM {schema}.accounts a,
     LATERAL (SELECT coalesce(sum(amount_cents), 0)::bigint AS sum_cents, count(*) AS n
              FROM {schema}.ledger_entries WHERE account_id = a.account_id) e
WHERE a.account_id = $1`

const sqlEntries = `
SELECT id, amount_cents, source, coalesce(event_id, ''), coalesce(order_id, ''), coalesce(idempotency_key, ''),
       occurred_at, created_at
FROM {schema}.ledger_entries
WHERE account_id = $1
ORDER BY id DESC
LIMIT $2`

// Apply credits c: it inserts the entry, adds the amount to the account's balance and publishes an
// AccountCredited event in the outbox, all in tx (the caller's transaction, so that they commit
// together with whatever else it does, or not at all). A credit for an event that already has an
// entry credits and publishes nothing and reports AlreadyApplied.
func (l *Ledger) Apply(ctx context.Context, tx pgx.Tx, c Credit) (Applied, error) {
	if err := ValidateAccountID(c.AccountID); err != nil {
		return Applied{}, err
	}
	if err := ValidateAmount(c.AmountCents); err != nil {
		return Applied{}, err
	}
	switch {
	case c.Source != SourceEvent && c.Source != SourceCredit:
		return Applied{}, &FieldError{Field: "source", Detail: fmt.Sprintf("unknown source %q", c.Source)}
	case (c.Source == SourceEvent) != (c.EventID != ""):
		return Applied{}, &FieldError{Field: "event_id", Detail: "is required for, and only for, event credits"}
	}
	at := c.OccurredAt
	if at.IsZero() {
		at = time.Now()
	}
	a := Applied{AccountID: c.AccountID, AmountCents: c.AmountCents}
	err := tx.QueryRow(ctx, l.apply, c.AccountID, c.AmountCents, string(c.Source), c.EventID, c.OrderID,
		c.IdempotencyKey, at).Scan(&a.EntryID, &a.BalanceCents, &a.AccountSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		a = Applied{AlreadyApplied: true}
		err = tx.QueryRow(ctx, l.existing, c.EventID).Scan(&a.EntryID, &a.AccountID, &a.AmountCents)
	}
	if err != nil {
		return Applied{}, fmt.Errorf("ledger: apply: %w", err)
	}
	if err := l.publishCredited(ctx, tx, c.Source, []Credit{c}, []Applied{a}); err != nil {
		return Applied{}, err
	}
	return a, nil
}

// ApplyEvents credits a set of event credits (Source SourceEvent) with one statement in tx, and
// publishes their AccountCredited events with one more, as Apply does for one: it returns their
// Applied in the order of cs, AlreadyApplied for an event that already had an entry (no event). It
// checks every credit first and applies none if one is invalid.
func (l *Ledger) ApplyEvents(ctx context.Context, tx pgx.Tx, cs []Credit) ([]Applied, error) {
	n := len(cs)
	accounts, amounts, events, orders, ats := make([]string, n), make([]int64, n), make([]string, n), make([]string, n), make([]time.Time, n)
	for i, c := range cs {
		if err := ValidateAccountID(c.AccountID); err != nil {
			return nil, err
		}
		if err := ValidateAmount(c.AmountCents); err != nil {
			return nil, err
		}
		if c.Source != SourceEvent || c.EventID == "" {
			return nil, &FieldError{Field: "source", Detail: "ApplyEvents applies event credits (with an event_id) only"}
		}
		accounts[i], amounts[i], events[i], orders[i], ats[i] = c.AccountID, c.AmountCents, c.EventID, c.OrderID, c.OccurredAt
		if ats[i].IsZero() {
			ats[i] = time.Now()
		}
	}
	rows, err := tx.Query(ctx, l.applyEvents, accounts, amounts, events, orders, ats)
	if err != nil {
		return nil, fmt.Errorf("ledger: apply events: %w", err)
	}
	byEvent := make(map[string]Applied, n)
	var ev string
	var a Applied
	if _, err := pgx.ForEachRow(rows, []any{&ev, &a.EntryID, &a.AccountID, &a.AmountCents, &a.BalanceCents, &a.AccountSeq}, func() error {
		byEvent[ev] = a
		return nil
	}); err != nil {
		return nil, fmt.Errorf("ledger: apply events: %w", err)
	}
	out := make([]Applied, n)
	for i, c := range cs {
		got, ok := byEvent[c.EventID]
		if !ok { // already applied: report the entry that holds it
			got = Applied{AlreadyApplied: true}
			if err := tx.QueryRow(ctx, l.existing, c.EventID).Scan(&got.EntryID, &got.AccountID, &got.AmountCents); err != nil {
				return nil, fmt.Errorf("ledger: apply events: %w", err)
			}
		}
		out[i] = got
	}
	if err := l.publishCredited(ctx, tx, SourceEvent, cs, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Account reads an account and its newest entries (at most limit, newest first) in one snapshot.
// An account without entries returns ErrAccountNotFound. The running total (accounts.balance_cents)
// is checked against the sum and number of the account's entries in that snapshot: a difference
// returns an error wrapping ErrBalanceMismatch instead of an inconsistent answer.
func (l *Ledger) Account(ctx context.Context, db interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}, id string, limit int) (Account, []Entry, error) {
	if err := ValidateAccountID(id); err != nil {
		return Account{}, nil, err
	}
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return Account{}, nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var a Account
	var sum, n int64
	err = tx.QueryRow(ctx, l.account, id).Scan(&a.AccountID, &a.BalanceCents, &a.Entries, &a.UpdatedAt, &sum, &n)
	if errors.Is(err, pgx.ErrNoRows) {
		return Account{}, nil, ErrAccountNotFound
	}
	if err != nil {
		return Account{}, nil, err
	}
	if sum != a.BalanceCents || n != a.Entries {
		return Account{}, nil, fmt.Errorf("%w: account %s: balance %d in %d entries, entries sum to %d in %d",
			ErrBalanceMismatch, id, a.BalanceCents, a.Entries, sum, n)
	}
	rows, err := tx.Query(ctx, l.entries, id, limit)
	if err != nil {
		return Account{}, nil, err
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) {
		var e Entry
		var src string
		err := r.Scan(&e.ID, &e.AmountCents, &src, &e.EventID, &e.OrderID, &e.IdempotencyKey, &e.OccurredAt, &e.CreatedAt)
		e.Source = Source(src)
		return e, err
	})
	if err != nil {
		return Account{}, nil, err
	}
	return a, entries, tx.Commit(ctx)
}
