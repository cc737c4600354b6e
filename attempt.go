package txinbox

import "time"

// Attempt is one failed attempt of an inbox message or an outbox event, as package admin reads it
// from the message's or event's history: the last 10 failed attempts of each, oldest first, kept on
// its row and trimmed by the statement that records a failure (a completed message or a sent event
// writes nothing to it). Reason says why it failed:
//
//   - "error": the handler or Publisher returned an error (the message or event is retried, or dead
//     once out of attempts), or a batch handler call left the transaction unusable;
//   - "panic": it panicked (recovered);
//   - "timeout": it ran past its timeout;
//   - "permanent": it returned a txinbox.Permanent error (dead at once);
//   - "decode", "unknown_kind" (inbox): the payload did not decode, or no handler of the pool handles
//     its kind (dead at once);
//   - "crashed": its attempt never finished: its worker's batch was charged by the rescuer (inbox), or
//     it was out of attempts the last of which never finished (dead);
//   - "taken_over" (outbox): its claim's lease ended before its relay recorded an outcome, and
//     another claim took it over.
type Attempt struct {
	// Number is the attempt's number: 1 for the first attempt claimed.
	Number int `json:"number"`
	// StartedAt is when the attempt began, on the database server's clock: the end of the worker's
	// claim of its batch (inbox) or the start of the relay's claim statement (outbox); never before
	// the message or event was due.
	StartedAt time.Time `json:"started_at"`
	// Duration is how long the handler or the Publisher call ran; zero when unknown (crashed,
	// taken_over, or the message was not run).
	Duration time.Duration `json:"duration_ns"`
	Reason   string        `json:"reason"`
	Error    string        `json:"error"`
	// Owner names the process that ran the attempt: the worker pool's Owner (worker.Config.Owner) or
	// the relay's (outbox.RelayConfig.Owner).
	Owner string `json:"owner"`
}
