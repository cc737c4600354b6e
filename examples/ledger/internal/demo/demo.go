// Package demo runs the ledger's exactly-once demonstration: a storm of duplicated OrderPaid events
// over HTTP, with transient failures, a poison event, a worker process killed while it holds a batch,
// and a replay of the whole stream, followed by a check of every invariant.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/examples/ledger/internal/api"
	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/worker"
)

// Options configures a run. Start from DefaultOptions.
type Options struct {
	// URL is the server's connection string; Database describes it in the summary.
	URL, Database string
	// Schema holds the run's tables. With Reset it is dropped and recreated first.
	Schema string
	Reset  bool

	Events    int // unique OrderPaid events
	MaxCopies int // each event is delivered 1 to MaxCopies times
	Accounts  int // 0: Events/25, at least 5
	Producers int // concurrent HTTP producers
	Credits   int // synchronous credits (POST /v1/credits), each sent 1 to 3 times
	Invalid   int // invalid bodies sent during the storm (answered 400)
	Conflicts int // events re-sent with another amount during the replay (answered 422)

	Workers     int     // in-process worker batches at once
	BatchSize   int     // messages per worker transaction
	FailPercent float64 // percent of events whose first attempt fails
	MaxAttempts int
	Lease       time.Duration
	Timeout     time.Duration // longest the drain may go without a message leaving the queue
	HandlerTime time.Duration // handler time limit
	Poll        time.Duration

	// Crash runs a child worker process and kills it (SIGKILL) while it holds a batch, with entries
	// written and not committed. The in-process workers start once it is dead.
	Crash bool
	// HangAfter is the number of messages the child handles before it hangs. 0: Events/20, at least 5.
	HangAfter int64
	// ChildCommand builds the child's command from the arguments of `ledger work`. Default: this
	// executable.
	ChildCommand func(args []string) *exec.Cmd
	// ChildStderr receives the child's stderr. Default: os.Stderr.
	ChildStderr io.Writer

	Seed int64 // 0: random

	Progress io.Writer // progress lines; nil: none
	TTY      bool      // redraw one progress line with \r instead of printing lines
	Logger   *slog.Logger
}

// DefaultOptions returns the options of `ledger demo`.
func DefaultOptions() Options {
	return Options{
		Schema: "ledger_demo", Reset: true,
		Events: 5000, MaxCopies: 10, Producers: 16, Credits: 250, Invalid: 5, Conflicts: 5,
		Workers: 4, BatchSize: 32, FailPercent: 5, MaxAttempts: 5,
		Lease: 3 * time.Second, HandlerTime: time.Second, Poll: 50 * time.Millisecond, Timeout: 3 * time.Minute,
		Crash: true,
	}
}

// childOwner names the crash child in claims (inbox.owner).
const childOwner = "demo-crash-child"

// run is the state of one demo run.
type run struct {
	o      Options
	db     *pgxpool.Pool
	q      func(string) string // qualifies {schema}
	rng    *rand.Rand
	tag    string
	client *http.Client
	base   string

	accounts []string
	events   []event
	credits  []credit
	poison   int // index of the poison event

	stats stats
	crash crashInfo
	phase atomic.Value // string
	sent  atomic.Int64
	total atomic.Int64
}

type event struct {
	ev     ledger.OrderPaid
	bodies [2][]byte // the same event, written two ways (field order, spacing)
}

type credit struct {
	key     string
	account string
	amount  int64
	body    []byte
}

