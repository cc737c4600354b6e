package worker

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txinbox/txinbox/internal/owner"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/engine"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/pooler"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/typednil"
)

// Defaults of Config (documented on its fields) and the settings derived from it (package
// documentation, "Wake-ups").
const (
	defaultConcurrency   = 4
	defaultBatchSize     = 32
	defaultPollInterval  = time.Second
	defaultLease         = time.Minute
	defaultMaxAttempts   = 10
	defaultTimeout       = 30 * time.Second
	defaultIdleWarnAfter = time.Minute
)

// Config configures a Pool. Consumer and Handlers are required; every other zero field takes the
// documented default.
type Config struct {
	// Consumer is the consumer whose messages this pool handles (inbox.Message.Consumer).
	Consumer string
	// Handlers maps kinds to handlers. A message of a kind without a handler is dead at once, its
	// error matching ErrUnknownKind and naming the kinds the pool handles.
	Handlers *Handlers
	// Concurrency is the number of batches run at once, each in its own transaction on its own
	// connection (one more connection claims). Default: 4.
	Concurrency int
	// BatchSize is the most messages of single handlers ([Handle]) run in one transaction. They run
	// in one savepoint while none fails; when one fails, they run again each in a savepoint of its
	// own, so a failure rolls back only that message, and a batch shares one commit. Default: 32. At
	// most 64: PostgreSQL tracks 64 subtransactions per transaction before every session's snapshots
	// slow down. A pool with batch handlers ([HandleBatch]) claims up to
	// the largest of BatchSize and their HandlerConfig.BatchSize at once: a batch handler's call takes
	// one savepoint, not one per message. Messages of single handlers beyond BatchSize in such a claim
	// are left out of its batch, unchanged, for a later claim.
	BatchSize int
	// PollInterval is how often an idle pool looks for work when no notification wakes it (listening
	// is off or its connection is down, or a message's NotBefore or retry delay has passed). A
	// notification or Wake ends the wait at once. After any activity (a claimed message, a
	// notification, Wake) one runner looks every 10ms (PollInterval if shorter) for 1s, or for twice
	// Store.NotifyInterval if that is longer, so that messages whose notification the receiving Client
	// debounced wait about 10ms, not a full PollInterval. Default: 1s.
	PollInterval time.Duration
	// Lease bounds, on the server side, how long a batch transaction may sit idle
	// (idle_in_transaction_session_timeout): a worker frozen or cut off inside its batch has its
	// session terminated, its locks released and its batch left to the rescuer (see the package
	// documentation, "Crash recovery"). A batch whose process dies is ended by the server at once,
	// without waiting for the Lease. Must exceed every handler Timeout (the pool's Timeout and each
	// kind's HandlerConfig.Timeout): a handler waiting outside the database leaves the transaction
	// idle for up to its Timeout. Default: 1m, or twice the longest handler Timeout if that is more (a
	// kind with a Timeout of 2m: 4m).
	//
	// Each claim statement is bounded on the server by the lesser of 10s and half the Lease
	// (statement_timeout for that statement only, sent in the same round trip). A claim locks the rows
	// it picks as it finds them and holds them, and its snapshot, until it ends: a claim slowed down
	// for long (a starved server, a queue full of dead rows) would keep up to its batch of ready
	// messages from every other worker. Cancelled at the bound, its batch transaction rolls back and
	// releases them, and the runner logs the failure and claims again. The rescuer's claims of
	// suspects are bounded the same way.
	Lease time.Duration
	// MaxAttempts is the number of attempts that may start before a message is dead; the crashes of
	// groups of more than one message count as one attempt in all (package documentation, "Crash
	// recovery"). Default: 10.
	MaxAttempts int
	// Timeout bounds one handler call (its context) and each statement of a batch transaction
	// (statement_timeout). A call that returns after its deadline is a timeout, even if it returned
	// nil (see HandlerConfig.Timeout). Default: 30s.
	Timeout time.Duration
	// Backoff sets the delay before a retry. Default: txinbox.Exponential{} (1s, 2s, 4s ... capped at
	// 10 minutes, ±20%).
	Backoff txinbox.Backoff
	// Owner names this pool in its batches (inbox_batch.owner; admin and the console show it as the
	// owner of the messages it is running). Default: hostname:pid:random.
	Owner string

	tune tuning // derived settings; tests set them (export_test.go)
}

