package engine

import (
	"context"
	"errors"
	"log/slog"

	"github.com/txinbox/txinbox/internal/base"
	"github.com/txinbox/txinbox/internal/pooler"
	"github.com/txinbox/txinbox/internal/schemasql"
)

// Base is what every user of an engine (a worker pool, an outbox relay) is bound to: the engine it
// runs on, and its Store's Logger and schema statements. Make it with NewBase.
type Base struct {
	*Engine                   // runners, wake-ups, listening, Start/Stop
	Log     *slog.Logger      // the Store's Logger
	St      *schemasql.Schema // the statement rewriter of the Store's schema
	db      any               // the Store's DB, for CheckStart
}

// NewBase returns the Base of a user of a Store's db, logger and schema, with an Engine of cfg that
// logs to logger and stays hot for tune.HotWindow. Unless tune.NoListen, it listens on
// cfg.Listen.Channel, on a connection that tune.ListenConnect opens, or else on one of its own outside
// db named listener ([Connector]); with tune.NoListen it polls only.
func NewBase(db any, logger *slog.Logger, schema string, cfg Config, tune Tune, listener string) *Base {
	cfg.Logger, cfg.HotWindow = logger, tune.HotWindow
	switch {
	case tune.NoListen:
		cfg.Listen = Listen{}
	case tune.ListenConnect != nil:
		cfg.Listen.Connect = tune.ListenConnect
	default:
		cfg.Listen.Connect = Connector(db, listener)
	}
	return &Base{Engine: New(cfg), db: db, Log: logger, St: schemasql.New(schema)}
}

// CheckStart is the check of a user's Start: that no pooler in transaction mode is in the way (an
// error matching txinbox.ErrPooler), then checkSchema, whose error matching txinbox.ErrNotMigrated it
// returns. Any other error (the database did not answer, yet) it logs as a warning, msg with attrs and
// the error, and returns nil: the user starts anyway, and its claims retry with backoff.
func (b *Base) CheckStart(ctx context.Context, checkSchema func(context.Context) error, msg string, attrs ...any) error {
	err := pooler.CheckPool(ctx, b.db)
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
