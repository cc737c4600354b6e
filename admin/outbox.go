package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/outbox"
)

// OutboxState is the state of an outbox event, as GetOutboxEvent reports it.
type OutboxState string

// The states of an outbox event.
const (
	// OutboxPending: queued, no relay holds it: waiting for its first attempt (or its NotBefore, or the
	// event of its key before it), for a retry, or replayed.
	OutboxPending OutboxState = "pending"
	// OutboxClaimed: a relay holds it (its lease may have ended: the next claim takes it over).
	OutboxClaimed OutboxState = "claimed"
	// OutboxSent: a Publisher acknowledged it; kept for the retention window.
	OutboxSent OutboxState = "sent"
	// OutboxDead: out of attempts, or refused with a permanent error: kept until replayed or
	// discarded.
	OutboxDead OutboxState = "dead"
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

// OutboxDeadFilter selects dead outbox events for ListOutboxDead, CountOutboxDead and OutboxDeadIDs,
// which apply it alike (the CLI and the console list the same events for the same filter), with the
// rules of the inbox's DeadFilter. Empty fields do not filter.
type OutboxDeadFilter struct {
	Topic string // exact topic
	Key   string // exact ordering key
	// ErrorContains matches the dead events whose last error contains it in any case ("TIMEOUT"
	// matches "timeout talking to the broker"): a plain substring, no wildcard, compared after
	// PostgreSQL's lower() of both (per the database's collation).
	ErrorContains string
	Since         time.Time // died at or after this time
	Until         time.Time // died before this time
	// Limit is the most events ListOutboxDead returns. Default DefaultDeadListLimit (100); at most
	// MaxDeadListLimit (1000). CountOutboxDead and OutboxDeadIDs ignore it.
	Limit int
	// Before, when not empty, keeps only the dead events listed after the one whose Cursor it is (they
	// died earlier, or at the same time with a lower id): the cursor of the next page is the Cursor of
	// the last event of a page, and OutboxDeadCount.Before bounds an action to the events counted.
	Before string
}

// OutboxDeadEvent is one dead outbox event as ListOutboxDead lists it: an event no Publisher took
// (out of attempts, or refused with a permanent error). GetOutboxEvent returns every field of it
// (payload, headers...).
type OutboxDeadEvent struct {
	// Cursor is the event's place in the list (its time of death and id): OutboxDeadFilter.Before
	// set to it lists the events after it. ListOutboxDead lists by it, latest first; an event
	// replayed and dead again gets a new one.
	Cursor  string `json:"cursor"`
	ID      int64  `json:"id"`
	EventID string `json:"event_id"` // the event's public id, its idempotency key downstream
	Topic   string `json:"topic"`
	Key     string `json:"key"` // ordering key; "" when none
	// Kind and ContentType are as in OutboxEvent, their defaults applied.
	Kind        string `json:"kind"`
	ContentType string `json:"content_type"`
	// DiedAt is when the event died (its finished_at).
	DiedAt          time.Time `json:"died_at"`
	AttemptsStarted int       `json:"attempts_started"`
	AttemptsFailed  int       `json:"attempts_failed"`
	LastError       string    `json:"last_error"` // the error it died of
}

// outboxCursor is a place in the list of dead events: (time of death, id), compared as a pair.
type outboxCursor struct {
	at time.Time
	id int64
}

// String is the cursor's text form: the time of death in Unix microseconds (PostgreSQL's precision),
// a colon, and the id.
func (c outboxCursor) String() string {
	return strconv.FormatInt(c.at.UnixMicro(), 10) + ":" + strconv.FormatInt(c.id, 10)
}

// parseOutboxCursor reads a cursor's text form ("" is none: ok false).
func parseOutboxCursor(s string) (c outboxCursor, ok bool, err error) {
	if s == "" {
		return c, false, nil
	}
	at, id, found := strings.Cut(s, ":")
	us, err1 := strconv.ParseInt(at, 10, 64)
	n, err2 := strconv.ParseInt(id, 10, 64)
	if !found || err1 != nil || err2 != nil || n < 0 {
		return c, false, &txinbox.ArgumentError{Name: "Before", Reason: fmt.Sprintf("%q is not a cursor of a dead event (from a list's cursor field)", s)}
	}
	return outboxCursor{at: time.UnixMicro(us).UTC(), id: n}, true, nil
}

// outboxFilter is a checked OutboxDeadFilter as the statements take it.
type outboxFilter struct {
	beforeAt     pgtype.Timestamptz
	beforeID     int64
	since, until pgtype.Timestamptz
}

// check returns an *ArgumentError for a bad filter, else the filter's parameters.
func (f OutboxDeadFilter) check() (outboxFilter, error) {
	var p outboxFilter
	switch {
	case f.Limit < 0 || f.Limit > MaxDeadListLimit:
		return p, &txinbox.ArgumentError{Name: "Limit", Reason: fmt.Sprintf("%d is not between 0 (default %d) and %d", f.Limit, DefaultDeadListLimit, MaxDeadListLimit)}
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since):
		return p, &txinbox.ArgumentError{Name: "Until", Reason: "must be after Since"}
	}
	for _, x := range []struct{ name, v string }{{"Topic", f.Topic}, {"Key", f.Key}, {"ErrorContains", f.ErrorContains}} {
		if !utf8.ValidString(x.v) || strings.ContainsRune(x.v, 0) {
			return p, &txinbox.ArgumentError{Name: x.name, Reason: "must be valid UTF-8 without NUL"}
		}
	}
	c, ok, err := parseOutboxCursor(f.Before)
	if err != nil {
		return p, err
	}
	if ok {
		p.beforeAt, p.beforeID = pgtype.Timestamptz{Time: c.at, Valid: true}, c.id
	}
	p.since, p.until = optTS(f.Since), optTS(f.Until)
	return p, nil
}

