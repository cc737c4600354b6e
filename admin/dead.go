package admin

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/outbox"
)

// View names one of the two sets of dead letters an Admin lists and acts on: the inbox's dead
// messages or the transactional outbox's dead events. Both are kept until an operator replays or
// discards them, and both are read and changed by the same calls ([Admin.ListDead],
// [Admin.CountDead], [Admin.DeadIDs], [Admin.DeadAmong], [Admin.ReplayDead], [Admin.DiscardDead]),
// with the same filter rules and order.
type View int

const (
	// Inbox is the inbox's dead letters: messages whose handler gave up on them (out of attempts, a
	// permanent error, or undecodable), by consumer. It is the zero View.
	Inbox View = iota
	// Outbox is the outbox's dead events: events no Publisher took (out of attempts, or refused with
	// a permanent error), by topic.
	Outbox
)

func (v View) check(name string) error {
	if v != Inbox && v != Outbox {
		return &txinbox.ArgumentError{Name: name, Reason: fmt.Sprintf("%d is not a View (Inbox or Outbox)", int(v))}
	}
	return nil
}

// Limits of the dead-letter calls.
const (
	// defaultDeadListLimit is DeadFilter.Limit when it is zero.
	defaultDeadListLimit = 100
	// maxListIDs is the largest limit DeadIDs and UnclaimedIDs accept.
	maxListIDs = 1_000_000
)

// DeadFilter selects the dead letters of one View for ListDead, CountDead and DeadIDs, which apply it
// alike (the CLI and the console list the same letters for the same filter). Empty fields do not
// filter; a field of the other View's returns an *[txinbox.ArgumentError].
type DeadFilter struct {
	// View is the set of dead letters: Inbox (the zero value) or Outbox.
	View View
	// Consumer and Kind (Inbox only) keep the messages of this exact consumer and kind.
	Consumer string
	Kind     string
	// Topic and Key (Outbox only) keep the events of this exact topic and ordering key.
	Topic string
	Key   string
	// ErrorContains keeps the letters whose last error contains it in any case ("TIMEOUT" matches
	// "timeout talking to bank"): a plain substring, no wildcard, compared after PostgreSQL's lower()
	// of both (per the database's collation).
	ErrorContains string
	Since         time.Time // died at or after this time
	Until         time.Time // died before this time
	// Limit is the most letters ListDead returns. Default: 100. At most 1000.
	// CountDead and DeadIDs ignore it.
	Limit int
	// Before, when not empty, keeps only the letters listed after the one whose Cursor it is (they
	// died earlier): the cursor of the next page is the Cursor of the last letter of a page, and
	// DeadCount.Before bounds an action to the letters counted.
	Before string
}

// deadParams is a checked DeadFilter as the statements take it.
type deadParams struct {
	beforeSeq    int64              // Inbox: the Before cursor, 0 when none
	beforeAt     pgtype.Timestamptz // Outbox: the Before cursor, NULL when none
	beforeID     int64
	since, until pgtype.Timestamptz
}

// check returns an *ArgumentError for a bad filter, else the filter's parameters.
func (f DeadFilter) check() (deadParams, error) {
	var p deadParams
	if err := f.View.check("View"); err != nil {
		return p, err
	}
	switch {
	case f.Limit < 0 || f.Limit > limits.DeadListLimit:
		return p, &txinbox.ArgumentError{Name: "Limit", Reason: fmt.Sprintf("%d is not between 0 (default %d) and %d", f.Limit, defaultDeadListLimit, limits.DeadListLimit)}
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since):
		return p, &txinbox.ArgumentError{Name: "Until", Reason: "must be after Since"}
	}
	own, other := [2]string{"Consumer", "Kind"}, [2]string{"Topic", "Key"}
	ownV, otherV := [2]string{f.Consumer, f.Kind}, [2]string{f.Topic, f.Key}
	otherView := "Outbox"
	if f.View == Outbox {
		own, other, ownV, otherV, otherView = other, own, otherV, ownV, "Inbox"
	}
	for i, v := range otherV {
		if v != "" {
			return p, &txinbox.ArgumentError{Name: other[i], Reason: "filters the dead letters of View " + otherView + " only"}
		}
	}
	for _, x := range []struct{ name, v string }{{own[0], ownV[0]}, {own[1], ownV[1]}, {"ErrorContains", f.ErrorContains}} {
		if !utf8.ValidString(x.v) || strings.ContainsRune(x.v, 0) {
			return p, &txinbox.ArgumentError{Name: x.name, Reason: "must be valid UTF-8 without NUL"}
		}
	}
	var err error
	if f.View == Inbox {
		p.beforeSeq, err = parseSeqCursor(f.Before)
	} else {
		var c outboxCursor
		var ok bool
		if c, ok, err = parseOutboxCursor(f.Before); ok {
			p.beforeAt, p.beforeID = pgtype.Timestamptz{Time: c.at, Valid: true}, c.id
		}
	}
	if err != nil {
		return p, err
	}
	p.since, p.until = optTS(f.Since), optTS(f.Until)
	return p, nil
}