// Run runs the demo and returns its report. An error means the demo could not run at all; failed
// invariants are reported in the Report (Report.OK).
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Events < 1 || o.MaxCopies < 1 || o.Producers < 1 || o.Workers < 1 {
		return nil, errors.New("demo: events, max-copies, producers and workers must be at least 1")
	}
	if o.Accounts == 0 {
		o.Accounts = max(5, o.Events/25)
	}
	if o.HangAfter == 0 {
		o.HangAfter = int64(max(5, o.Events/20))
	}
	if o.Seed == 0 {
		o.Seed = rand.Int64N(1<<31) + 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.ChildStderr == nil {
		o.ChildStderr = os.Stderr
	}
	if o.ChildCommand == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.ChildCommand = func(args []string) *exec.Cmd { return exec.Command(exe, args...) }
	}
	start := time.Now()
	r := &run{o: o, rng: rand.New(rand.NewPCG(uint64(o.Seed), 0x1ed9e7)), stats: newStats()}
	r.tag = strconv.FormatInt(o.Seed%1_000_000, 36)
	r.phase.Store("setup")

	cfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		return nil, err
	}
	if o.Reset {
		c, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
		if err != nil {
			return nil, err
		}
		err = ledger.DropSchema(ctx, c, o.Schema)
		c.Close(context.Background())
		if err != nil {
			return nil, err
		}
	}
	if err := ledger.Migrate(ctx, cfg.ConnConfig, o.Schema); err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(o.Producers + o.Workers + 6)
	r.db, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer r.db.Close()
	r.q = func(s string) string { return qualify(s, o.Schema) }

	r.generate()

	// The in-process workers (started once the crash child is dead) and the HTTP API.
	faults := &Faults{FailFirstPercent: o.FailPercent, Poison: map[string]bool{r.events[r.poison].ev.EventID: true}}
	lg, err := ledger.New(txinbox.Store{DB: r.db, Schema: o.Schema})
	if err != nil {
		return nil, err
	}
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, ledger.KindOrderPaid, faults.Inject(o.Schema, lg.Handler(o.Logger)))
	pool, err := worker.New(txinbox.Store{DB: r.db, Schema: o.Schema, Logger: o.Logger}, worker.Config{
		Consumer: ledger.Consumer, Handlers: hs, Concurrency: o.Workers, BatchSize: o.BatchSize,
		PollInterval: o.Poll, Lease: o.Lease, Timeout: o.HandlerTime, MaxAttempts: o.MaxAttempts,
		Backoff: txinbox.Exponential{Base: 100 * time.Millisecond, Max: time.Second},
		Owner:   fmt.Sprintf("demo-in-process:%d", os.Getpid())})
	if err != nil {
		return nil, err
	}
	h, err := api.New(api.Config{DB: r.db, Schema: o.Schema, Wake: pool.Wake, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	r.base = "http://" + ln.Addr().String()
	r.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: o.Producers, MaxIdleConnsPerHost: o.Producers, MaxConnsPerHost: o.Producers,
		IdleConnTimeout: time.Minute, DisableCompression: true,
	}}
	defer r.client.CloseIdleConnections()

	progressDone := r.progress(ctx)
	defer progressDone()

	// The crash child, then the in-process pool once the child is dead.
	poolStarted := make(chan struct{})
	var stopPool sync.Once
	stop := func() {
		stopPool.Do(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_ = pool.Stop(sctx)
		})
	}
	defer stop()
	startPool := func() {
		if err := pool.Start(context.WithoutCancel(ctx)); err != nil {
			o.Logger.Error("demo: start workers", "err", err)
		}
		close(poolStarted)
	}
	var childDone func()
	if o.Crash {
		childDone = r.startCrashChild(ctx, faults, startPool)
		defer childDone()
	} else {
		startPool()
	}

	// Phase 1: the storm.
	rep := &Report{opts: o, tag: r.tag}
	stormStart := time.Now()
	storm := r.stormDeliveries()
	r.phase.Store("storm")
	if err := r.send(ctx, storm, false); err != nil {
		return nil, err
	}
	rep.StormDuration = time.Since(stormStart)
	rep.StormDeliveries = len(storm)

	// Phase 2: drain, the crash child included.
	r.phase.Store("drain")
	select {
	case <-poolStarted:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	drainStart := time.Now()
	rep.Drained, rep.DrainStall = r.waitDrained(ctx)
	rep.DrainDuration = time.Since(drainStart)
	rep.ProcessDuration = time.Since(stormStart)
	if childDone != nil {
		childDone()
	}
	before, err := r.totals(ctx)
	if err != nil {
		return nil, err
	}

	// Phase 3: replay the whole stream once more, with a few tampered events and credits.
	r.phase.Store("replay")
	replayStart := time.Now()
	replay := r.replayDeliveries(storm)
	if err := r.send(ctx, replay, true); err != nil {
		return nil, err
	}
	if ok, stall := r.waitDrained(ctx); !ok && rep.DrainStall == "" {
		rep.Drained, rep.DrainStall = false, "replay: "+stall
	}
	rep.ReplayDuration = time.Since(replayStart)
	rep.ReplayDeliveries = len(replay)
	after, err := r.totals(ctx)
	if err != nil {
		return nil, err
	}
	r.phase.Store("checks")
	stop()
	progressDone()

	rep.Duration = time.Since(start)
	if err := r.verify(ctx, rep, before, after); err != nil {
		return nil, err
	}
	return rep, nil
}

