package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/store"
)

// finish is the recorded outcome of one message of a batch.
type finish struct {
	c       *claimed
	outcome Outcome // recorded by FinishBatch
	reason  Reason  // for the Observer and the logs
	cause   error   // the attempt's error (nil when completed)
	err     string  // cause as stored: last_error
	result  []byte
	delay   time.Duration
	uncount bool // the claim's attempt is not counted: the handler never ran
	elapsed time.Duration
}

const maxErrorBytes = 8 << 10

// run handles a claimed batch in one transaction: lock the claims (dropping any taken over since),
// run each handler in a savepoint of its own, record every outcome in one statement, commit.
func (p *Pool) run(ctx context.Context, inf *inflight) {
	batch := inf.batch
	sort.Slice(batch, func(i, j int) bool { return batch[i].ID < batch[j].ID })
	done, err := p.runTx(ctx, inf)
	if err == nil {
		p.committed(ctx, done)
		return
	}
	if inf.abandoned.Load() {
		return // Stop rolled the batch back and handed its claims back
	}
	// The transaction rolled back. Record the failure of the message whose handler broke it (if any),
	// hand the others back without charging them an attempt. Both are fenced by the claim token, so
	// this is safe even if the commit did in fact happen.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var record []*finish // the culprit's failure, after the outcomes the transaction committed with it
	var be culpritError
	isCulprit := errors.As(err, &be)
	if isCulprit && ctx.Err() == nil && be.f != nil {
		record = append(append(append(record, be.before...), be.f), be.also...)
	}
	var release []*claimed
	for _, c := range batch {
		held := isCulprit && slices.Contains(be.hold, c) // left claimed: taken over alone after the lease
		if !held && !slices.ContainsFunc(record, func(f *finish) bool { return f.c == c }) {
			release = append(release, c)
		}
	}
	if ctx.Err() == nil {
		p.cfg.Logger.Warn("txinbox: batch rolled back", "consumer", p.cfg.Consumer, "messages", len(batch), "err", err)
	}
	if len(record) > 0 {
		if ferr := p.finish(bctx, p.st.Wrap(p.db), record); ferr != nil {
			p.cfg.Logger.Warn("txinbox: recording failure", "consumer", p.cfg.Consumer, "id", be.f.c.ID, "err", ferr)
			for _, f := range record {
				release = append(release, f.c) // try at least to hand them back
			}
		} else {
			p.committed(bctx, record)
		}
	}
	if isCulprit && len(be.hold) > 0 {
		// Held: taken over after their lease, each alone (ClaimSuspects). If this fails they are
		// taken over in groups, halved until the culprit is alone.
		ids, tokens := idsTokens(be.hold)
		if _, ierr := store.Queries.IsolateClaims(bctx, p.st.Wrap(p.db), sqlc.IsolateClaimsParams{Consumer: p.cfg.Consumer, Ids: ids, Tokens: tokens}); ierr != nil {
			p.cfg.Logger.Warn("txinbox: marking held claims to run alone failed; they are taken over in groups when the lease ends",
				"consumer", p.cfg.Consumer, "messages", len(be.hold), "err", ierr)
		}
	}
	if len(release) > 0 {
		ids, tokens := idsTokens(release)
		if _, rerr := store.Queries.ReleaseClaims(bctx, p.st.Wrap(p.db), sqlc.ReleaseClaimsParams{Consumer: p.cfg.Consumer, Ids: ids, Tokens: tokens}); rerr != nil {
			p.cfg.Logger.Warn("txinbox: releasing claims failed; they are taken over when the lease ends",
				"consumer", p.cfg.Consumer, "messages", len(release), "err", rerr)
		}
	}
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
	status, err := store.Queries.XactStatus(context.WithoutCancel(ctx), p.st.Wrap(p.db), xid)
	if err != nil {
		status = "unknown (" + err.Error() + ")"
	}
	p.fail(f, f.c, Permanent(fmt.Errorf("the handler ended the batch transaction itself (COMMIT or ROLLBACK through tx.Conn() or a statement), "+
		"which it must not do; that transaction %s", txFate(status))), ReasonError)
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

func (p *Pool) runTx(ctx context.Context, inf *inflight) ([]*finish, error) {
	batch := inf.batch
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		p.detach(inf)
		_ = tx.Rollback(context.WithoutCancel(ctx)) // gives the connection back (a closed one is dropped)
	}()
	if err := p.attach(inf, tx); err != nil {
		return nil, err
	}
	db := p.st.Wrap(tx)
	ids, tokens := idsTokens(batch)
	locked, err := store.Queries.LockClaims(ctx, db, sqlc.LockClaimsParams{
		Consumer: p.cfg.Consumer, Ids: ids, Tokens: tokens,
		StatementTimeout: strconv.FormatInt(p.maxTO.Milliseconds()+1000, 10),
		IdleTimeout:      strconv.FormatInt(p.cfg.Lease.Milliseconds(), 10),
	})
	if err != nil {
		return nil, err
	}
	xid, err := store.Queries.CurrentXact(ctx, db)
	if err != nil {
		return nil, err
	}
	if len(locked) != len(batch) {
		keep := make(map[int64]bool, len(locked))
		for _, id := range locked {
			keep[id] = true
		}
		var mine []*claimed
		for _, c := range batch {
			if keep[c.ID] {
				mine = append(mine, c)
			} else {
				p.cfg.Logger.Warn("txinbox: claim taken over by another worker after its lease ended; skipped",
					"consumer", p.cfg.Consumer, "id", c.ID, "token", c.Token)
			}
		}
		batch = mine
	}
	if len(batch) == 0 {
		return nil, nil
	}
	sp := &savepoints{tx: tx}
	done := make([]*finish, 0, len(batch))
	prevSingle := false // the previous step ran a single handler
	for _, u := range p.units(batch) {
		if ctx.Err() != nil {
			return nil, ctx.Err() // stopping: roll everything back, hand the batch back
		}
		if u.h != nil {
			prevSingle = false
			if done, err = p.runBatchUnit(ctx, tx, sp, u, xid, done); err != nil {
				return nil, err
			}
			continue
		}
		c := u.cs[0]
		sp.next()
		f := p.handle(ctx, &handlerTx{Tx: tx, sp: sp}, c)
		prevWasSingle := prevSingle
		prevSingle = true
		done = append(done, f)
		if txEnded(tx) {
			return nil, p.endedByHandler(ctx, xid, done)
		}
		if sp.broken != nil {
			// The savepoint statements failed: the transaction is unusable. If it was left aborted by
			// the previous message (a failed statement it ignored), that message is the culprit.
			if len(done) > 1 && prevWasSingle && isAborted(sp.broken) && done[len(done)-2].outcome == OutcomeCompleted {
				prev := done[len(done)-2]
				p.fail(prev, prev.c, errors.New("the handler returned nil, but its transaction was left aborted by a failed statement"), ReasonError)
				return nil, culpritError{f: prev, err: sp.broken}
			}
			return nil, sp.broken
		}
		if f.outcome == OutcomeCompleted && sp.failed != nil {
			// A statement failed but the handler returned nil: fine if it recovered (a nested
			// savepoint), void if it left the transaction aborted.
			if _, err := tx.Exec(ctx, "SELECT 1"); isAborted(err) {
				p.fail(f, c, fmt.Errorf("the handler returned nil, but its transaction was left aborted by a failed statement: %w", sp.failed), ReasonError)
			} else if err != nil {
				return nil, err
			}
		}
		if f.outcome != OutcomeCompleted {
			if err := sp.rollback(ctx); err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				return nil, culpritError{f: f, err: err}
			}
		}
	}
	if err := p.finish(ctx, db, done); err != nil {
		return nil, err
	}
	p.detach(inf) // Commit gives the connection back to the pool
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return done, nil
}