// tuning holds the settings derived from a Config and its Store, which tests may set (export_test.go);
// a zero field takes the derived value.
type tuning struct {
	engine.Tune // hot window, claim bound, listening (engine.Tune.Derive)
	// idleWarnAfter: idle this long while messages of consumers no pool serves wait, the pool warns
	// (package documentation, "Maintenance"); negative: never. Derived: 1 minute.
	idleWarnAfter time.Duration
}

func (c Config) withDefaults(st txinbox.Store) (Config, error) {
	bad := func(field, reason string) (Config, error) {
		return c, &txinbox.ConfigError{Field: field, Reason: reason}
	}
	if name, reason := typednil.Field(c); name != "" {
		return bad(name, reason)
	}
	if err := txinbox.ValidateName(c.Consumer); err != nil {
		return bad("Consumer", err.Error())
	}
	if c.Handlers == nil || len(c.Handlers.byKind) == 0 {
		return bad("Handlers", "no handler registered (use worker.Handle)")
	}
	c.Concurrency = cmp.Or(c.Concurrency, defaultConcurrency)
	c.BatchSize = cmp.Or(c.BatchSize, defaultBatchSize)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, defaultMaxAttempts)
	c.PollInterval = cmp.Or(c.PollInterval, defaultPollInterval)
	c.Timeout = cmp.Or(c.Timeout, defaultTimeout)
	c.Lease = cmp.Or(c.Lease, max(defaultLease, 2*c.longestTimeout()))
	c.tune.Tune = c.tune.Derive(st.NotifyInterval, c.Lease)
	c.tune.idleWarnAfter = cmp.Or(c.tune.idleWarnAfter, defaultIdleWarnAfter)
	switch {
	case c.Concurrency < 0:
		return bad("Concurrency", "must not be negative")
	case c.BatchSize < 0 || c.BatchSize > limits.PoolBatchSize:
		return bad("BatchSize", fmt.Sprintf("must be 1 to %d", limits.PoolBatchSize))
	case c.MaxAttempts < 0:
		return bad("MaxAttempts", "must not be negative")
	case c.PollInterval < 0 || c.Lease < 0 || c.Timeout < 0:
		return bad("PollInterval/Lease/Timeout", "must not be negative")
	}
	if c.Backoff == nil {
		c.Backoff = txinbox.Exponential{}
	}
	if c.Owner == "" {
		c.Owner = owner.New()
	}
	for kind, h := range c.Handlers.byKind {
		if err := txinbox.ValidateName(kind); err != nil {
			return bad("Handlers", fmt.Sprintf("kind %v", err))
		}
		if t := c.timeout(h); t >= c.Lease {
			return bad("Lease", fmt.Sprintf("%v must exceed the timeout of kind %q (%v)", c.Lease, kind, t))
		}
	}
	return c, nil
}

