// Package retention keeps the inbox table bounded: completed messages past their dedup window
// (Store.Retention) leave with their generation, and expired idempotency keys are deleted. The
// schema's maintainer (package maintain), which every runner (package runner) runs, does both with
// this package's code ([Cleaner.RotateIfDue], [Cleaner.DeleteExpiredKeys]): a service needs no
// Cleaner of its own. A [Cleaner] (made by [New]) is for manual use (the CLI's `txinbox rotate` and
// `txinbox clean`) and for services that run no maintainer: it rotates generations and deletes
// expired keys periodically as a [txinbox.Service] (Start, Stop), or once ([Cleaner.RunOnce],
// [Cleaner.Rotate]); [Cleaner.Clean] deletes expired rows at once, row by row.
//
// Clean is txinbox's word for this automatic removal; an operator deleting chosen messages uses
// package admin (Discard).
package retention

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/walk"
)

var _ txinbox.Service = (*Cleaner)(nil)

// statements returns the statement rewriter of schema.
// cleanerLockKey returns the key of the advisory lock a Cleaner of schema holds for the length of a
// pass. It shows in pg_locks with locktype advisory, classid and objid its high and low 32 bits.
func cleanerLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("txinbox.cleaner:" + schema))
	return int64(h.Sum64() >> 1)
}

func statements(schema string) *schemasql.Schema { return schemasql.New(schema) }

