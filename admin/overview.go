package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
)

// Limits of Overview.
const (
	// maxOverviewConsumers is the most consumers Overview lists.
	maxOverviewConsumers = 500
	// maxOverviewMinutes is the longest window of Overview's per-minute counts: two days, what the
	// worker pools keep of them.
	maxOverviewMinutes = 2 * 24 * 60
)

// Overview is what the operator console's first page shows: per consumer, the queued messages, the
// dead letters and the finished attempts of the last minutes.
type Overview struct {
	// Consumers are the consumers with stored messages, in name order; at most 500 of them.
	Consumers []ConsumerOverview
	// Truncated is true when more consumers have stored messages than were listed.
	Truncated bool
}

// ConsumerOverview is one consumer of an Overview. Pending, Retrying, Claimed and Dead are exact;
// Minutes comes from the per-minute counts in inbox_rollup: each batch's transaction records its
// counts with its outcomes (inbox_rollup_batch) and the schema's maintainer (package maintain) folds
// them every maintain.Config.RollupInterval, so they are exact once folded and up to that interval
// late.
type ConsumerOverview struct {
	Consumer string
	Pending  int64 // waiting, never claimed
	Retrying int64 // waiting, claimed before: failed, handed back by a stopping pool, or replayed
	Claimed  int64 // held by a worker
	Dead     int64 // dead letters
	// OldestDue is how long the oldest due waiting message has been due; zero when none is.
	OldestDue time.Duration
	// Minutes are the minutes of the window with finished attempts, oldest first.
	Minutes []MinuteCounts
}

// MinuteCounts are the finished attempts of one consumer in one minute.
type MinuteCounts struct {
	Minute    time.Time // the minute's start
	Completed int64     // attempts that completed their message
	Failed    int64     // attempts that failed
	Dead      int64     // of the failed ones, those after which the message was dead
}

// Overview returns, per consumer with stored messages, the counts of its queued messages and dead
// letters and its finished attempts per minute over the last minutes minutes (the current one
// included; 1 to 2880: two days, what the worker pools keep of them). It reads the queue (as large as the backlog), the dead-letter
// set, the per-minute counts and one descent of the inbox's unique key per consumer: never a scan
// of the inbox table, so its cost does not grow with the completed messages kept.
func (a *Admin) Overview(ctx context.Context, minutes int) (Overview, error) {
	var o Overview
	if minutes < 1 || minutes > maxOverviewMinutes {
		return o, &txinbox.ArgumentError{Name: "minutes", Reason: fmt.Sprintf("%d is not between 1 and %d", minutes, maxOverviewMinutes)}
	}
	db := a.st.Wrap(a.store.DB)
	names, err := schemasql.ConsumersUpTo(ctx, db, maxOverviewConsumers+1)
	if err != nil {
		return o, schemasql.Err(err)
	}
	if len(names) > maxOverviewConsumers {
		names, o.Truncated = names[:maxOverviewConsumers], true
	}
	o.Consumers = make([]ConsumerOverview, len(names))
	at := make(map[string]*ConsumerOverview, len(names))
	for i, n := range names {
		o.Consumers[i].Consumer = n
		at[n] = &o.Consumers[i]
	}
	// Counts of consumers beyond the listed ones (Truncated) are left out.
	queue, err := schemasql.Queries.QueueCounts(ctx, db)
	if err != nil {
		return o, schemasql.Err(err)
	}
	for _, q := range queue {
		if c := at[q.Consumer]; c != nil {
			c.Pending, c.Retrying, c.Claimed = q.Pending, q.Retrying, q.Claimed
			c.OldestDue = time.Duration(q.OldestDueSeconds * float64(time.Second))
		}
	}
	dead, err := schemasql.Queries.DeadCounts(ctx, db)
	if err != nil {
		return o, schemasql.Err(err)
	}
	for _, d := range dead {
		if c := at[d.Consumer]; c != nil {
			c.Dead = d.Dead
		}
	}
	roll, err := schemasql.Queries.RollupMinutes(ctx, db, int32(minutes))
	if err != nil {
		return o, schemasql.Err(err)
	}
	for _, r := range roll {
		if c := at[r.Consumer]; c != nil {
			c.Minutes = append(c.Minutes, MinuteCounts{Minute: ts(r.Minute), Completed: r.Completed, Failed: r.Failed, Dead: r.Dead})
		}
	}
	return o, nil
}

// FindMessage returns the message stored under consumer and key, in any state: the live one when
// the key also has an expired row in an older generation, else the newest. None returns a
// *NotFoundError (errors.Is ErrNotFound) naming consumer and key.
func (a *Admin) FindMessage(ctx context.Context, consumer, key string) (inbox.StoredMessage, error) {
	id, err := schemasql.Queries.MessageIDByKey(ctx, a.st.Wrap(a.store.DB), consumer, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return inbox.StoredMessage{}, &NotFoundError{View: Inbox, Consumer: consumer, Key: key}
	}
	if err != nil {
		return inbox.StoredMessage{}, schemasql.Err(err)
	}
	m, err := a.GetMessage(ctx, id)
	var nf *NotFoundError
	if errors.As(err, &nf) { // deleted in between
		return m, &NotFoundError{View: Inbox, Consumer: consumer, Key: key}
	}
	return m, err
}

// UnclaimedCount is what CountUnclaimed counted.
type UnclaimedCount struct {
	// Matching is the number of the consumer's queued messages no worker holds (pending, or waiting
	// for a retry).
	Matching int64
	// MaxID is the greatest id among them (0 when none): UnclaimedIDs up to it never returns a message
	// received after the count.
	MaxID int64
}

// CountUnclaimed counts consumer's queued messages that no worker holds. It reads the queue only.
func (a *Admin) CountUnclaimed(ctx context.Context, consumer string) (UnclaimedCount, error) {
	r, err := schemasql.Queries.CountUnclaimed(ctx, a.st.Wrap(a.store.DB), consumer)
	if err != nil {
		return UnclaimedCount{}, schemasql.Err(err)
	}
	return UnclaimedCount{Matching: r.Matching, MaxID: r.MaxID}, nil
}

// UnclaimedIDs returns the ids, up to maxID, of consumer's queued messages that no worker holds, in
// increasing order (never nil), at most limit (1 to 1,000,000). DiscardPending with them deletes
// those still unclaimed then.
func (a *Admin) UnclaimedIDs(ctx context.Context, consumer string, maxID int64, limit int) ([]int64, error) {
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	ids, err := schemasql.Queries.UnclaimedIDs(ctx, a.st.Wrap(a.store.DB), sqlc.UnclaimedIDsParams{
		Consumer: consumer, MaxID: maxID, MaxRows: int32(limit)})
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return nonNil(ids), nil
}