// longestTimeout returns the longest handler Timeout: the pool's Timeout or a kind's.
func (c *Config) longestTimeout() time.Duration {
	longest := c.Timeout
	for _, h := range c.Handlers.byKind {
		longest = max(longest, c.timeout(h))
	}
	return longest
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

func (c *Config) backoff(h *handler) txinbox.Backoff {
	if h != nil && h.cfg.Backoff != nil {
		return h.cfg.Backoff
	}
	return c.Backoff
}

var _ txinbox.Service = (*Pool)(nil)

// Pool claims and handles the messages of one consumer. Create it with New, then Start and Stop it.
type Pool struct {
	eng     *engine.Base  // the engine, and the Store's Logger and statements
	store   txinbox.Store // resolved
	cfg     Config
	lockKey int64 // the advisory lock of messages taken over alone (ClaimSuspects)
	// snoozeKey is the advisory lock between SnoozeBlocked and ReadyNext (LockSnooze).
	snoozeKey int64
	tracer    txinbox.OperationTracer // the Store's Tracer, or nil
	maxTO     time.Duration           // longest handler timeout: the batch statement_timeout
	// claimMax is the most messages claimed at once: Config.BatchSize, or the largest
	// HandlerConfig.BatchSize of a batch handler if larger.
	claimMax int

	epoch       time.Time
	lastMessage atomic.Int64 // ns since epoch of the last claim that returned messages
	snoozedAt   time.Time    // the rescuer's last SnoozeBlocked
	records     records      // the connection batches are recorded on
	// turn is held by the runner whose claim of ready messages is running; cursor is where the
	// next one starts (guarded by turn; claim.go, "The claim cursor").
	turn   chan struct{}
	cursor cursor

	mu       sync.Mutex
	inflight map[*batch]struct{} // batch transactions not yet ended (guarded by mu)

	// Set by tests only (export_test.go), before Start.
	claimHook      func(msgs []*claimed) // runs between a batch's claim (recorded) and its handlers
	orderingSnooze time.Duration         // replaces defaultOrderingSnooze when not zero
}

// New returns a pool handling cfg.Consumer's messages in store (whose DB, usually a *pgxpool.Pool,
// it uses Concurrency+2 connections of at most; whose Retention it stamps on each message it
// completes; whose NotifyInterval sets how long it polls fast after activity, and, negative, turns
// its LISTEN off).
//
// New checks store and cfg (a *[txinbox.ConfigError] says which field is wrong) and freezes
// cfg.Handlers: Handle panics on them afterwards. It does not touch the database; Start does.
func New(store txinbox.Store, cfg Config) (*Pool, error) {
	store, err := store.Resolve()
	if err != nil {
		return nil, err
	}
	cfg, err = cfg.withDefaults(store)
	if err != nil {
		return nil, err
	}
	cfg.Handlers.frozen.Store(true)
	h := fnv.New64a()
	h.Write([]byte("txinbox.rescue\x00" + store.Schema + "\x00" + cfg.Consumer))
	lockKey := int64(h.Sum64() >> 1)
	h.Reset()
	h.Write([]byte("txinbox.snooze\x00" + store.Schema + "\x00" + cfg.Consumer))
	p := &Pool{store: store, cfg: cfg, lockKey: lockKey, snoozeKey: int64(h.Sum64() >> 1), epoch: time.Now(), inflight: map[*batch]struct{}{}, turn: make(chan struct{}, 1)}
	p.eng = engine.NewBase(store.DB, store.Logger, store.Schema, engine.Config{Runners: cfg.Concurrency, PollInterval: cfg.PollInterval,
		Attrs: []any{"consumer", cfg.Consumer}, Listen: listen(store, cfg.Consumer)}, cfg.tune.Tune, "txinbox listener")
	p.tracer = store.Tracer
	p.claimMax = cfg.BatchSize
	p.records.connect = engine.Connector(store.DB, "txinbox recorder")
	p.records.pooled.Store(p.records.connect != nil) // until its connection shows otherwise
	for _, hd := range cfg.Handlers.byKind {
		p.maxTO = max(p.maxTO, cfg.timeout(hd))
		if hd.batch != nil {
			p.claimMax = max(p.claimMax, hd.cfg.BatchSize)
		}
	}
	return p, nil
}

// Start checks that the schema has txinbox's tables (an error matching txinbox.ErrNotMigrated if not;
// if the database cannot be asked, it logs a warning and starts anyway, since claims retry) and,
// when the Store's DB is a *pgxpool.Pool in pgx's default query exec mode, that no pooler in
// transaction mode is found in between that would lose its named prepared statements (an error
// matching txinbox.ErrPooler, which names default_query_exec_mode=exec; docs/operations.md,
// "PgBouncer"), then
// starts Concurrency batch runners, one rescuer (which charges the batches that never finished
// and takes their messages over in groups: see the package documentation, "Crash recovery"), the
// pool's heartbeat (package documentation, "Maintenance"), and returns. Each runner holds one connection while it
// runs a batch; the rescuer and the heartbeat one more now and then: a *pgxpool.Pool with
// Concurrency+2 connections rarely makes a runner wait. (The schema's maintainer is not the pool's:
// package runner runs one per process.) When its MaxConns is below Concurrency, Start
// logs a warning once: fewer batches than Concurrency can run at once. With a *pgxpool.Pool, the
// pool also opens two connections of its own, outside it: one it listens on, and one its batches
// are recorded on (RecordBatch), so that a runner holding its batch's connection never waits for
// another. (Behind a pooler in transaction mode a record needs a server session of the pooler's
// besides the batch's: runners then claim in turn, and Concurrency batches at once need Concurrency+1
// server connections for the pool; docs/operations.md, "PgBouncer".)
//
// ctx is used for the check and bounds the pool's life: when it ends, the pool stops as with Stop on
// an expired ctx, which abandons the batches in flight at once. To let in-flight work finish on
// SIGTERM, do not pass the ctx that the signal cancels: pass a ctx that outlives it
// (context.Background()), and call Stop with a deadline when the signal comes:
//
//	sigCtx, _ := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
//	_ = p.Start(context.Background())
//	<-sigCtx.Done()
//	stopCtx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
//	defer cancel()
//	err := p.Stop(stopCtx) // in-flight batches finish and commit, or are abandoned at the deadline
func (p *Pool) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.eng.Started() {
		return errors.New("txinbox: pool already started")
	}
	if err := p.eng.CheckStart(ctx, p.checkSchema, "txinbox: could not check the schema's tables; starting anyway",
		"consumer", p.cfg.Consumer, "schema", p.store.Schema); err != nil {
		return err
	}
	p.beat(ctx)
	p.warnPoolSize()
	if pooled, err := pooler.Behind(ctx, p.store.DB); err == nil {
		p.records.pooled.Store(pooled) // else as assumed, until the records connection opens
	}
	return p.eng.Start(ctx, engine.Hooks{
		NewRunner:  func() engine.Runner { return &runner{p: p} },
		Extra:      []func(context.Context){p.rescue, p.heartbeat},
		OnDeadline: p.atDeadline,
		AfterStop: func(ctx context.Context) {
			p.records.close()
			p.gone(ctx)
		},
	})
}