// parseSeqCursor reads an inbox letter's cursor: its seq, in decimal ("" is none: 0).
func parseSeqCursor(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, &txinbox.ArgumentError{Name: "Before", Reason: fmt.Sprintf("%q is not a cursor of a dead letter (from a list's cursor field)", truncate(s))}
	}
	return n, nil
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

// ListDead returns the dead letters of f.View matching f, newest first, at most f.Limit of them. When
// it returns f.Limit letters there may be more: the next page is ListDead with f.Before set to the
// Cursor of the last one. Letters that die meanwhile never appear on a later page (they died later).
//
// Inbox: dead messages stay in the inbox table, with their key, payload and last error, until an
// operator replays them (ReplayDead) or deletes them (DiscardDead, or DiscardOlder with
// inbox.StateDead); the retention cleaner never deletes them. While a dead message is kept its key
// stays taken: a redelivery is reported as a Duplicate in state dead and not run again. They are
// listed in the order they died (a message replayed and dead again dies anew), read from the
// dead-letter set (one row per dead message, kept by triggers on the inbox table, in the order they
// died) through its index on that order (or on consumer and that order), and then the page's
// messages by primary key: never a scan of the inbox table.
//
// Outbox: dead events stay in the outbox, with their payload and last error, until an operator
// replays them (ReplayDead) or deletes them (DiscardDead); rotations never remove them. A dead event
// does not hold back the later events of its key. They are listed by the time they died, then by
// id, both descending, with one scan of the outbox table (it has no index on the state, so that the
// relay's write of an event stays a HOT update).
//
// Bad arguments return an *[txinbox.ArgumentError].
func (a *Admin) ListDead(ctx context.Context, f DeadFilter) ([]txinbox.DeadLetter, error) {
	p, err := f.check()
	if err != nil {
		return nil, err
	}
	if f.Limit == 0 {
		f.Limit = defaultDeadListLimit
	}
	db := a.st.Wrap(a.store.DB)
	if f.View == Outbox {
		rows, err := schemasql.Queries.ListOutboxDead(ctx, db, sqlc.ListOutboxDeadParams{
			BeforeAt: p.beforeAt, BeforeID: p.beforeID, Topic: f.Topic, Key: f.Key, ErrorContains: f.ErrorContains,
			Since: p.since, Until: p.until, MaxRows: int32(f.Limit)})
		if err != nil {
			return nil, schemasql.Err(err)
		}
		out := make([]txinbox.DeadLetter, len(rows))
		for i, r := range rows {
			died := ts(r.DiedAt)
			out[i] = txinbox.DeadLetter{Cursor: outboxCursor{at: died, id: r.ID}.String(), ID: r.ID, EventID: r.EventID,
				Topic: r.Topic, Key: r.Key, Kind: cmp.Or(r.Kind, r.Topic), ContentType: cmp.Or(r.ContentType, outbox.DefaultContentType),
				DiedAt: died, AttemptsStarted: int(r.AttemptsStarted), AttemptsFailed: int(r.AttemptsFailed), LastError: r.LastError}
		}
		return out, nil
	}
	rows, err := schemasql.Queries.ListDead(ctx, db, sqlc.ListDeadParams{
		BeforeSeq: p.beforeSeq, Consumer: f.Consumer, Kind: f.Kind, ErrorContains: f.ErrorContains,
		Since: p.since, Until: p.until, MaxRows: int32(f.Limit)})
	if err != nil {
		return nil, schemasql.Err(err)
	}
	out := make([]txinbox.DeadLetter, len(rows))
	for i, r := range rows {
		out[i] = txinbox.DeadLetter{Cursor: strconv.FormatInt(r.Seq, 10), ID: r.ID, Consumer: r.Consumer, Key: r.Key, Kind: r.Kind,
			DiedAt: ts(r.DiedAt), AttemptsStarted: int(r.AttemptsStarted), AttemptsFailed: int(r.AttemptsFailed),
			Undecodable: r.Undecodable, LastError: r.LastError}
	}
	return out, nil
}

