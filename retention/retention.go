package inbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/store"
)

// Defaults and limits of CleanOptions and CleanerConfig.
const (
	DefaultCleanBatchSize    = 1000
	MaxCleanBatchSize        = 100000
	DefaultCleanInterval     = time.Minute
	DefaultFullSweepInterval = time.Hour
	cleanSpanFactor          = 10 // a statement reads at most BatchSize*cleanSpanFactor ids
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
	Deleted int64 // expired rows deleted
	Batches int   // delete statements run
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
		return o, &ArgumentError{Name: "BatchSize", Reason: fmt.Sprintf("%d is not between 1 and %d", o.BatchSize, MaxCleanBatchSize)}
	}
	if o.MaxBatches < 0 {
		return o, &ArgumentError{Name: "MaxBatches", Reason: "must not be negative"}
	}
	return o, nil
}

// Clean deletes every completed message whose dedup window has ended (see Cleaner) in one pass over
// the whole table. It walks the primary key in id order, in spans of 10*o.BatchSize ids; each
// statement deletes at most o.BatchSize rows of one span, in a short transaction of its own. It never
// waits on a row lock (rows locked by receivers or workers are skipped and left for the next pass)
// and holds no lock between statements, so receiving and processing go on while it runs. It stops
// between statements when ctx ends, returning the work done so far with ctx's error. Its cost is a
// read of the whole table (0.6 to 1.3 s per million rows on a loaded 2-core machine, see
// BenchmarkCleanPass); the Cleaner does this only every FullSweepInterval. Several Clean calls may run at once safely.
func (c *Client) Clean(ctx context.Context, o CleanOptions) (CleanResult, error) {
	o, err := o.withDefaults()
	if err != nil {
		return CleanResult{}, err
	}
	maxID, err := store.Queries.MaxMessageID(ctx, c.st.Wrap(c.db))
	if err != nil {
		return CleanResult{}, translateError(err)
	}
	r, err := c.cleanWalk(o, 0, maxID, false, nil).run(ctx)
	r.Full = true
	return r.CleanResult, err
}

func (c *Client) cleanWalk(o CleanOptions, from, to int64, quick bool, check func(context.Context) error) *walk {
	db := c.st.Wrap(c.db)
	w := &walk{
		from: from, to: to, batch: int64(o.BatchSize), span: int64(o.BatchSize) * cleanSpanFactor,
		maxBatches: o.MaxBatches, check: check,
		del: func(ctx context.Context, after, until int64) (picked, deleted, last int64, err error) {
			r, err := store.Queries.CleanExpiredRange(ctx, db, sqlc.CleanExpiredRangeParams{AfterID: after, UntilID: until, MaxRows: int32(o.BatchSize)})
			return r.Picked, r.Deleted, r.LastID, err
		},
	}
	if quick {
		w.live = func(ctx context.Context, after, until int64) (bool, error) {
			return store.Queries.HasLiveCompleted(ctx, db, after, until)
		}
	}
	return w
}

// walk deletes rows in id order, over the ids above from and up to to, in spans of span ids: each
// delete statement covers part of one span and deletes at most batch rows.
type walk struct {
	from, to    int64
	batch, span int64
	maxBatches  int
	check       func(context.Context) error // called between statements; an error ends the walk
	del         func(ctx context.Context, after, until int64) (picked, deleted, last int64, err error)
	// live, for a quick walk, reports whether a span holds records still in their window: the walk
	// stops at the first span that holds some and nothing to delete.
	live func(ctx context.Context, after, until int64) (bool, error)
}

type walkResult struct {
	CleanResult
	next       int64 // every id up to next is done: a cut-short walk resumes after it
	liveAt     int64 // a quick walk that stopped: the start of the span where it stopped; else -1
	expiredEnd int64 // the end of the last span where rows were deleted; 0 if none
}

func (w *walk) run(ctx context.Context) (walkResult, error) {
	r := walkResult{next: w.from, liveAt: -1}
	after, until, spanStart := w.from, w.from, w.from
	var pickedInSpan int64
	for {
		if after >= until { // start the next span
			if after >= w.to {
				r.Done = true
				return r, nil
			}
			spanStart, until, pickedInSpan = after, min(after+w.span, w.to), 0
		}
		if w.maxBatches > 0 && r.Batches >= w.maxBatches {
			return r, nil
		}
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if w.check != nil && r.Batches > 0 {
			if err := w.check(ctx); err != nil {
				return r, err
			}
		}
		picked, deleted, last, err := w.del(ctx, after, until)
		if err != nil {
			return r, translateError(err)
		}
		r.Batches++
		r.Deleted += deleted
		pickedInSpan += picked
		if picked >= w.batch { // the span may hold more
			after, r.next = last, last
			continue
		}
		if pickedInSpan > 0 {
			r.expiredEnd = until
		} else if w.live != nil {
			live, err := w.live(ctx, spanStart, until)
			if err != nil {
				return r, translateError(err)
			}
			if live {
				r.liveAt, r.Done = spanStart, true
				return r, nil
			}
		}
		after, r.next = until, until
	}
}

// CleanerLockKey returns the key of the PostgreSQL advisory lock a Cleaner holds, for the length of a
// pass, for schema. It shows in pg_locks (locktype advisory, classid and objid its high and low 32
// bits).
func CleanerLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("txinbox.cleaner:" + schema))
	return int64(h.Sum64() >> 1)
}

// CleanerConfig configures a Cleaner. The zero value is valid.
type CleanerConfig struct {
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
	// Logger receives a line per pass that deleted something (Info) and per failed pass (Warn).
	// Default slog.Default().
	Logger *slog.Logger
}

