package admin

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
)

// MaxListIDs is the largest limit DeadIDs and UnclaimedIDs accept.
const MaxListIDs = 1_000_000

// DeadFilter selects dead letters for ListDead, CountDead and DeadIDs, which apply it alike (the CLI
// and the console list the same messages for the same filter). Empty fields do not filter.
type DeadFilter struct {
	Consumer string // exact consumer
	Kind     string // exact kind
	// ErrorContains matches the dead letters whose last error contains it in any case ("TIMEOUT"
	// matches "timeout talking to bank"): a plain substring, no wildcard, compared after PostgreSQL's
	// lower() of both (per the database's collation).
	ErrorContains string
	Since         time.Time // died at or after this time
	Until         time.Time // died before this time
	// Limit is the most dead letters ListDead returns. Default DefaultDeadListLimit (100); at most
	// MaxDeadListLimit (1000). CountDead and DeadIDs ignore it.
	Limit int
	// Before, when not 0, keeps only the dead letters whose Seq is below it: the cursor of the next
	// page is the Seq of the last letter of a page, and DeadCount.Before bounds an action to the
	// letters counted.
	Before int64
}

// DeadLetter is one dead letter as ListDead lists it: a message whose handler gave up on it (it ran
// out of attempts, returned a permanent error, or could not be decoded at all). GetMessage returns
// every field of it (payload, headers...); there its CompletedAt is DiedAt.
type DeadLetter struct {
	// Seq is the letter's place in the order messages died in: a later death has a greater Seq (a
	// message replayed and dead again gets a new one). ListDead lists by Seq, greatest first.
	Seq      int64  `json:"seq"`
	ID       int64  `json:"id"`
	Consumer string `json:"consumer"`
	Key      string `json:"key"`
	Kind     string `json:"kind"`
	// DiedAt is when the message died (its completed_at).
	DiedAt          time.Time `json:"died_at"`
	AttemptsStarted int       `json:"attempts_started"`
	AttemptsFailed  int       `json:"attempts_failed"`
	// Undecodable is true for a message stored as raw bytes (it could not be decoded): ReplayDead
	// skips it; discard it.
	Undecodable bool   `json:"undecodable"`
	LastError   string `json:"last_error"` // the error it died of
}

// check returns an *ArgumentError for a bad filter.
func (f DeadFilter) check() error {
	switch {
	case f.Limit < 0 || f.Limit > MaxDeadListLimit:
		return &txinbox.ArgumentError{Name: "Limit", Reason: fmt.Sprintf("%d is not between 0 (default %d) and %d", f.Limit, DefaultDeadListLimit, MaxDeadListLimit)}
	case f.Before < 0:
		return &txinbox.ArgumentError{Name: "Before", Reason: "must not be negative"}
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since):
		return &txinbox.ArgumentError{Name: "Until", Reason: "must be after Since"}
	}
	for _, x := range []struct{ name, v string }{{"Consumer", f.Consumer}, {"Kind", f.Kind}, {"ErrorContains", f.ErrorContains}} {
		if !utf8.ValidString(x.v) || strings.ContainsRune(x.v, 0) {
			return &txinbox.ArgumentError{Name: x.name, Reason: "must be valid UTF-8 without NUL"}
		}
	}
	return nil
}

