package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
)

// InFlight is one message of the inbox or event of the outbox that is still queued (neither
// completed, sent nor dead), as ListInFlight lists it. A message has a Consumer, an event a Topic and
// an EventID; the fields of the other View are zero. GetMessage and GetOutboxEvent return every field
// of one, its attempt history (History) included.
type InFlight struct {
	// Cursor is its place in its list, newest first: InFlightFilter.Before set to it lists the ones
	// after it (queued earlier). It is the id, in decimal.
	Cursor string `json:"cursor"`
	// ID is the message's id in the inbox, or the event's id in the outbox.
	ID       int64  `json:"id"`
	EventID  string `json:"event_id,omitempty"` // the outbox event's public id; "" for a message
	Topic    string `json:"topic,omitempty"`    // the outbox event's topic; "" for a message
	Consumer string `json:"consumer,omitempty"` // the inbox message's consumer; "" for an event
	// Key is the message's key, or the event's ordering key ("" when it has none).
	Key string `json:"key"`
	// Kind is the message's kind; for an event, its Kind or, when published without one, its topic.
	Kind string `json:"kind"`
	// State is "pending" (waiting, never claimed: for its first attempt, its not-before time or the
	// message or event of its ordering key before it), "retrying" (waiting, claimed before: an attempt
	// failed or never finished, a stopping pool or relay handed it back, or it was replayed) or
	// "processing" (held by a worker's batch, one left behind by a worker that died included until
	// the rescuer charges it; for the outbox, claimed by a relay, whose lease may have ended: the
	// next claim takes it over). These are the Pending, Retrying and Claimed counts of
	// Admin.Overview and Admin.OutboxStats.
	State           string `json:"state"`
	AttemptsStarted int    `json:"attempts_started"`
	AttemptsFailed  int    `json:"attempts_failed"`
	// EnqueuedAt is when the message was received (or its expired key renewed), or the event
	// published (the start of the publishing transaction).
	EnqueuedAt time.Time `json:"enqueued_at"`
	// NextRunAt is, while it waits, the earliest time of its next claim: its not-before time, its
	// retry's backoff, or a snooze behind its ordering key. Zero while processing.
	NextRunAt time.Time `json:"next_run_at,omitzero"`
	// Owner (processing only) names the worker pool or relay holding it, StartedAt when its batch or
	// claim began and, for the outbox, LeaseUntil when the claim's lease ends.
	Owner      string    `json:"owner,omitempty"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// LastError is the error of its latest failed attempt ("" when none failed); its history has the
	// last 10 (GetMessage, GetOutboxEvent).
	LastError string `json:"last_error,omitempty"`
}

// The states ListInFlight lists.
const (
	statePending    = "pending"
	stateRetrying   = "retrying"
	stateProcessing = "processing"
)

// InFlightFilter selects the queued messages or events of one View for ListInFlight, with the rules
// of DeadFilter: empty fields do not filter; a field of the other View's returns an
// *[txinbox.ArgumentError].
type InFlightFilter struct {
	// View is Inbox (the zero value: messages, by consumer) or Outbox (events, by topic).
	View View
	// Consumer (Inbox only) keeps the messages of this exact consumer.
	Consumer string
	// Topic (Outbox only) keeps the events of this exact topic.
	Topic string
	// State keeps those in this state: "pending", "retrying" or "processing" (InFlight.State).
	State string
	// Limit is the most ListInFlight returns. Default: 100. At most 1000.
	Limit int
	// Before, when not empty, keeps only those listed after the one whose Cursor it is (queued
	// earlier): the cursor of the next page is the Cursor of the last one of a page.
	Before string
}

// check returns an *ArgumentError for a bad filter, else the Before cursor's id (0 when none).
func (f InFlightFilter) check() (int64, error) {
	if err := f.View.check("View"); err != nil {
		return 0, err
	}
	if f.Limit < 0 || f.Limit > limits.DeadListLimit {
		return 0, &txinbox.ArgumentError{Name: "Limit", Reason: fmt.Sprintf("%d is not between 0 (default %d) and %d", f.Limit, defaultDeadListLimit, limits.DeadListLimit)}
	}
	switch f.State {
	case "", statePending, stateRetrying, stateProcessing:
	default:
		return 0, &txinbox.ArgumentError{Name: "State", Reason: fmt.Sprintf("%q is not a state of queued work (pending, retrying or processing)", truncate(f.State))}
	}
	if f.View == Inbox && f.Topic != "" {
		return 0, &txinbox.ArgumentError{Name: "Topic", Reason: "filters the work of View Outbox only"}
	}
	if f.View == Outbox && f.Consumer != "" {
		return 0, &txinbox.ArgumentError{Name: "Consumer", Reason: "filters the work of View Inbox only"}
	}
	for _, x := range []struct{ name, v string }{{"Consumer", f.Consumer}, {"Topic", f.Topic}} {
		if !utf8.ValidString(x.v) || strings.ContainsRune(x.v, 0) {
			return 0, &txinbox.ArgumentError{Name: x.name, Reason: "must be valid UTF-8 without NUL"}
		}
	}
	if f.Before == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(f.Before, 10, 64)
	if err != nil || n <= 0 {
		return 0, &txinbox.ArgumentError{Name: "Before", Reason: fmt.Sprintf("%q is not a cursor of queued work (from a list's cursor field)", truncate(f.Before))}
	}
	return n, nil
}

// ListInFlight returns the queued messages (View Inbox) or events (View Outbox) matching f, newest
// first (by id, descending), at most f.Limit of them: the work waiting for its first attempt
// (pending), waiting for another (retrying) and held by a worker or relay (processing). When it
// returns f.Limit there may be more: the next page is ListInFlight with f.Before set to the Cursor
// of the last one. Work queued meanwhile never appears on a later page (its id is greater); one
// that completes, is sent or dies meanwhile leaves the list.
//
// It reads the queue (as large as the backlog) through its primary key and the inbox or outbox row
// of each one listed by id (for a Topic filter, of each one queued): never a scan of the inbox or
// outbox table. The result is never nil (empty: none). Bad arguments return an
// *[txinbox.ArgumentError].
func (a *Admin) ListInFlight(ctx context.Context, f InFlightFilter) ([]InFlight, error) {
	before, err := f.check()
	if err != nil {
		return nil, err
	}
	if f.Limit == 0 {
		f.Limit = defaultDeadListLimit
	}
	db := a.st.Wrap(a.store.DB)
	if f.View == Outbox {
		rows, err := schemasql.Queries.ListOutboxInFlight(ctx, db, sqlc.ListOutboxInFlightParams{
			BeforeID: before, Topic: f.Topic, State: f.State, MaxRows: int32(f.Limit)})
		if err != nil {
			return nil, schemasql.Err(err)
		}
		out := make([]InFlight, len(rows))
		for i, r := range rows {
			out[i] = InFlight{Cursor: strconv.FormatInt(r.ID, 10), ID: r.ID, EventID: r.EventID, Topic: r.Topic, Key: r.Key,
				Kind: cmp.Or(r.Kind, r.Topic), State: r.State, AttemptsStarted: int(r.AttemptsStarted),
				AttemptsFailed: int(r.AttemptsFailed), EnqueuedAt: ts(r.CreatedAt), NextRunAt: ts(r.NextRunAt),
				Owner: r.Owner, StartedAt: ts(r.StartedAt), LeaseUntil: ts(r.LeaseUntil), LastError: r.LastError}
		}
		return out, nil
	}
	rows, err := schemasql.Queries.ListInFlight(ctx, db, sqlc.ListInFlightParams{
		Consumer: f.Consumer, BeforeID: before, State: f.State, MaxRows: int32(f.Limit)})
	if err != nil {
		return nil, schemasql.Err(err)
	}
	out := make([]InFlight, len(rows))
	for i, r := range rows {
		out[i] = InFlight{Cursor: strconv.FormatInt(r.ID, 10), ID: r.ID, Consumer: r.Consumer, Key: r.Key, Kind: r.Kind,
			State: r.State, AttemptsStarted: int(r.AttemptsStarted), AttemptsFailed: int(r.AttemptsFailed),
			EnqueuedAt: ts(r.ReceivedAt), NextRunAt: ts(r.NextRunAt), Owner: r.Owner, StartedAt: ts(r.StartedAt),
			LastError: r.LastError}
	}
	return out, nil
}

// historyEntry is one element of a row's history column (migration 00013).
type historyEntry struct {
	N      int       `json:"n"`
	At     time.Time `json:"at"`
	MS     float64   `json:"ms"`
	Reason string    `json:"reason"`
	Error  string    `json:"error"`
	Owner  string    `json:"owner"`
}

// history decodes a history column (a JSON array; "[]" or NULL when empty) into attempts, oldest
// first; nil when none.
func history(b []byte) []txinbox.Attempt {
	var es []historyEntry
	if len(b) == 0 || json.Unmarshal(b, &es) != nil || len(es) == 0 {
		return nil
	}
	out := make([]txinbox.Attempt, len(es))
	for i, e := range es {
		out[i] = txinbox.Attempt{Number: e.N, StartedAt: e.At, Duration: time.Duration(e.MS * float64(time.Millisecond)),
			Reason: e.Reason, Error: e.Error, Owner: e.Owner}
	}
	return out
}
