package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/worker"
)

// lateTimeout is the Timeout of the handlers that return after it, and lateSleep how long they
// sleep, ignoring their ctx.
const lateTimeout, lateSleep = time.Second, 2500 * time.Millisecond

// applyAttempt records that attempt of message key ran: one row keyed by both, so that the effects
// of the attempts can be told apart.
func applyAttempt(ctx context.Context, tx pgx.Tx, schema, key string, attempt int) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "effects"}.Sanitize()+" (key, amount) VALUES ($1, 1)",
		fmt.Sprintf("%s/attempt-%d", key, attempt))
	return err
}

// A handler that returns nil after its Timeout is charged a timeout: its writes are rolled back and
// the message is retried after the backoff, the attempt counted. Whether the write went out before
// the deadline on the handler's ctx, or after it on a ctx of its own (context.Background()), the
// rule is the same: what a late handler wrote does not commit.
func TestLateReturnIsATimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error
	}{
		{"write before the deadline", func(ctx context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error {
			if err := applyAttempt(ctx, tx, schema, m.Key, m.Attempt); err != nil {
				return err
			}
			time.Sleep(lateSleep) // ignores ctx
			return nil
		}},
		{"write after the deadline on context.Background", func(_ context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error {
			time.Sleep(lateSleep) // ignores ctx
			return applyAttempt(context.Background(), tx, schema, m.Key, m.Attempt)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.receive(t, "late", "bystander")
			previous := make(chan string, 1)
			hs := worker.NewHandlers()
			worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
				if m.Key != "late" {
					return applyAttempt(ctx, tx, e.Schema, m.Key, m.Attempt)
				}
				if m.Attempt > 1 { // the retry returns in time
					previous <- m.PreviousError
					return applyAttempt(ctx, tx, e.Schema, m.Key, m.Attempt)
				}
				return tc.fn(ctx, tx, e.Schema, m)
			}, worker.HandlerConfig{Timeout: lateTimeout})
			run(t, e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 1 }))
			waitFor(t, "late to complete", func() bool { s, _, _, _ := e.state(t, "late"); return s == "completed" })

			state, started, failed, _ := e.state(t, "late")
			lastErr := e.lastFailure(t, "late")
			if state != "completed" || started != 2 || failed != 1 {
				t.Fatalf("late: %s after %d attempts, %d failed; want completed by the second, the first charged", state, started, failed)
			}
			if !strings.Contains(lastErr, "timed out after 1s") {
				t.Errorf("late: last error %q, want the timeout", lastErr)
			}
			if prev := <-previous; !strings.Contains(prev, "timed out after 1s") {
				t.Errorf("the retry's PreviousError = %q, want the timeout", prev)
			}
			if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'late/attempt-1'`); n != 0 {
				t.Errorf("the late attempt's write committed (%d rows)", n)
			}
			if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'late/attempt-2'`); n != 1 {
				t.Errorf("the retry's write: %d rows, want 1", n)
			}
			// The message of the same batch is not charged, and its write commits once.
			if s, started, failed, _ := e.state(t, "bystander"); s != "completed" || started != 1 || failed != 0 {
				t.Errorf("bystander: %s after %d attempts, %d failed; want completed at the first", s, started, failed)
			}
			if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key LIKE 'bystander/%'`); n != 1 {
				t.Errorf("bystander's writes: %d rows, want 1", n)
			}
		})
	}
}

// A batch handler call that returns nil after its Timeout is a failed call (a timeout): its writes
// are rolled back and it is bisected as any failure, so that only a message whose own call (alone)
// returned late is charged; the messages that complete in calls that return in time are never
// charged an attempt. Whether the call wrote before the deadline on its ctx, or after it on a ctx of
// its own (context.Background()), the rule is the same: what a late call wrote does not commit.
func TestLateBatchCallIsATimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// call writes msgs' attempts; late: the call returns after its deadline (ignoring ctx).
		call func(ctx context.Context, tx pgx.Tx, schema string, msgs []*worker.Message[credit], late bool) error
	}{
		{"write before the deadline", func(ctx context.Context, tx pgx.Tx, schema string, msgs []*worker.Message[credit], late bool) error {
			for _, m := range msgs {
				if err := applyAttempt(ctx, tx, schema, m.Key, m.Attempt); err != nil {
					return err
				}
			}
			if late {
				time.Sleep(lateSleep) // ignores ctx
			}
			return nil
		}},
		{"write after the deadline on context.Background", func(ctx context.Context, tx pgx.Tx, schema string, msgs []*worker.Message[credit], late bool) error {
			if late {
				time.Sleep(lateSleep) // ignores ctx
				ctx = context.Background()
			}
			for _, m := range msgs {
				if err := applyAttempt(ctx, tx, schema, m.Key, m.Attempt); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.receive(t, "ok-0", "ok-1", "late", "ok-2")
			previous := make(chan string, 1)
			hs := worker.NewHandlers()
			worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
				late := false
				for _, m := range msgs {
					if m.Key == "late" {
						if m.Attempt == 1 {
							late = true
						} else {
							previous <- m.PreviousError
						}
					}
				}
				return tc.call(ctx, tx, e.Schema, msgs, late)
			}, worker.HandlerConfig{Timeout: lateTimeout})
			run(t, batchPool(t, e, nil, hs, func(c *worker.Config) { c.Concurrency = 1 }))
			waitFor(t, "all to complete", func() bool { return e.count(t, "completed") == 4 })

			state, started, failed, _ := e.state(t, "late")
			lastErr := e.lastFailure(t, "late")
			if state != "completed" || started != 2 || failed != 1 || !strings.Contains(lastErr, "timed out after 1s") {
				t.Fatalf("late: %s after %d attempts, %d failed, last error %q; want completed by the second, the first charged a timeout", state, started, failed, lastErr)
			}
			if prev := <-previous; !strings.Contains(prev, "timed out after 1s") {
				t.Errorf("the retry's PreviousError = %q, want the timeout", prev)
			}
			if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'late/attempt-1'`); n != 0 {
				t.Errorf("the late call's write of late committed (%d rows)", n)
			}
			if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'late/attempt-2'`); n != 1 {
				t.Errorf("the retry's write: %d rows, want 1", n)
			}
			for _, k := range []string{"ok-0", "ok-1", "ok-2"} {
				if s, started, failed, _ := e.state(t, k); s != "completed" || started != 1 || failed != 0 {
					t.Errorf("%s: %s after %d attempts, %d failed; want completed at the first, never charged", k, s, started, failed)
				}
				if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key LIKE $1`, k+"/%"); n != 1 {
					t.Errorf("%s's writes: %d rows, want 1", k, n)
				}
			}
		})
	}
}
