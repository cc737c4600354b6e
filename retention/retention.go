// Package retention keeps the inbox table bounded: completed messages past their dedup window
// (Store.Retention) leave with their generation, and expired idempotency keys are deleted. The
// schema's maintainer (package maintain), which every runner (package runner) runs, does both with
// this package's code, periodically: a service needs nothing of its own. The functions are for manual
// use (the CLI's `txinbox rotate` and `txinbox clean`): [Rotate] begins a new generation, [Clean]
// deletes expired rows at once, row by row, and [DeleteExpiredKeys] deletes expired idempotency keys.
//
// Retention: a completed message's row is its dedup record. While it is kept, a redelivery of its key
// is reported as a Duplicate (with the stored result) and not run again. The worker sets the end of
// that window when the message completes: expires_at = completed_at + Store.Retention (default 7
// days). After it, the key is accepted again as a new message, whether or not its row is still
// stored: when a row leaves never changes what receiving does. Pending and processing messages never
// expire, and dead messages are kept until an operator replays or discards them (package admin).
//
// Generations (migration 00006): the inbox table is a ring of three partitions, one per generation.
// New messages go into the current generation's partition. A rotation ([Rotate]; the maintainer's
// once per maintain.Config.Generation) begins a new generation in the partition the previous rotation
// emptied, copies into it the messages of the generation before last that must stay (pending, dead,
// and completed ones still in their window), and TRUNCATEs that generation's partition: expired
// messages leave with the file, with no row DELETE, no dead row versions and no vacuum, and a
// transaction holding back the xmin horizon does not stop it. A duplicate is rejected across
// partitions exactly as within one (see package inbox). The rotation is one transaction that locks the
// retired partition ACCESS EXCLUSIVE: it waits for every transaction that has touched the inbox table
// (RotateOptions.LockTimeout), and receives and workers of every consumer wait for it while it copies
// (about 1 s per 60,000 messages kept: docs/retention-design.md). A receive transaction at REPEATABLE
// READ or SERIALIZABLE that began before a rotation fails with a serialization error (SQLSTATE 40001)
// when it receives afterwards; retry it, as any transaction at those levels. Of two rotations at once,
// one rotates and the other reports Rotated false: no lock of the caller's is needed.
//
// Clean is txinbox's word for this automatic removal; an operator deleting chosen messages uses
// package admin (Discard).
package retention

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/walk"
)

// statements returns the statement rewriter of schema.
func statements(schema string) *schemasql.Schema { return schemasql.New(schema) }

// Defaults of CleanOptions and RotateOptions (documented on their fields).
const (
	defaultCleanBatchSize    = 1000
	defaultRotateLockTimeout = 2 * time.Second
)

// CleanOptions bounds one cleaning pass.
type CleanOptions struct {
	// BatchSize is the most rows one statement (one short transaction) deletes; a statement also
	// reads at most 10*BatchSize ids of the primary key. Default: 1000; at most 100,000.
	BatchSize int
	// MaxBatches stops the pass after that many statements even if expired rows remain. Default 0:
	// no limit.
	MaxBatches int
}

// CleanResult reports one [Clean] pass.
type CleanResult struct {
	Deleted     int64 // expired inbox rows deleted
	Batches     int   // delete statements run on the inbox table
	KeysDeleted int64 // expired idempotency keys deleted (package idempotency)
	// Done is true when the pass ended normally: false when MaxBatches or ctx cut it short.
	Done bool
}

// Rotation reports one rotation of the inbox's generations (see the package documentation).
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
	// wait for it while it holds the retired slot (see the package documentation).
	Duration time.Duration
}

func (o CleanOptions) withDefaults() (CleanOptions, error) {
	if o.BatchSize == 0 {
		o.BatchSize = defaultCleanBatchSize
	}
	if o.BatchSize < 0 || o.BatchSize > limits.CleanBatchSize {
		return o, &txinbox.ArgumentError{Name: "BatchSize", Reason: fmt.Sprintf("%d is not between 1 and %d", o.BatchSize, limits.CleanBatchSize)}
	}
	if o.MaxBatches < 0 {
		return o, &txinbox.ArgumentError{Name: "MaxBatches", Reason: "must not be negative"}
	}
	return o, nil
}

// RotateOptions configures [Rotate]. The zero value takes every default.
type RotateOptions struct {
	// Generation is the least age of the current generation for a rotation: a call rotates only if
	// the current generation began at least this long ago. Default: Store.Retention (at least 1s),
	// which keeps the copy of each rotation small: a message completed soon after it arrived has left
	// its window when its generation is retired, between one and two generations later. A shorter
	// Generation bounds the table tighter (about three generations of messages are stored) but copies
	// more messages still in their window. At least 1s.
	Generation time.Duration
	// LockTimeout bounds the rotation's wait for the retired slot's lock, which waits for every
	// transaction that has touched the inbox table, while receives and workers of every consumer wait
	// behind it; a rotation that times out returns the error (SQLSTATE 55P03) and changed nothing:
	// call again later. Default: 2s; at least 1ms.
	LockTimeout time.Duration
	// Force rotates now, whatever the current generation's age (an operator, a test).
	Force bool
}

