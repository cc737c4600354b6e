package txinbox

import "time"

// DeadLetter is one dead letter as package admin lists it (admin.Admin.ListDead): an inbox message
// whose handler gave up on it (it ran out of attempts, returned a permanent error, or could not be
// decoded at all), or an outbox event no Publisher took (out of attempts, or refused with a permanent
// error). A letter of the inbox has a Consumer, one of the outbox a Topic; the fields of the other
// side are zero. admin's GetMessage and GetOutboxEvent return every field of one (payload,
// headers...).
type DeadLetter struct {
	// Cursor is the letter's place in its list, newest first: admin.DeadFilter.Before set to it lists
	// the letters after it (they died earlier). A letter replayed and dead again gets a new one. The
	// inbox's is the order messages died in (a decimal number, greater for a later death); the
	// outbox's is the event's time of death and its id.
	Cursor string `json:"cursor"`
	// ID is the message's id in the inbox, or the event's id in the outbox: the id the replay and
	// discard calls take.
	ID int64 `json:"id"`
	// EventID is the outbox event's public id, its idempotency key downstream (the CloudEvents id a
	// consumer sees); "" for an inbox message.
	EventID string `json:"event_id,omitempty"`
	// Topic is the outbox event's topic ("" for an inbox message).
	Topic string `json:"topic,omitempty"`
	// Consumer is the inbox message's consumer ("" for an outbox event).
	Consumer string `json:"consumer,omitempty"`
	// Key is the inbox message's key, or the outbox event's ordering key ("" when it has none).
	Key string `json:"key"`
	// Kind is the message's kind; for an outbox event, its Kind or, when published without one, its
	// topic.
	Kind string `json:"kind"`
	// ContentType is the outbox event's payload media type ("application/json" when published
	// without one); "" for an inbox message.
	ContentType string `json:"content_type,omitempty"`
	// DiedAt is when it died.
	DiedAt          time.Time `json:"died_at"`
	AttemptsStarted int       `json:"attempts_started"`
	AttemptsFailed  int       `json:"attempts_failed"`
	// Undecodable is true for an inbox message stored as raw bytes (it could not be decoded): a
	// replay skips it; discard it.
	Undecodable bool   `json:"undecodable,omitempty"`
	LastError   string `json:"last_error"` // the error it died of
}
