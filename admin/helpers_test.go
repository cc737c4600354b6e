package admin_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/testdb"
	"github.com/txinbox/txinbox/worker"
)

// client receives (inbox) and administers (admin) one test's schema.
type client struct {
	*inbox.Client
	*admin.Admin
}

type receiver interface {
	ReceiveMany(ctx context.Context, msgs []inbox.Message) ([]inbox.Receipt, error)
}

func newClient(t *testing.T) (client, *testdb.DB) {
	t.Helper()
	db := testdb.New(t)
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return client{c, a}, db
}

func msg(key, payload string) inbox.Message {
	return inbox.Message{Consumer: "ledger", Key: key, Kind: "OrderPaid", Payload: []byte(payload)}
}

// receiveKeys stores one message per key for consumer ledger and returns their ids.
func receiveKeys(t *testing.T, c receiver, keys ...string) []int64 {
	t.Helper()
	msgs := make([]inbox.Message, len(keys))
	for i, k := range keys {
		msgs[i] = msg(k, `{"amount":1}`)
	}
	rs, err := c.ReceiveMany(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, len(rs))
	for i, r := range rs {
		if r.Outcome != inbox.Inserted {
			t.Fatalf("receive %s: %+v", keys[i], r)
		}
		ids[i] = r.ID
	}
	return ids
}

// complete marks messages completed as the worker would (queue row deleted, expires_at set), with a
// dedup window ending expiresIn from now (negative: already expired).
func complete(t *testing.T, db *testdb.DB, expiresIn time.Duration, ids ...int64) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = ANY($1))
		UPDATE {schema}.inbox SET state = 'completed', attempts_started = 1, completed_at = now(),
			expires_at = now() + make_interval(secs => $2), result = '{"ok":true}'
		WHERE id = ANY($1)`), ids, expiresIn.Seconds())
	if err != nil {
		t.Fatal(err)
	}
}

func keyRange(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

type credit struct {
	Amount int64 `json:"amount"`
}

// startWorker runs a worker pool for consumer ledger whose handler counts its runs per key in
// counts (committed with the message) and fails permanently while failing is true.
func startWorker(t *testing.T, db *testdb.DB, failing *atomic.Bool) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`CREATE TABLE IF NOT EXISTS {schema}.counts (key text PRIMARY KEY, runs int NOT NULL)`)); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{db.Schema, "counts"}.Sanitize()
	hs := worker.NewHandlers()
	worker.Handle(hs, "OrderPaid", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if failing != nil && failing.Load() {
			return worker.Permanent(errors.New("ledger closed"))
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" AS c (key, runs) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET runs = c.runs + 1", m.Key)
		return err
	})
	p, err := worker.New(db.Store(), worker.Config{Consumer: "ledger", Handlers: hs,
		PollInterval: 10 * time.Millisecond, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(ctx)
	})
}

// waitFor polls cond until it holds; the deadline only keeps a broken test from hanging.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
