package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// TestHotWindowExceedsNotifyInterval: a pool's fast polling after activity lasts longer than
// Store.NotifyInterval, whatever it is (1s, or twice NotifyInterval if that is longer), so that a
// message whose notification was debounced never waits a full PollInterval; a negative
// NotifyInterval (no notifications) turns the pool's LISTEN off and keeps the 1s window.
func TestHotWindowExceedsNotifyInterval(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(context.Context, pgx.Tx, *worker.Message[struct{}]) error { return nil })
	for _, c := range []struct {
		notify, want time.Duration
		listens      bool
	}{
		{0, time.Second, true}, // the default NotifyInterval, 50ms
		{time.Millisecond, time.Second, true},
		{time.Second, 2 * time.Second, true},
		{2 * time.Second, 4 * time.Second, true},
		{-1, time.Second, false},
	} {
		st := txinbox.Store{DB: db.Pool, Schema: db.Schema, NotifyInterval: c.notify}
		p, err := worker.New(st, worker.Config{Consumer: "ledger", Handlers: hs})
		if err != nil {
			t.Fatalf("NotifyInterval %v: %v", c.notify, err)
		}
		resolved, _ := st.Resolve()
		if got := worker.HotWindowOf(p); got != c.want || got <= resolved.NotifyInterval {
			t.Errorf("NotifyInterval %v: hot window %v, want %v (more than NotifyInterval)", c.notify, got, c.want)
		}
		if got := worker.Listens(p); got != c.listens {
			t.Errorf("NotifyInterval %v: listens %v, want %v", c.notify, got, c.listens)
		}
	}
}