// DeadCount is what CountDead counted.
type DeadCount struct {
	// Matching is the number of dead letters matching the filter (all of them, no paging).
	Matching int64
	// Before bounds a later action to the letters counted: DeadIDs or ListDead with the same filter
	// and this Before never return a letter that died after the count. It is the filter's Before when
	// that was set, else a cursor past every dead letter of the View at the count.
	Before string
}

// CountDead counts the dead letters of f.View matching f (f.Limit is ignored): Inbox through the
// dead-letter set, Outbox with one scan of the outbox table. Bad arguments return an
// *[txinbox.ArgumentError].
func (a *Admin) CountDead(ctx context.Context, f DeadFilter) (DeadCount, error) {
	p, err := f.check()
	if err != nil {
		return DeadCount{}, err
	}
	db := a.st.Wrap(a.store.DB)
	if f.View == Outbox {
		r, err := schemasql.Queries.CountOutboxDead(ctx, db, sqlc.CountOutboxDeadParams{
			BeforeAt: p.beforeAt, BeforeID: p.beforeID, Topic: f.Topic, Key: f.Key, ErrorContains: f.ErrorContains,
			Since: p.since, Until: p.until})
		if err != nil {
			return DeadCount{}, schemasql.Err(err)
		}
		c := DeadCount{Matching: r.Matching, Before: f.Before}
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
	r, err := schemasql.Queries.CountDead(ctx, db, sqlc.CountDeadParams{
		BeforeSeq: p.beforeSeq, Consumer: f.Consumer, Kind: f.Kind, ErrorContains: f.ErrorContains,
		Since: p.since, Until: p.until})
	if err != nil {
		return DeadCount{}, schemasql.Err(err)
	}
	c := DeadCount{Matching: r.Matching, Before: f.Before}
	if c.Before == "" {
		c.Before = strconv.FormatInt(r.MaxSeq+1, 10) // past every letter dead now
	}
	return c, nil
}

// DeadIDs returns the ids of the dead letters of f.View matching f (f.Limit is ignored), in
// increasing order (never nil), at most limit (1 to 1,000,000). Bad arguments return an
// *[txinbox.ArgumentError].
func (a *Admin) DeadIDs(ctx context.Context, f DeadFilter, limit int) ([]int64, error) {
	p, err := f.check()
	if err != nil {
		return nil, err
	}
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	db := a.st.Wrap(a.store.DB)
	var ids []int64
	if f.View == Outbox {
		ids, err = schemasql.Queries.OutboxDeadIDs(ctx, db, sqlc.OutboxDeadIDsParams{
			BeforeAt: p.beforeAt, BeforeID: p.beforeID, Topic: f.Topic, Key: f.Key, ErrorContains: f.ErrorContains,
			Since: p.since, Until: p.until, MaxRows: int32(limit)})
	} else {
		ids, err = schemasql.Queries.DeadIDs(ctx, db, sqlc.DeadIDsParams{
			BeforeSeq: p.beforeSeq, Consumer: f.Consumer, Kind: f.Kind, ErrorContains: f.ErrorContains,
			Since: p.since, Until: p.until, MaxRows: int32(limit)})
	}
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return nonNil(ids), nil
}

// checkLimit returns an *ArgumentError unless limit is between 1 and maxListIDs.
func checkLimit(limit int) error {
	if limit < 1 || limit > maxListIDs {
		return &txinbox.ArgumentError{Name: "limit", Reason: fmt.Sprintf("%d is not between 1 and %d", limit, maxListIDs)}
	}
	return nil
}

// DeadAmong returns those of ids that are dead letters of v now, in increasing order (never nil). At
// most 10,000 ids per call.
func (a *Admin) DeadAmong(ctx context.Context, v View, ids ...int64) ([]int64, error) {
	if err := v.check("view"); err != nil {
		return nil, err
	}
	if err := checkIDs(ids); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return []int64{}, nil
	}
	db := a.st.Wrap(a.store.DB)
	var got []int64
	var err error
	if v == Outbox {
		got, err = schemasql.Queries.OutboxDeadAmong(ctx, db, ids)
	} else {
		got, err = schemasql.Queries.DeadAmong(ctx, db, ids)
	}
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return nonNil(got), nil
}