// ListDead returns the dead letters matching f, newest first (by Seq: the order they died in), at
// most f.Limit of them. When it returns f.Limit letters there may be more: the next page is
// ListDead with f.Before set to the Seq of the last one. Letters that die meanwhile never appear on
// a later page (they have greater Seqs).
//
// Dead messages stay in the inbox table, with their key, payload and last error, until an operator
// replays them (ReplayDead) or deletes them (DiscardDead, or DiscardOlder with inbox.StateDead); the
// retention cleaner never deletes them. While a dead message is kept its key stays taken: a
// redelivery is reported as a Duplicate in state dead and not run again.
//
// It reads the dead-letter set (one row per dead message, kept by triggers on the inbox table, in
// the order they died) through its index on that order (or on consumer and that order), and then
// the page's messages by primary key: never a scan of the inbox table. Bad arguments return an
// *[txinbox.ArgumentError].
func (a *Admin) ListDead(ctx context.Context, f DeadFilter) ([]DeadLetter, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if f.Limit == 0 {
		f.Limit = DefaultDeadListLimit
	}
	rows, err := schemasql.Queries.ListDead(ctx, a.st.Wrap(a.store.DB), sqlc.ListDeadParams{
		BeforeSeq: f.Before, Consumer: f.Consumer, Kind: f.Kind, ErrorContains: f.ErrorContains,
		Since: optTS(f.Since), Until: optTS(f.Until), MaxRows: int32(f.Limit)})
	if err != nil {
		return nil, schemasql.Err(err)
	}
	out := make([]DeadLetter, len(rows))
	for i, r := range rows {
		out[i] = DeadLetter{Seq: r.Seq, ID: r.ID, Consumer: r.Consumer, Key: r.Key, Kind: r.Kind, DiedAt: ts(r.DiedAt),
			AttemptsStarted: int(r.AttemptsStarted), AttemptsFailed: int(r.AttemptsFailed), Undecodable: r.Undecodable,
			LastError: r.LastError}
	}
	return out, nil
}

// DeadCount is what CountDead counted.
type DeadCount struct {
	// Matching is the number of dead letters matching the filter (all of them, no paging).
	Matching int64
	// Before bounds a later action to the letters counted: DeadIDs or ListDead with the same filter
	// and this Before never return a letter that died after the count. It is the filter's Before when
	// that was set, else one more than the greatest Seq of all dead letters at the count.
	Before int64
}

// CountDead counts the dead letters matching f (f.Limit is ignored). Bad arguments return an
// *[txinbox.ArgumentError].
func (a *Admin) CountDead(ctx context.Context, f DeadFilter) (DeadCount, error) {
	if err := f.check(); err != nil {
		return DeadCount{}, err
	}
	r, err := schemasql.Queries.CountDead(ctx, a.st.Wrap(a.store.DB), sqlc.CountDeadParams{
		BeforeSeq: f.Before, Consumer: f.Consumer, Kind: f.Kind, ErrorContains: f.ErrorContains,
		Since: optTS(f.Since), Until: optTS(f.Until)})
	if err != nil {
		return DeadCount{}, schemasql.Err(err)
	}
	c := DeadCount{Matching: r.Matching, Before: f.Before}
	if c.Before == 0 {
		c.Before = r.MaxSeq + 1
	}
	return c, nil
}

// DeadIDs returns the ids of the dead letters matching f (f.Limit is ignored), in increasing order,
// at most limit (1 to MaxListIDs). Bad arguments return an *[txinbox.ArgumentError].
func (a *Admin) DeadIDs(ctx context.Context, f DeadFilter, limit int) ([]int64, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxListIDs {
		return nil, &txinbox.ArgumentError{Name: "limit", Reason: fmt.Sprintf("%d is not between 1 and %d", limit, MaxListIDs)}
	}
	ids, err := schemasql.Queries.DeadIDs(ctx, a.st.Wrap(a.store.DB), sqlc.DeadIDsParams{
		BeforeSeq: f.Before, Consumer: f.Consumer, Kind: f.Kind, ErrorContains: f.ErrorContains,
		Since: optTS(f.Since), Until: optTS(f.Until), MaxRows: int32(limit)})
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return nonNil(ids), nil
}

// DeadAmong returns those of ids that are dead letters now, in increasing order (never nil). At most
// MaxAdminIDs ids per call.
func (a *Admin) DeadAmong(ctx context.Context, ids ...int64) ([]int64, error) {
	if err := checkIDs(ids); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return []int64{}, nil
	}
	got, err := schemasql.Queries.DeadAmong(ctx, a.st.Wrap(a.store.DB), ids)
	if err != nil {
		return nil, schemasql.Err(err)
	}
	return nonNil(got), nil
}

func nonNil(ids []int64) []int64 {
	if ids == nil {
		return []int64{}
	}
	return ids
}
