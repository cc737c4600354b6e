// Package retention deletes expired records: completed messages past their dedup window
// (Store.Retention) and expired idempotency keys. A [Cleaner] (made by [New]) does it periodically as
// a [txinbox.Service] (Start, Stop), or once ([Cleaner.Clean], [Cleaner.RunOnce]).
//
// Clean is txinbox's word for this automatic deletion; an operator deleting chosen messages uses
// package admin (Discard).
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/store"
	"github.com/txinbox/txinbox/internal/walk"
)

var _ txinbox.Service = (*Cleaner)(nil)

// statements returns the statement rewriter of schema.
func statements(schema string) *store.Store { return store.New(schema) }

// Defaults and limits of CleanOptions and Config.
const (
	DefaultCleanBatchSize    = 1000
	MaxCleanBatchSize        = 100000
	DefaultCleanInterval     = time.Minute
	DefaultFullSweepInterval = time.Hour
)

// CleanOptions bounds one cleaning pass.
type CleanOptions struct {
	// BatchSize is the most rows one statement (one short transaction) deletes; a statement also
	// reads at most 10*BatchSize ids of the primary key. Default DefaultCleanBatchSize (1000); at most
	// MaxCleanBatchSize.
	BatchSize int
	// MaxBatches stops the pass after that many statements even if expired rows remain. Default 0:
	// no limit.
	MaxBatches int
}

// CleanResult reports one cleaning pass.
type CleanResult struct {
	Deleted     int64 // expired inbox rows deleted
	Batches     int   // delete statements run on the inbox table
	KeysDeleted int64 // expired idempotency keys deleted (package idempotency)
	// Full is true for a pass that walked (or is walking) the whole table, false for a Cleaner's
	// quick pass that starts where expiries were found last time.
	Full bool
	// Done is true when the pass ended normally: false when MaxBatches or ctx cut it short (a
	// Cleaner's next pass resumes it).
	Done bool
}

func (o CleanOptions) withDefaults() (CleanOptions, error) {
	if o.BatchSize == 0 {
		o.BatchSize = DefaultCleanBatchSize
	}
	if o.BatchSize < 0 || o.BatchSize > MaxCleanBatchSize {
		return o, &txinbox.ArgumentError{Name: "BatchSize", Reason: fmt.Sprintf("%d is not between 1 and %d", o.BatchSize, MaxCleanBatchSize)}
	}
	if o.MaxBatches < 0 {
		return o, &txinbox.ArgumentError{Name: "MaxBatches", Reason: "must not be negative"}
	}
	return o, nil
}

// Config configures a Cleaner. The zero value is valid.
type Config struct {
	// Interval is the time between the starts of two passes. Default DefaultCleanInterval (1 min).
	Interval time.Duration
	// FullSweepInterval is how often a pass walks the whole table (see Cleaner); the first pass of
	// a Cleaner always does. Default DefaultFullSweepInterval (1 h).
	FullSweepInterval time.Duration
	// BatchSize is the most rows one statement deletes. Default DefaultCleanBatchSize (1000).
	BatchSize int
	// MaxBatches bounds the statements of one pass; the next pass goes on from there. Default 0: no
	// limit.
	MaxBatches int
	// BatchSize also bounds each statement deleting idempotency keys.
	// Logger receives a line per pass that deleted something (Info) and per failed pass (Warn).
	// Default slog.Default().
	Logger *slog.Logger
}

