package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
	"github.com/txinbox/txinbox/worker"
)

func inboxMsg(key, kind string) inbox.Message {
	return inbox.Message{Consumer: "ledger", Key: key, Kind: kind, Payload: []byte(`{"amount": 1}`)}
}

// handledOf returns the committed outcomes a pool's Tracer rec was told of (txinbox.OpHandled) for the
// messages of one kind, in the order they were told.
func handledOf(rec *tracerec.Recorder, kind string) []tracerec.Op {
	var out []tracerec.Op
	for _, op := range rec.Ops(txinbox.OpHandled) {
		if op.Start.Messages[0].Kind == kind {
			out = append(out, op)
		}
	}
	return out
}

// A handler's Timeout, shorter than the pool's, ends its attempts: each is recorded as a failure
// (reason timeout, the deadline in last_error), its effect rolled back, and the message retried until
// the handler's MaxAttempts, then dead. Two ways of waiting on ctx: in Go (select) and in the database
// (a statement cancelled by ctx, which also costs the batch its connection).
func TestHandlerTimeoutEndsAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		wait func(ctx context.Context, tx pgx.Tx) error
	}{
		{"select on ctx", func(ctx context.Context, _ pgx.Tx) error {
			<-ctx.Done()
			return ctx.Err()
		}},
		{"statement cancelled by ctx", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SELECT pg_sleep(600)")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.receive(t, "slow", "bystander")
			const handlerTimeout = 300 * time.Millisecond
			var calls atomic.Int64
			var deadlineOK atomic.Bool
			deadlineOK.Store(true)
			hs := worker.NewHandlers()
			worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
				if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
					return err
				}
				if m.Key != "slow" {
					return nil
				}
				calls.Add(1)
				// The handler's ctx carries the handler's deadline, not the pool's (a minute).
				if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > handlerTimeout {
					deadlineOK.Store(false)
				}
				return tc.wait(ctx, tx)
			}, worker.HandlerConfig{Timeout: handlerTimeout, MaxAttempts: 2})
			rec := &tracerec.Recorder{}
			p := e.with(rec).pool(t, hs, func(c *worker.Config) {
				c.Timeout, c.Lease, c.MaxAttempts = time.Minute, 2*time.Minute, 10
			})
			run(t, p)
			waitFor(t, "slow to be dead", func() bool { s, _, _, _ := e.state(t, "slow"); return s == "dead" })

			state, started, failed, lastErr := e.state(t, "slow")
			if state != "dead" || started != 2 || failed != 2 || calls.Load() != 2 {
				t.Fatalf("slow: state %s, started %d, failed %d, handler calls %d; want dead after 2 of 2", state, started, failed, calls.Load())
			}
			if !strings.Contains(lastErr, "timed out after 300ms") {
				t.Errorf("last_error = %q, want the handler timeout (300ms)", lastErr)
			}
			if tc.name == "select on ctx" && !strings.Contains(lastErr, context.DeadlineExceeded.Error()) {
				t.Errorf("last_error = %q, want %q", lastErr, context.DeadlineExceeded)
			}
			if !deadlineOK.Load() {
				t.Error("the handler's ctx deadline was not the handler's Timeout")
			}
			failures := func() (got []string) {
				for _, op := range handledOf(rec, "credit") {
					if op.Start.Attempt > 0 && op.End.Outcome != "completed" {
						got = append(got, string(op.End.Outcome)+"/"+op.End.Reason)
					}
				}
				return got
			}
			// The Tracer hears of an attempt after its commit: wait for the second report.
			waitFor(t, "both failed attempts reported", func() bool { return len(failures()) >= 2 })
			if got := failures(); strings.Join(got, " ") != "retry/timeout dead/timeout" {
				t.Errorf("failed attempts reported %v, want [retry/timeout dead/timeout]", got)
			}
			// The slow message's writes were rolled back each time; the bystander is unharmed.
			if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'slow'`); n != 0 {
				t.Errorf("effects of the timed-out message: %d", n)
			}
			waitFor(t, "bystander", func() bool { s, _, _, _ := e.state(t, "bystander"); return s == "completed" })
			if s, started, failed, _ := e.state(t, "bystander"); started != 1 || failed != 0 {
				t.Errorf("bystander: %s, started %d, failed %d; want one attempt, not charged for the other's timeout", s, started, failed)
			}
			if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = 'bystander'`); n != 1 {
				t.Errorf("bystander effects = %d, want 1", n)
			}
		})
	}
}

