package engine_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txinbox/txinbox/internal/engine"
)

// fakeRunner is a Runner without a database: claim says what each Claim finds, run what Run does.
type fakeRunner struct {
	claims *atomic.Int64
	claim  func() engine.Outcome
	run    func()
}

func (f *fakeRunner) Claim(context.Context) (engine.Outcome, error) {
	f.claims.Add(1)
	return f.claim(), nil
}
func (f *fakeRunner) Run(context.Context) {
	if f.run != nil {
		f.run()
	}
}
func (f *fakeRunner) Rest(context.Context) {}
func (f *fakeRunner) Done(context.Context) {}

// startFake starts an engine of 4 runners that poll every hour when idle (so that only wake-ups and
// the fast polling while hot make them claim), hot for hotWindow after activity.
func startFake(t *testing.T, hotWindow time.Duration, claims *atomic.Int64, claim func() engine.Outcome, run func()) *engine.Engine {
	t.Helper()
	return startEngine(t, engine.Config{Runners: 4, PollInterval: time.Hour, HotWindow: hotWindow},
		func() engine.Runner { return &fakeRunner{claims: claims, claim: claim, run: run} })
}

// startEngine starts an engine of cfg (logging nowhere) whose runners newRunner makes, and stops it
// when the test ends.
func startEngine(t *testing.T, cfg engine.Config, newRunner func() engine.Runner) *engine.Engine {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	e := engine.New(cfg)
	if err := e.Start(context.Background(), engine.Hooks{NewRunner: newRunner}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	})
	return e
}

// At a low rate every claim finds a partial batch. After one, the queue was empty when it ran: the
// engine claims again HotPoll after it began (one runner, the poller), not at once after every batch
// by every runner. Every claim here is partial, for 300ms: at most one claim per HotPoll (plus one in
// flight, and each runner's first claim at start), where claiming at once after each batch made
// millions. (An upper bound only: a slow machine claims less, never more.)
func TestPartialBatchesClaimOncePerHotPoll(t *testing.T) {
	t.Parallel()
	var claims atomic.Int64
	e := startFake(t, time.Hour, &claims, func() engine.Outcome { return engine.Partial }, nil)
	e.Wake()
	const window = 300 * time.Millisecond
	time.Sleep(window)
	if got, most := claims.Load(), int64(window/engine.HotPoll)+1+4; got > most {
		t.Fatalf("%d claims in %v of partial batches: want at most %d (one per HotPoll, %v)", got, window, most, engine.HotPoll)
	}
	if claims.Load() < 2 {
		t.Fatalf("%d claims: the poller must keep claiming while the engine is hot", claims.Load())
	}
}

// A partial batch whose run lasts longer than HotPoll hands polling over: another runner claims
// while it runs, so that new work is found while long handlers run. The runners' first claims (at
// start) find nothing; then one Wake, one partial batch whose run lasts until another claim comes.
func TestLongPartialRunHandsPollingOver(t *testing.T) {
	t.Parallel()
	var claims atomic.Int64
	var armed, taken atomic.Bool
	release := make(chan struct{})
	var once sync.Once
	e := startFake(t, time.Hour, &claims, func() engine.Outcome {
		if armed.Load() && taken.CompareAndSwap(false, true) {
			return engine.Partial
		}
		return engine.Idle
	}, func() { <-release })
	defer once.Do(func() { close(release) })
	waitClaims(t, &claims, 4) // each runner's first claim, then every runner sleeps PollInterval
	armed.Store(true)
	e.Wake()
	waitClaims(t, &claims, 5) // the partial batch, now running
	waitClaims(t, &claims, 6) // nobody else would claim within PollInterval (an hour) without the hand-over
	once.Do(func() { close(release) })
}

// waitClaims waits until claims reaches n (a correctness wait: the deadline only keeps a broken
// test from hanging).
func waitClaims(t *testing.T, claims *atomic.Int64, n int64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for claims.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d claims, waited for %d", claims.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A Wake wakes one runner, not all of them: it claims, and only a full batch wakes the next. Here
// the engine is never hot (no fast polling) and every claim finds nothing: one Wake, one claim.
func TestWakeWakesOneRunner(t *testing.T) {
	t.Parallel()
	var claims atomic.Int64
	e := startFake(t, -1, &claims, func() engine.Outcome { return engine.Idle }, nil)
	waitClaims(t, &claims, 4) // each runner's first claim, at start
	time.Sleep(50 * time.Millisecond)
	before := claims.Load()
	e.Wake()
	time.Sleep(200 * time.Millisecond)
	if got := claims.Load() - before; got != 1 {
		t.Fatalf("one Wake of 4 idle runners made %d claims, want 1", got)
	}
}

// Full batches wake the next runner: one Wake into a backlog gets every runner claiming. The
// runners' first claims (at start) find nothing; then one Wake, and every claim finds a full batch,
// whose run lasts until the test ends.
func TestFullBatchesWakeTheNextRunner(t *testing.T) {
	t.Parallel()
	var claims, running atomic.Int64
	var armed atomic.Bool
	release := make(chan struct{})
	var once sync.Once
	e := startFake(t, -1, &claims, func() engine.Outcome {
		if armed.Load() {
			return engine.Full
		}
		return engine.Idle
	}, func() {
		running.Add(1)
		<-release
	})
	defer once.Do(func() { close(release) })
	waitClaims(t, &claims, 4)
	armed.Store(true)
	e.Wake()
	deadline := time.Now().Add(2 * time.Minute)
	for running.Load() < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 4 runners ran full batches after one Wake: a full batch must wake the next runner", running.Load())
		}
		time.Sleep(time.Millisecond)
	}
	once.Do(func() { close(release) })
}
