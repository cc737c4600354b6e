package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
)

// unit is what a batch transaction runs in one step: one message of a single handler (h nil), or the
// messages of one call of a batch handler.
type unit struct {
	h  *handler
	cs []*claimed
}

// units splits a batch (sorted by id) into its steps: each message of a single handler (or of no
// handler) alone, in order; the messages of a batch kind in calls of at most its BatchSize, at the
// place of the kind's first message.
func (p *Pool) units(batch []*claimed) []unit {
	var out []unit
	seen := map[string]bool{}
	for i, c := range batch {
		h := p.cfg.Handlers.byKind[c.Kind]
		if h == nil || h.batch == nil {
			out = append(out, unit{cs: []*claimed{c}})
			continue
		}
		if seen[c.Kind] {
			continue
		}
		seen[c.Kind] = true
		var cs []*claimed
		for _, o := range batch[i:] {
			if o.Kind == c.Kind {
				cs = append(cs, o)
			}
		}
		for len(cs) > 0 {
			n := min(len(cs), h.cfg.BatchSize)
			out = append(out, unit{h: h, cs: cs[:n:n]})
			cs = cs[n:]
		}
	}
	return out
}

// batchItem is one message of a batch handler's calls.
type batchItem struct {
	c      *claimed
	msg    any // *Message[T]
	result []byte
}

// callResult is what one call of a batch handler gave.
type callResult struct {
	err     error // nil: the call succeeded
	reason  failReason
	elapsed time.Duration
}

// batchCall runs one unit of a batch handler inside the batch transaction.
type batchCall struct {
	p       *Pool
	tx      pgx.Tx
	sp      *savepoints
	h       *handler
	xid     string
	decided []*finish // the outcomes of the batch so far, this unit's appended as they are decided
	calls   int
}

// runBatchUnit runs u (a batch handler's messages): out-of-attempts and undecodable messages are
// decided without a call; the others are handed to the handler, failures isolated by bisection. It
// returns done with the unit's outcomes appended; an error leaves the batch transaction unusable (a
// culpritError says what to record and what to hold).
func (p *Pool) runBatchUnit(ctx context.Context, tx pgx.Tx, sp *savepoints, u unit, xid string, done []*finish) ([]*finish, error) {
	b := &batchCall{p: p, tx: tx, sp: sp, h: u.h, xid: xid, decided: done}
	items := make([]*batchItem, 0, len(u.cs))
	for _, c := range u.cs {
		if f := p.outOfAttempts(c, u.h); f != nil {
			b.decided = append(b.decided, f)
			continue
		}
		it := &batchItem{c: c}
		msg, err := u.h.batch.decode(c, &it.result)
		if err != nil {
			f := &finish{c: c}
			p.fail(f, c, err, reasonError)
			b.decided = append(b.decided, f)
			continue
		}
		it.msg = msg
		items = append(items, it)
	}
	err := b.isolate(ctx, items)
	return b.decided, err
}

// isolate completes pending, or, when a call fails, finds the failing messages: it searches one
// culprit at a time by halving (calling the left half: if it fails the culprit is in it, else the
// left half is completed and the culprit is in the right half, which is not called as a whole), charges
// it, and calls the handler once more on every message not yet decided. With k culprits among n
// messages that makes at most k·(⌈log2 n⌉+2)+1 calls.
func (b *batchCall) isolate(ctx context.Context, pending []*batchItem) error {
	for len(pending) > 0 {
		r, err := b.call(ctx, pending)
		if err != nil {
			return err
		}
		if r.err == nil {
			b.complete(pending, r)
			return nil
		}
		if rest, ok := b.named(pending, r); ok {
			pending = rest
			continue
		}
		// pending fails as a whole: search one culprit in it.
		set, last := pending, &r
		var untested []*batchItem
		for len(set) > 1 {
			left, right := set[:len(set)/2], set[len(set)/2:]
			lr, err := b.call(ctx, left)
			if err != nil {
				return err
			}
			if lr.err == nil {
				b.complete(left, lr)
				set, last = right, nil // set failed and left did not: the culprit is in right
				continue
			}
			if rest, ok := b.named(left, lr); ok {
				untested = append(append(untested, rest...), right...)
				set = nil
				break
			}
			untested = append(untested, right...)
			set, last = left, &lr
		}
		if len(set) == 1 {
			if last == nil { // inferred, never called alone: call it to learn its own error
				lr, err := b.call(ctx, set)
				if err != nil {
					return err
				}
				switch rest, ok := b.named(set, lr); {
				case lr.err == nil:
					b.complete(set, lr)
				case ok:
					untested = append(untested, rest...)
				default:
					b.charge(set[0], lr)
				}
			} else {
				b.charge(set[0], *last)
			}
		}
		slices.SortFunc(untested, func(x, y *batchItem) int { return compareIDs(x.c.ID, y.c.ID) })
		pending = untested
	}
	return nil
}