// checkSchema returns an error matching txinbox.ErrNotMigrated unless both tables exist and may be used.
func (p *Pool) checkSchema(ctx context.Context) error {
	row, err := schemasql.Queries.SchemaTables(ctx, p.store.DB, p.eng.St.Table("inbox"), p.eng.St.Table("inbox_queue"))
	if err != nil {
		return fmt.Errorf("txinbox: checking the schema %q: %w", p.store.Schema, err)
	}
	var missing []string
	if !row.Inbox {
		missing = append(missing, "inbox")
	}
	if !row.Queue {
		missing = append(missing, "inbox_queue")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: schema %q: no table %s, or this role may not read and write it",
			txinbox.ErrNotMigrated, p.store.Schema, strings.Join(missing, " or "))
	}
	return nil
}

// warnPoolSize warns when db is a *pgxpool.Pool too small for the pool's runners.
func (p *Pool) warnPoolSize() {
	pool, ok := p.store.DB.(*pgxpool.Pool)
	if !ok {
		return
	}
	if have := int(pool.Config().MaxConns); have < p.cfg.Concurrency {
		p.eng.Log.Warn("txinbox: the pgxpool has fewer connections than Concurrency; fewer batches run at once",
			"consumer", p.cfg.Consumer, "max_conns", have, "concurrency", p.cfg.Concurrency, "recommended_max_conns", p.cfg.Concurrency+2)
	}
}

// StopError is returned by Stop when its ctx ended while batches were still running.
type StopError struct {
	// Abandoned is the number of batches still running at the deadline, and Messages the number of
	// messages claimed in them. Their transactions were rolled back (their connections closed) and
	// their messages handed back as pending, not charged an attempt.
	Abandoned, Messages int
	// Err is the ctx's error (context.DeadlineExceeded or context.Canceled).
	Err error
}

