package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/textcheck"
	"github.com/txinbox/txinbox/outbox"
)

// OutboxTopicStats counts the events of one topic of the outbox.
type OutboxTopicStats struct {
	Topic string `json:"topic"`
	// Pending, Retrying and Claimed are the unsent events (queued): Pending waiting and never
	// claimed; Retrying waiting and claimed before (failed, handed back by a stopping relay, or
	// replayed); Claimed held by a relay (in flight).
	Pending  int64 `json:"pending"`
	Retrying int64 `json:"retrying"`
	Claimed  int64 `json:"claimed"`
	// Sent counts the sent events still kept: a rotation (the maintainer's, or outbox.Rotate)
	// removes them once the retention window has passed.
	Sent int64 `json:"sent"`
	// Dead counts the dead events, kept until replayed or discarded.
	Dead int64 `json:"dead"`
	// OldestUnsentAge is the lag: how long the oldest unsent event has been waiting, since it was
	// published (a replayed event too), or since its NotBefore when it has never been claimed and
	// that is later; zero when no event is unsent. An event whose NotBefore is still ahead is not
	// counted. Its JSON form is oldest_unsent_seconds, a number of seconds (fractional).
	OldestUnsentAge time.Duration `json:"-"`
}

// Unsent returns the events of the topic not sent yet and not dead: pending, retrying and claimed.
func (s OutboxTopicStats) Unsent() int64 { return s.Pending + s.Retrying + s.Claimed }

type outboxTopicStatsFields OutboxTopicStats // without the methods

// outboxTopicStatsJSON is the JSON form of OutboxTopicStats.
type outboxTopicStatsJSON struct {
	outboxTopicStatsFields
	OldestUnsentSeconds float64 `json:"oldest_unsent_seconds"`
}

// MarshalJSON encodes s with OldestUnsentAge as oldest_unsent_seconds (seconds, fractional).
func (s OutboxTopicStats) MarshalJSON() ([]byte, error) {
	return json.Marshal(outboxTopicStatsJSON{outboxTopicStatsFields(s), s.OldestUnsentAge.Seconds()})
}

// UnmarshalJSON decodes the form MarshalJSON writes.
func (s *OutboxTopicStats) UnmarshalJSON(b []byte) error {
	var v outboxTopicStatsJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = OutboxTopicStats(v.outboxTopicStatsFields)
	s.OldestUnsentAge = time.Duration(v.OldestUnsentSeconds * float64(time.Second))
	return nil
}

// OutboxStats counts the outbox's events per topic and state, in topic order (a topic with no event
// left is not listed), with the lag of each. The unsent events are read from the queue (as large as
// the backlog), each by its id; the sent and dead ones with one scan of the outbox table, which has
// no index on the state (the relay's write of an event stays a HOT update: migration 00009), so call
// it for dashboards and the CLI, not on a hot path. The Prometheus collector of package metrics reads
// the queue's part alone.
func (a *Admin) OutboxStats(ctx context.Context) ([]OutboxTopicStats, error) {
	db := a.st.Wrap(a.store.DB)
	queued, err := schemasql.Queries.OutboxQueueStats(ctx, db)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	done, err := schemasql.Queries.OutboxStateCounts(ctx, db)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	out := make([]OutboxTopicStats, 0, max(len(queued), len(done)))
	i, j := 0, 0
	for i < len(queued) || j < len(done) { // both in topic order: merge them
		var s OutboxTopicStats
		switch {
		case j == len(done) || (i < len(queued) && queued[i].Topic < done[j].Topic):
			s.Topic = queued[i].Topic
		default:
			s.Topic = done[j].Topic
		}
		if i < len(queued) && queued[i].Topic == s.Topic {
			q := queued[i]
			s.Pending, s.Retrying, s.Claimed = q.Pending, q.Retrying, q.Claimed
			s.OldestUnsentAge = time.Duration(q.OldestUnsentSeconds * float64(time.Second))
			i++
		}
		if j < len(done) && done[j].Topic == s.Topic {
			s.Sent, s.Dead = done[j].Sent, done[j].Dead
			j++
		}
		out = append(out, s)
	}
	return out, nil
}

