package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
)

// finish is the recorded outcome of one message of a batch.
type finish struct {
	c       *claimed
	outcome txinbox.Outcome // recorded by FinishBatch
	reason  failReason      // for the Store's Tracer and the logs
	cause   error           // the attempt's error (nil when completed)
	err     string          // cause as stored: last_error
	result  []byte
	delay   time.Duration
	uncount bool // the claim's attempt is not counted: the handler never ran
	elapsed time.Duration
}

const maxErrorBytes = 8 << 10

// finish records the outcomes done of b's messages (FinishBatch) in tx, with the batch's row record
// (0: none) deleted in the same statement. Each outcome is fenced by its message's token: in the
// batch transaction they all hold; outside it, an outcome whose message was charged or finished by
// another worker since is not recorded, and finish reports it.
//
// If a message of an ordering key leaves the queue, tx first takes the consumer's snooze lock, shared
// (LockSnoozeShared, in the same round trip), and holds it until it commits. A snooze (SnoozeBlocked)
// thus never spans the commit: it either commits before it, and the key's next message it put off is
// snoozed in every snapshot that no longer shows this one (no claim sees that message due and locks
// it, which would make ReadyNext skip it), or takes its snapshot after it, and sees that message at
// the head of its key.
func (p *Pool) finish(ctx context.Context, tx pgx.Tx, b *batch, done []*finish, record int64) error {
	n := len(done)
	arg := sqlc.FinishBatchParams{
		Consumer: p.cfg.Consumer, RetentionSeconds: p.store.Retention.Seconds(), Batch: record,
		StartedAt: pgtype.Timestamptz{Time: b.started, Valid: true},
		Ids:       make([]int64, n), Keys: make([]string, n), Tokens: make([]int64, n), Outcomes: make([]string, n),
		Errors: make([]string, n), Results: make([]string, n), Delays: make([]float64, n), Uncount: make([]int32, n),
		Reasons: make([]string, n), ElapsedMs: make([]float64, n), Owner: p.cfg.Owner,
	}
	for i, f := range done {
		arg.Ids[i], arg.Keys[i], arg.Tokens[i], arg.Outcomes[i] = f.c.ID, f.c.Key, f.c.Token, string(f.outcome)
		arg.Errors[i], arg.Results[i], arg.Delays[i] = f.err, string(f.result), f.delay.Seconds()
		arg.Reasons[i], arg.ElapsedMs[i] = string(f.reason), float64(f.elapsed)/float64(time.Millisecond)
		if f.uncount {
			arg.Uncount[i] = 1
		}
	}
	lock := len(leavingKeys(done)) > 0
	var rows int64
	err := p.pipeline(ctx, tx, func(db sqlc.DBTX) []error {
		errs := []error{schemasql.Queries.CustomPlans(ctx, db)} // the rest of tx: custom plans (CustomPlans)
		if lock {
			errs = append(errs, schemasql.Queries.LockSnoozeShared(ctx, db, p.snoozeKey))
		}
		var err error
		rows, err = schemasql.Queries.FinishBatch(ctx, db, arg)
		return append(errs, err)
	})
	if err != nil {
		return err
	}
	if rows != int64(n) {
		// Cannot happen while the batch holds its locks; outside it, the rescuer got there first.
		return fmt.Errorf("txinbox: recorded %d of %d outcomes: the rescuer charged the batch first", rows, n)
	}
	return nil
}

// settle follows a batch whose transaction rolled back, in one transaction of its own: it records the
// failure of the message whose handler broke the batch (a culpritError; with the outcomes decided
// before it if that transaction committed, its handler having committed it), marks the messages held
// to run alone, and deletes the batch's row, so that its other messages, free again, are not charged.
// Every outcome is fenced by its token. If the database cannot be reached, the row stays, and the
// rescuer charges the batch as one that never finished.
func (p *Pool) settle(ctx context.Context, b *batch, err error) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var be culpritError
	var record []*finish // the culprit's failure, after the outcomes the transaction committed with it
	var held []*claimed
	if errors.As(err, &be) {
		if be.f != nil && ctx.Err() == nil {
			record = append(append(append(record, be.before...), be.f), be.also...)
		}
		held = be.hold
	}
	if ctx.Err() == nil {
		p.eng.Log.Warn("txinbox: batch rolled back", "consumer", p.cfg.Consumer, "messages", len(b.msgs), "err", err)
	}
	serr := pgx.BeginFunc(bctx, p.store.DB, func(tx pgx.Tx) error {
		if len(record) > 0 {
			if err := p.finish(bctx, tx, b, record, 0); err != nil {
				return err
			}
		}
		ids, tokens := idsTokens(held)
		_, err := schemasql.Queries.SettleBatch(bctx, p.eng.St.Wrap(tx), sqlc.SettleBatchParams{
			Consumer: p.cfg.Consumer, Batch: b.record, HeldIds: ids, HeldTokens: tokens,
			StartedAt: pgtype.Timestamptz{Time: b.started, Valid: true}, Owner: p.cfg.Owner,
			HeldError: truncateError("its batch handler call left the transaction unusable: " + err.Error())})
		return err
	})
	if serr != nil {
		p.eng.Log.Warn("txinbox: recording a rolled-back batch failed; the rescuer charges it as a batch that never finished",
			"consumer", p.cfg.Consumer, "messages", len(b.msgs), "err", serr)
		return
	}
	if len(record) > 0 {
		p.committed(bctx, record)
	}
}