func (e *StopError) Error() string {
	return fmt.Sprintf("txinbox: stopped at the deadline: %d batches (%d messages) abandoned: %v", e.Abandoned, e.Messages, e.Err)
}

// Unwrap returns Err, so errors.Is(err, context.DeadlineExceeded) holds.
func (e *StopError) Unwrap() error { return e.Err }

// Stop stops the pool: it claims no more and waits until the batches in flight have finished or ctx
// ends. Batches that finish in time commit as usual, and Stop returns nil.
//
// When ctx ends first, Stop returns at once with a *StopError. It cancels the handlers' contexts and
// abandons the batches still running: it closes their connections, so the server rolls their
// transactions back (nothing a handler wrote is kept), and hands their messages back as pending without
// charging them an attempt (if the database cannot be reached for that, another worker takes them over
// when their lease ends). A handler that ignores its ctx keeps running in its goroutine until it
// returns, but nothing it does can commit; its goroutine holds its (closed) connection until then, so
// pgxpool.Pool.Close waits for it: a process that is shutting down can exit instead.
//
// Every call returns the result of the first: a Stop after the ctx given to Start ended reports what
// that stop did. A later call waits for the first to finish (or for its own ctx).
func (p *Pool) Stop(ctx context.Context) error { return p.eng.Stop(ctx) }

// atDeadline runs when Stop's ctx ends with batches still running (their handlers' contexts are
// cancelled): it abandons them and returns a *StopError, or, if none was running, waits for the
// runners' claims and sleeps to end with the cancelled context and returns nil.
func (p *Pool) atDeadline(ctx context.Context) error {
	if batches, messages := p.abandon(); batches > 0 {
		return &StopError{Abandoned: batches, Messages: messages, Err: ctx.Err()}
	}
	<-p.eng.Done()
	return nil
}

