package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/worker"
)

// Fencing. A worker whose batch was taken over (its batch transaction ended by the server while it was
// frozen, its batch charged by another worker's rescuer and its message claimed again) must change
// nothing, whatever it does next: run its handler on its dead transaction, or, after its batch rolled
// back, record the culprit's failure (FinishBatch, fenced by the message's token, which the charge
// changed) or delete its batch's row (SettleBatch: the charge deleted it). In each test the stale
// worker A acts while worker B holds the fresh claim of the same message, frozen between its claim
// and its handlers: the queue row is still there, so only the token tells the two claims apart.
// (TestFencedAfterLeaseTakeover wakes A after B has completed the message, when the queue row is
// gone.)

// fenceRig is worker A (short lease, never rescues anything itself) and worker B (the rescuer that
// takes A's claim over) on one message, "fenced".
type fenceRig struct {
	e              *env
	a, b           *worker.Pool
	aCalls, bCalls atomic.Int64
	bHeld          chan struct{} // closed when B has claimed the message and is frozen
	releaseB       func()        // lets B go on into its batch transaction (idempotent)
}

// await waits for ch to be closed; the deadline only keeps a broken test from hanging.
func await(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(2 * time.Minute):
		t.Fatalf("gave up waiting for %s", what)
	}
}

// startA starts A and makes sure that whatever A waits on is let go before the test stops it.
func (r *fenceRig) startA(t *testing.T, release chan struct{}) func() {
	t.Helper()
	open := sync.OnceFunc(func() { close(release) })
	run(t, r.a)
	t.Cleanup(open) // runs before run's Stop (cleanups run last-in first-out)
	return open
}

// newFenceRig creates both pools (not started) with A's handler aHandle, and installs the claim hook
// that freezes B at its first claim. If freezeA, A is also frozen at its first claim until releaseA is
// closed (aFrozen is closed when it is). logger, if not nil, is A's logger.
func newFenceRig(t *testing.T, aHandle func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error,
	logger *slog.Logger, aFrozen, releaseA chan struct{}) *fenceRig {
	t.Helper()
	held := make(chan struct{})
	r := &fenceRig{e: newEnv(t), bHeld: make(chan struct{})}
	r.releaseB = sync.OnceFunc(func() { close(held) })
	r.e.receive(t, "fenced")
	hsA := worker.NewHandlers()
	worker.Handle(hsA, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		r.aCalls.Add(1)
		return aHandle(ctx, tx, m)
	})
	hsB := worker.NewHandlers()
	worker.Handle(hsB, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		r.bCalls.Add(1)
		return applyCredit(ctx, tx, r.e.Schema, m)
	})
	storeA := r.e.Store()
	storeA.Logger = logger // nil: slog.Default()
	r.a = r.e.poolOn(t, storeA, hsA, func(c *worker.Config) {
		c.Owner, c.Concurrency = "worker-A", 1
		worker.NoListen(c)
		c.Lease, c.Timeout = 500*time.Millisecond, 200*time.Millisecond
		c.PollInterval = time.Hour // A's rescuer looks once, at Start, when nothing is suspect yet
	})
	r.b = r.e.pool(t, hsB, func(c *worker.Config) { c.Owner = "worker-B"; worker.NoListen(c) })
	var aOnce, bOnce sync.Once
	if aFrozen != nil {
		worker.SetClaimHook(r.a, func(*worker.Pool, []string) {
			aOnce.Do(func() { close(aFrozen); <-releaseA })
		})
	}
	worker.SetClaimHook(r.b, func(*worker.Pool, []string) {
		bOnce.Do(func() { close(r.bHeld); <-held })
	})
	return r
}