// OutboxEvent is one event of the outbox with every field, as GetOutboxEvent and FindOutboxEvent read
// it.
type OutboxEvent struct {
	ID int64 `json:"id"` // the outbox's id: the order of the events, and the id of the admin calls
	// EventID is the event's public id (a UUID): the CloudEvents id a consumer sees, and its
	// idempotency key downstream. FindOutboxEvent looks an event up by it.
	EventID string `json:"event_id"`
	Topic   string `json:"topic"`
	Key     string `json:"key,omitempty"` // ordering key; "" when none
	// Kind is the event's kind, sent as the CloudEvents type: outbox.Message.Kind, or the topic when
	// it was published without one.
	Kind string `json:"kind"`
	// ContentType is the payload's media type, sent as the CloudEvents datacontenttype:
	// outbox.Message.ContentType, or outbox.DefaultContentType ("application/json") when it was
	// published without one.
	ContentType string `json:"content_type"`
	// Payload is the JSON document byte for byte as published.
	Payload json.RawMessage   `json:"payload"`
	Headers map[string]string `json:"headers,omitempty"`
	// State is "pending" (queued, no relay holds it: waiting for its first attempt, its NotBefore,
	// the event of its key before it, or a retry; or replayed), "claimed" (a relay holds it; its lease
	// may have ended: the next claim takes it over), "sent" (a Publisher acknowledged it; kept for the
	// retention window) or "dead" (out of attempts, or refused with a permanent error: kept until
	// replayed or discarded).
	State string `json:"state"`
	// AttemptsStarted counts the attempts claimed by a relay, AttemptsFailed those that failed; more
	// started than failed means one is running (State claimed) or never finished.
	AttemptsStarted int `json:"attempts_started"`
	AttemptsFailed  int `json:"attempts_failed"`
	// NextRunAt is a pending event's not-before time: its NotBefore, the time of its next retry, or
	// when it was published or replayed (a claim may come later: the event of its key before it
	// goes first). Zero for the other states.
	NextRunAt  time.Time `json:"next_run_at,omitzero"`
	Owner      string    `json:"owner,omitempty"`      // the relay holding the claim
	LeaseUntil time.Time `json:"lease_until,omitzero"` // end of the current claim
	Token      int64     `json:"token"`                // fencing token, incremented by every claim
	LastError  string    `json:"last_error,omitempty"` // error of the latest failed attempt
	CreatedAt  time.Time `json:"created_at"`           // start of the publishing transaction
	StartedAt  time.Time `json:"started_at,omitzero"`  // start of the latest attempt
	FinishedAt time.Time `json:"finished_at,omitzero"` // when it was sent or died
	// History is the event's last failed attempts, at most 10, oldest first (nil when none failed):
	// see txinbox.Attempt. A sent attempt is not listed: FinishedAt is its time.
	History []txinbox.Attempt `json:"history,omitempty"`
}

// GetOutboxEvent returns the outbox event id, in any state. An unknown id returns a *NotFoundError
// (View Outbox; errors.Is ErrNotFound).
func (a *Admin) GetOutboxEvent(ctx context.Context, id int64) (OutboxEvent, error) {
	r, err := schemasql.Queries.GetOutboxEvent(ctx, a.st.Wrap(a.store.DB), id)
	if errors.Is(err, pgx.ErrNoRows) {
		return OutboxEvent{}, &NotFoundError{View: Outbox, ID: id}
	}
	if err != nil {
		return OutboxEvent{}, schemasql.Err(err)
	}
	ev := OutboxEvent{ID: r.ID, EventID: r.EventID, Topic: r.Topic, Key: r.Key, Kind: cmp.Or(r.Kind, r.Topic),
		ContentType: cmp.Or(r.ContentType, outbox.DefaultContentType), Payload: json.RawMessage(r.Payload),
		State: r.State, AttemptsStarted: int(r.AttemptsStarted), AttemptsFailed: int(r.AttemptsFailed),
		NextRunAt: ts(r.NextRunAt), Owner: r.Owner, LeaseUntil: ts(r.LeaseUntil), Token: r.Token, LastError: r.LastError,
		CreatedAt: ts(r.CreatedAt), StartedAt: ts(r.StartedAt), FinishedAt: ts(r.FinishedAt), History: history(r.History)}
	if len(r.Headers) > 2 {
		_ = json.Unmarshal(r.Headers, &ev.Headers) // written by Publish as a JSON object of strings
	}
	return ev, nil
}

