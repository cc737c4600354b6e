package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/walk"
)

// Config configures an Admin. The zero value is valid.
type Config struct {
	// Progress, if set, is called by DiscardOlder after each of its statements, on the calling
	// goroutine, with how far it has got (the txinbox command draws it). Default: none.
	Progress func(Progress)
}

// Progress is how far a DiscardOlder call has got (Config.Progress).
type Progress struct {
	// Done is the number of rows deleted so far.
	Done int64
	// Share is the share of the walk done, between 0 and 1: the ids walked over all the ids to walk,
	// one consumer after the other. Deletions are spread unevenly over the ids, so the time left it
	// suggests is an estimate.
	Share float64
}

// Admin runs operator actions on the stored messages of one Store. It is safe for concurrent use.
type Admin struct {
	store txinbox.Store
	cfg   Config
	st    *schemasql.Schema
}

// New returns an Admin of store. An invalid store or cfg returns a *[txinbox.ConfigError].
func New(store txinbox.Store, cfg Config) (*Admin, error) {
	store, err := store.Resolve()
	if err != nil {
		return nil, err
	}
	return &Admin{store: store, cfg: cfg, st: storeFor(store)}, nil
}

func storeFor(st txinbox.Store) *schemasql.Schema { return schemasql.New(st.Schema) }

// seenInvalidate starts a new epoch of the Store's SeenCache after rows were deleted early, so that
// the cache never answers a deleted key. It waits at most limits.SeenTimeout, even if ctx has ended,
// and reports the invalidation to the Store's Tracer (txinbox.OpSeenInvalidate) with its error, which
// never reaches the caller.
func (a *Admin) seenInvalidate(ctx context.Context) {
	c := a.store.SeenCache
	if c == nil {
		return
	}
	t := a.store.Tracer
	if t != nil {
		ctx = t.TraceStart(ctx, txinbox.TraceStart{Op: txinbox.OpSeenInvalidate, Schema: a.store.Schema})
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limits.SeenTimeout)
	err := c.Invalidate(ictx)
	cancel()
	if t != nil {
		t.TraceEnd(ctx, txinbox.TraceEnd{Op: txinbox.OpSeenInvalidate, Err: err})
	}
}

// ErrNotFound is matched (errors.Is) by every *NotFoundError.
var ErrNotFound = errors.New("txinbox: message not found")

// NotFoundError reports a message or an outbox event that is not stored. A message (View Inbox)
// never was, or was deleted: looked up by id (GetMessage), or by consumer and key (FindMessage; ID
// is then 0). An outbox event (View Outbox) never was, was discarded, or was sent and then removed by
// a rotation after the retention window: looked up by id (GetOutboxEvent), or by event id
// (FindOutboxEvent; ID is then 0).
type NotFoundError struct {
	View          View
	ID            int64
	Consumer, Key string // Inbox, by consumer and key
	EventID       string // Outbox, by event id
}

func (e *NotFoundError) Error() string {
	switch {
	case e.View == Outbox && e.ID == 0:
		return fmt.Sprintf("txinbox: no outbox event has event id %s", e.EventID)
	case e.View == Outbox:
		return fmt.Sprintf("txinbox: outbox event %d not found", e.ID)
	case e.ID == 0:
		return fmt.Sprintf("txinbox: no message of consumer %q has key %q", e.Consumer, e.Key)
	}
	return fmt.Sprintf("txinbox: message %d not found", e.ID)
}

// Is reports whether target is ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

func storedMessage(r sqlc.Inbox) inbox.StoredMessage {
	m := inbox.StoredMessage{
		ID: r.ID, Consumer: r.Consumer, Key: r.Key, Kind: r.Kind, Payload: r.Payload, Raw: r.Raw,
		Fingerprint: r.Fingerprint, OrderingKey: r.OrderingKey.String, State: inbox.State(r.State),
		AttemptsStarted: int(r.AttemptsStarted), AttemptsFailed: int(r.AttemptsFailed),
		NextRunAt: ts(r.NextRunAt), Owner: r.Owner.String, LeaseUntil: ts(r.LeaseUntil), Token: r.Token,
		LastError: r.LastError.String, ReceivedAt: ts(r.ReceivedAt), StartedAt: ts(r.StartedAt),
		CompletedAt: ts(r.CompletedAt), ExpiresAt: ts(r.ExpiresAt), Result: r.Result, History: history(r.History),
	}
	if len(r.Headers) > 0 {
		_ = json.Unmarshal(r.Headers, &m.Headers) // stored from a map[string]string
		if len(m.Headers) == 0 {
			m.Headers = nil
		}
	}
	return m
}

