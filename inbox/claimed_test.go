package inbox_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// TestDuplicateOfClaimedMessage: while a worker holds a message (its claim lives in the queue row and
// its inbox row stays pending until the finish), a redelivery is a Duplicate in state processing, from
// Receive and from ReceiveMany (which reads rows committed after its snapshot through LookupKeys),
// and, with a seen-key cache, it is not cached (a processing message may complete and start its
// dedup window before a cache entry would expire).
func TestDuplicateOfClaimedMessage(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// cached has a seen-key cache that is empty when the message is claimed.
	cachedStore := db.Store()
	cachedStore.SeenCache = newLRU(t)
	cached, err := inbox.New(cachedStore, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m := inbox.Message{Consumer: "ledger", Key: "k1", Kind: "credit", Payload: json.RawMessage(`{"amount":1}`)}
	if r, err := c.Receive(ctx, m); err != nil || r.Outcome != inbox.Inserted {
		t.Fatalf("first receive: %+v, %v", r, err)
	}

	started, release := make(chan struct{}), make(chan struct{})
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, _ pgx.Tx, _ *worker.Message[json.RawMessage]) error {
		close(started)
		<-release
		return nil
	})
	p, err := worker.New(db.Store(), worker.Config{Consumer: "ledger", Handlers: hs, Concurrency: 1,
		PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(sctx)
	})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // runs before Stop: a failing test does not leave the handler blocked
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the worker never claimed the message")
	}

	for i, cl := range []*inbox.Client{c, cached, cached} {
		r, err := cl.Receive(ctx, m)
		if err != nil || r.Outcome != inbox.Duplicate || r.State != inbox.StateProcessing || r.Cached {
			t.Fatalf("receive %d while claimed: %+v, %v; want a Duplicate in state processing, not cached", i+2, r, err)
		}
	}
	rs, err := c.ReceiveMany(ctx, []inbox.Message{m, m})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Outcome != inbox.Duplicate || r.State != inbox.StateProcessing {
			t.Errorf("ReceiveMany[%d] while claimed: %+v; want a Duplicate in state processing", i, r)
		}
	}

	free()
	deadline := time.Now().Add(time.Minute)
	for db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'completed'`) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the message never completed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r, err := c.Receive(ctx, m); err != nil || r.Outcome != inbox.Duplicate || r.State != inbox.StateCompleted {
		t.Fatalf("receive after completion: %+v, %v; want a Duplicate in state completed", r, err)
	}
}
