package txinbox

// Outcome is how a finished attempt left its message (a worker pool's handler call: TraceEnd of
// OpHandled) or its event (an outbox relay's hand-over: TraceEnd of OpRelayed). A receipt's outcome
// (inserted, duplicate, conflict) is inbox.Outcome.
type Outcome string

// The outcomes of an attempt.
const (
	// OutcomeCompleted: the handler returned nil; its writes and the message's "completed" mark
	// committed together.
	OutcomeCompleted Outcome = "completed"
	// OutcomeSent: the relay's Publisher acknowledged the event; it leaves the outbox's queue.
	OutcomeSent Outcome = "sent"
	// OutcomeRetry: the attempt failed and the message or event will be tried again after its
	// backoff.
	OutcomeRetry Outcome = "retry"
	// OutcomeDead: the attempt failed and the message or event will not be tried again (a [Permanent]
	// error, or MaxAttempts attempts started): a dead letter, kept for replay or discard. A dead
	// event leaves the outbox's queue, and the next event of its key goes.
	OutcomeDead Outcome = "dead"
)
