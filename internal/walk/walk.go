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
	MaxBatches  int // 0: no limit
	// Delete runs one statement over the ids in (after, until]: picked rows were looked at (at most
	// Batch), deleted deleted, and last is the greatest id picked.
	Delete func(ctx context.Context, after, until int64) (picked, deleted, last int64, err error)
	// Err wraps the errors of Delete.
	Err func(error) error
}

// Result reports a walk.
type Result struct {
	Deleted int64 // rows deleted
	Batches int   // delete statements run
	// Done is true when the walk ended normally: false when MaxBatches or ctx cut it short.
	Done bool
}

// Run walks until To, MaxBatches, an error, or ctx's end, and returns what it did.
func (w *Walk) Run(ctx context.Context) (Result, error) {
	var r Result
	after, until := w.From, w.From
	for {
		if after >= until { // start the next span
			if after >= w.To {
				r.Done = true
				return r, nil
			}
			until = min(after+w.Span, w.To)
		}
		if w.MaxBatches > 0 && r.Batches >= w.MaxBatches {
			return r, nil
		}
		if err := ctx.Err(); err != nil {
			return r, err
		}
		picked, deleted, last, err := w.Delete(ctx, after, until)
		if err != nil {
			return r, w.Err(err)
		}
		r.Batches++
		r.Deleted += deleted
		if picked >= w.Batch { // the span may hold more
			after = last
			continue
		}
		after = until
	}
}
