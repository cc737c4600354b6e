package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
)

// run runs b's handlers in its transaction, records every outcome with the batch's row (FinishBatch)
// and commits: the life of a batch after its claim. If the transaction rolls back instead, settle
// keeps what must be kept of it.
func (p *Pool) run(ctx context.Context, b *batch) {
	done, err := p.handleAll(ctx, b)
	if err == nil {
		err = p.finish(ctx, b.tx, b, done, b.record)
	}
	if err == nil {
		p.detach(b) // Commit gives the connection back to the pool
		err = b.tx.Commit(ctx)
	}
	p.endTx(ctx, b)
	defer p.untrack(b) // after settle: until then the pool's own rescuer leaves its row alone
	switch {
	case err == nil:
		p.committed(ctx, done)
	case b.abandoned.Load():
		// Stop rolled the batch back and released it.
	default:
		p.settle(ctx, b, err)
	}
}

// handleAll runs the handlers of b's messages in its transaction and returns their outcomes: each run
// of consecutive single handlers' messages optimistically in one savepoint (runSingles), each call of
// a batch handler in one (bisect.go). An error leaves the transaction unusable; a culpritError says
// which outcomes to record anyway and which messages to hold.
func (p *Pool) handleAll(ctx context.Context, b *batch) ([]*finish, error) {
	tx := b.tx
	sp := &savepoints{tx: tx}
	done := make([]*finish, 0, len(b.msgs))
	prevSingle := false // the previous step ran a single handler
	us := p.units(b.msgs)
	var err error
	for i := 0; i < len(us); {
		if ctx.Err() != nil {
			return nil, ctx.Err() // stopping: roll everything back, hand the batch back
		}
		if u := us[i]; u.h != nil {
			prevSingle = false
			if done, err = p.runBatchUnit(ctx, tx, sp, u, b.xid, done); err != nil {
				return nil, err
			}
			i++
			continue
		}
		j := i + 1
		for j < len(us) && us[j].h == nil {
			j++
		}
		run := make([]*claimed, 0, j-i)
		for _, u := range us[i:j] {
			run = append(run, u.cs[0])
		}
		if done, err = p.runSingles(ctx, b, sp, run, done, prevSingle); err != nil {
			return nil, err
		}
		prevSingle, i = true, j
	}
	return done, nil
}

// runSingles runs run (consecutive messages of single handlers) and returns done with their outcomes
// appended. It first runs them optimistically: all in one savepoint, established lazily before the
// run's first statement, with no savepoint statement per message. If every call completes (nil, in
// time, the transaction usable), that is all. If one fails, the pool rolls back to the run's savepoint
// and runs the run again carefully, each message in a savepoint of its own (handleOne), except that
// failed message (the culprit), which is not called again: its failure in the optimistic pass is its
// outcome. The messages before it were called twice, their first writes rolled back. A message
// whose first failed statement found the transaction already aborted is not taken for a culprit:
// then every message of the run is run again.
func (p *Pool) runSingles(ctx context.Context, b *batch, sp *savepoints, run []*claimed, done []*finish, prevSingle bool) ([]*finish, error) {
	if len(run) == 1 {
		return p.handleOne(ctx, b, sp, run[0], done, prevSingle)
	}
	tx := b.tx
	start := len(done)
	var before *finish // the step before the run, if its statements came last before the savepoint
	if start > 0 && prevSingle {
		before = done[start-1]
	}
	sp.next()
	var culprit *finish
	failed := false
	for _, c := range run {
		sp.failed = nil
		f := p.handle(ctx, &handlerTx{Tx: tx, sp: sp}, c)
		done = append(done, f)
		// The run's savepoint statements go out before its first statement: if they fail, no message
		// of the run wrote anything, and the step before the run may be the culprit.
		if err := p.checkCall(ctx, b, sp, done, before); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err() // stopping: roll everything back, hand the batch back
		}
		if err := p.checkRecovered(ctx, sp, f); err != nil {
			return nil, err
		}
		if f.outcome != txinbox.OutcomeCompleted && p.callsHandler(c) {
			failed = true
			if !isAborted(sp.failed) {
				culprit = f
			}
			break
		}
	}
	if !failed {
		return done, nil
	}
	if err := sp.rollback(ctx); err != nil {
		if ctx.Err() != nil || culprit == nil {
			return nil, err
		}
		return nil, culpritError{f: culprit, err: err}
	}
	done = done[:start]
	prev := prevSingle
	for _, c := range run {
		if culprit != nil && c == culprit.c {
			done, prev = append(done, culprit), true
			continue
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var err error
		if done, err = p.handleOne(ctx, b, sp, c, done, prev); err != nil {
			return nil, err
		}
		prev = true
	}
	return done, nil
}

// callsHandler reports whether handle calls a handler for c (not for an unknown kind or a message out
// of attempts).
func (p *Pool) callsHandler(c *claimed) bool {
	h := p.cfg.Handlers.byKind[c.Kind]
	return h != nil && p.outOfAttempts(c, h) == nil
}

