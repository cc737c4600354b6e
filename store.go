package txinbox

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox/internal/base"
	"github.com/txinbox/txinbox/internal/typednil"
)

// DB is what txinbox needs from a database handle: run statements and begin transactions.
// *pgxpool.Pool and *pgx.Conn satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DefaultSchema is Store.Schema when it is empty: "public".
const DefaultSchema = base.DefaultSchema

// Defaults of [Store] (documented on its fields).
const (
	defaultRetention      = 7 * 24 * time.Hour
	defaultNotifyInterval = 50 * time.Millisecond
)

// Store says where txinbox's tables are and the settings every component working on them must
// share. Give the same Store to every constructor (inbox.New, worker.New, idempotency.New, admin.New,
// runner.New, metrics.New, migrate.Up) and function (retention.Rotate, say): a setting
// said here is said once.
//
// The zero value of each field but DB takes the documented default; [Store.Resolve] fills them in and
// checks the Store, and every constructor calls it.
type Store struct {
	// DB runs the statements: usually a *pgxpool.Pool. Required.
	DB DB
	// Schema is the PostgreSQL schema holding the tables (see package migrate). Default:
	// [DefaultSchema] ("public"); it must pass [ValidateSchema].
	Schema string
	// Retention is the dedup window: a completed message's record is kept this long after it
	// completes, and a redelivery of its key within it is a Duplicate; after it the key is accepted as
	// a new message. The worker stamps it on each message it completes; package retention deletes the
	// records past it. Default: 7 days. Must not be negative.
	Retention time.Duration
	// NotifyInterval is the least time between two wake-up notifications (NOTIFY on
	// [Store.NotifyChannel]) a receiving inbox Client (or a publishing outbox Client) sends for one
	// consumer (for the outbox); messages received sooner are found by the worker pools' (the relays')
	// fast polling after activity, which lasts 1s, or twice NotifyInterval if that is longer. It also
	// decides whether admin's ReplayDead notifies. Default: 50ms.
	//
	// Negative: no notifications and no LISTEN, for everything made on this Store: Clients never
	// notify, and worker pools and outbox relays poll only (every PollInterval when idle, every 10ms
	// for 1s after activity). Set it so when connections go through a pooler in transaction mode
	// (PgBouncer), where LISTEN cannot work. (A pool or relay also falls back to polling by itself when
	// a check after LISTEN shows that notifications do not arrive, and logs it.)
	NotifyInterval time.Duration
	// Tracer, if set, is told when each operation of every component made from the Store starts and
	// ends (see [OperationTracer]): package txotel's makes spans, package metrics' counts, and
	// [Tracers] combines them. If it is also an [Injector] (txotel's is), it carries traces across
	// services: the trace context is recorded with outbox events and received messages. Default:
	// none (nothing is told, and no trace context is recorded).
	Tracer OperationTracer
	// Logger receives the logs of everything made on this Store: worker pools, outbox relays, the
	// maintainer (and the runner that runs them), the idempotency middleware, the console, the broker
	// adapters' consumers and sinks. Each adds its own attributes (such as "consumer" or "schema"); use
	// Logger.With to tell Stores apart. Default: slog.Default().
	Logger *slog.Logger
	// SeenCache, if set, is the seen-key cache of the inbox Clients receiving into this Store: it
	// answers redeliveries of recently accepted messages without a database round trip (package seen's
	// NewLRU in process, module github.com/txinbox/txinbox/seenredis on Redis, shared by every
	// process). Every receive call looks its keys up first: a message whose key is cached with the
	// same kind and the same payload bytes ([SeenEntry].Fingerprint) gets a Duplicate receipt with
	// Cached set, its ID as cached, and State and Result unknown (empty); every other message, and all
	// of them when the cache fails or takes longer than 100ms, goes to the database as without a
	// cache. Each call to the cache (Get, Put, Invalidate) is bounded by 100ms.
	//
	// A key is cached only after its row has committed: after inbox Receive and ReceiveMany return,
	// and for ReceiveTx and ReceiveManyTx (or a Client whose DB is a pgx.Tx) only when the caller
	// calls the Client's Remember after the commit (a DB that runs Receive inside a transaction it
	// began with a BEGIN statement cannot be told apart: give such a Store no SeenCache). Cached are
	// Inserted messages and Duplicates of pending or dead ones (not completed or processing ones,
	// whose window may already be running). Each entry expires Retention after the receive call that
	// made it started: the key's dedup window, which begins no sooner than the row's commit, ends no
	// sooner.
	//
	// Rows deleted early (package admin: DiscardDead, DiscardPending, DiscardOlder) make their keys
	// new again: an admin.Admin of this Store invalidates the whole cache (a new epoch) once it
	// deleted something; for Redis that reaches every process sharing it. Deletions made through a
	// Store without this cache (another process's in-process LRU, or the txinbox command) are not
	// seen by it: for up to Retention, a redelivery of such a key may still be answered Duplicate
	// instead of being stored again. Cache errors never reach the caller: they are reported to the
	// Tracer (OpSeenGet, OpSeenPut, OpSeenInvalidate). Default: none.
	SeenCache SeenCache
}

// Resolve returns s with its defaults filled in, or a *[ConfigError] naming the field ("Store.DB",
// "Store.Schema", "Store.Retention") if s is invalid. A DB or Tracer that holds a nil pointer (a nil
// *pgxpool.Pool, whose pgxpool.New error was dropped, say) is invalid: an interface holding a nil
// pointer is not nil. The constructors check their configurations' interface fields alike.
func (s Store) Resolve() (Store, error) {
	if s.DB == nil {
		return s, &ConfigError{Field: "Store.DB", Reason: "is required (a *pgxpool.Pool, say)"}
	}
	if name, reason := typednil.Field(s); name != "" {
		return s, &ConfigError{Field: "Store." + name, Reason: reason}
	}
	if s.Schema == "" {
		s.Schema = DefaultSchema
	}
	if err := ValidateSchema(s.Schema); err != nil {
		return s, err
	}
	if s.Retention == 0 {
		s.Retention = defaultRetention
	}
	if s.Retention < 0 {
		return s, &ConfigError{Field: "Store.Retention", Reason: "must not be negative"}
	}
	if s.NotifyInterval == 0 {
		s.NotifyInterval = defaultNotifyInterval
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	return s, nil
}

// NotifyChannel returns the channel on which inbox Clients announce new messages of the Store's
// schema (the payload is the consumer) and worker pools listen: "txinbox_" followed by the schema
// name, or, when that would exceed the 63 bytes PostgreSQL allows a channel name, "txinbox_" followed
// by 16 hex digits of a hash of it. An empty Schema means DefaultSchema.
func (s Store) NotifyChannel() string { return base.Channel("txinbox_", s.Schema) }

var schemaRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidateSchema returns a *[ConfigError] (Field "Store.Schema") unless schema is a plain identifier:
// a letter or underscore, then letters, digits or underscores, at most 63 bytes. (It is quoted with
// pgx.Identifier anyway; the rule keeps names that need quoting, and would surprise an operator,
// out.)
func ValidateSchema(schema string) error {
	if !schemaRE.MatchString(schema) {
		return &ConfigError{Field: "Store.Schema", Reason: fmt.Sprintf("%q is not a plain identifier (letters, digits, underscores; at most 63 bytes; not starting with a digit)", schema)}
	}
	return nil
}