// ListOutboxDead returns the dead outbox events matching f, newest first (by the time they died,
// then by id, both descending), at most f.Limit of them. When it returns f.Limit events there may be
// more: the next page is ListOutboxDead with f.Before set to the Cursor of the last one. Events that
// die meanwhile do not appear on a later page (they died later).
//
// Dead events stay in the outbox, with their payload and last error, until an operator replays them
// (ReplayOutboxDead) or deletes them (DiscardOutboxDead); rotations never remove them. A dead event
// does not hold back the later events of its key.
//
// It reads the whole outbox table (one scan: there is no index on the state, so that the relay's
// write of an event stays a HOT update). Bad arguments return an *[txinbox.ArgumentError].
func (a *Admin) ListOutboxDead(ctx context.Context, f OutboxDeadFilter) ([]OutboxDeadEvent, error) {
	p, err := f.check()
	if err != nil {
		return nil, err
	}
	if f.Limit == 0 {
		f.Limit = DefaultDeadListLimit
	}
	rows, err := schemasql.Queries.ListOutboxDead(ctx, a.st.Wrap(a.store.DB), sqlc.ListOutboxDeadParams{
		BeforeAt: p.beforeAt, BeforeID: p.beforeID, Topic: f.Topic, Key: f.Key, ErrorContains: f.ErrorContains,
		Since: p.since, Until: p.until, MaxRows: int32(f.Limit)})
	if err != nil {
		return nil, schemasql.Err(err)
	}
	out := make([]OutboxDeadEvent, len(rows))
	for i, r := range rows {
		died := ts(r.DiedAt)
		out[i] = OutboxDeadEvent{Cursor: outboxCursor{at: died, id: r.ID}.String(), ID: r.ID, EventID: r.EventID,
			Topic: r.Topic, Key: r.Key, Kind: cmp.Or(r.Kind, r.Topic), ContentType: cmp.Or(r.ContentType, outbox.DefaultContentType),
			DiedAt: died, AttemptsStarted: int(r.AttemptsStarted),
			AttemptsFailed: int(r.AttemptsFailed), LastError: r.LastError}
	}
	return out, nil
}

// OutboxDeadCount is what CountOutboxDead counted.
type OutboxDeadCount struct {
	// Matching is the number of dead events matching the filter (all of them, no paging).
	Matching int64
	// Before bounds a later action to the events counted: OutboxDeadIDs or ListOutboxDead with the
	// same filter and this Before never return an event that died after the count. It is the
	// filter's Before when that was set, else a cursor past every dead event at the count.
	Before string
}

