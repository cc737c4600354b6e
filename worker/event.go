package worker

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
