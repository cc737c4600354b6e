// Package engine is the one claim → run → finish engine that txinbox's background workers run on:
// the worker pool (package worker) and the outbox relay (package outbox). It owns what they share:
// the runners' loop (claim at once after a full batch, one poller claiming every HotPoll while hot
// and batches are partial, sleep PollInterval when idle, back off after a failed claim), wake-ups
// (Wake, and LISTEN on a connection of its own, reopened with backoff, with a check that
// notifications really come back: a pooler in transaction mode swallows them), one Start/Stop with
// the semantics of txinbox.Service, and what binds a user to its Store ([Base]: the Store's Logger
// and statements, and the check before Start). Its users keep what is theirs: the claim, the run and
// the finish of a batch ([Runner]), and what Stop does at its deadline.
package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures an Engine. Every duration is its user's, defaults applied.
type Config struct {
	// Runners is the number of runner goroutines, each claiming and running batches in turn.
	Runners int
	// PollInterval is how long an idle runner sleeps when nothing wakes it.
	PollInterval time.Duration
	// HotWindow is how long the engine stays hot after its last activity, during which one runner
	// claims every HotPoll (PollInterval if shorter); negative: never.
	HotWindow time.Duration
	// Listen says where notifications wake the runners; its zero value: nowhere (polling only).
	Listen Listen
	// Logger receives the engine's logs, each with Attrs (such as "consumer", c).
	Logger *slog.Logger
	Attrs  []any
	// Name prefixes the log message of a failed claim: "txinbox: " + Name + "claim failed" (such as
	// "outbox "; "" for a worker pool).
	Name string
}

// Listen says where an Engine listens for wake-ups.
type Listen struct {
	// Channel is the channel to LISTEN on.
	Channel string
	// Connect opens a connection of the engine's own: the listening one, and, for the check after
	// LISTEN, one that sends the check's notification; nil: no listening (Start logs that it polls
	// only).
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Wakes reports whether a notification's payload is one for this engine; nil: every one is.
	Wakes func(payload string) bool
}

// Outcome is what one step of a runner found.
type Outcome int

const (
	// Idle means nothing was claimed; the runner sleeps (HotPoll while hot, else PollInterval).
	Idle Outcome = iota
	// Again means nothing was claimed, but more may be due at once (the claim put rows off): claim again.
	Again
	// Partial means a batch smaller than the claim's maximum was claimed and run.
	Partial
	// Full means a full batch was claimed and run: more may be waiting.
	Full
)

// Runner is the work of one runner goroutine, until the engine stops: Claim claims a batch, and Run
// runs what it claimed (its finish may be left for the next Claim, in the same round trip); then
// Done is called once. A Claim that failed returns the error: the engine logs it and backs off
// (from the lesser of PollInterval and 1s, doubling up to 30s) before the next Claim.
type Runner interface {
	Claim(ctx context.Context) (Outcome, error)
	// Run runs the batch the last Claim claimed (it returned Partial or Full).
	Run(ctx context.Context)
	// Rest is called before the runner sleeps until woken or PollInterval: what the runner keeps
	// for its next Claim (such as the outcomes of its last batch, recorded in the next claim's
	// transaction) it does now, on its own.
	Rest(ctx context.Context)
	Done(ctx context.Context)
}

// Engine runs Runners (see the package documentation). Make it with New.
type Engine struct {
	cfg   Config
	wake  chan struct{}
	epoch time.Time

	lastActive    atomic.Int64 // ns since epoch of the last activity
	hotPoller     atomic.Bool  // a runner is polling every HotPoll
	listenPID     atomic.Uint32
	notifications atomic.Int64

	mu       sync.Mutex
	started  bool
	hooks    Hooks
	stopping chan struct{}      // closed by Stop: claim no more
	cancel   context.CancelFunc // ends the runs in flight
	wg       sync.WaitGroup
	done     chan struct{} // closed when every goroutine of the engine has returned
	stopDone chan struct{} // closed when the first Stop has finished; stopErr is its result
	stopErr  error
}

// New returns an Engine of cfg.
func New(cfg Config) *Engine {
	e := &Engine{cfg: cfg, wake: make(chan struct{}, cfg.Runners+1), epoch: time.Now(),
		stopping: make(chan struct{}), done: make(chan struct{}), stopDone: make(chan struct{})}
	e.lastActive.Store(-int64(max(cfg.HotWindow, 0)) - 1) // cold until something happens
	return e
}

// ErrAlreadyStarted is the error of a second Start.
var ErrAlreadyStarted = errors.New("txinbox: already started")