// Rotate begins a new generation of store's inbox if the current one began at least opts.Generation
// ago, or at once with opts.Force (see the package documentation), in a transaction of its own, and
// otherwise returns Rotated false at the cost of one read. Of two rotations at once, one rotates and
// the other returns Rotated false. It also returns Rotated false when consumers kept being registered
// (a consumer's first receive in a process) through five tries: call again later. Bad options return
// a *[txinbox.ArgumentError]; a database error (the lock wait timing out, say) is returned wrapped,
// with nothing changed. store.DB must be able to begin a transaction (a *pgxpool.Pool or a
// *pgx.Conn). It is the rotation of the schema's maintainer (package maintain).
func Rotate(ctx context.Context, store txinbox.Store, opts RotateOptions) (Rotation, error) {
	store, err := store.Resolve()
	if err != nil {
		return Rotation{}, err
	}
	if opts.Generation == 0 {
		opts.Generation = max(store.Retention, time.Second)
	}
	if opts.LockTimeout == 0 {
		opts.LockTimeout = defaultRotateLockTimeout
	}
	switch {
	case opts.Generation < time.Second:
		return Rotation{}, &txinbox.ArgumentError{Name: "Generation", Reason: "must be at least 1s"}
	case opts.LockTimeout < time.Millisecond:
		return Rotation{}, &txinbox.ArgumentError{Name: "LockTimeout", Reason: "must be at least 1ms"}
	}
	return rotate(ctx, store, opts)
}

// Clean deletes every completed message of store whose dedup window has ended (see the package
// documentation) in one pass over the whole table, row by row, then every expired idempotency key.
// Rotations never need it (they remove expired messages with their generation); it frees their space
// at once, before their generation is retired, at the cost of dead row versions that vacuum must
// remove. It walks the
// primary key in id order, one consumer after the other (each statement names its consumer, as every
// statement of txinbox does: SCALING.md), in spans of 10*o.BatchSize ids; each statement deletes at most
// o.BatchSize rows of one span, in a short transaction of its own. It never waits on a row lock (rows
// locked by receivers or workers are skipped and left for the next pass) and holds no lock between
// statements, so receiving and processing go on while it runs. It stops between statements when ctx
// ends, returning the work done so far with ctx's error. Its cost is a read of the whole table (see
// BenchmarkCleanPass); the maintainer never does it. Several Clean calls may run at once safely. Bad
// options return a *[txinbox.ArgumentError]; an invalid store a *[txinbox.ConfigError].
func Clean(ctx context.Context, store txinbox.Store, o CleanOptions) (CleanResult, error) {
	store, err := store.Resolve()
	if err != nil {
		return CleanResult{}, err
	}
	o, err = o.withDefaults()
	if err != nil {
		return CleanResult{}, err
	}
	st := statements(store.Schema)
	db := st.Wrap(store.DB)
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
		r, err := walkOf(db, o, consumer, maxID, res.Batches).Run(ctx)
		res.Deleted, res.Batches = res.Deleted+r.Deleted, res.Batches+r.Batches
		if err != nil || !r.Done {
			res.Done = false
			return res, err
		}
	}
	res.KeysDeleted, err = cleanKeys(ctx, db, o.BatchSize)
	return res, err
}

// walkOf returns the walk of one consumer's ids up to to, on db: every statement names the consumer
// (schemasql.Consumers). ran is the number of statements the pass has already run, counted against
// o.MaxBatches (see spent).
func walkOf(db sqlc.DBTX, o CleanOptions, consumer string, to int64, ran int) *walk.Walk {
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

// DeleteExpiredKeys deletes every expired idempotency key of store (package idempotency), 1000 per
// statement, until none is left or ctx ends, and returns how many it deleted. Each statement skips
// rows locked by running requests, so several calls at once are safe. Expiry is checked on every read
// of a key, so how often this runs changes only the table's size, never behaviour. It is the key
// deletion of the schema's maintainer (package maintain) and of [Clean].
func DeleteExpiredKeys(ctx context.Context, store txinbox.Store) (int64, error) {
	store, err := store.Resolve()
	if err != nil {
		return 0, err
	}
	return cleanKeys(ctx, statements(store.Schema).Wrap(store.DB), defaultCleanBatchSize)
}

// cleanKeys deletes expired idempotency keys, batch rows per statement, until none is left or ctx
// ends, and returns how many it deleted.
func cleanKeys(ctx context.Context, db sqlc.DBTX, batch int) (int64, error) {
	var total int64
	for {
		n, err := schemasql.Queries.IdemCleanExpired(ctx, db, int32(batch))
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
	}
}

// rotate runs inbox_rotate (migration 00006) in a transaction of its own with opts.LockTimeout: a
// new generation if the current one began at least opts.Generation ago, or at once with opts.Force.
// A rotation that gave up because a consumer was being registered (busy) runs again, a few times.
func rotate(ctx context.Context, store txinbox.Store, opts RotateOptions) (Rotation, error) {
	start := time.Now()
	var period pgtype.Interval
	if !opts.Force {
		period = pgtype.Interval{Microseconds: opts.Generation.Microseconds(), Valid: true}
	}
	st := statements(store.Schema)
	var row sqlc.RotateRow
	for attempt := 0; ; attempt++ {
		err := pgx.BeginFunc(ctx, store.DB, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", opts.LockTimeout.Milliseconds())); err != nil {
				return err
			}
			var err error
			row, err = schemasql.Queries.Rotate(ctx, st.Wrap(tx), period)
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
	return Rotation{Rotated: row.Rotated, Generation: row.Generation, Copied: row.Copied, Duration: time.Since(start)}, nil
}

// maxBusyRotations bounds the runs of a rotation that finds a consumer being registered.
const maxBusyRotations = 5