// ReplayDead puts the dead letters ids of v back to pending, in one statement, and returns the ids it
// replayed, in order. Ids that are not dead (any more) or not stored are skipped and absent from the
// result. At most 10,000 ids per call.
//
// Inbox: a replayed message keeps its row, key, payload, headers and last error (the handler sees it
// as the previous error); its attempts are reset to zero and it runs as soon as a worker is free.
// Because the row is reused, the replay is not rejected as a duplicate of itself, and later
// deliveries of the same key are still deduplicated against it. Idle worker pools of the replayed
// consumers are woken by a notification (unless Store.NotifyInterval is negative). A message with an
// ordering key becomes again the head of that key (it was received first), so later messages of the
// key wait for it. Messages stored undecodable (DeadLetter.Undecodable: they can only die again:
// discard them) are skipped too.
//
// Outbox: a replayed event keeps its row, event id (its idempotency key downstream), payload, headers
// and last error; its attempts are reset to zero and it goes as soon as a relay claims it (relays are
// woken by a notification, unless Store.NotifyInterval is negative). An event with a key becomes
// again the oldest queued event of that key (it was published first), so later queued events of the
// key wait for it. The replay is fenced as the inbox's is: the event's queue row keeps the fencing
// token of its last claim, so the next claim's token is greater than any before, and a relay that
// still holds an old claim of the event (its Publish call outlived the lease) records nothing over
// the new one.
func (a *Admin) ReplayDead(ctx context.Context, v View, ids ...int64) ([]int64, error) {
	if err := v.check("view"); err != nil {
		return nil, err
	}
	if err := checkIDs(ids); err != nil || len(ids) == 0 {
		return nil, err
	}
	db := a.st.Wrap(a.store.DB)
	notify := a.store.NotifyInterval >= 0
	var done []int64
	var err error
	if v == Outbox {
		channel := ""
		if notify {
			channel = schemasql.OutboxChannel(a.store.Schema)
		}
		done, err = schemasql.Queries.ReplayOutboxDead(ctx, db, ids, channel)
	} else {
		channel := ""
		if notify {
			channel = a.store.NotifyChannel()
		}
		done, err = schemasql.Queries.ReplayDead(ctx, db, ids, channel)
	}
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return done, nil
}

// DiscardDead deletes the dead letters ids of v, in one statement, and returns the ids it deleted, in
// order. Ids that are not dead (any more) or not stored are skipped and absent from the result. At
// most 10,000 ids per call.
//
// Inbox: the messages' keys are free again: a later delivery of one is accepted as a new message
// (the Store's SeenCache is invalidated). Outbox: the events are never published.
func (a *Admin) DiscardDead(ctx context.Context, v View, ids ...int64) ([]int64, error) {
	if err := v.check("view"); err != nil {
		return nil, err
	}
	if err := checkIDs(ids); err != nil || len(ids) == 0 {
		return nil, err
	}
	db := a.st.Wrap(a.store.DB)
	if v == Outbox {
		done, err := schemasql.Queries.DiscardOutboxDead(ctx, db, ids)
		if err != nil {
			return nil, schemasql.Err(err)
		}
		return done, nil
	}
	done, err := schemasql.Queries.DiscardDead(ctx, db, ids)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	if len(done) > 0 {
		a.seenInvalidate(ctx) // their keys are new again (the Store's SeenCache)
	}
	return done, nil
}

func nonNil(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}
