package worker_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/worker"
)

// A handler that ends the batch transaction itself (pgx.BeginFunc on tx.Conn(), COMMIT or ROLLBACK)
// breaks the batch's atomicity. The pool notices (no round trip), asks the server whether that
// transaction committed, records exactly what it committed, and makes the culprit dead: nothing runs
// twice and nothing committed is left unrecorded (before, the batch was handed back and rerun in a hot
// loop, repeating the committed effects).
func TestHandlerEndingTheBatchTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		end       func(ctx context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error
		committed bool
	}{
		{"BeginFunc on Conn", func(ctx context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error {
			return pgx.BeginFunc(ctx, tx.Conn(), func(inner pgx.Tx) error {
				_, err := inner.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "effects"}.Sanitize()+" (key, amount) VALUES ($1, 1)", m.Key)
				return err
			})
		}, true},
		{"COMMIT statement", func(ctx context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error {
			if err := applyCredit(ctx, tx, schema, m); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "COMMIT")
			return err
		}, true},
		{"ROLLBACK through Conn", func(ctx context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error {
			if err := applyCredit(ctx, tx, schema, m); err != nil {
				return err
			}
			_, err := tx.Conn().Exec(ctx, "ROLLBACK")
			return err
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.receive(t, "a-1", "b-ender", "c-1") // one batch, run in this order
			var mu sync.Mutex
			calls := map[string]int{}
			hs := worker.NewHandlers()
			worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
				mu.Lock()
				calls[m.Key]++
				mu.Unlock()
				if m.Key == "b-ender" {
					return tc.end(ctx, tx, e.Schema, m)
				}
				return applyCredit(ctx, tx, e.Schema, m)
			})
			run(t, e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 1; c.BatchSize = 10 }))
			waitFor(t, "all finished", func() bool { return e.count(t, "completed")+e.count(t, "dead") == 3 })
			s, started, _, lastErr := e.state(t, "b-ender")
			wantFate := "rolled back"
			if tc.committed {
				wantFate = "committed"
			}
			if s != "dead" || started != 1 || !strings.Contains(lastErr, "ended the batch transaction itself") || !strings.Contains(lastErr, wantFate) {
				t.Fatalf("b-ender: %s after %d attempts, error %q; want dead at once, saying the transaction %s", s, started, lastErr, wantFate)
			}
			for _, k := range []string{"a-1", "c-1"} {
				if s, _, _, _ := e.state(t, k); s != "completed" {
					t.Errorf("%s: %s, want completed", k, s)
				}
			}
			wantEffects := map[string]int64{"a-1": 1, "c-1": 1, "b-ender": 0}
			wantCalls := map[string]int{"a-1": 1, "b-ender": 1, "c-1": 1}
			if tc.committed {
				wantEffects["b-ender"] = 1 // what it wrote before ending the transaction was committed
			} else {
				wantCalls["a-1"] = 2 // rolled back with the batch, handed back, run again
			}
			for k, want := range wantEffects {
				if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = $1`, k); n != want {
					t.Errorf("effects of %s = %d, want %d", k, n, want)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for k, want := range wantCalls {
				if calls[k] != want {
					t.Errorf("handler calls for %s = %d, want %d (all calls %v)", k, calls[k], want, calls)
				}
			}
		})
	}
}