// The headers of an inbox message that name the event it was delivered as, when that was a
// CloudEvents event (every event of a txinbox outbox is): the broker adapters' sinks store the
// event's CloudEvents attributes in the message's headers under these names, whatever the broker.
const (
	// headerEventID holds the event's CloudEvents id: for an event of a txinbox outbox, its event id
	// (OutboxEvent.EventID in the publishing service's database).
	headerEventID = "ce-id"
	// headerEventSource holds the event's CloudEvents source: for an event of a txinbox outbox, the
	// publishing service (outbox.RelayConfig.Source).
	headerEventSource = "ce-source"
)

// Upstream returns the id and source of the event that the stored message m was delivered as: the
// values of its headers "ce-id" and "ce-source" (where the broker adapters' sinks store the
// CloudEvents attributes id and source, whatever the broker), each "" when absent. For a message
// published by another service's txinbox outbox, eventID is that event's event id, which that
// service's admin finds with FindOutboxEvent.
func Upstream(m inbox.StoredMessage) (eventID, source string) {
	return m.Headers[headerEventID], m.Headers[headerEventSource]
}

func ts(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}

func optTS(t time.Time) pgtype.Timestamptz { return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()} }

// GetMessage returns the stored message id, in any state. An unknown id returns a *NotFoundError
// (errors.Is ErrNotFound).
func (a *Admin) GetMessage(ctx context.Context, id int64) (inbox.StoredMessage, error) {
	r, err := schemasql.Queries.GetMessage(ctx, a.st.Wrap(a.store.DB), id)
	if errors.Is(err, pgx.ErrNoRows) {
		return inbox.StoredMessage{}, &NotFoundError{View: Inbox, ID: id}
	}
	if err != nil {
		return inbox.StoredMessage{}, schemasql.Err(err)
	}
	return storedMessage(sqlc.Inbox{
		ID: r.ID, Consumer: r.Consumer, Key: r.Key, Kind: r.Kind, Payload: r.Payload, Raw: r.Raw, Headers: r.Headers,
		Fingerprint: r.Fingerprint, OrderingKey: r.OrderingKey, State: r.State, AttemptsStarted: r.AttemptsStarted,
		AttemptsFailed: r.AttemptsFailed, NextRunAt: r.NextRunAt, Owner: pgtype.Text{String: r.Owner, Valid: r.Owner != ""},
		LeaseUntil: r.LeaseUntil, Token: r.Token, LastError: r.LastError, ReceivedAt: r.ReceivedAt, StartedAt: r.StartedAt,
		CompletedAt: r.CompletedAt, ExpiresAt: r.ExpiresAt, Result: r.Result, History: r.History,
	}), nil
}

func checkIDs(ids []int64) error {
	if len(ids) > limits.AdminIDs {
		return &txinbox.ArgumentError{Name: "ids", Reason: fmt.Sprintf("%d ids, more than the limit of %d per call", len(ids), limits.AdminIDs)}
	}
	for _, id := range ids {
		if id <= 0 {
			return &txinbox.ArgumentError{Name: "ids", Reason: fmt.Sprintf("%d is not a message id", id)}
		}
	}
	return nil
}

// PendingFilter selects the pending messages DiscardPending deletes. Consumer or IDs must be set;
// every field that is set must match (Kind only together with Consumer or IDs).
type PendingFilter struct {
	Consumer string  // exact consumer
	Kind     string  // exact kind
	IDs      []int64 // message ids; at most 10,000
	// DryRun: change and lock nothing, and return what would be discarded now.
	DryRun bool
}

