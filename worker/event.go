package worker

import (
	"time"

	"github.com/txinbox/txinbox"
)

// Reason says why an attempt failed. It is "" for a completed attempt.
type Reason string

// The reasons of a failed attempt.
const (
	// ReasonError: the handler returned an error.
	ReasonError Reason = "error"
	// ReasonPanic: the handler panicked (recovered; the error holds the stack).
	ReasonPanic Reason = "panic"
	// ReasonTimeout: the handler ran past its Timeout: it returned after its ctx's deadline, whatever
	// it returned (nil included).
	ReasonTimeout Reason = "timeout"
	// ReasonPermanent: the handler returned a txinbox.Permanent error (dead at once).
	ReasonPermanent Reason = "permanent"
	// ReasonDecode: the payload does not decode into the handler's type (dead at once).
	ReasonDecode Reason = "decode"
	// ReasonUnknownKind: no handler is registered for the message's kind in this pool (ErrUnknownKind):
	// dead at once.
	ReasonUnknownKind Reason = "unknown_kind"
	// ReasonCrashed: out of attempts, the last of which never finished (its worker crashed, hung or lost
	// its connection).
	ReasonCrashed Reason = "crashed"
)

// Observer receives events from a pool. Its methods must be fast and safe for concurrent use.
type Observer interface {
	// Handled is called once per finished attempt, after its outcome was committed.
	Handled(HandleEvent)
}

// HandleEvent describes a finished attempt.
type HandleEvent struct {
	Consumer string
	Kind     string
	// ID is the message's id (inbox.Receipt.ID) and Key its idempotency key.
	ID  int64
	Key string
	// Outcome is how the attempt left the message: txinbox.OutcomeCompleted, txinbox.OutcomeRetry or
	// txinbox.OutcomeDead.
	Outcome txinbox.Outcome
	// Reason is why the attempt failed; "" when completed.
	Reason Reason
	// Err is the attempt's error (nil when completed): what the handler returned, a *txinbox.PermanentError, a
	// recovered panic, a timeout, a decode error, ErrUnknownKind, or, for ReasonCrashed, the error
	// recorded by the last attempt that finished. Its text is what the message records as last_error
	// (cut to 8 KiB).
	Err error
	// Attempt is the attempt's number, from 1.
	Attempt int
	// Duration is the time spent in the handler (0 if it did not run).
	Duration time.Duration
	// ReceivedAt is when the message was received (stored).
	ReceivedAt time.Time
}

// TakeoverObserver is an optional interface of an [Observer]: a pool whose Observer implements it
// also tells it about the batches that never finished and the takeovers of their messages (package
// metrics implements it). See the package documentation, "Crash recovery".
type TakeoverObserver interface {
	// Charged is called once per batch that never finished, by the pool whose rescuer charged it.
	Charged(ChargeEvent)
	// TakenOver is called once per group of such messages claimed to run again, before it runs.
	TakenOver(TakeoverEvent)
}

// ChargeEvent describes a batch that never finished (the worker running it died, hung or lost its
// connection before its commit), charged by a pool's rescuer.
type ChargeEvent struct {
	Consumer string
	// Messages is the number of its messages still queued, charged and isolated.
	Messages int
	// Owner is the owner (Config.Owner) of the pool that ran it.
	Owner string
	// GroupCrashes is the most batches of more than one message that never finished that any of its
	// messages has been in (1 after one crash; more while the isolation halves the groups).
	GroupCrashes int
}

// TakeoverEvent describes a takeover: a pool's rescuer claimed a group of messages whose batch never
// finished, to run them again.
type TakeoverEvent struct {
	Consumer string
	// Messages is the size of the group.
	Messages int
	// Alone reports a group of one message: it runs alone, and a crash while it runs counts as one of
	// its attempts.
	Alone bool
}