// abandon gives up on every batch in flight: it closes their connections (the server rolls their
// transactions back) and deletes their inbox_batch rows, so that their messages are not charged.
func (p *Pool) abandon() (batches, messages int) {
	p.mu.Lock()
	var records []int64
	for b := range p.inflight {
		b.abandoned.Store(true)
		if b.conn != nil {
			// Closed under the lock: a runner detaches its connection (under the lock) before it
			// commits or gives it back to the pgxpool, where closing it would break another user.
			_ = b.conn.Close()
			b.conn = nil
		}
		if b.record != 0 {
			records = append(records, b.record)
			messages += len(b.msgs)
		}
	}
	batches = len(records)
	p.mu.Unlock()
	if batches == 0 {
		return 0, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	err := p.release(ctx, records)
	p.eng.Log.Warn("txinbox: stop deadline reached; batches still running were abandoned and rolled back",
		"consumer", p.cfg.Consumer, "batches", batches, "messages", messages, "release_err", err)
	return batches, messages
}

// releaseTimeout bounds how long Stop spends handing abandoned batches back.
const releaseTimeout = 2 * time.Second

// release deletes the inbox_batch rows of batches that rolled back (SettleBatch), so that their
// messages are free and uncharged. With a *pgxpool.Pool it uses a connection of its own: the pool's
// may all be held by abandoned batches whose goroutines have not returned. If it fails, the rescuer
// charges those batches as batches that never finished.
func (p *Pool) release(ctx context.Context, records []int64) error {
	var db sqlc.DBTX = p.store.DB
	if pool, ok := p.store.DB.(*pgxpool.Pool); ok {
		conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
		db = conn
	}
	for _, r := range records {
		if _, err := schemasql.Queries.SettleBatch(ctx, p.eng.St.Wrap(db), sqlc.SettleBatchParams{Consumer: p.cfg.Consumer, Batch: r}); err != nil {
			return err
		}
	}
	return nil
}

// track registers b as in flight, with its transaction's connection, so that Stop can close it;
// endTx ends it.
func (p *Pool) track(b *batch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := b.tx.Conn(); c != nil && c.PgConn() != nil {
		b.conn = c.PgConn().Conn()
		if tc, ok := b.conn.(*tls.Conn); ok {
			b.conn = tc.NetConn() // closing the TLS layer could wait for a blocked writer
		}
	}
	p.inflight[b] = struct{}{}
}

// detach takes b's connection out of Stop's reach: the runner is about to commit, or to give the
// connection back to the pgxpool (where another user may get it), so Stop must not close it anymore.
func (p *Pool) detach(b *batch) {
	p.mu.Lock()
	b.conn = nil
	p.mu.Unlock()
}

// endTx rolls b's transaction back if it is still open (a closed connection is dropped by the
// pgxpool), which gives its connection back.
func (p *Pool) endTx(ctx context.Context, b *batch) {
	p.detach(b)
	_ = b.tx.Rollback(context.WithoutCancel(ctx))
}

// untrack stops tracking b: the runner is done with it.
func (p *Pool) untrack(b *batch) {
	p.mu.Lock()
	delete(p.inflight, b)
	p.mu.Unlock()
}

// running reports whether the batch row record is one of the pool's batches not yet done with
// (running, or settling after a rollback).
func (p *Pool) running(record int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for b := range p.inflight {
		if b.record == record {
			return true
		}
	}
	return false
}

// Wake tells an idle pool that a message may be ready, so it claims before its poll interval ends.
// The pool's own notifications do this for messages received by any process; call it after receiving
// a message when listening is off.
func (p *Pool) Wake() { p.eng.Wake() }

// runner is one batch runner of the pool: it claims a batch (engine.Runner's Claim) and runs it.
type runner struct {
	p *Pool
	b *batch // claimed, to run
}

func (r *runner) Claim(ctx context.Context) (engine.Outcome, error) {
	b, err := r.p.claim(ctx, false)
	if err != nil || b == nil {
		return engine.Idle, err
	}
	r.b = b
	r.p.lastMessage.Store(int64(time.Since(r.p.epoch)))
	if len(b.msgs) >= r.p.cfg.BatchSize {
		return engine.Full, nil
	}
	return engine.Partial, nil
}

func (r *runner) Run(ctx context.Context) {
	b := r.b
	r.b = nil
	if r.p.claimHook != nil {
		r.p.claimHook(b.msgs)
	}
	r.p.run(ctx, b)
}

func (r *runner) Rest(context.Context) {}

func (r *runner) Done(context.Context) {}

// rescue is the rescuer, until Stop: it charges the batches that never finished, then takes their
// messages over group after group while any is due, and sleeps PollInterval when none is (a Wake
// does not end its sleep: suspects appear when leases end, not when messages arrive).
func (p *Pool) rescue(ctx context.Context) {
	first := min(p.cfg.PollInterval, time.Second)
	errDelay := first
	for !p.eng.Stopped() {
		err := p.charge(ctx)
		var b *batch
		if err == nil {
			b, err = p.claim(ctx, true)
		}
		if err != nil {
			if ctx.Err() == nil {
				p.eng.Log.Warn("txinbox: claim failed", "consumer", p.cfg.Consumer, "err", err)
			}
			p.eng.Sleep(ctx, errDelay, false)
			errDelay = min(errDelay*2, 30*time.Second)
			continue
		}
		errDelay = first
		if b != nil {
			p.tookOver(ctx, b)
			if p.claimHook != nil {
				p.claimHook(b.msgs)
			}
			p.run(ctx, b)
			continue // claim again at once
		}
		p.snoozeBlocked(ctx)
		p.eng.Sleep(ctx, p.cfg.PollInterval, false)
	}
}

// defaultOrderingSnooze is how long a claim puts off a message blocked behind an older message of
// its ordering key. The worker finishing the older message makes it ready at once (ReadyNext); the
// snooze only bounds the wait if that worker dies between its commit and ReadyNext.
const defaultOrderingSnooze = 30 * time.Second

// snooze returns the pool's ordering snooze: defaultOrderingSnooze unless a test set another.
func (p *Pool) snooze() time.Duration {
	if p.orderingSnooze != 0 {
		return p.orderingSnooze
	}
	return defaultOrderingSnooze
}