// handle runs one message's handler and decides its outcome. The caller rolls back to the savepoint
// unless the outcome is completed.
func (p *Pool) handle(ctx context.Context, tx pgx.Tx, c *claimed) *finish {
	h := p.cfg.Handlers.byKind[c.Kind]
	if f := p.outOfAttempts(c, h); f != nil {
		return f
	}
	f := &finish{c: c}
	if h == nil {
		p.fail(f, c, fmt.Errorf("%w: %q", ErrUnknownKind, c.Kind), ReasonUnknownKind)
		return f
	}
	sctx, span := p.startSpan(ctx, c)
	defer endSpan(span, f)
	hctx, cancel := context.WithTimeout(sctx, p.cfg.timeout(h))
	defer cancel()
	start := time.Now()
	var result []byte
	err := callHandler(hctx, h, tx, c, &result)
	f.elapsed = time.Since(start)
	switch {
	case err == nil:
		f.outcome, f.result = OutcomeCompleted, result
	case errors.As(err, new(*panicError)):
		p.fail(f, c, err, ReasonPanic)
	case hctx.Err() != nil && ctx.Err() == nil:
		p.fail(f, c, fmt.Errorf("timed out after %v: %w", p.cfg.timeout(h), err), ReasonTimeout)
	default:
		p.fail(f, c, err, ReasonError)
	}
	return f
}