// leavingKeys returns the ordering keys of the messages of done that leave the queue (completed or
// dead), each once.
func leavingKeys(done []*finish) []string {
	var keys []string
	for _, f := range done {
		if f.c.OrderingKey != "" && f.outcome != txinbox.OutcomeRetry && !slices.Contains(keys, f.c.OrderingKey) {
			keys = append(keys, f.c.OrderingKey)
		}
	}
	return keys
}

// committed follows the commit of outcomes: it makes the next message of each ordering key whose
// message left the queue ready, logs the failures and tells the Store's Tracer (txinbox.OpHandled).
func (p *Pool) committed(ctx context.Context, done []*finish) {
	if keys := leavingKeys(done); len(keys) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := p.pipelined(rctx, func(db sqlc.DBTX) []error {
			return []error{schemasql.Queries.CustomPlans(rctx, db), schemasql.Queries.LockSnoozeShared(rctx, db, p.snoozeKey),
				schemasql.Queries.ReadyNext(rctx, db, p.cfg.Consumer, keys)}
		})
		if err != nil {
			p.eng.Log.Warn("txinbox: making the next messages of ordering keys ready failed; they run when their snooze ends",
				"consumer", p.cfg.Consumer, "keys", len(keys), "snooze", p.snooze(), "err", err)
		}
		cancel()
	}
	p.logFailures(ctx, done)
	p.handled(ctx, done)
}

// logFailures logs each committed failure: a retry at Debug, a dead letter at Warn.
func (p *Pool) logFailures(ctx context.Context, done []*finish) {
	for _, f := range done {
		level, msg := slog.LevelDebug, "txinbox: attempt failed; will retry"
		switch f.outcome {
		case txinbox.OutcomeCompleted:
			continue
		case txinbox.OutcomeDead:
			level, msg = slog.LevelWarn, "txinbox: message is dead"
		}
		if !p.eng.Log.Enabled(ctx, level) {
			continue
		}
		attrs := []slog.Attr{
			slog.String("consumer", f.c.Consumer), slog.String("kind", f.c.Kind), slog.Int64("id", f.c.ID),
			slog.String("key", f.c.Key), slog.Int("attempt", f.c.Attempt), slog.String("reason", string(f.reason)),
			slog.String("err", f.err),
		}
		if f.outcome == txinbox.OutcomeRetry {
			attrs = append(attrs, slog.Duration("retry_in", f.delay))
		}
		p.eng.Log.LogAttrs(context.WithoutCancel(ctx), level, msg, attrs...)
	}
}

// handled tells the Store's Tracer, if any, the committed outcome of each message of done
// (txinbox.OpHandled).
func (p *Pool) handled(ctx context.Context, done []*finish) {
	if p.tracer == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, f := range done {
		c := f.c
		octx := p.tracer.TraceStart(ctx, txinbox.TraceStart{Op: txinbox.OpHandled, Schema: p.store.Schema,
			Consumer: c.Consumer, Messages: []txinbox.TraceMessage{traceMessage(c)}, Attempt: c.Attempt,
			OrderingKey: c.OrderingKey})
		p.tracer.TraceEnd(octx, txinbox.TraceEnd{Op: txinbox.OpHandled, Outcome: f.outcome, Reason: string(f.reason),
			Duration: f.elapsed, Err: f.cause})
	}
}

// traceMessage describes c to a tracer.
func traceMessage(c *claimed) txinbox.TraceMessage {
	return txinbox.TraceMessage{ID: c.Key, Consumer: c.Consumer, Kind: c.Kind, Headers: c.Headers}
}

// truncateError makes an error message storable as text: valid UTF-8, no NUL, at most maxErrorBytes.
func truncateError(s string) string {
	if len(s) > maxErrorBytes {
		s = s[:maxErrorBytes] + "…"
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}