// CountOutboxDead counts the dead outbox events matching f (f.Limit is ignored), with one scan of the
// outbox table. Bad arguments return an *[txinbox.ArgumentError].
func (a *Admin) CountOutboxDead(ctx context.Context, f OutboxDeadFilter) (OutboxDeadCount, error) {
	p, err := f.check()
	if err != nil {
		return OutboxDeadCount{}, err
	}
	r, err := schemasql.Queries.CountOutboxDead(ctx, a.st.Wrap(a.store.DB), sqlc.CountOutboxDeadParams{
		BeforeAt: p.beforeAt, BeforeID: p.beforeID, Topic: f.Topic, Key: f.Key, ErrorContains: f.ErrorContains,
		Since: p.since, Until: p.until})
	if err != nil {
		return OutboxDeadCount{}, schemasql.Err(err)
	}
	c := OutboxDeadCount{Matching: r.Matching, Before: f.Before}
	if c.Before == "" {
		// Past every event that died at or before the latest death now; none when nothing is dead.
		bound := outboxCursor{at: time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}
		if r.NewestAt.Valid {
			bound = outboxCursor{at: r.NewestAt.Time, id: math.MaxInt64}
		}
		c.Before = bound.String()
	}
	return c, nil
}

// OutboxDeadIDs returns the ids of the dead outbox events matching f (f.Limit is ignored), in
// increasing order, at most limit (1 to MaxListIDs). Bad arguments return an
// *[txinbox.ArgumentError].
func (a *Admin) OutboxDeadIDs(ctx context.Context, f OutboxDeadFilter, limit int) ([]int64, error) {
	p, err := f.check()
	if err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxListIDs {
		return nil, &txinbox.ArgumentError{Name: "limit", Reason: fmt.Sprintf("%d is not between 1 and %d", limit, MaxListIDs)}
	}
	ids, err := schemasql.Queries.OutboxDeadIDs(ctx, a.st.Wrap(a.store.DB), sqlc.OutboxDeadIDsParams{
		BeforeAt: p.beforeAt, BeforeID: p.beforeID, Topic: f.Topic, Key: f.Key, ErrorContains: f.ErrorContains,
		Since: p.since, Until: p.until, MaxRows: int32(limit)})
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return nonNil(ids), nil
}

// OutboxDeadAmong returns those of ids that are dead outbox events now, in increasing order (never
// nil). At most MaxAdminIDs ids per call.
func (a *Admin) OutboxDeadAmong(ctx context.Context, ids ...int64) ([]int64, error) {
	if err := checkIDs(ids); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return []int64{}, nil
	}
	got, err := schemasql.Queries.OutboxDeadAmong(ctx, a.st.Wrap(a.store.DB), ids)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return nonNil(got), nil
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
	State   OutboxState       `json:"state"`
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
}

// OutboxNotFoundError reports an outbox event that is not stored (never was, was discarded, or was
// sent and then removed by a rotation after the retention window): by id (GetOutboxEvent), or by
// event id (FindOutboxEvent; ID is then 0). It matches ErrNotFound.
type OutboxNotFoundError struct {
	ID      int64
	EventID string
}

func (e *OutboxNotFoundError) Error() string {
	if e.ID == 0 {
		return fmt.Sprintf("txinbox: no outbox event has event id %s", e.EventID)
	}
	return fmt.Sprintf("txinbox: outbox event %d not found", e.ID)
}

// Is reports whether target is ErrNotFound.
func (e *OutboxNotFoundError) Is(target error) bool { return target == ErrNotFound }

// GetOutboxEvent returns the outbox event id, in any state. An unknown id returns an
// *OutboxNotFoundError (errors.Is ErrNotFound).
func (a *Admin) GetOutboxEvent(ctx context.Context, id int64) (OutboxEvent, error) {
	r, err := schemasql.Queries.GetOutboxEvent(ctx, a.st.Wrap(a.store.DB), id)
	if errors.Is(err, pgx.ErrNoRows) {
		return OutboxEvent{}, &OutboxNotFoundError{ID: id}
	}
	if err != nil {
		return OutboxEvent{}, schemasql.Err(err)
	}
	ev := OutboxEvent{ID: r.ID, EventID: r.EventID, Topic: r.Topic, Key: r.Key, Kind: cmp.Or(r.Kind, r.Topic),
		ContentType: cmp.Or(r.ContentType, outbox.DefaultContentType), Payload: json.RawMessage(r.Payload),
		State: OutboxState(r.State), AttemptsStarted: int(r.AttemptsStarted), AttemptsFailed: int(r.AttemptsFailed),
		NextRunAt: ts(r.NextRunAt), Owner: r.Owner, LeaseUntil: ts(r.LeaseUntil), Token: r.Token, LastError: r.LastError,
		CreatedAt: ts(r.CreatedAt), StartedAt: ts(r.StartedAt), FinishedAt: ts(r.FinishedAt)}
	if len(r.Headers) > 2 {
		_ = json.Unmarshal(r.Headers, &ev.Headers) // written by Publish as a JSON object of strings
	}
	return ev, nil
}

