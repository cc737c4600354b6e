package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/store"
)

// Defaults of Config.
const (
	DefaultConcurrency  = 4
	DefaultBatchSize    = 32
	MaxBatchSize        = 64
	DefaultPollInterval = time.Second
	DefaultLease        = time.Minute
	DefaultRetention    = 7 * 24 * time.Hour
	DefaultMaxAttempts  = 10
	DefaultTimeout      = 30 * time.Second
	DefaultHotPoll      = 10 * time.Millisecond
	DefaultHotWindow    = time.Second

	DefaultQueueVacuumThreshold = 50_000
)

// Config configures a Pool. Consumer and Handlers are required; every other zero field takes the
// documented default.
type Config struct {
	// Consumer is the consumer whose messages this pool handles (inbox.Message.Consumer).
	Consumer string
	// Schema holds the inbox tables. Default: inbox.DefaultSchema ("public").
	Schema string
	// Handlers maps kinds to handlers. A message of a kind without a handler fails with
	// ErrUnknownKind and is retried until it is dead.
	Handlers *Handlers
	// Concurrency is the number of batches run at once, each in its own transaction on its own
	// connection (one more connection claims). Default: 4.
	Concurrency int
	// BatchSize is the most messages claimed and run in one transaction. Each message runs in a
	// savepoint of its own, so a failure rolls back only that message, and a batch shares one commit.
	// Default: 32. At most 64: PostgreSQL tracks 64 subtransactions per transaction before every
	// session's snapshots slow down.
	BatchSize int
	// PollInterval is how often an idle pool looks for work when no notification wakes it (listening
	// is off or its connection is down, or a message's NotBefore or retry delay has passed). A
	// notification or Wake ends the wait at once. Default: 1s.
	PollInterval time.Duration
	// HotPollInterval is how often one runner of the pool looks for work during HotWindow after any
	// activity (a claimed message, a notification or Wake), so that messages whose notification was
	// debounced by the receiving Client (inbox.Config.NotifyInterval) wait about this long, not a full
	// PollInterval. Default: 10ms.
	HotPollInterval time.Duration
	// HotWindow is how long the pool keeps polling every HotPollInterval after its last activity. It
	// must exceed the inbox.Config.NotifyInterval of the Clients receiving for this consumer (50ms by
	// default) by the commit time of a receiving transaction. Default: 1s. Negative: never poll fast.
	HotWindow time.Duration
	// DisableListen turns off LISTEN: the pool finds new messages by polling only. Set it when
	// connections go through a pooler in transaction mode (PgBouncer), where LISTEN cannot work. (A
	// pool also falls back to polling by itself when a check after LISTEN shows that notifications do
	// not arrive.) Default: false.
	DisableListen bool
	// ListenConnect opens the connection the pool listens on, held for the pool's life and reopened
	// with backoff when lost. Default: when db is a *pgxpool.Pool, a new connection with the pool's
	// ConnConfig (outside the pool, so it takes none of its slots); otherwise none, and the pool polls.
	ListenConnect func(ctx context.Context) (*pgx.Conn, error)
	// Lease is how long a claim holds before another worker may take the message over, if the
	// claiming worker has not locked it in its batch transaction (it crashed or was cut off first). It
	// also bounds, on the server side, how long a batch transaction may sit idle (a frozen worker's
	// session is terminated, its locks released). Must exceed every handler Timeout. Default: 1m.
	Lease time.Duration
	// Retention is the dedup window kept after a message completes: a duplicate received within it is
	// rejected; after it the key is accepted as new. Default: 7 days.
	Retention time.Duration
	// MaxAttempts is the number of attempts that may start before a message is dead. Default: 10.
	MaxAttempts int
	// Timeout bounds one handler call (its context) and each statement of a batch transaction
	// (statement_timeout). Default: 30s.
	Timeout time.Duration
	// Backoff sets the delay before a retry. Default: DefaultBackoff.
	Backoff Backoff
	// Logger receives the pool's logs. Default: slog.Default().
	Logger *slog.Logger
	// Owner names this pool in claims (inbox.owner). Default: hostname:pid:random.
	Owner string
	// Observer, if set, is told about every attempt finished (package metrics implements it).
	// Default: none.
	Observer Observer
	// TracerProvider makes a span ("txinbox.handle", kind consumer) around each handler call; the
	// handler's ctx carries it. Its parent is the trace context that Propagator finds in the message
	// headers (a traceparent header), so a handler's work joins the trace of whoever sent the message.
	// Default: otel.GetTracerProvider() (no spans unless the application installs a provider).
	TracerProvider trace.TracerProvider
	// Propagator reads the trace context from message headers. Default: propagation.TraceContext{}
	// (W3C traceparent and tracestate).
	Propagator propagation.TextMapPropagator
	// QueueVacuumThreshold is the pool's safety net for the inbox_queue table, whose rows churn (every
	// message inserts, claims and deletes one): every 5 seconds the pool reads how many dead row
	// versions PostgreSQL counts in it (pg_stat_user_tables.n_dead_tup) and, above this number, runs
	// VACUUM (SKIP_LOCKED) on that table alone. Autovacuum normally keeps the table small (the
	// migration tunes it to vacuum after 1,000 dead rows), but it may be off, or its workers busy with
	// large tables for minutes, and then every claim reads through dead rows and slows down. Vacuuming
	// the queue takes milliseconds while its backlog is small. It needs the table's owner (as do the
	// migrations); a VACUUM that leaves more dead rows than this (not the owner, or an old transaction
	// holding back cleanup) is logged once, and the check backs off to every 5 minutes. Default:
	// DefaultQueueVacuumThreshold (50,000). Negative: never vacuum.
	QueueVacuumThreshold int
}

