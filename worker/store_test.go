package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/testkit/testdb"
	"github.com/txinbox/txinbox/worker"
)

// TestHotWindowMustExceedNotifyInterval: a HotWindow that does not exceed Store.NotifyInterval is a
// *ConfigError (messages whose notification was debounced would wait a full PollInterval), the
// default HotWindow is derived so that it does, and a negative either side turns the check off.
func TestHotWindowMustExceedNotifyInterval(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(context.Context, pgx.Tx, *worker.Message[struct{}]) error { return nil })
	slow := txinbox.Store{DB: db.Pool, Schema: db.Schema, NotifyInterval: 2 * time.Second}
	for _, hw := range []time.Duration{time.Second, 2 * time.Second} {
		_, err := worker.New(slow, worker.Config{Consumer: "ledger", Handlers: hs, HotWindow: hw})
		var ce *txinbox.ConfigError
		if !errors.Is(err, txinbox.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != "HotWindow" {
			t.Errorf("HotWindow %v with NotifyInterval 2s: %v, want a *ConfigError for HotWindow", hw, err)
		}
	}
	ok := []struct {
		store txinbox.Store
		hw    time.Duration
	}{
		{slow, 0},               // default: derived from NotifyInterval
		{slow, 3 * time.Second}, // longer
		{slow, -1},              // never poll fast
		{db.Store(), 0},         // both defaults
		{txinbox.Store{DB: db.Pool, Schema: db.Schema, NotifyInterval: -1}, time.Millisecond}, // never notify
	}
	for _, c := range ok {
		if _, err := worker.New(c.store, worker.Config{Consumer: "ledger", Handlers: hs, HotWindow: c.hw}); err != nil {
			t.Errorf("NotifyInterval %v, HotWindow %v: %v", c.store.NotifyInterval, c.hw, err)
		}
	}
}
