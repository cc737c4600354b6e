package engine

import (
	"context"
	"errors"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox/internal/base"
	"github.com/txinbox/txinbox/internal/pooler"
	"github.com/txinbox/txinbox/internal/schemasql"
)

// DB is the database of an engine's user: txinbox.DB (a *pgxpool.Pool, usually).
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Base is what every user of an engine (a worker pool, an outbox relay) is bound to: the engine it
// runs on, and its Store's DB, Logger and schema statements. Make it with NewBase.
type Base struct {
	*Engine                   // runners, wake-ups, listening, Start/Stop
	DB      DB                // the Store's DB
	Log     *slog.Logger      // the Store's Logger
	St      *schemasql.Schema // the statement rewriter of the Store's schema
}

// NewBase returns the Base of a user of a Store's db, logger and schema, with an Engine of cfg that
// logs to logger and stays hot for tune.HotWindow. Unless tune.NoListen, it listens on
// cfg.Listen.Channel, on a connection that tune.ListenConnect opens, or else on one of its own outside
// db named listener ([Connector]); with tune.NoListen it polls only.
func NewBase(db DB, logger *slog.Logger, schema string, cfg Config, tune Tune, listener string) *Base {
	cfg.Logger, cfg.HotWindow = logger, tune.HotWindow
	switch {
	case tune.NoListen:
		cfg.Listen = Listen{}
	case tune.ListenConnect != nil:
		cfg.Listen.Connect = tune.ListenConnect
	default:
		cfg.Listen.Connect = Connector(db, listener)
	}
	return &Base{Engine: New(cfg), DB: db, Log: logger, St: schemasql.New(schema)}
}

// CheckStart is the check of a user's Start: that no pooler in transaction mode is in the way (an
// error matching txinbox.ErrPooler), then checkSchema, whose error matching txinbox.ErrNotMigrated it
// returns. Any other error (the database did not answer, yet) it logs as a warning, msg with attrs and
// the error, and returns nil: the user starts anyway, and its claims retry with backoff.
func (b *Base) CheckStart(ctx context.Context, checkSchema func(context.Context) error, msg string, attrs ...any) error {
	err := pooler.CheckPool(ctx, b.DB)
	if !errors.Is(err, base.ErrPooler) { // a check that could not finish proves nothing
		err = checkSchema(ctx)
	}
	if errors.Is(err, base.ErrNotMigrated) || errors.Is(err, base.ErrPooler) {
		return err
	} else if err != nil {
		b.Log.Warn(msg, append(attrs, "err", err)...)
	}
	return nil
}