// Cleaner deletes expired dedup records and expired idempotency keys periodically.
//
// Retention: a completed message's row is its dedup record. While it is kept, a redelivery of its key
// is reported as a Duplicate (with the stored result) and not run again. The worker sets the end of
// that window when the message completes: expires_at = completed_at + Store.Retention (default 7
// days). After it, the key is accepted again as a new message: Receive reuses the expired
// row (Outcome Inserted) even if the cleaner has not deleted it yet, and once the row is deleted a new
// one is inserted. The cleaner only keeps the table from growing, so when it deletes a row does not
// change what receiving does. Pending and processing messages never expire, and dead messages are
// kept until an operator replays or discards them (package admin).
//
// Cost: the inbox table has no index on expiry (so that every state change stays a HOT update), and
// finding expired rows means reading the table. Messages expire in roughly the order they were
// received, which is id order, so a pass normally starts where the previous one found the first
// records still in their window, deletes what expired since, and stops at the first span of ids
// holding such records and nothing expired: a few short statements. Rows that expire behind that
// point (a message that completed long after the ones received with it, or a consumer whose workers
// used a shorter Retention) are deleted by the full pass made every FullSweepInterval, which reads
// the whole table in short statements (Clean). Expired idempotency keys are deleted after the inbox
// rows of every pass, oldest expiry first, BatchSize per statement.
//
// Run a Cleaner in every process that runs workers (or in one of them): only one Cleaner per schema
// runs a pass at any time, across all processes, because a pass holds a transaction-scoped PostgreSQL
// advisory lock (Store.CleanerLockKey) taken with pg_try_advisory_xact_lock; a Cleaner that finds it taken
// skips that pass. The lock is held in an otherwise idle transaction on one connection of the pool
// while the statements run on others, so the pool needs at least two connections; the lock ends with
// that transaction, or with its connection if the process dies.
type Cleaner struct {
	store txinbox.Store
	st    *store.Store
	cfg   Config
	opt   CleanOptions
	key   int64
	log   *slog.Logger

	life sync.Mutex // guards stop and done
	stop context.CancelFunc
	done chan struct{}

	mu       sync.Mutex       // held by a running pass
	cursor   map[string]int64 // per consumer: quick passes start after this id
	lastFull time.Time        // start of the last full pass that finished; zero: none yet
	// fullNext holds, while a full pass is in progress (cut short by MaxBatches or ctx), the consumers
	// it has yet to finish and the id after which each one resumes; nil when none is in progress.
	fullNext map[string]int64
}

