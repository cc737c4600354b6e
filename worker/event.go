package worker

// failReason says why an attempt failed. It is "" for a completed attempt.
type failReason string

// The reasons of a failed attempt.
const (
	// reasonError: the handler returned an error.
	reasonError failReason = "error"
	// reasonPanic: the handler panicked (recovered; the error holds the stack).
	reasonPanic failReason = "panic"
	// reasonTimeout: the handler ran past its Timeout: it returned after its ctx's deadline, whatever
	// it returned (nil included).
	reasonTimeout failReason = "timeout"
	// reasonPermanent: the handler returned a txinbox.Permanent error (dead at once).
	reasonPermanent failReason = "permanent"
	// reasonDecode: the payload does not decode into the handler's type (dead at once).
	reasonDecode failReason = "decode"
	// reasonUnknownKind: no handler is registered for the message's kind in this pool (ErrUnknownKind):
	// dead at once.
	reasonUnknownKind failReason = "unknown_kind"
	// reasonCrashed: out of attempts, the last of which never finished (its worker crashed, hung or lost
	// its connection).
	reasonCrashed failReason = "crashed"
)
