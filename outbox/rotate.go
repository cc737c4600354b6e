package outbox

import (
	"context"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/outboxrot"
)

// RotateOptions configures [Rotate]. The zero value takes every default.
type RotateOptions struct {
	// Window is how long a sent event is kept after it was sent, for audit and replay. Default:
	// Store.Retention (7 days unless set). Must not be negative.
	Window time.Duration
	// Generation is the least time between two rotations: a call rotates only if the current
	// generation began at least this long ago. Default Window (at least 1s); at least 1s.
	Generation time.Duration
	// LockTimeout bounds the rotation's wait for the retired partition's lock (lock_timeout); a
	// rotation that times out returns the error and changed nothing: call again later. Default: 2s;
	// at least 1ms.
	LockTimeout time.Duration
	// Force rotates now, whatever the current generation's age (an operator, a test).
	Force bool
}

// Rotation reports one call of [Rotate].
type Rotation struct {
	// Rotated is true when a new generation began; false when the current one was not due yet, or
	// another rotation began it first.
	Rotated bool
	// Generation is the generation current afterwards.
	Generation int64
	// Copied is the number of events of the retired generation kept in the new one: those not yet
	// sent, the dead ones, and those sent less than Window ago.
	Copied int64
	// Duration is the time the rotation's transaction took (publishing into the retired partition,
	// and every relay statement, waits for it meanwhile).
	Duration time.Duration
}

// Rotate is the outbox's retention: it begins a new generation of st's outbox if the current one
// began at least opts.Generation ago (or at once with opts.Force), and removes the sent events of
// the retired generation that were sent more than opts.Window ago, with a TRUNCATE of its partition
// (migration 00009, outbox_rotate), never a row DELETE: no dead row versions, no vacuum, and a
// transaction holding back the xmin horizon does not stop it.
//
// The schema's maintainer (package maintain, which every runner runs) runs this rotation as
// its built-in job outbox-rotate, with the window maintain.Config.OutboxWindow (default
// Store.Retention): call Rotate yourself only where no maintainer rotates the outbox, or by hand.
//
// Contract, for the one who schedules it (a maintenance loop):
//   - Call it periodically, every minute, say, from any number of processes: calls that find the
//     generation not due return at once (Rotated false), and of two rotations at once one rotates
//     and the other returns Rotated false. No lock of the caller's is needed.
//   - Retention: an event sent at t is kept until at least t+Window, and removed by the first
//     rotation that retires its partition after that, which is at most two rotations later: by
//     t+Window+2×(Generation+the interval between calls). Events not yet sent (pending, claimed,
//     retrying) and dead events are never removed; they are copied into the new generation.
//   - Cost: one transaction that locks the retired partition ACCESS EXCLUSIVE (waiting at most
//     opts.LockTimeout for the transactions that touched it: relays' statements, and publishing
//     transactions that began before the previous rotation), then copies the survivors of that
//     partition and truncates it. Relays wait for it while it copies; publishing transactions do
//     not (they write the current generation's partition).
//   - Errors: a *[txinbox.ArgumentError] for bad options; the lock wait timing out (SQLSTATE 55P03)
//     or any other database error is returned wrapped, with nothing changed: call again later.
//
// st.DB must be able to begin a transaction; the rotation runs in one of its own.
func Rotate(ctx context.Context, st txinbox.Store, opts RotateOptions) (Rotation, error) {
	st, err := st.Resolve()
	if err != nil {
		return Rotation{}, err
	}
	o := outboxrot.Options{Window: opts.Window, Generation: opts.Generation, LockTimeout: opts.LockTimeout, Force: opts.Force}.
		WithDefaults(st.Retention)
	if field, reason := o.Check(); field != "" {
		return Rotation{}, &txinbox.ArgumentError{Name: field, Reason: reason}
	}
	r, err := outboxrot.Rotate(ctx, st.DB, st.Schema, o)
	if err != nil {
		return Rotation{}, err
	}
	return Rotation{Rotated: r.Rotated, Generation: r.Generation, Copied: r.Copied, Duration: r.Duration}, nil
}