// New returns a Cleaner of store. store.DB must be a connection pool (a *pgxpool.Pool, say): a
// *pgx.Conn or a pgx.Tx returns a *[txinbox.ConfigError] (Field "Store.DB"), since the batches would
// run inside the lock's transaction; so does any invalid field of store or cfg.
func New(store txinbox.Store, cfg Config) (*Cleaner, error) {
	store, err := store.Resolve()
	if err != nil {
		return nil, err
	}
	switch store.DB.(type) {
	case *pgx.Conn, pgx.Tx:
		return nil, &txinbox.ConfigError{Field: "Store.DB", Reason: "the cleaner needs a connection pool (*pgxpool.Pool): it holds its lock on one connection and deletes on others"}
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultCleanInterval
	}
	if cfg.FullSweepInterval == 0 {
		cfg.FullSweepInterval = DefaultFullSweepInterval
	}
	if cfg.Interval < 0 || cfg.FullSweepInterval < 0 {
		return nil, &txinbox.ConfigError{Field: "Interval", Reason: "Interval and FullSweepInterval must not be negative"}
	}
	opt, err := CleanOptions{BatchSize: cfg.BatchSize, MaxBatches: cfg.MaxBatches}.withDefaults()
	if err != nil {
		var ae *txinbox.ArgumentError
		if errors.As(err, &ae) {
			return nil, &txinbox.ConfigError{Field: ae.Name, Reason: ae.Reason}
		}
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Cleaner{store: store, st: statements(store.Schema), cfg: cfg, opt: opt, key: store.CleanerLockKey(),
		log: log.With("schema", store.Schema), cursor: map[string]int64{}}, nil
}

// Clean deletes every completed message whose dedup window has ended (see Cleaner) in one pass over
// the whole table, then every expired idempotency key, without the Cleaner's lock. It walks the
// primary key in id order, one consumer after the other (each statement names its consumer, as every
// statement of txinbox does: SCALING.md), in spans of 10*o.BatchSize ids; each statement deletes at most
// o.BatchSize rows of one span, in a short transaction of its own. It never waits on a row lock (rows
// locked by receivers or workers are skipped and left for the next pass) and holds no lock between
// statements, so receiving and processing go on while it runs. It stops between statements when ctx
// ends, returning the work done so far with ctx's error. Its cost is a read of the whole table (see
// BenchmarkCleanPass); the Cleaner does this only every FullSweepInterval. Several Clean calls may run
// at once safely. Bad options return a *[txinbox.ArgumentError].
func (cl *Cleaner) Clean(ctx context.Context, o CleanOptions) (CleanResult, error) {
	o, err := o.withDefaults()
	if err != nil {
		return CleanResult{}, err
	}
	db := cl.st.Wrap(cl.store.DB)
	maxID, err := store.Queries.MaxMessageID(ctx, db)
	if err != nil {
		return CleanResult{}, store.Err(err)
	}
	consumers, err := store.Consumers(ctx, db)
	if err != nil {
		return CleanResult{}, store.Err(err)
	}
	res := CleanResult{Full: true, Done: true}
	for _, consumer := range consumers {
		if spent(o, res.Batches) {
			res.Done = false
			return res, nil
		}
		r, err := cl.walk(o, consumer, 0, maxID, false, res.Batches, nil).Run(ctx)
		res.Deleted, res.Batches = res.Deleted+r.Deleted, res.Batches+r.Batches
		if err != nil || !r.Done {
			res.Done = false
			return res, err
		}
	}
	res.KeysDeleted, err = cl.cleanKeys(ctx, o.BatchSize, nil)
	return res, err
}

// walk returns the walk of one consumer's ids in (from, to]: every statement names the consumer
// (store.Consumers). ran is the number of statements the pass has already run, counted against
// o.MaxBatches (see spent).
func (cl *Cleaner) walk(o CleanOptions, consumer string, from, to int64, quick bool, ran int, check func(context.Context) error) *walk.Walk {
	db := cl.st.Wrap(cl.store.DB)
	w := &walk.Walk{
		From: from, To: to, Batch: int64(o.BatchSize), Span: int64(o.BatchSize) * walk.SpanFactor,
		Check: check, Err: store.Err,
		Delete: func(ctx context.Context, after, until int64) (picked, deleted, last int64, err error) {
			r, err := store.Queries.CleanExpiredRange(ctx, db, sqlc.CleanExpiredRangeParams{
				Consumer: consumer, AfterID: after, UntilID: until, MaxRows: int32(o.BatchSize)})
			return r.Picked, r.Deleted, r.LastID, err
		},
	}
	if o.MaxBatches > 0 {
		w.MaxBatches = o.MaxBatches - ran // the callers run no walk once nothing is left
	}
	if quick {
		w.Live = func(ctx context.Context, after, until int64) (bool, error) {
			return store.Queries.HasLiveCompleted(ctx, db, sqlc.HasLiveCompletedParams{Consumer: consumer, AfterID: after, UntilID: until})
		}
	}
	return w
}

// spent reports whether a pass that has run batches statements may run no more (o.MaxBatches).
func spent(o CleanOptions, batches int) bool { return o.MaxBatches > 0 && batches >= o.MaxBatches }

// cleanKeys deletes expired idempotency keys, batch rows per statement, until none is left or ctx
// ends (or check fails between statements), and returns how many it deleted. Each statement skips
// rows locked by running requests. Expiry is checked on every read of a key, so how often this runs
// changes only the table's size, never behaviour.
func (cl *Cleaner) cleanKeys(ctx context.Context, batch int, check func(context.Context) error) (int64, error) {
	var total int64
	for {
		n, err := store.Queries.IdemCleanExpired(ctx, cl.st.Wrap(cl.store.DB), int32(batch))
		total += n
		if err != nil {
			return total, store.Err(err)
		}
		if n < int64(batch) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
		if check != nil {
			if err := check(ctx); err != nil {
				return total, err
			}
		}
	}
}

// RunOnce runs one pass, a full one if one is due (see Cleaner), unless another Cleaner of the schema
// (in any process) or another call of this one is running a pass: then ran is false and nothing is
// deleted.
func (cl *Cleaner) RunOnce(ctx context.Context) (res CleanResult, ran bool, err error) {
	if !cl.mu.TryLock() {
		return res, false, nil
	}
	defer cl.mu.Unlock()
	tx, err := cl.store.DB.Begin(ctx)
	if err != nil {
		return res, false, store.Err(err)
	}
	// Rolling back ends the transaction and releases the lock; it wrote nothing.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	locked, err := store.Queries.TryCleanerLock(ctx, tx, cl.key)
	if err != nil {
		return res, false, store.Err(err)
	}
	if !locked {
		return res, false, nil
	}
	// Between statements, make sure the lock is still held (its connection may have been cut). Taking
	// an advisory lock again in the transaction that holds it succeeds at once.
	check := func(ctx context.Context) error {
		locked, err := store.Queries.TryCleanerLock(ctx, tx, cl.key)
		if err == nil && !locked {
			err = errors.New("lock taken by another cleaner")
		}
		if err != nil {
			return fmt.Errorf("txinbox: cleaner lost its lock: %w", err)
		}
		return nil
	}
	db := cl.st.Wrap(cl.store.DB)
	maxID, err := store.Queries.MaxMessageID(ctx, db)
	if err != nil {
		return res, true, store.Err(err)
	}
	consumers, err := store.Consumers(ctx, db)
	if err != nil {
		return res, true, store.Err(err)
	}
	start := time.Now()
	full := cl.fullNext != nil || cl.lastFull.IsZero() || start.Sub(cl.lastFull) >= cl.cfg.FullSweepInterval
	if full && cl.fullNext == nil {
		cl.fullNext = make(map[string]int64, len(consumers))
		for _, c := range consumers {
			cl.fullNext[c] = 0
		}
	}
	res = CleanResult{Full: full, Done: true}
	for _, consumer := range consumers {
		from := cl.cursor[consumer]
		if full {
			next, todo := cl.fullNext[consumer]
			if !todo {
				continue // done earlier in this full pass, or new since it began (the next one covers it)
			}
			from = next
		}
		if spent(cl.opt, res.Batches) {
			res.Done = false
			break
		}
		var r walk.Result
		r, err = cl.walk(cl.opt, consumer, from, maxID, !full, res.Batches, check).Run(ctx)
		res.Deleted, res.Batches = res.Deleted+r.Deleted, res.Batches+r.Batches
		switch {
		case full && r.Done:
			delete(cl.fullNext, consumer)
		case full:
			cl.fullNext[consumer] = r.Next
		case r.LiveAt >= 0:
			cl.cursor[consumer] = r.LiveAt
		case r.ExpiredEnd > cl.cursor[consumer]:
			cl.cursor[consumer] = r.ExpiredEnd
		}
		if err != nil || !r.Done {
			res.Done = false
			break
		}
	}
	if full && res.Done {
		cl.fullNext, cl.lastFull = nil, start
	}
	if err == nil {
		if err = check(ctx); err == nil {
			res.KeysDeleted, err = cl.cleanKeys(ctx, cl.opt.BatchSize, check)
		}
	}
	return res, true, err
}

// Start starts the Cleaner: it runs a pass at once, in a goroutine of its own, and then one every
// Interval until [Cleaner.Stop] or until ctx ends. Failed passes are logged and retried at the next
// interval. A Cleaner starts once: a second Start returns an error.
func (cl *Cleaner) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cl.life.Lock()
	defer cl.life.Unlock()
	if cl.done != nil {
		return errors.New("txinbox: the cleaner was already started")
	}
	runCtx, stop := context.WithCancel(ctx)
	cl.stop, cl.done = stop, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		cl.loop(runCtx)
	}(cl.done)
	return nil
}

// Stop ends the Cleaner's loop (a running pass stops between two statements) and waits until it has
// ended or ctx ends; then it returns an error wrapping ctx's. Stopping a Cleaner never started, or
// already stopped, returns nil.
func (cl *Cleaner) Stop(ctx context.Context) error {
	cl.life.Lock()
	stop, done := cl.stop, cl.done
	cl.life.Unlock()
	if done == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("txinbox: cleaner still running: %w", ctx.Err())
	}
}

func (cl *Cleaner) loop(ctx context.Context) {
	t := time.NewTicker(cl.cfg.Interval)
	defer t.Stop()
	for {
		start := time.Now()
		res, ran, err := cl.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			cl.log.Warn("txinbox: cleaning failed", "err", err, "deleted", res.Deleted)
		case ran && (res.Deleted > 0 || res.KeysDeleted > 0):
			cl.log.Info("txinbox: cleaned expired records", "deleted", res.Deleted, "keys_deleted", res.KeysDeleted,
				"batches", res.Batches, "full", res.Full, "done", res.Done, "duration", time.Since(start))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