// handleOne runs c's handler in a savepoint of its own and returns done with its outcome appended;
// prevSingle says whether the previous step ran a single handler.
func (p *Pool) handleOne(ctx context.Context, b *batch, sp *savepoints, c *claimed, done []*finish, prevSingle bool) ([]*finish, error) {
	sp.next()
	f := p.handle(ctx, &handlerTx{Tx: b.tx, sp: sp}, c)
	done = append(done, f)
	var before *finish
	if len(done) > 1 && prevSingle {
		before = done[len(done)-2]
	}
	if err := p.checkCall(ctx, b, sp, done, before); err != nil {
		return nil, err
	}
	if err := p.checkRecovered(ctx, sp, f); err != nil {
		return nil, err
	}
	if f.outcome != txinbox.OutcomeCompleted {
		if err := sp.rollback(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			return nil, culpritError{f: f, err: err}
		}
	}
	return done, nil
}

// checkCall checks the batch transaction after the handler call that decided the last of done: a
// handler that ended it itself (endedByHandler), or savepoint statements that failed, which leave it
// unusable. before is the step whose statements came last before the savepoint (nil: none of a
// single handler): if they left the transaction aborted (a failed statement it ignored), that step
// is the culprit.
func (p *Pool) checkCall(ctx context.Context, b *batch, sp *savepoints, done []*finish, before *finish) error {
	if txEnded(b.tx) {
		return p.endedByHandler(ctx, b.xid, done)
	}
	if sp.broken == nil {
		return nil
	}
	if before != nil && isAborted(sp.broken) && before.outcome == txinbox.OutcomeCompleted {
		p.fail(before, before.c, errLeftAborted, reasonError)
		return culpritError{f: before, err: sp.broken}
	}
	if f := done[len(done)-1]; sp.byCall {
		// The handler's own context ended while its savepoint was being established: its call cost
		// the transaction, and it is charged (a timeout if it returned its deadline).
		if f.outcome == txinbox.OutcomeCompleted {
			p.fail(f, f.c, fmt.Errorf("%w: %w", errCallBrokeTx, sp.broken), reasonError)
		}
		return culpritError{f: f, err: sp.broken}
	}
	return sp.broken
}

// checkRecovered judges a call that returned nil although one of its statements failed: fine if it
// recovered (a nested savepoint), its own failure if it left the transaction aborted.
func (p *Pool) checkRecovered(ctx context.Context, sp *savepoints, f *finish) error {
	if f.outcome != txinbox.OutcomeCompleted || sp.failed == nil {
		return nil
	}
	if _, err := sp.tx.Exec(ctx, "SELECT 1"); isAborted(err) {
		p.fail(f, f.c, fmt.Errorf("%w: %w", errLeftAborted, sp.failed), reasonError)
	} else if err != nil {
		return err
	}
	return nil
}

// txEnded reports whether the batch transaction is no longer open on its connection (a handler ended
// it with COMMIT or ROLLBACK through tx.Conn() or a statement). It reads the status the server sent
// with its last reply: no round trip.
func txEnded(tx pgx.Tx) bool {
	c := tx.Conn()
	return c != nil && c.PgConn().TxStatus() == 'I'
}

// endedByHandler handles a batch whose transaction the handler of the last of done ended itself. It
// asks the server whether that transaction (xid) committed: if so, the effects of the messages before
// it are durable, and their outcomes are recorded as they were decided; if it rolled back, they are
// handed back. Either way the culprit is dead at once: running it again would repeat what it may have
// committed, or end the batch again.
func (p *Pool) endedByHandler(ctx context.Context, xid string, done []*finish) error {
	f := done[len(done)-1]
	status, err := schemasql.Queries.XactStatus(context.WithoutCancel(ctx), p.eng.St.Wrap(p.store.DB), xid)
	if err != nil {
		status = "unknown (" + err.Error() + ")"
	}
	p.fail(f, f.c, txinbox.Permanent(fmt.Errorf("the handler ended the batch transaction itself (COMMIT or ROLLBACK through tx.Conn() or a statement), "+
		"which it must not do; that transaction %s", txFate(status))), reasonError)
	e := culpritError{f: f, err: errors.New("the handler of message " + strconv.FormatInt(f.c.ID, 10) + " ended the batch transaction")}
	if status == "committed" {
		e.before = done[:len(done)-1]
	}
	return e
}

func txFate(status string) string {
	switch status {
	case "committed":
		return "committed: what this message wrote before that is kept, and the outcomes of the messages run before it in its batch were recorded"
	case "aborted":
		return "rolled back: nothing of the batch was kept"
	}
	return "is in an unknown state (" + status + ")"
}

// culpritError says which message's handler left the transaction unusable.
type culpritError struct {
	f      *finish    // the culprit's failure (nil: only hold)
	also   []*finish  // failures of the other messages of the culprit's batch handler call, recorded with f
	before []*finish  // outcomes of the batch already committed with the transaction, recorded with f
	hold   []*claimed // messages neither recorded nor handed back: the rescuer runs them alone after their lease
	err    error
}

