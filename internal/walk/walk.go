// Package walk deletes rows of a table in primary-key order, in short statements over spans of ids:
// the loop shared by retention's cleaning passes and admin's DiscardOlder.
package walk

import "context"

// SpanFactor is how many ids one span covers per row a statement may delete: a statement reads at
// most Batch*SpanFactor ids.
const SpanFactor = 10

// Walk deletes rows in id order, over the ids above From and up to To, in spans of Span ids: each
// delete statement covers part of one span and deletes at most Batch rows.
type Walk struct {
	From, To    int64
	Batch, Span int64
	MaxBatches  int                         // 0: no limit
	Check       func(context.Context) error // called between statements; an error ends the walk
	// Delete runs one statement over the ids in (after, until]: picked rows were looked at (at most
	// Batch), deleted deleted, and last is the greatest id picked.
	Delete func(ctx context.Context, after, until int64) (picked, deleted, last int64, err error)
	// Live, for a quick walk, reports whether a span holds records still in their window: the walk
	// stops at the first span that holds some and nothing to delete.
	Live func(ctx context.Context, after, until int64) (bool, error)
	// Err wraps the errors of Delete and Live.
	Err func(error) error
}

// Result reports a walk.
type Result struct {
	Deleted int64 // rows deleted
	Batches int   // delete statements run
	// Done is true when the walk ended normally: false when MaxBatches or ctx cut it short.
	Done       bool
	Next       int64 // every id up to Next is done: a cut-short walk resumes after it
	LiveAt     int64 // a quick walk that stopped: the start of the span where it stopped; else -1
	ExpiredEnd int64 // the end of the last span where rows were deleted; 0 if none
}

// Run walks until To, MaxBatches, an error, or ctx's end, and returns what it did.
func (w *Walk) Run(ctx context.Context) (Result, error) {
	r := Result{Next: w.From, LiveAt: -1}
	after, until, spanStart := w.From, w.From, w.From
	var pickedInSpan int64
	for {
		if after >= until { // start the next span
			if after >= w.To {
				r.Done = true
				return r, nil
			}
			spanStart, until, pickedInSpan = after, min(after+w.Span, w.To), 0
		}
		if w.MaxBatches > 0 && r.Batches >= w.MaxBatches {
			return r, nil
		}
		if err := ctx.Err(); err != nil {
			return r, err
		}
		if w.Check != nil && r.Batches > 0 {
			if err := w.Check(ctx); err != nil {
				return r, err
			}
		}
		picked, deleted, last, err := w.Delete(ctx, after, until)
		if err != nil {
			return r, w.Err(err)
		}
		r.Batches++
		r.Deleted += deleted
		pickedInSpan += picked
		if picked >= w.Batch { // the span may hold more
			after, r.Next = last, last
			continue
		}
		if pickedInSpan > 0 {
			r.ExpiredEnd = until
		} else if w.Live != nil {
			live, err := w.Live(ctx, spanStart, until)
			if err != nil {
				return r, w.Err(err)
			}
			if live {
				r.LiveAt, r.Done = spanStart, true
				return r, nil
			}
		}
		after, r.Next = until, until
	}
}