// Observer receives events from a pool. Its methods must be fast and safe for concurrent use.
type Observer interface {
	// Handled is called once per finished attempt, after its outcome was committed.
	Handled(HandleEvent)
}

// HandleEvent describes a finished attempt.
type HandleEvent struct {
	Consumer string
	Kind     string
	// Outcome is "completed", "retry" (it failed and will be tried again) or "dead" (it failed and
	// will not be).
	Outcome string
	// Reason is "" when completed; else "error", "panic", "timeout", "permanent" (the handler returned
	// a Permanent error), "decode" (the payload does not decode into the handler's type),
	// "unknown_kind" or "crashed" (out of attempts, the last of which never finished).
	Reason string
	// Attempt is the attempt's number, from 1.
	Attempt int
	// Duration is the time spent in the handler (0 if it did not run).
	Duration time.Duration
	// ReceivedAt is when the message was received (stored).
	ReceivedAt time.Time
}

func (c Config) withDefaults() (Config, error) {
	bad := func(field, reason string) (Config, error) {
		return c, &inbox.ConfigError{Field: field, Reason: reason}
	}
	if err := inbox.ValidateName(c.Consumer); err != nil {
		return bad("Consumer", err.Error())
	}
	if c.Handlers == nil || len(c.Handlers.byKind) == 0 {
		return bad("Handlers", "no handler registered (use worker.Handle)")
	}
	if c.Schema == "" {
		c.Schema = inbox.DefaultSchema
	}
	if err := inbox.ValidateSchema(c.Schema); err != nil {
		return c, err
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Concurrency, DefaultConcurrency)
	def(&c.BatchSize, DefaultBatchSize)
	def(&c.MaxAttempts, DefaultMaxAttempts)
	def(&c.QueueVacuumThreshold, DefaultQueueVacuumThreshold)
	defd(&c.PollInterval, DefaultPollInterval)
	defd(&c.HotPollInterval, DefaultHotPoll)
	defd(&c.HotWindow, DefaultHotWindow)
	defd(&c.Lease, DefaultLease)
	defd(&c.Retention, DefaultRetention)
	defd(&c.Timeout, DefaultTimeout)
	switch {
	case c.Concurrency < 0:
		return bad("Concurrency", "must not be negative")
	case c.BatchSize < 0 || c.BatchSize > MaxBatchSize:
		return bad("BatchSize", fmt.Sprintf("must be 1 to %d", MaxBatchSize))
	case c.MaxAttempts < 0:
		return bad("MaxAttempts", "must not be negative")
	case c.PollInterval < 0 || c.Lease < 0 || c.Retention < 0 || c.Timeout < 0 || c.HotPollInterval < 0:
		return bad("PollInterval/HotPollInterval/Lease/Retention/Timeout", "must not be negative")
	}
	if c.Backoff == nil {
		c.Backoff = DefaultBackoff
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.Owner = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	for kind, h := range c.Handlers.byKind {
		if err := inbox.ValidateName(kind); err != nil {
			return bad("Handlers", fmt.Sprintf("kind %v", err))
		}
		if t := c.timeout(h); t >= c.Lease {
			return bad("Lease", fmt.Sprintf("%v must exceed the timeout of kind %q (%v)", c.Lease, kind, t))
		}
	}
	return c, nil
}

func (c *Config) timeout(h *handler) time.Duration {
	if h != nil && h.cfg.Timeout > 0 {
		return h.cfg.Timeout
	}
	return c.Timeout
}

func (c *Config) maxAttempts(h *handler) int {
	if h != nil && h.cfg.MaxAttempts > 0 {
		return h.cfg.MaxAttempts
	}
	return c.MaxAttempts
}

func (c *Config) backoff(h *handler) Backoff {
	if h != nil && h.cfg.Backoff != nil {
		return h.cfg.Backoff
	}
	return c.Backoff
}

// Pool claims and handles the messages of one consumer. Create it with New, then Start and Stop it.
type Pool struct {
	db      inbox.DB
	cfg     Config
	st      *store.Store
	lockKey int64
	tracer  trace.Tracer
	maxTO   time.Duration // longest handler timeout: the batch statement_timeout

	wake          chan struct{}
	epoch         time.Time
	lastActive    atomic.Int64  // ns since epoch of the last activity (claimed messages, notification, Wake)
	hotPoller     atomic.Bool   // a runner is polling every HotPollInterval
	listenPID     atomic.Uint32 // backend pid of the listening connection while it listens, else 0
	notifications atomic.Int64  // notifications received for this consumer
	vac           queueVacuum   // the rescuer's vacuum safety net

	mu       sync.Mutex
	started  bool
	stopping chan struct{}      // closed by Stop: claim no more
	cancel   context.CancelFunc // cancels in-flight handlers
	wg       sync.WaitGroup
}

// New returns a pool handling cfg.Consumer's messages with db (usually a *pgxpool.Pool, which needs
// Concurrency+2 connections at most).
func New(db inbox.DB, cfg Config) (*Pool, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h := fnv.New64a()
	h.Write([]byte("txinbox.rescue\x00" + cfg.Schema + "\x00" + cfg.Consumer))
	p := &Pool{db: db, cfg: cfg, st: store.New(cfg.Schema), lockKey: int64(h.Sum64() >> 1),
		tracer: cfg.TracerProvider.Tracer("github.com/txinbox/txinbox/worker"),
		wake:   make(chan struct{}, cfg.Concurrency+1), epoch: time.Now()}
	p.lastActive.Store(-int64(max(cfg.HotWindow, 0)) - 1) // cold until something happens
	for _, hd := range cfg.Handlers.byKind {
		p.maxTO = max(p.maxTO, cfg.timeout(hd))
	}
	return p, nil
}

// Start starts Concurrency batch runners and one rescuer (which runs, one at a time and alone, the
// messages whose previous attempt never finished). It returns at once; ctx bounds the pool's life like
// Stop with an expired deadline.
func (p *Pool) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("txinbox: pool already started")
	}
	p.started = true
	p.stopping = make(chan struct{})
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	for range p.cfg.Concurrency {
		p.wg.Go(func() { p.loop(runCtx, false) })
	}
	p.wg.Go(func() { p.loop(runCtx, true) })
	if !p.cfg.DisableListen {
		if connect := p.listenConnector(); connect != nil {
			p.wg.Go(func() { p.listen(runCtx, connect) })
		} else {
			p.cfg.Logger.Info("txinbox: no connection to LISTEN on (db is not a *pgxpool.Pool and ListenConnect is nil); polling only",
				"consumer", p.cfg.Consumer, "poll_interval", p.cfg.PollInterval)
		}
	}
	go func() {
		select {
		case <-ctx.Done():
			_ = p.Stop(ctx)
		case <-p.stopping:
		}
	}()
	return nil
}