// Hooks are what an engine's user runs on it.
type Hooks struct {
	// NewRunner returns the Runner of one runner goroutine; it is called Config.Runners times.
	NewRunner func() Runner
	// Extra are goroutines of the user's that run alongside the runners (a rescuer, a heartbeat);
	// each must return once Stopping is closed or its ctx ends.
	Extra []func(ctx context.Context)
	// OnDeadline runs when Stop's ctx ends before every goroutine has returned, after the context of
	// the runs in flight was cancelled; Stop returns its result (nil OnDeadline: ctx's error). It may
	// wait on Done.
	OnDeadline func(ctx context.Context) error
	// AfterStop runs once, at the end of the first Stop, whatever its result.
	AfterStop func(ctx context.Context)
}

// Start starts the runners, the extra goroutines and the listener of h, and returns. ctx bounds the
// engine's life: when it ends, the engine stops as with Stop on an ended ctx.
func (e *Engine) Start(ctx context.Context, h Hooks) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return ErrAlreadyStarted
	}
	e.started, e.hooks = true, h
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	for range e.cfg.Runners {
		r := h.NewRunner()
		e.wg.Go(func() { e.loop(runCtx, r) })
	}
	for _, f := range h.Extra {
		e.wg.Go(func() { f(runCtx) })
	}
	if e.cfg.Listen.Channel != "" {
		if e.cfg.Listen.Connect != nil {
			e.wg.Go(func() { e.listen(runCtx) })
		} else {
			e.cfg.Logger.Info("txinbox: no connection to LISTEN on (the Store's DB is not a *pgxpool.Pool); polling only",
				append(e.cfg.Attrs, "poll_interval", e.cfg.PollInterval)...)
		}
	}
	go func() { e.wg.Wait(); close(e.done) }()
	go func() {
		select {
		case <-ctx.Done():
			_ = e.Stop(ctx)
		case <-e.stopping:
		}
	}()
	return nil
}

// Stop stops claiming and waits until every goroutine of the engine has returned or ctx ends. In the
// second case it cancels the context of the runs in flight and returns what Hooks.OnDeadline
// returns. Every call returns the result of the first; a later call waits for the first (or for its
// own ctx). Stop before Start returns nil.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	if !e.started {
		e.mu.Unlock()
		return nil
	}
	first := false
	select {
	case <-e.stopping:
	default:
		close(e.stopping)
		first = true
	}
	e.mu.Unlock()
	if !first {
		select {
		case <-e.stopDone:
			return e.stopErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		e.cancel()
		if e.hooks.OnDeadline != nil {
			e.stopErr = e.hooks.OnDeadline(ctx)
		} else {
			e.stopErr = ctx.Err()
		}
	}
	if e.hooks.AfterStop != nil {
		e.hooks.AfterStop(ctx)
	}
	close(e.stopDone)
	return e.stopErr
}

// Done is closed once every goroutine of the engine has returned (after Stop).
func (e *Engine) Done() <-chan struct{} { return e.done }

// Stopping is closed when Stop is called: claim no more.
func (e *Engine) Stopping() <-chan struct{} { return e.stopping }

// Stopped reports whether Stop was called.
func (e *Engine) Stopped() bool {
	select {
	case <-e.stopping:
		return true
	default:
		return false
	}
}

// Started reports whether Start was called.
func (e *Engine) Started() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started
}

// Connector returns how to open a connection of one's own outside db, a *pgxpool.Pool, with its
// configuration (named applicationName unless that names itself), or nil if db is not one.
func Connector(db any, applicationName string) func(ctx context.Context) (*pgx.Conn, error) {
	pool, ok := db.(*pgxpool.Pool)
	if !ok {
		return nil
	}
	cc := pool.Config().ConnConfig // a copy
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = applicationName
	}
	return func(ctx context.Context) (*pgx.Conn, error) { return pgx.ConnectConfig(ctx, cc) }
}

// Wake makes the engine hot and wakes one sleeping runner (or the next one to sleep) to claim at
// once; a claim that comes back full wakes the next runner, and so on while batches are full.
func (e *Engine) Wake() {
	e.Active()
	e.wakeOne()
}

// Active records activity: the engine is hot for HotWindow.
func (e *Engine) Active() { e.lastActive.Store(int64(time.Since(e.epoch))) }

// hot reports whether the last activity is less than HotWindow ago.
func (e *Engine) hot() bool {
	return int64(time.Since(e.epoch))-e.lastActive.Load() < int64(e.cfg.HotWindow)
}