// CheckEventID returns nil when s has the form of an outbox event's event id (OutboxEvent.EventID, the
// CloudEvents id a consumer sees): a UUID in its text form, 32 hexadecimal digits (either case) in
// groups of 8, 4, 4, 4 and 12 joined by hyphens. Otherwise it returns an *[txinbox.ArgumentError]
// named "eventID".
func CheckEventID(s string) error {
	return checkEventID("eventID", s)
}

func checkEventID(name, s string) error {
	ok := len(s) == 36
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			ok = c == '-'
		} else {
			ok = '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
		}
	}
	if !ok {
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
// id that no stored event has returns an *OutboxNotFoundError naming it (errors.Is ErrNotFound); a
// string that is not an event id (CheckEventID) an *[txinbox.ArgumentError], without a statement.
func (a *Admin) FindOutboxEvent(ctx context.Context, eventID string) (OutboxEvent, error) {
	ids, err := a.outboxIDs(ctx, "eventID", []string{eventID})
	if err != nil {
		return OutboxEvent{}, err
	}
	if ids[0] == 0 {
		return OutboxEvent{}, &OutboxNotFoundError{EventID: eventID}
	}
	ev, err := a.GetOutboxEvent(ctx, ids[0])
	var nf *OutboxNotFoundError
	if errors.As(err, &nf) { // deleted in between
		return ev, &OutboxNotFoundError{EventID: eventID}
	}
	return ev, err
}

// OutboxIDs returns the outbox id (OutboxEvent.ID, the id the other calls take) of the event of each
// of eventIDs, in the order given: ids[i] is the id of the stored event whose event id is
// eventIDs[i] (in either case), 0 when none has it. It runs one statement, which probes the index on
// the event id (migration 00012) once per event id. A string that is not an event id (CheckEventID)
// returns an *[txinbox.ArgumentError] named "eventIDs", without a statement. At most MaxAdminIDs
// event ids per call.
func (a *Admin) OutboxIDs(ctx context.Context, eventIDs ...string) ([]int64, error) {
	return a.outboxIDs(ctx, "eventIDs", eventIDs)
}

// outboxIDs is OutboxIDs, its argument called name in errors.
func (a *Admin) outboxIDs(ctx context.Context, name string, eventIDs []string) ([]int64, error) {
	if len(eventIDs) > MaxAdminIDs {
		return nil, &txinbox.ArgumentError{Name: name, Reason: fmt.Sprintf("%d event ids, more than the limit of %d per call", len(eventIDs), MaxAdminIDs)}
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

// ReplayOutboxDead puts the dead outbox events ids back to pending, in one statement, and returns
// the ids it replayed, in order. A replayed event keeps its row, event id (its idempotency key
// downstream), payload, headers and last error; its attempts are reset to zero and it goes as soon as
// a relay claims it (relays are woken by a notification, unless Store.NotifyInterval is negative).
// An event with a key becomes again the oldest queued event of that key (it was published first), so
// later queued events of the key wait for it.
//
// The replay is fenced as the inbox's is: the event's queue row keeps the fencing token of its last
// claim, so the next claim's token is greater than any before, and a relay that still holds an old
// claim of the event (its Publish call outlived the lease) records nothing over the new one.
//
// Ids that are not dead (any more) or not stored are skipped and absent from the result. At most
// MaxAdminIDs ids per call.
func (a *Admin) ReplayOutboxDead(ctx context.Context, ids ...int64) ([]int64, error) {
	if err := checkIDs(ids); err != nil || len(ids) == 0 {
		return nil, err
	}
	channel := ""
	if a.store.NotifyInterval >= 0 {
		channel = outbox.NotifyChannel(a.store)
	}
	done, err := schemasql.Queries.ReplayOutboxDead(ctx, a.st.Wrap(a.store.DB), ids, channel)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return done, nil
}

// DiscardOutboxDead deletes the dead outbox events ids, in one statement, and returns the ids it
// deleted, in order: they are never published. Ids that are not dead (any more) or not stored are
// skipped and absent from the result. At most MaxAdminIDs ids per call.
func (a *Admin) DiscardOutboxDead(ctx context.Context, ids ...int64) ([]int64, error) {
	if err := checkIDs(ids); err != nil || len(ids) == 0 {
		return nil, err
	}
	done, err := schemasql.Queries.DiscardOutboxDead(ctx, a.st.Wrap(a.store.DB), ids)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return done, nil
}
