package inbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/internal/store"
)

// Defaults of CleanOptions and CleanerConfig.
const (
	DefaultCleanBatchSize = 1000
	MaxCleanBatchSize     = 100000
	DefaultCleanInterval  = time.Minute
)

// CleanOptions bounds one cleaning pass.
type CleanOptions struct {
	// BatchSize is the most rows one statement (one short transaction) deletes. Default
	// DefaultCleanBatchSize (1000); at most MaxCleanBatchSize.
	BatchSize int
	// MaxBatches stops the pass after that many batches even if expired rows remain (the next pass
	// goes on). Default 0: no limit, the pass ends when no expired row is left.
	MaxBatches int
}

// CleanResult reports one cleaning pass.
type CleanResult struct {
	Deleted int64 // expired rows deleted
	Batches int   // statements run
	// Done is true when the pass walked the whole table: every row expired at its start is deleted,
	// except rows locked at the time (a receiver renewing an expired key). False when MaxBatches or
	// ctx ended it early.
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

// Clean deletes completed messages whose dedup window has ended (see Cleaner), in batches of
// o.BatchSize rows, each one statement in a short transaction of its own, walking the primary key in
// id order. It never waits on a row lock (rows locked by receivers or workers are skipped) and never
// holds more than one batch's locks, so receiving and processing go on while it runs. It stops
// between batches when ctx ends, returning the work done so far with ctx's error. Several Clean calls
// may run at once safely; the Cleaner runs one at a time across processes.
func (c *Client) Clean(ctx context.Context, o CleanOptions) (CleanResult, error) {
	o, err := o.withDefaults()
	if err != nil {
		return CleanResult{}, err
	}
	return c.clean(ctx, o, nil)
}

// clean runs the batches; between batches it calls check (if set), which stops the pass with an error.
func (c *Client) clean(ctx context.Context, o CleanOptions, check func(context.Context) error) (CleanResult, error) {
	var res CleanResult
	var after int64
	db := c.st.Wrap(c.db)
	for o.MaxBatches == 0 || res.Batches < o.MaxBatches {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if check != nil && res.Batches > 0 {
			if err := check(ctx); err != nil {
				return res, err
			}
		}
		r, err := store.Queries.CleanExpired(ctx, db, after, int32(o.BatchSize))
		if err != nil {
			return res, translateError(err)
		}
		res.Batches++
		res.Deleted += r.Deleted
		if r.Picked < int64(o.BatchSize) {
			res.Done = true
			return res, nil
		}
		after = r.LastID
	}
	return res, nil
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
	// BatchSize is the most rows one statement deletes. Default DefaultCleanBatchSize (1000).
	BatchSize int
	// MaxBatches bounds one pass; the next pass goes on. Default 0: no limit.
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
// one is inserted. The cleaner only keeps the table from growing. Pending and processing messages
// never expire, and dead messages are kept until replayed, discarded or purged (see ReplayDead,
// DiscardDead and Purge).
//
// Run it in every process that runs workers (or in one of them): only one Cleaner per schema runs a
// pass at any time, across all processes, because a pass holds a transaction-scoped PostgreSQL
// advisory lock (CleanerLockKey) taken with
// pg_try_advisory_xact_lock; a Cleaner that finds it taken skips that pass. The lock is held in an
// otherwise idle transaction on one connection of the pool while the batches run on others, so the
// pool needs at least two connections; the lock ends with that transaction, or with its connection if
// the process dies.
type Cleaner struct {
	c   *Client
	cfg CleanerConfig
	opt CleanOptions
	key int64
	log *slog.Logger
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
	if cfg.Interval < 0 {
		return nil, &ConfigError{Field: "Interval", Reason: "must not be negative"}
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
	return &Cleaner{c: c, cfg: cfg, opt: opt, key: CleanerLockKey(c.cfg.Schema), log: log.With("schema", c.cfg.Schema)}, nil
}

// RunOnce runs one pass if no other Cleaner of the schema is running one. ran is false, and nothing is
// deleted, when another holds the lock.
func (cl *Cleaner) RunOnce(ctx context.Context) (res CleanResult, ran bool, err error) {
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
	// Between batches, make sure the lock is still held (its connection may have been cut). Taking
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
	res, err = cl.c.clean(ctx, cl.opt, check)
	return res, true, err
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
				"done", res.Done, "duration", time.Since(start))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