// wakeOne wakes one sleeping runner (or the next one to sleep).
func (e *Engine) wakeOne() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Sleep waits d, or until Stop or ctx's end; a Wake ends it too if wakeable.
func (e *Engine) Sleep(ctx context.Context, d time.Duration, wakeable bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	wake := e.wake
	if !wakeable {
		wake = nil
	}
	select {
	case <-t.C:
	case <-wake:
	case <-e.stopping:
	case <-ctx.Done():
	}
}

// ListenPID returns the backend pid of the listening connection while it listens, else 0.
func (e *Engine) ListenPID() uint32 { return e.listenPID.Load() }

// Notifications returns the number of notifications that woke the engine.
func (e *Engine) Notifications() int64 { return e.notifications.Load() }

// firstErrDelay is the longest first wait after a failed claim (PollInterval if shorter); it doubles
// after each failure in a row, up to maxErrDelay.
const (
	firstErrDelay = time.Second
	maxErrDelay   = 30 * time.Second
)

// loop is a runner: it claims and runs batches with r until Stop.
//
// After a full batch it wakes another runner (more may be waiting) and claims again at once after
// its run. After a partial batch the queue was empty when the claim ran, so a claim at once would
// mostly find nothing: the runner becomes the engine's poller if nobody is (runAsPoller) and claims
// again HotPoll after its claim began, or at once if woken; if another runner polls, it rests after
// its run as after a claim that found nothing. When it finds nothing it sleeps HotPoll (PollInterval
// if shorter) as the poller if the engine is hot and nobody polls, else it rests (Runner.Rest) and
// sleeps PollInterval, until woken. So at a low rate one claim per HotPoll carries what arrived
// meanwhile, instead of every runner claiming after every batch.
func (e *Engine) loop(ctx context.Context, r Runner) {
	defer r.Done(ctx)
	first := min(e.cfg.PollInterval, firstErrDelay)
	errDelay := first
	for !e.Stopped() {
		began := time.Now()
		out, err := r.Claim(ctx)
		if err != nil {
			if ctx.Err() == nil {
				e.cfg.Logger.Warn("txinbox: "+e.cfg.Name+"claim failed", append(e.cfg.Attrs, "err", err)...)
			}
			e.Sleep(ctx, errDelay, true)
			errDelay = min(errDelay*2, maxErrDelay)
			continue
		}
		errDelay = first
		switch out {
		case Full:
			e.Active()
			e.wakeOne() // more may be waiting
			r.Run(ctx)
		case Partial:
			e.Active()
			if e.hotPoller.CompareAndSwap(false, true) {
				e.runAsPoller(ctx, r, began)
			} else {
				r.Run(ctx)
				e.idle(ctx, r)
			}
		case Again:
		default:
			e.idle(ctx, r)
		}
	}
}

// idle waits for the next claim: HotPoll as the poller if the engine is hot and nobody polls, else
// until woken or PollInterval, after r rests.
func (e *Engine) idle(ctx context.Context, r Runner) {
	if e.hot() && e.hotPoller.CompareAndSwap(false, true) {
		e.Sleep(ctx, e.hotPoll(), true)
		e.hotPoller.Store(false)
		return
	}
	r.Rest(ctx)
	e.Sleep(ctx, e.cfg.PollInterval, true)
}

// hotPoll is how often the poller claims: HotPoll, or PollInterval if shorter.
func (e *Engine) hotPoll() time.Duration { return min(HotPoll, e.cfg.PollInterval) }

// runAsPoller runs the partial batch r claimed at began, as the engine's poller (hotPoller is
// set): it sleeps after the run until HotPoll after began (a Wake ends the sleep), then gives up the
// role and returns, to claim. A run that lasts past that time hands the role over: the role is given
// up and another runner woken to claim, so that the queue is still polled every HotPoll while long
// handlers run.
func (e *Engine) runAsPoller(ctx context.Context, r Runner, began time.Time) {
	next := began.Add(e.hotPoll())
	var running atomic.Bool
	running.Store(true)
	handOver := time.AfterFunc(time.Until(next), func() {
		if running.CompareAndSwap(true, false) {
			e.hotPoller.Store(false)
			e.wakeOne()
		}
	})
	r.Run(ctx)
	if running.CompareAndSwap(true, false) {
		handOver.Stop()
		if d := time.Until(next); d > 0 {
			e.Sleep(ctx, d, true)
		}
		e.hotPoller.Store(false)
	}
}