// A handler's Backoff wins over the pool's; kinds without one use the pool's. The delay is read from
// the database: the queue row's run_at minus the time the failure was recorded (FinishBatch's start),
// which lies between the handler's transaction's start (read by the handler) and the server's time
// once the test saw the failure.
func TestHandlerBackoffOverridesPool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Fail once, completing only after the test ends: the retries are an hour away.
	msgs := []string{"own", "pools"}
	for _, k := range msgs {
		kind := map[string]string{"own": "credit", "pools": "other"}[k]
		if _, err := e.client.Receive(context.Background(), inboxMsg(k, kind)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	txNow := map[string]time.Time{}
	failing := func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		var now time.Time
		if err := tx.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
			return err
		}
		mu.Lock()
		txNow[m.Key] = now
		mu.Unlock()
		if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
			return err
		}
		return errors.New("not yet")
	}
	hs := worker.NewHandlers()
	own := txinbox.Exponential{Base: 20 * time.Second, Max: 20 * time.Second, Jitter: 0.25} // 15s to 25s
	worker.Handle(hs, "credit", failing, worker.HandlerConfig{Backoff: own})
	worker.Handle(hs, "other", failing)
	p := e.pool(t, hs, func(c *worker.Config) {
		c.Backoff = txinbox.Exponential{Base: time.Hour, Max: time.Hour, Jitter: -1} // exactly 1h
	})
	run(t, p)
	waitFor(t, "both failures", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE attempts_failed = 1 AND state = 'pending'`) == 2
	})
	// The delay counts from the failure's record (FinishBatch's start), which came after the handler's
	// transaction began and before the test saw the failure: run_at minus the delay lies between.
	var seen time.Time
	if err := e.Pool.QueryRow(context.Background(), "SELECT now()").Scan(&seen); err != nil {
		t.Fatal(err)
	}
	delay := func(key string) (lo, hi time.Duration) {
		t.Helper()
		var runAt, nextRunAt time.Time
		var isolated bool
		if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT q.run_at, q.isolate > 0, m.next_run_at
			FROM {schema}.inbox m JOIN {schema}.inbox_queue q USING (id, consumer) WHERE m.key = $1`), key).Scan(&runAt, &isolated, &nextRunAt); err != nil {
			t.Fatal(err)
		}
		if isolated || !runAt.Equal(nextRunAt) {
			t.Fatalf("%s: queue row isolated=%v run_at %v, message next_run_at %v", key, isolated, runAt, nextRunAt)
		}
		mu.Lock()
		defer mu.Unlock()
		return runAt.Sub(seen), runAt.Sub(txNow[key])
	}
	if lo, hi := delay("own"); hi < 15*time.Second || lo > 25*time.Second {
		t.Errorf("handler backoff: run_at - failure in [%v, %v], want 15s to 25s (the handler's), not the pool's 1h", lo, hi)
	}
	if lo, hi := delay("pools"); lo > time.Hour || hi < time.Hour {
		t.Errorf("pool backoff: run_at - failure in [%v, %v], want 1h", lo, hi)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 0 {
		t.Errorf("effects of failed attempts: %d", n)
	}
}

// A pool without a Backoff uses the zero txinbox.Exponential: 1s, 2s, 4s ... capped at 10 minutes,
// ±20% (TestExponentialBackoff checks those delays).
func TestDefaultBackoffIsExponential(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(context.Context, pgx.Tx, *worker.Message[credit]) error { return nil })
	p, err := worker.New(e.Store(), worker.Config{Consumer: "ledger", Handlers: hs})
	if err != nil {
		t.Fatal(err)
	}
	if b := worker.BackoffOf(p); b != (txinbox.Exponential{}) {
		t.Fatalf("Backoff after defaults = %#v, want txinbox.Exponential{}", b)
	}
}

