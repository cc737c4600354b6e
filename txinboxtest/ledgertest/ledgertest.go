// Package ledgertest holds what the tests of admin and retention share: messages of consumer
// "ledger" and kind "OrderPaid", stored, marked completed as the worker would, and run by a worker
// pool that counts its runs per key.
//
// The package is txinbox's own test support: a program may import it, but its API may change in any
// release (the test kit for code using txinbox is package txinboxtest).
package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// Message is a message of consumer ledger and kind OrderPaid.
func Message(key, payload string) inbox.Message {
	return inbox.Message{Consumer: "ledger", Key: key, Kind: "OrderPaid", Payload: []byte(payload)}
}

// Receiver stores messages: an *inbox.Client, or a type embedding one.
type Receiver interface {
	ReceiveMany(ctx context.Context, msgs []inbox.Message) ([]inbox.Receipt, error)
}

// Receive stores one message per key (payload {"amount":1}) and returns their ids. A key that was
// not inserted fails t.
func Receive(t testing.TB, c Receiver, keys ...string) []int64 {
	t.Helper()
	msgs := make([]inbox.Message, len(keys))
	for i, k := range keys {
		msgs[i] = Message(k, `{"amount":1}`)
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

// Complete marks messages completed as the worker would (queue row deleted, expires_at set), with a
// dedup window ending expiresIn from now (negative: already expired).
func Complete(t testing.TB, db *testdb.DB, expiresIn time.Duration, ids ...int64) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = ANY($1))
		UPDATE {schema}.inbox SET state = 'completed', attempts_started = 1, completed_at = now(),
			expires_at = now() + make_interval(secs => $2), result = '{"ok":true}'
		WHERE id = ANY($1)`), ids, expiresIn.Seconds())
	if err != nil {
		t.Fatal(err)
	}
}

// Keys returns n keys: prefix-0 to prefix-(n-1).
func Keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

type credit struct {
	Amount int64 `json:"amount"`
}

// StartWorker runs a worker pool for consumer ledger until t ends. Its handler counts its runs per
// key in the table counts of db's schema (committed with the message) and fails permanently while
// failing (if not nil) is true.
func StartWorker(t testing.TB, db *testdb.DB, failing *atomic.Bool) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`CREATE TABLE IF NOT EXISTS {schema}.counts (key text PRIMARY KEY, runs int NOT NULL)`)); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{db.Schema, "counts"}.Sanitize()
	hs := worker.NewHandlers()
	worker.Handle(hs, "OrderPaid", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if failing != nil && failing.Load() {
			return txinbox.Permanent(errors.New("ledger closed"))
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

// WaitFor polls cond every 10 ms until it holds; the deadline (2 minutes) only keeps a broken test
// from hanging.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