func (e culpritError) Error() string {
	if e.f == nil {
		return e.err.Error()
	}
	return fmt.Sprintf("message %d: %v", e.f.c.ID, e.err)
}
func (e culpritError) Unwrap() error { return e.err }

// handle runs one message's handler and decides its outcome. The caller rolls back to the savepoint
// unless the outcome is completed.
func (p *Pool) handle(ctx context.Context, tx pgx.Tx, c *claimed) *finish {
	h := p.cfg.Handlers.byKind[c.Kind]
	if f := p.outOfAttempts(c, h); f != nil {
		return f
	}
	f := &finish{c: c}
	if h == nil {
		p.fail(f, c, fmt.Errorf("%w: %q (this pool handles %s)", ErrUnknownKind, c.Kind, p.cfg.Handlers.kindList()), reasonUnknownKind)
		return f
	}
	sctx := p.traceStart(ctx, c)
	defer p.traceEnd(sctx, f)
	hctx, cancel := context.WithTimeout(sctx, p.cfg.timeout(h))
	defer cancel()
	start := time.Now()
	var result []byte
	err := callHandler(hctx, h, tx, c, &result)
	returned := time.Now()
	f.elapsed = returned.Sub(start)
	switch {
	case errors.As(err, new(*panicError)):
		p.fail(f, c, err, reasonPanic)
	case timedOut(ctx, hctx, returned):
		p.fail(f, c, timeoutError(p.cfg.timeout(h), err), reasonTimeout)
	case err == nil:
		f.outcome, f.result = txinbox.OutcomeCompleted, result
	default:
		p.fail(f, c, err, reasonError)
	}
	return f
}

// timedOut reports whether a handler call given hctx (derived from ctx, the batch's) that returned
// at returned ran past its Timeout: hctx ended, or its deadline had passed when the call returned,
// while ctx goes on (a pool that stops cancels its handlers, which is not a timeout). Whatever the
// call returned, even nil, it is then a failure of its own (a timeout): its writes are rolled back.
func timedOut(ctx, hctx context.Context, returned time.Time) bool {
	if ctx.Err() != nil {
		return false
	}
	if hctx.Err() != nil {
		return true
	}
	dl, ok := hctx.Deadline()
	return ok && !returned.Before(dl)
}

// timeoutError is the failure of a call that ran past its Timeout t and returned err.
func timeoutError(t time.Duration, err error) error {
	if err == nil {
		return fmt.Errorf("timed out after %v: the handler returned nil after its deadline (%w); its writes were rolled back", t, context.DeadlineExceeded)
	}
	return fmt.Errorf("timed out after %v: %w", t, err)
}

// traceStart tells the Store's Tracer, if any, that a single handler call of c starts, and
// returns the context the handler runs in.
func (p *Pool) traceStart(ctx context.Context, c *claimed) context.Context {
	if p.tracer == nil {
		return ctx
	}
	return p.tracer.TraceStart(ctx, txinbox.TraceStart{
		Op: txinbox.OpHandle, Schema: p.store.Schema, Consumer: c.Consumer, Attempt: c.Attempt, OrderingKey: c.OrderingKey,
		Messages: []txinbox.TraceMessage{traceMessage(c)},
	})
}

// traceEnd tells the Store's Tracer that the handler call of f ended.
func (p *Pool) traceEnd(ctx context.Context, f *finish) {
	if p.tracer == nil {
		return
	}
	d := txinbox.TraceEnd{Op: txinbox.OpHandle, Outcome: f.outcome}
	if f.outcome != txinbox.OutcomeCompleted {
		d.Reason, d.Err = string(f.reason), f.cause
	}
	p.tracer.TraceEnd(ctx, d)
}

// fail records a failed attempt: dead if permanent, undecodable, of an unknown kind or out of
// attempts, else a retry after backoff.
func (p *Pool) fail(f *finish, c *claimed, err error, reason failReason) {
	h := p.cfg.Handlers.byKind[c.Kind]
	f.cause = err
	f.err = truncateError(err.Error())
	f.reason = reason
	switch {
	case reason == reasonUnknownKind:
		f.outcome = txinbox.OutcomeDead // no retry of this pool can handle it
	case errors.As(err, new(decodeError)):
		f.outcome, f.reason = txinbox.OutcomeDead, reasonDecode
	case txinbox.IsPermanent(err):
		f.outcome, f.reason = txinbox.OutcomeDead, reasonPermanent
	case c.Attempt >= p.cfg.maxAttempts(h):
		f.outcome = txinbox.OutcomeDead
	default:
		f.outcome = txinbox.OutcomeRetry
		f.delay = p.cfg.backoff(h).Delay(c.Failed + 1)
	}
}

type panicError struct {
	value any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v\n\n%s", e.value, e.stack) }

func callHandler(ctx context.Context, h *handler, tx pgx.Tx, c *claimed, result *[]byte) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	return h.run(ctx, tx, c, result)
}

func isAborted(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25P02"
}