// A handler whose first statement goes out after its deadline, or whose deadline passes while that
// statement (pipelined with the message's savepoint) is under way, fails its attempt as a timeout, as
// any other handler that outruns its Timeout: it is charged, retried until MaxAttempts, then dead. Its
// batch-mate completes once, never charged. (Its statement's failure was taken for the connection's
// before the message ran: the batch rolled back, no one was charged, and the message ran again at
// once, forever.) Both kinds of handler; the statement under way is held back by the test's
// connections (stallingConn) until the deadline has passed.
func TestStatementAfterDeadlineIsTheHandlersTimeout(t *testing.T) {
	t.Parallel()
	const slow, handlerTimeout = "slow-past-deadline", 300 * time.Millisecond
	for _, batch := range []bool{false, true} {
		for _, underWay := range []bool{false, true} {
			t.Run(fmt.Sprintf("batch=%v/under way=%v", batch, underWay), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				e.receive(t, slow, "bystander")
				stall := &stallingConns{match: []byte(slow), delay: 3 * handlerTimeout}
				first := func(ctx context.Context, key string) {
					if key != slow {
						return
					}
					if underWay {
						stall.armed.Store(true)
					} else {
						<-ctx.Done()
					}
				}
				var calls atomic.Int64
				hs := worker.NewHandlers()
				cfg := worker.HandlerConfig{Timeout: handlerTimeout, MaxAttempts: 2}
				if batch {
					worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
						calls.Add(1)
						for _, m := range msgs {
							first(ctx, m.Key)
						}
						return applyCredits(ctx, tx, e.Schema, msgs)
					}, cfg)
				} else {
					worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
						calls.Add(1)
						first(ctx, m.Key)
						return applyCredit(ctx, tx, e.Schema, m)
					}, cfg)
				}
				p := batchPool(t, e, stall.pool(t, e), hs, func(c *worker.Config) {
					c.Lease, c.MaxAttempts = 2*time.Second, 10
				})
				run(t, p)
				waitFor(t, slow+" to be dead", func() bool {
					s, _, _, _ := e.state(t, slow)
					return s == "dead" || calls.Load() > 50
				})
				// A call of both messages that costs the transaction cannot tell them apart: they are
				// held and run alone, that call's attempt started but charged to no one ("Crash
				// recovery" in the package documentation).
				wantFailed, bystanderStarted := 2, 1
				if batch && underWay {
					wantFailed, bystanderStarted = 1, 2
				}
				state, started, failed, lastErr := e.state(t, slow)
				if state != "dead" || started != 2 || failed != wantFailed || !strings.Contains(lastErr, "timed out after 300ms") {
					t.Fatalf("%s: %s, %d started, %d failed, error %q after %d handler calls; want dead after 2 attempts, %d failed, the last a timeout",
						slow, state, started, failed, lastErr, calls.Load(), wantFailed)
				}
				waitFor(t, "bystander", func() bool { s, _, _, _ := e.state(t, "bystander"); return s == "completed" })
				if s, started, failed, _ := e.state(t, "bystander"); started != bystanderStarted || failed != 0 {
					t.Errorf("bystander: %s, %d started, %d failed; want %d started, never charged", s, started, failed, bystanderStarted)
				}
				if n := e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 1 {
					t.Errorf("effects = %d, want the bystander's only", n)
				}
			})
		}
	}
}

// stallingConns holds back for delay, once armed, the next write that holds match on any connection
// of its pool.
type stallingConns struct {
	match []byte
	delay time.Duration
	armed atomic.Bool
}

// pool returns a pool on e's database whose connections stall as s says.
func (s *stallingConns) pool(t *testing.T, e *env) *pgxpool.Pool {
	t.Helper()
	cfg := e.Pool.Config()
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &stallingConn{Conn: c, s: s}, nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

type stallingConn struct {
	net.Conn
	s *stallingConns
}

func (c *stallingConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.s.match) && c.s.armed.CompareAndSwap(true, false) {
		time.Sleep(c.s.delay)
	}
	return c.Conn.Write(b)
}