// Stop stops claiming, lets in-flight batches finish until ctx ends, then cancels them: their
// transactions roll back and their messages are handed back as pending (or, if the database cannot be
// reached, taken over when their lease ends). It returns ctx.Err() if it had to cancel.
func (p *Pool) Stop(ctx context.Context) error {
	p.mu.Lock()
	if !p.started {
		p.mu.Unlock()
		return nil
	}
	select {
	case <-p.stopping:
	default:
		close(p.stopping)
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		p.cancel()
		<-done
		return ctx.Err()
	}
}

// Wake tells an idle pool that a message may be ready, so it claims before its poll interval ends.
// The pool's own notifications do this for messages received by any process; call it after receiving
// a message when listening is off.
func (p *Pool) Wake() {
	p.active()
	for range cap(p.wake) {
		select {
		case p.wake <- struct{}{}:
		default:
			return
		}
	}
}

func (p *Pool) stopped() bool {
	select {
	case <-p.stopping:
		return true
	default:
		return false
	}
}

// loop claims and runs batches (or, for the rescuer, suspects one at a time) until Stop. A runner
// claims again as soon as it has run a batch; when it finds nothing it sleeps: HotPollInterval if the
// pool is hot and no other runner is polling fast, else PollInterval, until woken.
func (p *Pool) loop(ctx context.Context, rescuer bool) {
	firstErrDelay := min(p.cfg.PollInterval, time.Second)
	errDelay := firstErrDelay
	for !p.stopped() {
		var (
			batch []*claimed
			again bool
			err   error
		)
		if rescuer {
			batch, err = p.claimSuspect(ctx)
		} else {
			batch, again, err = p.claim(ctx)
		}
		if err != nil {
			if ctx.Err() == nil {
				p.cfg.Logger.Warn("txinbox: claim failed", "consumer", p.cfg.Consumer, "err", err)
			}
			p.sleep(ctx, errDelay, rescuer)
			errDelay = min(errDelay*2, 30*time.Second)
			continue
		}
		errDelay = firstErrDelay
		if len(batch) > 0 {
			if !rescuer {
				p.active()
				if len(batch) == p.cfg.BatchSize || !p.hotPoller.Load() {
					// More may be waiting, or nobody watches for new messages while this batch runs.
					p.wakeOne()
				}
			}
			if testHookClaimed != nil {
				testHookClaimed(p, batch)
			}
			p.run(ctx, batch, rescuer)
		}
		switch {
		case rescuer:
			p.vac.maybe(ctx, p)
			p.sleep(ctx, p.cfg.PollInterval, true)
		case len(batch) > 0 || again:
			// claim again at once
		case p.hot() && p.hotPoller.CompareAndSwap(false, true):
			p.sleep(ctx, min(p.cfg.HotPollInterval, p.cfg.PollInterval), false)
			p.hotPoller.Store(false)
		default:
			p.sleep(ctx, p.cfg.PollInterval, false)
		}
	}
}