// checkEventID returns nil when s has the form of an outbox event's event id (textcheck.IsEventID),
// or an *[txinbox.ArgumentError] named name.
func checkEventID(name, s string) error {
	if !textcheck.IsEventID(s) {
		return &txinbox.ArgumentError{Name: name, Reason: fmt.Sprintf("%q is not an event id (a UUID such as 0190a8c2-6a1b-7c3d-9e4f-0123456789ab)", truncate(s))}
	}
	return nil
}

// truncate cuts s to 64 bytes for an error message.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// FindOutboxEvent returns the outbox event whose event id (OutboxEvent.EventID: the UUID a consumer
// sees as the CloudEvents id) is eventID, in any state, with every field as GetOutboxEvent reads it.
// The event id is found with one probe of the index on it (migration 00012), never a scan. An event
// id that no stored event has returns a *NotFoundError naming it (errors.Is ErrNotFound); a
// string that is not an event id (a UUID in its text form: 32 hexadecimal digits, either case, in
// groups of 8, 4, 4, 4 and 12 joined by hyphens) an *[txinbox.ArgumentError] named "eventID",
// without a statement.
func (a *Admin) FindOutboxEvent(ctx context.Context, eventID string) (OutboxEvent, error) {
	ids, err := a.outboxIDs(ctx, "eventID", []string{eventID})
	if err != nil {
		return OutboxEvent{}, err
	}
	if ids[0] == 0 {
		return OutboxEvent{}, &NotFoundError{View: Outbox, EventID: eventID}
	}
	ev, err := a.GetOutboxEvent(ctx, ids[0])
	var nf *NotFoundError
	if errors.As(err, &nf) { // deleted in between
		return ev, &NotFoundError{View: Outbox, EventID: eventID}
	}
	return ev, err
}

// OutboxIDs returns the outbox id (OutboxEvent.ID, the id the other calls take) of the event of each
// of eventIDs, in the order given: ids[i] is the id of the stored event whose event id is
// eventIDs[i] (in either case), 0 when none has it. It runs one statement, which probes the index on
// the event id (migration 00012) once per event id. A string that is not an event id (see
// FindOutboxEvent) returns an *[txinbox.ArgumentError] named "eventIDs", without a statement. At
// most 10,000 event ids per call.
func (a *Admin) OutboxIDs(ctx context.Context, eventIDs ...string) ([]int64, error) {
	return a.outboxIDs(ctx, "eventIDs", eventIDs)
}

// outboxIDs is OutboxIDs, its argument called name in errors.
func (a *Admin) outboxIDs(ctx context.Context, name string, eventIDs []string) ([]int64, error) {
	if len(eventIDs) > limits.AdminIDs {
		return nil, &txinbox.ArgumentError{Name: name, Reason: fmt.Sprintf("%d event ids, more than the limit of %d per call", len(eventIDs), limits.AdminIDs)}
	}
	for _, s := range eventIDs {
		if err := checkEventID(name, s); err != nil {
			return nil, err
		}
	}
	ids := make([]int64, len(eventIDs))
	if len(eventIDs) == 0 {
		return ids, nil
	}
	lower := make([]string, len(eventIDs))
	for i, s := range eventIDs {
		lower[i] = strings.ToLower(s) // the text form PostgreSQL returns
	}
	rows, err := schemasql.Queries.OutboxIDsOfEventIDs(ctx, a.st.Wrap(a.store.DB), lower)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	found := make(map[string]int64, len(rows))
	for _, r := range rows {
		found[r.EventID] = r.ID
	}
	for i, s := range lower {
		ids[i] = found[s]
	}
	return ids, nil
}
