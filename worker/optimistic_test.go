package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txinboxtest/txtest"
	"github.com/txinbox/txinbox/worker"
)

// callCounter counts the calls of a handler per message key.
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
}

func (c *callCounter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// handlerTimeout is the handlers' Timeout in a case of TestOptimisticRunChargesTheCulpritAlone: short
// for the late return only, which must outlive it; long for the others, whose failing statement
// must not be cut off by it on a slow server (Citus under -race took more than 300ms).
func handlerTimeout(name string) time.Duration {
	if name == "late return" {
		return 300 * time.Millisecond
	}
	return 30 * time.Second
}

// A batch of single-handler messages in which one message (k, in the middle) fails, in each way a
// call can fail: k alone is charged (once, with its outcome as when each message ran in a savepoint
// of its own) and called once; every other message completes with its effect exactly once and no
// attempt charged. The messages before k ran twice (their first writes rolled back with the
// optimistic run), those after it once. A message whose statement failed but that recovered through
// a nested savepoint and returned nil is no culprit: it completes too, its effect once.
func TestOptimisticRunChargesTheCulpritAlone(t *testing.T) {
	t.Parallel()
	timeout := handlerTimeout("late return")
	for _, tc := range []struct {
		name   string
		fail   func(ctx context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error
		want   string // k's state ("completed": not a culprit)
		reason string // in k's last error
	}{
		{"error", func(context.Context, pgx.Tx, string, *worker.Message[credit]) error {
			return errors.New("rejected after writing")
		}, "dead", "rejected after writing"},
		{"panic", func(context.Context, pgx.Tx, string, *worker.Message[credit]) error {
			panic("boom after writing")
		}, "dead", "boom after writing"},
		{"late return", func(context.Context, pgx.Tx, string, *worker.Message[credit]) error {
			time.Sleep(timeout + 200*time.Millisecond) // ignores ctx, then returns nil
			return nil
		}, "dead", "timed out after"},
		{"ignored failed statement", func(ctx context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error {
			_ = applyCredit(ctx, tx, schema, m) // its key again: a unique violation, ignored
			return nil
		}, "dead", "left aborted"},
		{"recovered failed statement", func(ctx context.Context, tx pgx.Tx, schema string, m *worker.Message[credit]) error {
			nested, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if err := applyCredit(ctx, nested, schema, m); err == nil {
				return errors.New("the second insert of the key succeeded")
			}
			return nested.Rollback(ctx)
		}, "completed", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			msgs := keys("m", 7)
			const k = "m-3"
			e.receive(t, msgs...)
			calls := &callCounter{}
			hs := worker.NewHandlers()
			worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
				calls.add(m.Key)
				if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
					return err
				}
				if m.Key == k {
					return tc.fail(ctx, tx, e.Schema, m)
				}
				return nil
			}, worker.HandlerConfig{MaxAttempts: 1, Timeout: handlerTimeout(tc.name)})
			run(t, e.pool(t, hs, func(c *worker.Config) { c.Concurrency, c.BatchSize = 1, 16 }))
			waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })

			for i, key := range msgs {
				s, started, failed, le := e.state(t, key)
				n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = $1`, key)
				if key == k {
					if s != tc.want || !strings.Contains(le, tc.reason) || started != 1 {
						t.Errorf("%s (k): %s after %d attempts (%q), want %s with %q after 1", key, s, started, le, tc.want, tc.reason)
					}
					if tc.want == "completed" {
						if failed != 0 || n != 1 {
							t.Errorf("%s (k, recovered): %d attempts failed, %d effects; want 0 and 1", key, failed, n)
						}
						continue
					}
					if failed != 1 || n != 0 {
						t.Errorf("%s (k): %d attempts failed, %d effects; want 1 and 0 (its writes rolled back)", key, failed, n)
					}
					if c := calls.get(key); c != 1 {
						t.Errorf("%s (k): called %d times, want once (the culprit is not called again)", key, c)
					}
					continue
				}
				if s != "completed" || started != 1 || failed != 0 {
					t.Errorf("%s: %s after %d attempts, %d failed (%q); want completed in 1, none failed", key, s, started, failed, le)
				}
				if n != 1 {
					t.Errorf("%s: %d effects, want exactly 1", key, n)
				}
				if tc.want == "completed" {
					continue
				}
				want := 1
				if i < 3 {
					want = 2 // before k: the optimistic call, rolled back, and the careful one
				}
				if c := calls.get(key); c != want {
					t.Errorf("%s: called %d times, want %d", key, c, want)
				}
			}
		})
	}
}

// savepointCounter is a pgx tracer that counts the savepoint statements sent, alone or in a
// pipeline.
type savepointCounter struct {
	savepoint, rollbackTo atomic.Int64
}

func (s *savepointCounter) count(sql string) {
	sql = strings.ToUpper(strings.TrimSpace(sql))
	switch {
	case strings.HasPrefix(sql, "SAVEPOINT"):
		s.savepoint.Add(1)
	case strings.HasPrefix(sql, "ROLLBACK TO"):
		s.rollbackTo.Add(1)
	}
}

func (s *savepointCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.count(d.SQL)
	return ctx
}
func (s *savepointCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *savepointCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (s *savepointCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.count(d.SQL)
}
func (s *savepointCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

var (
	_ pgx.QueryTracer = (*savepointCounter)(nil)
	_ pgx.BatchTracer = (*savepointCounter)(nil)
)

// A batch of single-handler messages that all complete runs them in one savepoint: one SAVEPOINT
// statement for the batch, none per message, and no rollback.
func TestOptimisticRunOneSavepoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	msgs := keys("m", 12)
	e.receive(t, msgs...)
	cfg, err := pgxpool.ParseConfig(e.URL)
	if err != nil {
		t.Fatal(err)
	}
	sc := &savepointCounter{}
	cfg.ConnConfig.Tracer = sc
	db, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	store := e.Store()
	store.DB = db
	run(t, e.poolOn(t, store, hs, func(c *worker.Config) { c.Concurrency, c.BatchSize = 1, 16 }))
	waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })
	if n := e.count(t, "completed"); n != int64(len(msgs)) {
		t.Fatalf("%d completed, want %d", n, len(msgs))
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != int64(len(msgs)) {
		t.Errorf("%d effects, want %d", n, len(msgs))
	}
	if n := sc.savepoint.Load(); n != 1 {
		t.Errorf("%d SAVEPOINT statements for one batch of %d messages that all completed, want 1 (one for the run)", n, len(msgs))
	}
	if n := sc.rollbackTo.Load(); n != 0 {
		t.Errorf("%d ROLLBACK TO SAVEPOINT statements, want none", n)
	}
}

// Every method of the handler's transaction in the optimistic run: each message uses one method
// first (one uses them all), and the last message of the batch fails. Every write of the optimistic
// run is rolled back, every message but the last runs again in its own savepoint, and its writes
// are kept exactly once; without the failure, each message runs once.
func TestHandlerTxEveryMethodOptimistic(t *testing.T) {
	t.Parallel()
	for _, failLast := range []bool{false, true} {
		t.Run(fmt.Sprintf("failLast=%v", failLast), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			names := txtest.Names(txMethods)
			var msgs []string
			for _, name := range names {
				msgs = append(msgs, "ok-"+name)
			}
			msgs = append(msgs, "ok-all")
			if failLast {
				msgs = append(msgs, "z-fails")
			}
			e.receive(t, msgs...)

			lo := &txtest.LargeObjects{}
			calls := &callCounter{}
			hs := worker.NewHandlers()
			worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
				calls.add(m.Key)
				if m.Key == "z-fails" {
					if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
						return err
					}
					return txinbox.Permanent(errors.New("rejected after writing"))
				}
				_, method, _ := strings.Cut(m.Key, "-")
				use := []string{method}
				if method == "all" {
					use = names
				}
				for _, name := range use {
					if err := txMethods[name](ctx, tx, e.Schema, m.Key+"/"+name, lo); err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
				}
				return nil
			}, worker.HandlerConfig{MaxAttempts: 1})
			run(t, e.pool(t, hs, func(c *worker.Config) { c.Concurrency, c.BatchSize = 1, 64 }))
			waitFor(t, "settled", func() bool { return e.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`) == 0 })

			wantCalls := 1
			if failLast {
				wantCalls = 2
				if s, _, _, le := e.state(t, "z-fails"); s != "dead" || calls.get("z-fails") != 1 {
					t.Errorf("z-fails: %s (%s) after %d calls, want dead after 1", s, le, calls.get("z-fails"))
				}
				if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'z-fails'`); n != 0 {
					t.Errorf("z-fails: %d effects, want 0", n)
				}
			}
			for _, k := range msgs {
				if k == "z-fails" {
					continue
				}
				if s, started, _, le := e.state(t, k); s != "completed" || started != 1 {
					t.Errorf("%s: %s after %d attempts (%s), want completed in 1", k, s, started, le)
				}
				if c := calls.get(k); c != wantCalls {
					t.Errorf("%s: called %d times, want %d", k, c, wantCalls)
				}
				_, method, _ := strings.Cut(k, "-")
				use := []string{method}
				if method == "all" {
					use = names
				}
				for _, name := range use {
					key := k + "/" + name
					if name == "LargeObjects" {
						lo.Check(t, e.Pool, key, true)
						continue
					}
					if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = $1`, key); n != 1 {
						t.Errorf("%s: %d effects, want exactly 1", key, n)
					}
				}
			}
		})
	}
}
