package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

const unservedWarning = "txinbox: this pool's consumer has had no message for a while, and messages of consumers that no pool serves are waiting: is Consumer mistyped?"

// A pool of a mistyped consumer ("ledgr") idles while messages of "ledger" wait with no pool to run
// them: it says so, once, naming both. The waiting messages of "billing", whose pool runs (they are
// not due yet), are not named.
func TestIdlePoolNamesConsumersThatNoPoolServes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "l-1", "l-2")
	if _, err := e.client.Receive(context.Background(), inbox.Message{Consumer: "billing", Key: "b-1", Kind: "credit",
		Payload: []byte(`{"amount": 1}`), NotBefore: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.pool(t, hs, func(c *worker.Config) { c.Consumer = "billing"; worker.SetIdleWarnAfter(c, -1) }))
	logs := &logBuffer{}
	run(t, e.poolOn(t, e.storeLogging(logs), hs, func(c *worker.Config) {
		c.Consumer = "ledgr"
		worker.SetIdleWarnAfter(c, 100*time.Millisecond)
	}))
	waitFor(t, "the warning", func() bool { return len(logs.find(t, unservedWarning)) > 0 })
	time.Sleep(time.Second) // ten more idle checks
	warned := logs.find(t, unservedWarning)
	if len(warned) != 1 {
		t.Fatalf("%d warnings, want 1: %v", len(warned), warned)
	}
	w := warned[0]
	if w["level"] != "WARN" || w["consumer"] != "ledgr" || fmt.Sprint(w["unserved_consumers"]) != "[ledger]" {
		t.Fatalf("warning %v, want consumer ledgr and unserved_consumers [ledger]", w)
	}
}

// A pool that serves the only consumer with messages never warns, however long it idles.
func TestIdlePoolWithNothingUnservedDoesNotWarn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "k-1")
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	logs := &logBuffer{}
	run(t, e.poolOn(t, e.storeLogging(logs), hs, func(c *worker.Config) { worker.SetIdleWarnAfter(c, 100*time.Millisecond) }))
	waitFor(t, "the message completed", func() bool { return e.count(t, "completed") == 1 })
	time.Sleep(time.Second)
	if w := logs.find(t, unservedWarning); len(w) > 0 {
		t.Fatalf("warned: %v", w)
	}
}