func (f PendingFilter) check() error {
	if f.Consumer == "" && len(f.IDs) == 0 {
		return &txinbox.ArgumentError{Name: "Consumer", Reason: "set Consumer or IDs (a Kind alone would span every consumer)"}
	}
	for name, v := range map[string]string{"Consumer": f.Consumer, "Kind": f.Kind} {
		if v == "" {
			continue
		}
		if err := txinbox.ValidateName(v); err != nil {
			return &txinbox.ArgumentError{Name: name, Reason: err.Error()}
		}
	}
	return checkIDs(f.IDs)
}

// PendingDiscard is what DiscardPending did, or in a dry run would do. Ids are in increasing order
// and never nil.
type PendingDiscard struct {
	// Discarded are the ids of the pending messages deleted (in a dry run: pending and unclaimed).
	Discarded []int64 `json:"discarded"`
	// Claimed are the ids of matching messages that were not deleted because a worker holds them:
	// claimed (state processing), or being claimed or released at that very moment.
	Claimed []int64 `json:"claimed"`
}

// DiscardPending deletes the pending messages matching f that no worker has claimed, with their
// queue rows, and returns their ids; matching messages a worker holds are left alone and returned in
// Claimed. Completed and dead messages never match (see DiscardDead and DiscardOlder). The key of a
// discarded message is free again: a later delivery of it is accepted as a new message. When the
// head of an ordering key is discarded, the next queued message of that key is made ready at once.
//
// With f.DryRun it changes and locks nothing: it returns the matching messages that are pending and
// unclaimed now (Discarded) and those claimed (Claimed).
//
// It walks the queue (pending and claimed messages only) in id order, 1000
// messages per statement, each statement its own short transaction; it stops between statements
// when ctx ends, and the statements done stay done. A queue row is locked (FOR UPDATE SKIP LOCKED)
// before its message is deleted, so a discard and a claim never both take a message. Bad arguments
// return an *ArgumentError (errors.Is ErrInvalidArgument) and change nothing.
func (a *Admin) DiscardPending(ctx context.Context, f PendingFilter) (PendingDiscard, error) {
	dryRun := f.DryRun
	out := PendingDiscard{Discarded: []int64{}, Claimed: []int64{}}
	if err := f.check(); err != nil {
		return out, err
	}
	if !dryRun {
		defer func() {
			if len(out.Discarded) > 0 {
				a.seenInvalidate(ctx) // their keys are new again (the Store's SeenCache)
			}
		}()
	}
	db := a.st.Wrap(a.store.DB)
	consumers := []string{f.Consumer}
	if f.Consumer == "" {
		var err error
		if consumers, err = schemasql.Consumers(ctx, db); err != nil {
			return out, schemasql.Err(err)
		}
	}
	for _, consumer := range consumers { // each statement names its consumer (schemasql.Consumers)
		if err := a.discardPending(ctx, db, consumer, f, dryRun, &out); err != nil {
			return out, err
		}
	}
	slices.Sort(out.Discarded) // id order, as one walk over every consumer would give
	slices.Sort(out.Claimed)
	return out, nil
}

// discardPending is DiscardPending for the messages of one consumer.
func (a *Admin) discardPending(ctx context.Context, db sqlc.DBTX, consumer string, f PendingFilter, dryRun bool, out *PendingDiscard) error {
	ids := f.IDs
	if ids == nil {
		ids = []int64{}
	}
	var after int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var seen int
		var ready []string // ordering keys whose head was deleted
		if dryRun {
			rows, err := schemasql.Queries.PreviewDiscardPending(ctx, db, sqlc.PreviewDiscardPendingParams{
				AfterID: after, Consumer: consumer, Kind: f.Kind, Ids: ids, MaxRows: discardBatchSize})
			if err != nil {
				return schemasql.Err(err)
			}
			for _, r := range rows {
				out.add(r.ID, r.Discarded)
			}
			seen = len(rows)
			if seen > 0 {
				after = rows[seen-1].ID
			}
		} else {
			rows, err := schemasql.Queries.DiscardPending(ctx, db, sqlc.DiscardPendingParams{
				AfterID: after, Consumer: consumer, Kind: f.Kind, Ids: ids, MaxRows: discardBatchSize})
			if err != nil {
				return schemasql.Err(err)
			}
			for _, r := range rows {
				out.add(r.ID, r.Discarded)
				if r.Discarded && r.OrderingKey.Valid {
					ready = append(ready, r.OrderingKey.String)
				}
			}
			seen = len(rows)
			if seen > 0 {
				after = rows[seen-1].ID
			}
		}
		if len(ready) > 0 {
			if err := schemasql.Queries.ReadyNext(ctx, db, consumer, ready); err != nil {
				return schemasql.Err(err)
			}
		}
		if seen < discardBatchSize {
			return nil
		}
	}
}