// generate makes the accounts, events and credits of the run.
func (r *run) generate() {
	o := r.o
	r.accounts = make([]string, o.Accounts)
	for i := range r.accounts {
		r.accounts[i] = fmt.Sprintf("acct-%s-%04d", r.tag, i)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	r.events = make([]event, o.Events)
	for i := range r.events {
		ev := ledger.OrderPaid{
			EventID:     fmt.Sprintf("evt-%s-%06d", r.tag, i),
			OrderID:     fmt.Sprintf("ord-%s-%06d", r.tag, i),
			AccountID:   r.accounts[r.rng.IntN(len(r.accounts))],
			AmountCents: 100 + r.rng.Int64N(99_900),
			OccurredAt:  now.Add(-time.Duration(r.rng.Int64N(int64(24 * time.Hour)))).Truncate(time.Millisecond),
		}
		r.events[i] = event{ev: ev, bodies: [2][]byte{eventBody(ev, false), eventBody(ev, true)}}
	}
	r.poison = r.rng.IntN(len(r.events))
	r.credits = make([]credit, o.Credits)
	for i := range r.credits {
		c := credit{key: fmt.Sprintf("credit-%s-%05d", r.tag, i), account: r.accounts[r.rng.IntN(len(r.accounts))],
			amount: 100 + r.rng.Int64N(9_900)}
		c.body = fmt.Appendf(nil, `{"account_id":%q,"amount_cents":%d}`, c.account, c.amount)
		r.credits[i] = c
	}
}

// eventBody writes ev as a producer would; alt writes the same event with other field order and
// spacing (still the same event: not a conflict).
func eventBody(ev ledger.OrderPaid, alt bool) []byte {
	if !alt {
		b, _ := json.Marshal(ev)
		return b
	}
	return fmt.Appendf(nil, "{\n  \"occurred_at\": %q,\n  \"amount_cents\": %d,\n  \"account_id\": %q,\n  \"order_id\": %q,\n  \"event_id\": %q\n}\n",
		ev.OccurredAt.Format(time.RFC3339Nano), ev.AmountCents, ev.AccountID, ev.OrderID, ev.EventID)
}

// invalidBodies are sent during the storm; each must be answered 400.
var invalidBodies = []string{
	`{"event_id":"bad-1","order_id":"o","account_id":"a","amount_cents":-5,"occurred_at":"2026-01-01T00:00:00Z"}`,
	`{"event_id":"bad-2","order_id":"o","account_id":"a","amount_cents":100,"occurred_at":"yesterday"}`,
	`{"event_id":"bad-3","order_id":"o","account_id":"a","amount_cents":100,"occurred_at":"2026-01-01T00:00:00Z","coupon":"FREE"}`,
	`{"event_id":"bad-4","account_id":"a","amount_cents":100,"occurred_at":"2026-01-01T00:00:00Z"}`,
	`{"event_id":"bad-5","order_id":"o","account_id":"a","amount_cents":1.5,"occurred_at":"2026-01-01T00:00:00Z"}`,
	`{"event_id":"bad-6","order_id":"o","account_id":"a","amount_cents":"100","occurred_at":"2026-01-01T00:00:00Z"}`,
	`not json`,
}

type kind int

const (
	kEvent          kind = iota // an event delivery: 202 the first time, 200 after
	kInvalid                    // an invalid body: 400
	kConflictEvent              // an event id with another amount: 422
	kCredit                     // a credit: 201 (replayed after the first)
	kConflictCredit             // a credit key with another amount: 422
)

type delivery struct {
	kind kind
	idx  int
	alt  bool
}

// stormDeliveries returns every event 1 to MaxCopies times, the credits 1 to 3 times and the invalid
// bodies, shuffled.
func (r *run) stormDeliveries() []delivery {
	var ds []delivery
	for i := range r.events {
		for range 1 + r.rng.IntN(r.o.MaxCopies) {
			ds = append(ds, delivery{kind: kEvent, idx: i, alt: r.rng.IntN(2) == 0})
		}
	}
	for i := range r.credits {
		for range 1 + r.rng.IntN(3) {
			ds = append(ds, delivery{kind: kCredit, idx: i})
		}
	}
	for i := range r.o.Invalid {
		ds = append(ds, delivery{kind: kInvalid, idx: i % len(invalidBodies)})
	}
	r.rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	return ds
}

// replayDeliveries returns the storm's deliveries again, reshuffled, with Conflicts tampered events
// and a tampered credit.
func (r *run) replayDeliveries(storm []delivery) []delivery {
	ds := make([]delivery, 0, len(storm)+r.o.Conflicts+1)
	for _, d := range storm {
		if d.kind != kInvalid {
			ds = append(ds, d)
		}
	}
	for range r.o.Conflicts {
		ds = append(ds, delivery{kind: kConflictEvent, idx: r.rng.IntN(len(r.events))})
	}
	if len(r.credits) > 0 {
		ds = append(ds, delivery{kind: kConflictCredit, idx: r.rng.IntN(len(r.credits))})
	}
	r.rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	return ds
}

// qualify replaces {schema} with the quoted schema.
func qualify(sql, schema string) string {
	return strings.ReplaceAll(sql, "{schema}", pgx.Identifier{schema}.Sanitize())
}