// Defaults and limits of CleanOptions and Config.
const (
	DefaultCleanBatchSize    = 1000
	MaxCleanBatchSize        = 100000
	DefaultCleanInterval     = time.Minute
	DefaultRotateLockTimeout = 2 * time.Second
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

// CleanResult reports one cleaning pass: a [Cleaner.Clean] (Deleted, Batches, Done, KeysDeleted) or a
// [Cleaner.RunOnce] (Rotation, KeysDeleted, Done).
type CleanResult struct {
	Deleted     int64 // expired inbox rows deleted (Clean only)
	Batches     int   // delete statements run on the inbox table (Clean only)
	KeysDeleted int64 // expired idempotency keys deleted (package idempotency)
	// Rotation reports RunOnce's rotation: Rotated is false when the current generation was not
	// due yet.
	Rotation Rotation
	// Done is true when the pass ended normally: false when MaxBatches or ctx cut it short.
	Done bool
}

// Rotation reports one rotation of the inbox's generations (see Cleaner).
type Rotation struct {
	// Rotated is true when a new generation began; false when the current one was not due yet (or
	// another rotation began it first).
	Rotated bool
	// Generation is the generation current afterwards.
	Generation int64
	// Copied is the number of messages of the retired generation kept in the new one: pending,
	// dead, and completed ones still in their dedup window.
	Copied int64
	// Duration is the time the rotation's transaction took: receives and workers of every consumer
	// wait for it while it holds the retired slot (see Cleaner).
	Duration time.Duration
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
	// Interval is the time between the starts of two passes (RunOnce). Default DefaultCleanInterval
	// (1 min).
	Interval time.Duration
	// Generation is the length of a generation: a pass rotates when the current generation began at
	// least this long ago; at least 1s. Default Store.Retention (or 1s if that is shorter), which
	// keeps the copy of each rotation small:
	// a message completed soon after it arrived has left its window when its generation is retired,
	// between one and two generations later. A shorter Generation bounds the table tighter (about three
	// generations of messages are stored) but copies more messages still in their window.
	Generation time.Duration
	// RotateLockTimeout bounds the rotation's wait for the retired slot's lock, which waits for every
	// transaction that has touched the inbox table, while receives and workers of every consumer wait
	// behind it; a rotation that times out is retried at the next pass. Default
	// DefaultRotateLockTimeout (2 s).
	RotateLockTimeout time.Duration
	// BatchSize is the most idempotency keys one statement of a pass deletes. Default
	// DefaultCleanBatchSize (1000). Clean takes its own (CleanOptions).
	BatchSize int
	// Deprecated: MaxBatches bounded a pass's row deletes, which passes no longer make (they rotate,
	// migration 00006); it is still checked (not negative) and otherwise ignored. Bound
	// [Cleaner.Clean] with CleanOptions.MaxBatches.
	MaxBatches int
	// Logger receives a line per rotation and per pass that deleted something (Info) and per failed
	// pass (Warn). Default slog.Default().
	Logger *slog.Logger
}

// Cleaner rotates the inbox's generations and deletes expired idempotency keys periodically.
//
// Retention: a completed message's row is its dedup record. While it is kept, a redelivery of its key
// is reported as a Duplicate (with the stored result) and not run again. The worker sets the end of
// that window when the message completes: expires_at = completed_at + Store.Retention (default 7
// days). After it, the key is accepted again as a new message, whether or not its row is still
// stored: when a row leaves never changes what receiving does. Pending and processing messages never
// expire, and dead messages are kept until an operator replays or discards them (package admin).
//
// Generations (migration 00006): the inbox table is a ring of three partitions, one per generation.
// New messages go into the current generation's partition. A rotation, once per Config.Generation,
// begins a new generation in the partition the previous rotation emptied, copies into it the
// messages of the generation before last that must stay (pending, dead, and completed ones still in
// their window), and TRUNCATEs that generation's partition: expired messages leave with the file,
// with no row DELETE, no dead row versions and no vacuum, and a transaction holding back the xmin
// horizon does not stop it. A duplicate is rejected across partitions exactly as within one (see
// package inbox). The rotation is one transaction that locks the retired partition ACCESS EXCLUSIVE:
// it waits for every transaction that has touched the inbox table (Config.RotateLockTimeout), and
// receives and workers of every consumer wait for it while it copies (about 1 s per 60,000 messages
// kept: docs/retention-design.md). A receive transaction at REPEATABLE READ or SERIALIZABLE that
// began before a rotation fails with a serialization error (SQLSTATE 40001) when it receives
// afterwards; retry it, as any transaction at those levels.
//
// Every runner (package runner) runs the schema's maintainer (package maintain), which rotates and deletes expired
// keys with this code: a Cleaner is needed only where no maintainer runs, or by hand. Several
// Cleaners may run, in any processes: only one Cleaner per schema
// runs a pass at any time, across all processes, because a pass holds a transaction-scoped PostgreSQL
// advisory lock taken with pg_try_advisory_xact_lock (in pg_locks: locktype advisory, its key
// derived from the schema name); a Cleaner that finds it
// taken skips that pass. (The maintainer does not take this lock: it is one per schema by election.) The lock is held in an otherwise idle transaction on one connection of the
// pool while the statements run on others, so the pool needs at least two connections; the lock ends
// with that transaction, or with its connection if the process dies. A rotation is also safe
// without the lock: of two at once, one rotates and the other reports Rotated false.
type Cleaner struct {
	store txinbox.Store
	st    *schemasql.Schema
	cfg   Config
	opt   CleanOptions
	key   int64
	log   *slog.Logger

	life sync.Mutex // guards stop and done
	stop context.CancelFunc
	done chan struct{}

	mu sync.Mutex // held by a running pass
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
	if cfg.Generation == 0 {
		cfg.Generation = max(store.Retention, time.Second)
	}
	if cfg.RotateLockTimeout == 0 {
		cfg.RotateLockTimeout = DefaultRotateLockTimeout
	}
	switch {
	case cfg.Interval < 0:
		return nil, &txinbox.ConfigError{Field: "Interval", Reason: "must not be negative"}
	case cfg.Generation < time.Second:
		return nil, &txinbox.ConfigError{Field: "Generation", Reason: "must be at least 1s"}
	case cfg.RotateLockTimeout < time.Millisecond:
		return nil, &txinbox.ConfigError{Field: "RotateLockTimeout", Reason: "must be at least 1ms"}
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
	return &Cleaner{store: store, st: statements(store.Schema), cfg: cfg, opt: opt, key: cleanerLockKey(store.Schema),
		log: log.With("schema", store.Schema)}, nil
}

// Clean deletes every completed message whose dedup window has ended (see Cleaner) in one pass over
// the whole table, row by row, then every expired idempotency key, without the Cleaner's lock. A
// Cleaner never needs it (rotations remove expired messages); it frees their space at once, before
// their generation is retired, at the cost of dead row versions that vacuum must remove. It walks the
// primary key in id order, one consumer after the other (each statement names its consumer, as every
// statement of txinbox does: SCALING.md), in spans of 10*o.BatchSize ids; each statement deletes at most
// o.BatchSize rows of one span, in a short transaction of its own. It never waits on a row lock (rows
// locked by receivers or workers are skipped and left for the next pass) and holds no lock between
// statements, so receiving and processing go on while it runs. It stops between statements when ctx
// ends, returning the work done so far with ctx's error. Its cost is a read of the whole table (see
// BenchmarkCleanPass); a Cleaner's passes never do it. Several Clean calls may run at once safely. Bad options return a *[txinbox.ArgumentError].
func (cl *Cleaner) Clean(ctx context.Context, o CleanOptions) (CleanResult, error) {
	o, err := o.withDefaults()
	if err != nil {
		return CleanResult{}, err
	}
	db := cl.st.Wrap(cl.store.DB)
	maxID, err := schemasql.Queries.MaxMessageID(ctx, db)
	if err != nil {
		return CleanResult{}, schemasql.Err(err)
	}
	consumers, err := schemasql.Consumers(ctx, db)
	if err != nil {
		return CleanResult{}, schemasql.Err(err)
	}
	res := CleanResult{Done: true}
	for _, consumer := range consumers {
		if spent(o, res.Batches) {
			res.Done = false
			return res, nil
		}
		r, err := cl.walk(o, consumer, maxID, res.Batches).Run(ctx)
		res.Deleted, res.Batches = res.Deleted+r.Deleted, res.Batches+r.Batches
		if err != nil || !r.Done {
			res.Done = false
			return res, err
		}
	}
	res.KeysDeleted, err = cl.cleanKeys(ctx, o.BatchSize, nil)
	return res, err
}

// walk returns the walk of one consumer's ids up to to: every statement names the consumer
// (schemasql.Consumers). ran is the number of statements the pass has already run, counted against
// o.MaxBatches (see spent).
func (cl *Cleaner) walk(o CleanOptions, consumer string, to int64, ran int) *walk.Walk {
	db := cl.st.Wrap(cl.store.DB)
	w := &walk.Walk{
		From: 0, To: to, Batch: int64(o.BatchSize), Span: int64(o.BatchSize) * walk.SpanFactor, Err: schemasql.Err,
		Delete: func(ctx context.Context, after, until int64) (picked, deleted, last int64, err error) {
			r, err := schemasql.Queries.CleanExpiredRange(ctx, db, sqlc.CleanExpiredRangeParams{
				Consumer: consumer, AfterID: after, UntilID: until, MaxRows: int32(o.BatchSize)})
			return r.Picked, r.Deleted, r.LastID, err
		},
	}
	if o.MaxBatches > 0 {
		w.MaxBatches = o.MaxBatches - ran // the callers run no walk once nothing is left
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
		n, err := schemasql.Queries.IdemCleanExpired(ctx, cl.st.Wrap(cl.store.DB), int32(batch))
		total += n
		if err != nil {
			return total, schemasql.Err(err)
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

// RunOnce runs one pass: a rotation if the current generation began at least Config.Generation ago
// (see Cleaner), then the deletion of expired idempotency keys, unless another Cleaner of the schema
// (in any process) or another call of this one is running a pass: then ran is false and nothing is
// done. A rotation that fails (its lock wait timed out, say) returns its error; the keys are not
// deleted in that pass.
func (cl *Cleaner) RunOnce(ctx context.Context) (res CleanResult, ran bool, err error) {
	if !cl.mu.TryLock() {
		return res, false, nil
	}
	defer cl.mu.Unlock()
	tx, err := cl.store.DB.Begin(ctx)
	if err != nil {
		return res, false, schemasql.Err(err)
	}
	// Rolling back ends the transaction and releases the lock; it wrote nothing.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	locked, err := schemasql.Queries.TryCleanerLock(ctx, tx, cl.key)
	if err != nil {
		return res, false, schemasql.Err(err)
	}
	if !locked {
		return res, false, nil
	}
	// Between statements, make sure the lock is still held (its connection may have been cut). Taking
	// an advisory lock again in the transaction that holds it succeeds at once.
	check := func(ctx context.Context) error {
		locked, err := schemasql.Queries.TryCleanerLock(ctx, tx, cl.key)
		if err == nil && !locked {
			err = errors.New("lock taken by another cleaner")
		}
		if err != nil {
			return fmt.Errorf("txinbox: cleaner lost its lock: %w", err)
		}
		return nil
	}
	res.Rotation, err = cl.RotateIfDue(ctx)
	if err != nil {
		return res, true, err
	}
	if err = check(ctx); err == nil {
		res.KeysDeleted, err = cl.cleanKeys(ctx, cl.opt.BatchSize, check)
	}
	res.Done = err == nil
	return res, true, err
}

// RotateIfDue begins a new generation if the current one began at least Config.Generation ago (see
// Cleaner), without the Cleaner's lock, and otherwise returns Rotated false at the cost of one read.
// Of two rotations at once, one rotates and the other returns Rotated false. It is the rotation of
// RunOnce, and of the schema's maintainer (package maintain).
func (cl *Cleaner) RotateIfDue(ctx context.Context) (Rotation, error) {
	return cl.rotate(ctx, &cl.cfg.Generation)
}

// DeleteExpiredKeys deletes every expired idempotency key, Config.BatchSize per statement, until none
// is left or ctx ends, without the Cleaner's lock, and returns how many it deleted. Each statement
// skips rows locked by running requests, so several calls at once are safe. It is the key deletion
// of RunOnce (which also checks its lock between statements), and of the schema's maintainer.
func (cl *Cleaner) DeleteExpiredKeys(ctx context.Context) (int64, error) {
	return cl.cleanKeys(ctx, cl.opt.BatchSize, nil)
}

// Generation returns Config.Generation after defaults: the length of a generation.
func (cl *Cleaner) Generation() time.Duration { return cl.cfg.Generation }

// Rotate begins a new generation now, whatever the age of the current one (see Cleaner), without the
// Cleaner's lock. Of two rotations at once, one rotates and the other returns Rotated false. It also
// returns Rotated false when consumers kept being registered (a consumer's first receive in a
// process) through five tries; a Cleaner tries again at its next pass.
func (cl *Cleaner) Rotate(ctx context.Context) (Rotation, error) {
	return cl.rotate(ctx, nil)
}

// rotate runs inbox_rotate (migration 00006) in a transaction of its own with Config.RotateLockTimeout:
// a new generation if the current one began at least *due ago, or at once when due is nil. A
// rotation that gave up because a consumer was being registered (busy) runs again, a few times.
func (cl *Cleaner) rotate(ctx context.Context, due *time.Duration) (Rotation, error) {
	start := time.Now()
	var period pgtype.Interval
	if due != nil {
		period = pgtype.Interval{Microseconds: due.Microseconds(), Valid: true}
	}
	var row sqlc.RotateRow
	for attempt := 0; ; attempt++ {
		err := pgx.BeginFunc(ctx, cl.store.DB, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", cl.cfg.RotateLockTimeout.Milliseconds())); err != nil {
				return err
			}
			var err error
			row, err = schemasql.Queries.Rotate(ctx, cl.st.Wrap(tx), period)
			return err
		})
		if err != nil {
			return Rotation{}, fmt.Errorf("txinbox: rotating generations: %w", schemasql.Err(err))
		}
		if !row.Busy || attempt == maxBusyRotations-1 {
			break
		}
		select {
		case <-ctx.Done():
			return Rotation{}, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		}
	}
	r := Rotation{Rotated: row.Rotated, Generation: row.Generation, Copied: row.Copied, Duration: time.Since(start)}
	if r.Rotated {
		cl.log.Info("txinbox: rotated generations", "generation", r.Generation, "copied", r.Copied, "duration", r.Duration)
	}
	return r, nil
}

// maxBusyRotations bounds the runs of a rotation that finds a consumer being registered.
const maxBusyRotations = 5

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
			cl.log.Warn("txinbox: cleaning failed", "err", err)
		case ran && res.KeysDeleted > 0:
			cl.log.Info("txinbox: deleted expired idempotency keys", "keys_deleted", res.KeysDeleted,
				"done", res.Done, "duration", time.Since(start))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
