// Package outboxrot is the outbox's rotation (migration 00009, outbox_rotate): the code of
// outbox.Rotate and of the maintainer's built-in job outbox-rotate. It is a package of its own
// because package maintain cannot import package outbox (outbox imports worker, which imports
// maintain).
package outboxrot

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox/internal/schemasql"
)

// DefaultLockTimeout is Options.LockTimeout when it is zero.
const DefaultLockTimeout = 2 * time.Second

// Options of a rotation (outbox.RotateOptions documents each field).
type Options struct {
	// Window: a sent event is kept at least this long after it was sent.
	Window time.Duration
	// Generation: a rotation happens only if the current generation began at least this long ago.
	Generation time.Duration
	// LockTimeout bounds the wait for the retired partition's lock.
	LockTimeout time.Duration
	// Force rotates whatever the current generation's age.
	Force bool
}

// WithDefaults returns o with its zero durations set: Window to retention (the Store's), Generation
// to Window (at least 1s), LockTimeout to DefaultLockTimeout.
func (o Options) WithDefaults(retention time.Duration) Options {
	if o.Window == 0 {
		o.Window = retention
	}
	if o.Generation == 0 {
		o.Generation = max(o.Window, time.Second)
	}
	if o.LockTimeout == 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	return o
}

// Check returns the name of the first field of o that is out of range (Window, Generation or
// LockTimeout) and why, or "" if every field is valid: Window not negative, Generation at least 1s,
// LockTimeout at least 1ms.
func (o Options) Check() (field, reason string) {
	switch {
	case o.Window < 0:
		return "Window", "must not be negative"
	case o.Generation < time.Second:
		return "Generation", "must be at least 1s"
	case o.LockTimeout < time.Millisecond:
		return "LockTimeout", "must be at least 1ms"
	}
	return "", ""
}

// Result reports a rotation (outbox.Rotation documents each field).
type Result struct {
	Rotated    bool
	Generation int64
	Copied     int64
	Duration   time.Duration
}

// Beginner is what a rotation runs on: it begins a transaction of its own.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Rotate runs one rotation of schema's outbox in a transaction of its own begun on db, with o's
// lock timeout (set_config lock_timeout, local to the transaction): it begins a new generation if
// the current one began at least o.Generation ago, or at once with o.Force, and keeps the sent
// events of the retired generation sent less than o.Window ago. o must have its defaults and be
// valid (WithDefaults, Check). A database error is returned wrapped, with nothing changed.
func Rotate(ctx context.Context, db Beginner, schema string, o Options) (Result, error) {
	var period pgtype.Interval
	if !o.Force {
		period = pgtype.Interval{Microseconds: o.Generation.Microseconds(), Valid: true}
	}
	keep := pgtype.Interval{Microseconds: o.Window.Microseconds(), Valid: true}
	start := time.Now()
	var r Result
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", o.LockTimeout.Milliseconds())); err != nil {
			return err
		}
		row, err := schemasql.Queries.OutboxRotate(ctx, schemasql.New(schema).Wrap(tx), period, keep)
		r = Result{Rotated: row.Rotated, Generation: row.Generation, Copied: row.Copied}
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("txinbox: rotating the outbox: %w", schemasql.Err(err))
	}
	r.Duration = time.Since(start)
	return r, nil
}