// startSpan starts the span of a handler call, a child of the trace context in the message headers.
func (p *Pool) startSpan(ctx context.Context, c *claimed) (context.Context, trace.Span) {
	if len(c.Headers) > 0 {
		ctx = p.cfg.Propagator.Extract(ctx, propagation.MapCarrier(c.Headers))
	}
	ctx, span := p.tracer.Start(ctx, "txinbox.handle", trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("messaging.system", "txinbox"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.consumer.group.name", c.Consumer),
			attribute.String("messaging.message.id", c.Key),
			attribute.String("txinbox.kind", c.Kind),
			attribute.Int64("txinbox.message_id", c.ID),
			attribute.Int("txinbox.attempt", c.Attempt),
		)
		if c.OrderingKey != "" {
			span.SetAttributes(attribute.String("txinbox.ordering_key", c.OrderingKey))
		}
	}
	return ctx, span
}

// endSpan ends a handler call's span with its outcome.
func endSpan(span trace.Span, f *finish) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("txinbox.outcome", string(f.outcome)))
		if f.outcome != OutcomeCompleted {
			span.SetAttributes(attribute.String("txinbox.reason", string(f.reason)))
			span.SetStatus(codes.Error, f.err)
		}
	}
	span.End()
}

// fail records a failed attempt: dead if permanent or out of attempts, else a retry after backoff.
func (p *Pool) fail(f *finish, c *claimed, err error, reason Reason) {
	h := p.cfg.Handlers.byKind[c.Kind]
	f.cause = err
	f.err = truncateError(err.Error())
	f.reason = reason
	switch {
	case errors.As(err, new(decodeError)):
		f.outcome, f.reason = OutcomeDead, ReasonDecode
	case IsPermanent(err):
		f.outcome, f.reason = OutcomeDead, ReasonPermanent
	case c.Attempt >= p.cfg.maxAttempts(h):
		f.outcome = OutcomeDead
	default:
		f.outcome = OutcomeRetry
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

func (p *Pool) finish(ctx context.Context, db sqlc.DBTX, done []*finish) error {
	n := len(done)
	arg := sqlc.FinishBatchParams{
		Consumer: p.cfg.Consumer, RetentionSeconds: p.store.Retention.Seconds(),
		Ids: make([]int64, n), Keys: make([]string, n), Tokens: make([]int64, n), Outcomes: make([]string, n),
		Errors: make([]string, n), Results: make([]string, n), Delays: make([]float64, n), Uncount: make([]int32, n),
	}
	for i, f := range done {
		arg.Ids[i], arg.Keys[i], arg.Tokens[i], arg.Outcomes[i] = f.c.ID, f.c.Key, f.c.Token, string(f.outcome)
		arg.Errors[i], arg.Results[i], arg.Delays[i] = f.err, string(f.result), f.delay.Seconds()
		if f.uncount {
			arg.Uncount[i] = 1
		}
	}
	rows, err := store.Queries.FinishBatch(ctx, db, arg)
	if err != nil {
		return err
	}
	if rows != int64(n) {
		// Cannot happen while the batch holds its locks; outside a batch it means a takeover.
		return fmt.Errorf("txinbox: recorded %d of %d outcomes: claims were taken over", rows, n)
	}
	return nil
}

// committed follows the commit of outcomes: it makes the next message of each ordering key whose
// message left the queue ready, logs the failures and tells the Observer.
func (p *Pool) committed(ctx context.Context, done []*finish) {
	var keys []string
	for _, f := range done {
		if f.c.OrderingKey != "" && f.outcome != OutcomeRetry && !slices.Contains(keys, f.c.OrderingKey) {
			keys = append(keys, f.c.OrderingKey)
		}
	}
	if len(keys) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := store.Queries.ReadyNext(rctx, p.st.Wrap(p.db), p.cfg.Consumer, keys); err != nil {
			p.cfg.Logger.Warn("txinbox: making the next messages of ordering keys ready failed; they run when their snooze ends",
				"consumer", p.cfg.Consumer, "keys", len(keys), "snooze", p.snooze(), "err", err)
		}
		cancel()
	}
	p.logFailures(ctx, done)
	p.observe(done)
}

// logFailures logs each committed failure: a retry at Debug, a dead letter at Warn.
func (p *Pool) logFailures(ctx context.Context, done []*finish) {
	for _, f := range done {
		level, msg := slog.LevelDebug, "txinbox: attempt failed; will retry"
		switch f.outcome {
		case OutcomeCompleted:
			continue
		case OutcomeDead:
			level, msg = slog.LevelWarn, "txinbox: message is dead"
		}
		if !p.cfg.Logger.Enabled(ctx, level) {
			continue
		}
		attrs := []slog.Attr{
			slog.String("consumer", f.c.Consumer), slog.String("kind", f.c.Kind), slog.Int64("id", f.c.ID),
			slog.String("key", f.c.Key), slog.Int("attempt", f.c.Attempt), slog.String("reason", string(f.reason)),
			slog.String("err", f.err),
		}
		if f.outcome == OutcomeRetry {
			attrs = append(attrs, slog.Duration("retry_in", f.delay))
		}
		p.cfg.Logger.LogAttrs(context.WithoutCancel(ctx), level, msg, attrs...)
	}
}

func (p *Pool) observe(done []*finish) {
	if p.cfg.Observer == nil {
		return
	}
	for _, f := range done {
		p.cfg.Observer.Handled(HandleEvent{Consumer: f.c.Consumer, Kind: f.c.Kind, ID: f.c.ID, Key: f.c.Key,
			Outcome: f.outcome, Reason: f.reason, Err: f.cause, Attempt: f.c.Attempt, Duration: f.elapsed,
			ReceivedAt: f.c.ReceivedAt})
	}
}

func idsTokens(cs []*claimed) (ids, tokens []int64) {
	ids, tokens = make([]int64, len(cs)), make([]int64, len(cs))
	for i, c := range cs {
		ids[i], tokens[i] = c.ID, c.Token
	}
	return ids, tokens
}

// truncateError makes an error message storable as text: valid UTF-8, no NUL, at most maxErrorBytes.
func truncateError(s string) string {
	if len(s) > maxErrorBytes {
		s = s[:maxErrorBytes] + "…"
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

func isAborted(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25P02"
}
