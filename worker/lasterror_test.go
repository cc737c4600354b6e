package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/worker"
)

// A message that completes holds no last error: neither one that failed before it completed, nor a
// dead letter replayed and then completed (its page, and admin, would show the error it no longer
// has). While it waits for its retry, the error of its failed attempt is kept.
func TestCompletedMessageHasNoLastError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	a, err := admin.New(e.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var broken atomic.Bool
	broken.Store(true)
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if broken.Load() {
			if m.Key == "dies" {
				return txinbox.Permanent(errors.New("card declined"))
			}
			return errors.New("ledger unreachable")
		}
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.pool(t, hs, nil))
	e.receive(t, "dies", "retries")
	waitFor(t, "a failure of each", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE last_error IS NOT NULL`) == 2
	})
	if _, _, _, lastErr := e.state(t, "retries"); lastErr != "ledger unreachable" {
		t.Fatalf("a message waiting for its retry has last error %q, want its failure's", lastErr)
	}
	waitFor(t, "the dead letter", func() bool { return e.count(t, "dead") == 1 })
	broken.Store(false)
	dead, err := a.ListDead(ctx, admin.DeadFilter{})
	if err != nil || len(dead) != 1 {
		t.Fatalf("ListDead = %v, %v", dead, err)
	}
	if done, err := a.ReplayDead(ctx, admin.Inbox, dead[0].ID); err != nil || len(done) != 1 {
		t.Fatalf("ReplayDead = %v, %v", done, err)
	}
	waitFor(t, "both completed", func() bool { return e.count(t, "completed") == 2 })
	for _, key := range []string{"dies", "retries"} {
		m, err := a.FindMessage(ctx, "ledger", key)
		if err != nil {
			t.Fatal(err)
		}
		if m.LastError != "" {
			t.Errorf("completed message %s has last error %q, want none", key, m.LastError)
		}
	}
}