// snapshot is everything a worker could change about the message: its inbox row, its queue row and
// the batch rows that list it.
func (r *fenceRig) snapshot(t *testing.T) string {
	t.Helper()
	var s string
	err := r.e.Pool.QueryRow(context.Background(), r.e.SQL(`SELECT row(m.state, m.owner, m.token,
		m.attempts_started, m.attempts_failed, m.last_error, m.lease_until, m.next_run_at, m.completed_at,
		m.expires_at, m.result, q.id, q.alone, q.token, q.run_at, q.attempts_started, q.isolate, q.group_size,
		q.group_crashes, (SELECT array_agg(b.id ORDER BY b.id) FROM {schema}.inbox_batch b
			WHERE b.consumer = m.consumer AND m.id = ANY (b.ids)))::text
		FROM {schema}.inbox m LEFT JOIN {schema}.inbox_queue q USING (id, consumer)
		WHERE m.consumer = 'ledger' AND m.key = 'fenced'`)).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// token returns the message's token (of its queue row while queued) and the owner of the batch that
// lists it (its claim), and its queue row's token and whether a batch lists it.
func (r *fenceRig) token(t *testing.T) (token int64, owner string, qToken int64, qClaimed bool) {
	t.Helper()
	err := r.e.Pool.QueryRow(context.Background(), r.e.SQL(`SELECT coalesce(q.token, m.token), coalesce(b.owner, m.owner, ''),
		coalesce(q.token, -1), b.id IS NOT NULL
		FROM {schema}.inbox m LEFT JOIN {schema}.inbox_queue q USING (id, consumer)
		LEFT JOIN LATERAL (SELECT b.id, b.owner FROM {schema}.inbox_batch b
			WHERE b.consumer = m.consumer AND m.id = ANY (b.ids) ORDER BY b.id DESC LIMIT 1) b ON true
		WHERE m.consumer = 'ledger' AND m.key = 'fenced'`)).Scan(&token, &owner, &qToken, &qClaimed)
	if err != nil {
		t.Fatal(err)
	}
	return
}

// takeover starts B and waits until it holds its fresh claim (frozen); it returns the snapshot then.
func (r *fenceRig) takeover(t *testing.T, tokenA int64) string {
	t.Helper()
	run(t, r.b)
	t.Cleanup(r.releaseB)
	await(t, "B's claim", r.bHeld)
	tok, owner, qTok, claimed := r.token(t)
	if owner != "worker-B" || tok <= tokenA || qTok != tok || !claimed {
		t.Fatalf("after B's takeover: owner %q, token %d (A's was %d), queue token %d, claimed %v", owner, tok, tokenA, qTok, claimed)
	}
	return r.snapshot(t)
}

// staleDone stops A, whose stale work is then over, and checks that it changed nothing of B's claim.
func (r *fenceRig) staleDone(t *testing.T, held string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // only keeps a hang from lasting
	defer cancel()
	if err := r.a.Stop(ctx); err != nil {
		t.Fatalf("stopping A: %v", err)
	}
	if now := r.snapshot(t); now != held {
		t.Errorf("worker A, fenced out, changed B's claim:\n  B's claim: %s\n  after A:   %s", held, now)
	}
	if n := r.e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 0 {
		t.Errorf("effects = %d after A's stale batch, want 0", n)
	}
}

// finishB lets B run its claim and checks that the message completed exactly once, by B, charged the
// two attempts (A's, charged with its batch, and B's) and no failure.
func (r *fenceRig) finishB(t *testing.T) {
	t.Helper()
	r.releaseB()
	waitFor(t, "B to complete the message", func() bool { return r.e.count(t, "completed") == 1 })
	if n := r.e.Count(t, `SELECT count(*) FROM {schema}.effects`); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
	if n := r.bCalls.Load(); n != 1 {
		t.Errorf("B's handler ran %d times, want 1", n)
	}
	if s, started, failed, le := r.e.state(t, "fenced"); s != "completed" || started != 2 || failed != 0 || le != "" {
		t.Errorf("final: %s, attempts started %d, failed %d, last error %q; want completed, 2, 0, none", s, started, failed, le)
	}
}

// A worker frozen after its claim, past its Lease, wakes up while another worker holds a fresh claim
// of the same message: the server ended its idle batch transaction at the Lease (its locks went with
// it, its batch was charged and taken over), so whatever its handler does then commits nothing, and
// the worker changes nothing; the other worker then completes the message once.
func TestFencedStaleClaimWhileTakeoverHeld(t *testing.T) {
	t.Parallel()
	aFrozen, releaseA := make(chan struct{}), make(chan struct{})
	var r *fenceRig
	r = newFenceRig(t, func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, r.e.Schema, m)
	}, nil, aFrozen, releaseA)
	thawA := r.startA(t, releaseA)
	await(t, "A's claim", aFrozen) // A holds a committed claim, but no lock, and its lease runs out
	tokenA, owner, _, _ := r.token(t)
	if owner != "worker-A" {
		t.Fatalf("owner %q after A's claim", owner)
	}
	held := r.takeover(t, tokenA)
	thawA()
	r.staleDone(t, held)
	if n := r.aCalls.Load(); n > 1 {
		t.Errorf("A's handler ran %d times on its stale claim, want at most once (on its ended transaction)", n)
	}
	r.finishB(t)
}