// active records activity: the pool is hot for HotWindow.
func (p *Pool) active() { p.lastActive.Store(int64(time.Since(p.epoch))) }

// hot reports whether the last activity is less than HotWindow ago.
func (p *Pool) hot() bool {
	return int64(time.Since(p.epoch))-p.lastActive.Load() < int64(p.cfg.HotWindow)
}

// wakeOne wakes one sleeping runner (or the next one to sleep).
func (p *Pool) wakeOne() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Pool) sleep(ctx context.Context, d time.Duration, rescuer bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	wake := p.wake
	if rescuer {
		wake = nil // suspects appear when leases end, not when messages arrive
	}
	select {
	case <-t.C:
	case <-wake:
	case <-p.stopping:
	case <-ctx.Done():
	}
}

// testHookClaimed, set by tests only, runs between a claim's commit and its batch transaction.
var testHookClaimed func(p *Pool, batch []*claimed)

// claimed is one claimed message.
type claimed struct {
	ID            int64
	Consumer      string
	Key           string
	Kind          string
	Payload       []byte
	Headers       map[string]string
	OrderingKey   string
	Token         int64
	Attempt       int
	Failed        int
	PreviousError string
	ReceivedAt    time.Time
}

// orderingSnooze is how long a claim puts off a message blocked behind an older message of its
// ordering key. The worker finishing the older message makes it ready at once (ReadyNext); the
// snooze only bounds the wait if that worker dies between its commit and ReadyNext.
var orderingSnooze = 30 * time.Second

