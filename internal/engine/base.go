package engine

import (
	"context"
	"errors"
	"log/slog"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/pooler"
	"github.com/txinbox/txinbox/internal/schemasql"
)

// Base is what every user of an engine (a worker pool, an outbox relay) is bound to: the engine it
// runs on, and the Store it serves with that Store's DB, Logger and schema statements. Make it with
// NewBase.
type Base struct {
	*Engine                   // runners, wake-ups, listening, Start/Stop
	Store   txinbox.Store     // resolved
	DB      txinbox.DB        // Store.DB
	Log     *slog.Logger      // Store.Logger
	St      *schemasql.Schema // the statement rewriter of Store.Schema
}

// NewBase returns the Base of a user of store (resolved), with an Engine of cfg that logs to the
// Store's Logger and stays hot for tune.HotWindow. Unless tune.NoListen, it listens on
// cfg.Listen.Channel, on a connection that tune.ListenConnect opens, or else on one of its own outside
// the Store's DB named listener ([Connector]); with tune.NoListen it polls only.
func NewBase(store txinbox.Store, cfg Config, tune Tune, listener string) *Base {
	cfg.Logger, cfg.HotWindow = store.Logger, tune.HotWindow
	switch {
	case tune.NoListen:
		cfg.Listen = Listen{}
	case tune.ListenConnect != nil:
		cfg.Listen.Connect = tune.ListenConnect
	default:
		cfg.Listen.Connect = Connector(store.DB, listener)
	}
	return &Base{Engine: New(cfg), Store: store, DB: store.DB, Log: store.Logger, St: schemasql.New(store.Schema)}
}

// CheckStart is the check of a user's Start: that no pooler in transaction mode is in the way (an
// error matching txinbox.ErrPooler), then checkSchema, whose error matching txinbox.ErrNotMigrated it
// returns. Any other error (the database did not answer, yet) it logs as a warning, msg with attrs and
// the error, and returns nil: the user starts anyway, and its claims retry with backoff.
func (b *Base) CheckStart(ctx context.Context, checkSchema func(context.Context) error, msg string, attrs ...any) error {
	err := pooler.CheckPool(ctx, b.DB)
	if !errors.Is(err, txinbox.ErrPooler) { // a check that could not finish proves nothing
		err = checkSchema(ctx)
	}
	if errors.Is(err, txinbox.ErrNotMigrated) || errors.Is(err, txinbox.ErrPooler) {
		return err
	} else if err != nil {
		b.Log.Warn(msg, append(attrs, "err", err)...)
	}
	return nil
}