// pauseLogger is a logger that, at the first record whose message contains match, closes paused and
// blocks until resume is closed. The pool logs "batch rolled back" after its batch transaction has
// rolled back and before it records the culprit's failure and releases the other claims, outside that
// transaction: pausing there lets another worker take the claims over first.
func pauseLogger(match string, paused, resume chan struct{}) *slog.Logger {
	return slog.New(&pauseHandler{match: match, paused: paused, resume: resume, once: &sync.Once{}})
}

type pauseHandler struct {
	match          string
	paused, resume chan struct{}
	once           *sync.Once
}

func (h *pauseHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *pauseHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *pauseHandler) WithGroup(string) slog.Handler            { return h }
func (h *pauseHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.once.Do(func() { close(h.paused); <-h.resume })
	}
	return nil
}

// terminate ends the handler's own database session: the batch transaction cannot go on.
func terminate(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
	return err
}

// A handler breaks its batch transaction (its session is terminated) and fails: the batch rolls back,
// and the worker records that failure (FinishBatch) outside the transaction, with its token. If
// another worker claimed the message in between, the failure is not recorded: the other worker's claim
// is untouched, and it completes the message once.
func TestFencedCulpritFailureAfterTakeover(t *testing.T) {
	t.Parallel()
	paused, resume := make(chan struct{}), make(chan struct{})
	var r *fenceRig
	r = newFenceRig(t, func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if err := applyCredit(ctx, tx, r.e.Schema, m); err != nil {
			return err
		}
		return terminate(ctx, tx) // the culprit: its failure is recorded after the rollback
	}, pauseLogger("rolled back", paused, resume), nil, nil)
	resumeA := r.startA(t, resume)
	await(t, "A's rollback", paused) // A's batch rolled back; A has not recorded anything yet
	tokenA, owner, _, _ := r.token(t)
	if owner != "worker-A" {
		t.Fatalf("owner %q after A's claim", owner)
	}
	held := r.takeover(t, tokenA)
	resumeA()
	r.staleDone(t, held)
	if n := r.aCalls.Load(); n != 1 {
		t.Errorf("A's handler ran %d times, want 1", n)
	}
	r.finishB(t)
}

// A handler breaks its batch transaction (its session is terminated) but returns nil: the batch rolls
// back with no culprit, and the worker hands the claim back (ReleaseClaims) outside the transaction,
// with its token. If another worker claimed the message in between, nothing is handed back: the other
// worker's claim is untouched, and it completes the message once.
func TestFencedReleaseAfterTakeover(t *testing.T) {
	t.Parallel()
	paused, resume := make(chan struct{}), make(chan struct{})
	var r *fenceRig
	r = newFenceRig(t, func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if err := applyCredit(ctx, tx, r.e.Schema, m); err != nil {
			return err
		}
		_ = terminate(ctx, tx)
		return nil // ignores the error: the batch fails after the handler, so its claim is released
	}, pauseLogger("rolled back", paused, resume), nil, nil)
	resumeA := r.startA(t, resume)
	await(t, "A's rollback", paused)
	tokenA, owner, _, _ := r.token(t)
	if owner != "worker-A" {
		t.Fatalf("owner %q after A's claim", owner)
	}
	held := r.takeover(t, tokenA)
	resumeA()
	r.staleDone(t, held)
	if n := r.aCalls.Load(); n != 1 {
		t.Errorf("A's handler ran %d times, want 1", n)
	}
	r.finishB(t)
}