// Cleaner deletes expired dedup records periodically.
//
// Retention: a completed message's row is its dedup record. While it is kept, a redelivery of its key
// is reported as a Duplicate (with the stored result) and not run again. The worker sets the end of
// that window when the message completes: expires_at = completed_at + worker Config.Retention
// (default 7 days). After it, the key is accepted again as a new message: Receive reuses the expired
// row (Outcome Inserted) even if the cleaner has not deleted it yet, and once the row is deleted a new
// one is inserted. The cleaner only keeps the table from growing, so when it deletes a row does not
// change what receiving does. Pending and processing messages never expire, and dead messages are
// kept until replayed, discarded or purged (see ReplayDead, DiscardDead and Purge).
//
// Cost: the inbox table has no index on expiry (so that every state change stays a HOT update), and
// finding expired rows means reading the table. Messages expire in roughly the order they were
// received, which is id order, so a pass normally starts where the previous one found the first
// records still in their window, deletes what expired since, and stops at the first span of ids
// holding such records and nothing expired: a few short statements. Rows that expire behind that
// point (a message that completed long after the ones received with it, or a consumer whose workers
// keep a shorter Retention) are deleted by the full pass made every FullSweepInterval, which reads
// the whole table in short statements (Clean).
//
// Run a Cleaner in every process that runs workers (or in one of them): only one Cleaner per schema
// runs a pass at any time, across all processes, because a pass holds a transaction-scoped PostgreSQL
// advisory lock (CleanerLockKey) taken with pg_try_advisory_xact_lock; a Cleaner that finds it taken
// skips that pass. The lock is held in an otherwise idle transaction on one connection of the pool
// while the statements run on others, so the pool needs at least two connections; the lock ends with
// that transaction, or with its connection if the process dies.
type Cleaner struct {
	c   *Client
	cfg CleanerConfig
	opt CleanOptions
	key int64
	log *slog.Logger

	mu       sync.Mutex // held by a running pass
	cursor   int64      // quick passes start after this id
	lastFull time.Time  // start of the last full pass that finished; zero: none yet
	fullNext int64      // a full pass cut short resumes after this id; -1: none in progress
}

// NewCleaner returns a Cleaner of the client's schema. The client's DB must be a connection pool (a
// *pgxpool.Pool, say): a *pgx.Conn or a pgx.Tx returns a *ConfigError, since the batches would run
// inside the lock's transaction.
func (c *Client) NewCleaner(cfg CleanerConfig) (*Cleaner, error) {
	switch c.db.(type) {
	case *pgx.Conn, pgx.Tx:
		return nil, &ConfigError{Field: "DB", Reason: "the cleaner needs a connection pool (*pgxpool.Pool): it holds its lock on one connection and deletes on others"}
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultCleanInterval
	}
	if cfg.FullSweepInterval == 0 {
		cfg.FullSweepInterval = DefaultFullSweepInterval
	}
	if cfg.Interval < 0 || cfg.FullSweepInterval < 0 {
		return nil, &ConfigError{Field: "Interval", Reason: "Interval and FullSweepInterval must not be negative"}
	}
	opt, err := CleanOptions{BatchSize: cfg.BatchSize, MaxBatches: cfg.MaxBatches}.withDefaults()
	if err != nil {
		var ae *ArgumentError
		if errors.As(err, &ae) {
			return nil, &ConfigError{Field: ae.Name, Reason: ae.Reason}
		}
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Cleaner{c: c, cfg: cfg, opt: opt, key: CleanerLockKey(c.cfg.Schema), log: log.With("schema", c.cfg.Schema), fullNext: -1}, nil
}

// RunOnce runs one pass, a full one if one is due (see Cleaner), unless another Cleaner of the schema
// (in any process) or another call of this one is running a pass: then ran is false and nothing is
// deleted.
func (cl *Cleaner) RunOnce(ctx context.Context) (res CleanResult, ran bool, err error) {
	if !cl.mu.TryLock() {
		return res, false, nil
	}
	defer cl.mu.Unlock()
	tx, err := cl.c.db.Begin(ctx)
	if err != nil {
		return res, false, translateError(err)
	}
	// Rolling back ends the transaction and releases the lock; it wrote nothing.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	locked, err := store.Queries.TryCleanerLock(ctx, tx, cl.key)
	if err != nil {
		return res, false, translateError(err)
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
	maxID, err := store.Queries.MaxMessageID(ctx, cl.c.st.Wrap(cl.c.db))
	if err != nil {
		return res, true, translateError(err)
	}
	start := time.Now()
	full := cl.fullNext >= 0 || cl.lastFull.IsZero() || start.Sub(cl.lastFull) >= cl.cfg.FullSweepInterval
	from := cl.cursor
	if full {
		from = max(cl.fullNext, 0)
	}
	r, err := cl.c.cleanWalk(cl.opt, from, maxID, !full, check).run(ctx)
	r.Full = full
	switch {
	case full && r.Done:
		cl.fullNext, cl.lastFull = -1, start
	case full:
		cl.fullNext = r.next
	case r.liveAt >= 0:
		cl.cursor = r.liveAt
	case r.expiredEnd > cl.cursor:
		cl.cursor = r.expiredEnd
	}
	return r.CleanResult, true, err
}

// Run runs a pass at once and then every Interval until ctx ends, and returns nil then. Failed passes
// are logged and retried at the next interval.
func (cl *Cleaner) Run(ctx context.Context) error {
	t := time.NewTicker(cl.cfg.Interval)
	defer t.Stop()
	for {
		start := time.Now()
		res, ran, err := cl.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			cl.log.Warn("txinbox: cleaning failed", "err", err, "deleted", res.Deleted)
		case ran && res.Deleted > 0:
			cl.log.Info("txinbox: cleaned expired messages", "deleted", res.Deleted, "batches", res.Batches,
				"full", res.Full, "done", res.Done, "duration", time.Since(start))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