// claim claims a batch. again reports that it claimed nothing but snoozed messages blocked behind
// their ordering key: others may be ready behind them.
func (p *Pool) claim(ctx context.Context) (batch []*claimed, again bool, err error) {
	rows, err := store.Queries.ClaimBatch(ctx, p.st.Wrap(p.db), sqlc.ClaimBatchParams{
		Owner: pgtype.Text{String: p.cfg.Owner, Valid: true}, LeaseSeconds: p.cfg.Lease.Seconds(),
		Consumer: p.cfg.Consumer, Max: int32(p.cfg.BatchSize), SnoozeSeconds: orderingSnooze.Seconds(),
	})
	if err != nil {
		return nil, false, err
	}
	if len(rows) == 1 && rows[0].ID == 0 {
		return nil, true, nil
	}
	batch = make([]*claimed, len(rows))
	for i, r := range rows {
		batch[i] = fromRow(sqlc.ClaimSuspectRow(r))
	}
	return batch, false, nil
}

// claimSuspect claims one message whose last attempt never finished, unless one is being run already
// (by any process): suspects run strictly one at a time, each alone in its transaction, so a message
// that crashes its process cannot charge innocent messages an attempt more than once.
func (p *Pool) claimSuspect(ctx context.Context) ([]*claimed, error) {
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	db := p.st.Wrap(tx)
	if err := store.Queries.LockRescue(ctx, db, p.lockKey); err != nil {
		return nil, err
	}
	rows, err := store.Queries.ClaimSuspect(ctx, db, sqlc.ClaimSuspectParams{
		Owner: pgtype.Text{String: p.cfg.Owner, Valid: true}, LeaseSeconds: p.cfg.Lease.Seconds(),
		Consumer: p.cfg.Consumer,
	})
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	out := make([]*claimed, len(rows))
	for i, r := range rows {
		out[i] = fromRow(r)
	}
	return out, nil
}

func fromRow(r sqlc.ClaimSuspectRow) *claimed {
	c := &claimed{
		ID: r.ID, Consumer: r.Consumer, Key: r.Key, Kind: r.Kind, Payload: r.Payload,
		OrderingKey: r.OrderingKey.String, Token: r.Token, Attempt: int(r.AttemptsStarted),
		Failed: int(r.AttemptsFailed), PreviousError: r.LastError.String, ReceivedAt: r.ReceivedAt.Time,
	}
	if len(r.Headers) > 2 {
		_ = json.Unmarshal(r.Headers, &c.Headers) // stored by Receive as a JSON object of strings
	}
	return c
}