func (d *PendingDiscard) add(id int64, discarded bool) {
	if discarded {
		d.Discarded = append(d.Discarded, id)
	} else {
		d.Claimed = append(d.Claimed, id)
	}
}

// ConsumerStats counts the stored messages of one consumer.
type ConsumerStats struct {
	Consumer   string `json:"consumer"`
	Pending    int64  `json:"pending"`    // waiting for their first or next attempt
	Processing int64  `json:"processing"` // claimed by a worker
	Completed  int64  `json:"completed"`  // dedup records kept (including Expired ones)
	Dead       int64  `json:"dead"`       // dead letters, kept until replayed or discarded
	// Expired counts completed messages past their dedup window that the cleaner has not deleted yet.
	Expired int64 `json:"expired"`
	// CompletedLastMinute counts the messages that completed in the last minute.
	CompletedLastMinute int64 `json:"completed_last_minute"`
	// OldestPendingAge is how long the oldest due pending message has been waiting since it became
	// due (received, or its retry backoff ended); zero when none is due. A growing value means the
	// workers are falling behind, or stopped. Its JSON form is oldest_pending_seconds, a number of
	// seconds (fractional).
	OldestPendingAge time.Duration `json:"-"`
}

// consumerStatsJSON is the JSON form of ConsumerStats.
type consumerStatsJSON struct {
	consumerStatsFields
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
}

type consumerStatsFields ConsumerStats // without the methods

// MarshalJSON encodes s with OldestPendingAge as oldest_pending_seconds (seconds, fractional).
func (s ConsumerStats) MarshalJSON() ([]byte, error) {
	return json.Marshal(consumerStatsJSON{consumerStatsFields(s), s.OldestPendingAge.Seconds()})
}

// UnmarshalJSON decodes the form MarshalJSON writes.
func (s *ConsumerStats) UnmarshalJSON(b []byte) error {
	var v consumerStatsJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*s = ConsumerStats(v.consumerStatsFields)
	s.OldestPendingAge = time.Duration(v.OldestPendingSeconds * float64(time.Second))
	return nil
}

// Stats counts the stored messages per consumer and state, in consumer order. It reads the whole
// inbox table (one sequential scan: there is no index on state, to keep updates HOT), so call it
// for dashboards and the CLI, not on a hot path.
func (a *Admin) Stats(ctx context.Context) ([]ConsumerStats, error) {
	rows, err := schemasql.Queries.ConsumerStats(ctx, a.st.Wrap(a.store.DB))
	if err != nil {
		return nil, schemasql.Err(err)
	}
	var out []ConsumerStats
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].Consumer != r.Consumer {
			out = append(out, ConsumerStats{Consumer: r.Consumer})
		}
		s := &out[len(out)-1]
		switch inbox.State(r.State) {
		case inbox.StatePending:
			s.Pending = r.Messages
			s.OldestPendingAge = time.Duration(r.OldestDueSeconds * float64(time.Second))
		case inbox.StateProcessing:
			s.Processing = r.Messages
		case inbox.StateCompleted:
			s.Completed = r.Messages
			s.Expired = r.Expired
			s.CompletedLastMinute = r.LastMinute
		case inbox.StateDead:
			s.Dead = r.Messages
		}
	}
	return out, nil
}