func compareIDs(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// complete records items as completed by the call r.
func (b *batchCall) complete(items []*batchItem, r callResult) {
	for _, it := range items {
		b.decided = append(b.decided, &finish{c: it.c, outcome: txinbox.OutcomeCompleted, result: it.result, elapsed: r.elapsed})
	}
}

// charge records it's failure in the call r (of it alone).
func (b *batchCall) charge(it *batchItem, r callResult) {
	f := &finish{c: it.c, elapsed: r.elapsed}
	b.p.fail(f, it.c, r.err, r.reason)
	b.decided = append(b.decided, f)
}

// named charges the messages of items that a BatchErrors returned by the call r names, and returns the
// others; ok is false when r's error names none of items.
func (b *batchCall) named(items []*batchItem, r callResult) (rest []*batchItem, ok bool) {
	var be BatchErrors
	if !errors.As(r.err, &be) {
		return nil, false
	}
	for _, it := range items {
		if _, in := be[it.c.ID]; in {
			ok = true
			break
		}
	}
	if !ok {
		return nil, false
	}
	for _, it := range items {
		err, in := be[it.c.ID]
		if !in {
			rest = append(rest, it)
			continue
		}
		if err == nil {
			err = errors.New("named failed in BatchErrors with a nil error")
		}
		b.charge(it, callResult{err: err, reason: reasonError, elapsed: r.elapsed})
	}
	return rest, true
}

// call calls the handler on items in a savepoint of their own, rolled back if the call fails. An error
// means the batch transaction cannot go on.
func (b *batchCall) call(ctx context.Context, items []*batchItem) (callResult, error) {
	if err := ctx.Err(); err != nil {
		return callResult{}, err // stopping: roll everything back, hand the batch back
	}
	b.calls++
	p, h, sp := b.p, b.h, b.sp
	sp.next()
	msgs := make([]any, len(items))
	for i, it := range items {
		it.result = nil // a result set by an earlier call of it was rolled back with that call
		msgs[i] = it.msg
	}
	sctx := p.traceBatchStart(ctx, items)
	hctx, cancel := context.WithTimeout(sctx, p.cfg.timeout(h))
	start := time.Now()
	err := callBatch(hctx, h, &handlerTx{Tx: b.tx, sp: sp}, msgs)
	returned := time.Now()
	r := callResult{err: err, elapsed: returned.Sub(start)}
	late := timedOut(ctx, hctx, returned)
	cancel()
	switch {
	case errors.As(err, new(*panicError)):
		r.reason = reasonPanic
	case late:
		// Even a call that returned nil: it is a failed call, bisected as any other.
		r.err, r.reason = timeoutError(p.cfg.timeout(h), err), reasonTimeout
	case err == nil:
	default:
		r.reason = reasonError
	}
	defer p.traceBatchEnd(sctx, r)
	if txEnded(b.tx) {
		return r, b.ended(ctx, items)
	}
	if sp.broken != nil && sp.byCall {
		// The call's own context ended while its savepoint was being established: the call cost
		// the transaction.
		if r.err == nil {
			r.err, r.reason = fmt.Errorf("%w: %w", errCallBrokeTx, sp.broken), reasonError
		}
		return r, b.lost(items, r, sp.broken)
	}
	if sp.broken != nil {
		return r, sp.broken // the connection was unusable before this call's first statement
	}
	if r.err == nil && sp.failed != nil {
		// A statement failed but the handler returned nil: fine if it recovered (a nested savepoint),
		// a failure of the call if it left the transaction aborted.
		_, err := b.tx.Exec(ctx, "SELECT 1")
		switch {
		case isAborted(err):
			r.err, r.reason = fmt.Errorf("%w: %w", errLeftAborted, sp.failed), reasonError
		case err != nil:
			return r, b.lost(items, r, err)
		}
	}
	if r.err != nil {
		if err := sp.rollback(ctx); err != nil {
			if ctx.Err() != nil {
				return r, err
			}
			return r, b.lost(items, r, err)
		}
	}
	return r, nil
}

// lost handles a call after which the transaction is unusable (its connection lost, a failed
// rollback): one message is the culprit, charged its failure; several cannot be told apart, so they
// are held, neither recorded nor handed back: after their lease the rescuer runs them alone.
func (b *batchCall) lost(items []*batchItem, r callResult, err error) error {
	if len(items) == 1 {
		f := &finish{c: items[0].c, elapsed: r.elapsed}
		cause, reason := r.err, r.reason
		if cause == nil {
			cause, reason = err, reasonError
		}
		b.p.fail(f, f.c, cause, reason)
		return culpritError{f: f, err: err}
	}
	return culpritError{hold: claimsOf(items), err: fmt.Errorf("a batch handler call of %d messages left the transaction unusable (held for the rescuer): %w", len(items), err)}
}

// ended handles a call that ended the batch transaction itself (COMMIT or ROLLBACK through tx.Conn()
// or a statement). If that transaction committed, what it wrote is durable: the outcomes decided
// before are recorded and the messages of the call are dead at once (running them again would repeat
// what they committed). If it rolled back, a call of one message is dead at once (as a single
// handler's), and the messages of a larger call are held for the rescuer, which runs them alone.
func (b *batchCall) ended(ctx context.Context, items []*batchItem) error {
	status, err := schemasql.Queries.XactStatus(context.WithoutCancel(ctx), b.p.eng.St.Wrap(b.p.store.DB), b.xid)
	if err != nil {
		status = "unknown (" + err.Error() + ")"
	}
	e := culpritError{err: fmt.Errorf("a batch handler call of %d messages ended the batch transaction", len(items))}
	if status != "committed" && len(items) > 1 {
		e.hold = claimsOf(items)
		return e
	}
	for _, it := range items {
		f := &finish{c: it.c}
		b.p.fail(f, it.c, txinbox.Permanent(fmt.Errorf("the batch handler ended the batch transaction itself (COMMIT or ROLLBACK through tx.Conn() or a statement) in a call of %d messages, "+
			"which it must not do; that transaction %s", len(items), txFate(status))), reasonError)
		e.also = append(e.also, f)
	}
	if status == "committed" {
		e.before = b.decided
	}
	e.f, e.also = e.also[0], e.also[1:]
	return e
}

func claimsOf(items []*batchItem) []*claimed {
	out := make([]*claimed, len(items))
	for i, it := range items {
		out[i] = it.c
	}
	return out
}

// outOfAttempts returns the dead outcome of a message whose last allowed attempt never finished, or
// nil if it may run.
func (p *Pool) outOfAttempts(c *claimed, h *handler) *finish {
	maxAttempts := p.cfg.maxAttempts(h)
	if c.Attempt <= maxAttempts {
		return nil
	}
	f := &finish{c: c, outcome: txinbox.OutcomeDead, reason: reasonCrashed, uncount: true}
	f.cause = fmt.Errorf("gave up after %d attempts: the last one never finished (its worker crashed, hung or lost its connection); previous error: %s", maxAttempts, c.PreviousError)
	f.err = truncateError(f.cause.Error())
	return f
}

func callBatch(ctx context.Context, h *handler, tx pgx.Tx, msgs []any) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	return h.batch.call(ctx, tx, msgs)
}

// traceBatchStart tells the Store's Tracer, if any, that a batch handler call of items
// starts, and returns the context the handler runs in.
func (p *Pool) traceBatchStart(ctx context.Context, items []*batchItem) context.Context {
	if p.tracer == nil {
		return ctx
	}
	c := items[0].c
	d := txinbox.TraceStart{Op: txinbox.OpHandle, Schema: p.store.Schema, Consumer: c.Consumer, Attempt: c.Attempt, Batch: true,
		Messages: make([]txinbox.TraceMessage, len(items))}
	for i, it := range items {
		d.Messages[i] = traceMessage(it.c)
	}
	return p.tracer.TraceStart(ctx, d)
}

// traceBatchEnd tells the Store's Tracer that a batch handler call ended with r.
func (p *Pool) traceBatchEnd(ctx context.Context, r callResult) {
	if p.tracer == nil {
		return
	}
	p.tracer.TraceEnd(ctx, txinbox.TraceEnd{Op: txinbox.OpHandle, Reason: string(r.reason), Err: r.err})
}