// discardBatchSize is the most rows one statement of DiscardPending and DiscardOlder deletes.
const discardBatchSize = 1000

// OlderFilter selects the finished messages DiscardOlder deletes.
type OlderFilter struct {
	// OlderThan: messages that completed or died more than this long ago (not negative).
	OlderThan time.Duration
	// States: inbox.StateCompleted and inbox.StateDead only; inbox.StateCompleted when empty.
	States []inbox.State
}

// OlderDiscard is what DiscardOlder did.
type OlderDiscard struct {
	// Discarded is how many messages it deleted (also when it returns an error: the statements done
	// stay done).
	Discarded int64 `json:"discarded"`
}

// DiscardOlder deletes the messages in one of f.States (inbox.StateCompleted and inbox.StateDead
// only; inbox.StateCompleted when none is given) that completed or died more than f.OlderThan ago,
// whatever their dedup window, and returns how many it deleted. Like retention's cleaning pass, it walks the
// primary key in spans of ids, each statement deleting at most 1000 rows in a short
// transaction of its own, and stops between statements when ctx ends (the statements done stay
// done). The key of a discarded message is accepted again as a new message, so discard completed
// messages only past the longest time a duplicate can still arrive. Pending and processing messages
// are never discarded by it (see DiscardPending). Bad arguments return a *[txinbox.ArgumentError].
func (a *Admin) DiscardOlder(ctx context.Context, f OlderFilter) (OlderDiscard, error) {
	n, err := a.discardOlder(ctx, f.OlderThan, f.States)
	return OlderDiscard{Discarded: n}, err
}

func (a *Admin) discardOlder(ctx context.Context, olderThan time.Duration, states []inbox.State) (int64, error) {
	if olderThan < 0 {
		return 0, &txinbox.ArgumentError{Name: "OlderThan", Reason: "must not be negative"}
	}
	if len(states) == 0 {
		states = []inbox.State{inbox.StateCompleted}
	}
	var names []string
	for _, s := range states {
		if s != inbox.StateCompleted && s != inbox.StateDead {
			return 0, &txinbox.ArgumentError{Name: "States", Reason: fmt.Sprintf("%q cannot be discarded by age (only %q and %q)", s, inbox.StateCompleted, inbox.StateDead)}
		}
		names = append(names, string(s))
	}
	db := a.st.Wrap(a.store.DB)
	maxID, err := schemasql.Queries.MaxMessageID(ctx, db)
	if err != nil {
		return 0, schemasql.Err(err)
	}
	consumers, err := schemasql.Consumers(ctx, db)
	if err != nil {
		return 0, schemasql.Err(err)
	}
	var deleted int64
	defer func() {
		if deleted > 0 {
			a.seenInvalidate(ctx) // their keys are new again (the Store's SeenCache)
		}
	}()
	for i, consumer := range consumers { // each statement names its consumer (schemasql.Consumers)
		var walked int64 // rows deleted by this walk so far
		w := &walk.Walk{
			To: maxID, Batch: discardBatchSize, Span: discardBatchSize * walk.SpanFactor, Err: schemasql.Err,
			Delete: func(ctx context.Context, after, until int64) (int64, int64, int64, error) {
				r, err := schemasql.Queries.DiscardOlder(ctx, db, sqlc.DiscardOlderParams{AfterID: after, UntilID: until,
					Consumer: consumer, States: names, OlderThanSeconds: olderThan.Seconds(), MaxRows: discardBatchSize})
				walked += r.Deleted
				if err == nil && a.cfg.Progress != nil {
					at := until // where the walk goes on: past the span, or after the last row picked of a full one
					if r.Picked >= discardBatchSize {
						at = r.LastID
					}
					share := (float64(i) + float64(at)/float64(maxID)) / float64(len(consumers))
					a.cfg.Progress(Progress{Done: deleted + walked, Share: min(share, 1)})
				}
				return r.Picked, r.Deleted, r.LastID, err
			},
		}
		r, err := w.Run(ctx)
		deleted += r.Deleted
		if err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}
