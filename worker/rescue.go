package worker

import (
	"context"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
)

// The rescuer: one goroutine per pool that charges the batches of its consumer that never finished,
// takes their messages over in isolated groups (claim with suspects), and puts off the messages
// blocked behind their ordering key. See the package documentation, "Crash recovery".

// charge charges every batch of the consumer that never finished: its inbox_batch row is there and
// its transaction is no longer in progress (its process died, or its session was ended while
// frozen). Each is charged once (ChargeBatch), whichever pool's rescuer finds it first.
func (p *Pool) charge(ctx context.Context) error {
	db := p.eng.St.Wrap(p.store.DB)
	batches, err := schemasql.Queries.ListBatches(ctx, db, p.cfg.Consumer)
	if err != nil || len(batches) == 0 {
		return err
	}
	xids := make([]string, len(batches))
	for i, b := range batches {
		xids[i] = b.Xid
	}
	statuses, err := schemasql.Queries.XactStatuses(ctx, db, xids)
	if err != nil {
		return err
	}
	for i, b := range batches {
		if i >= len(statuses) || statuses[i] == "in progress" || p.running(b.ID) {
			continue // running, or rolled back and being settled by this pool's runner
		}
		charged, err := schemasql.Queries.ChargeBatch(ctx, db, p.cfg.Consumer, b.ID)
		if err != nil {
			return err
		}
		if len(charged) == 0 {
			continue // another rescuer charged it first
		}
		groupCrashes := 0
		for _, c := range charged {
			groupCrashes = max(groupCrashes, int(c.GroupCrashes))
		}
		p.eng.Log.Warn("txinbox: charged a batch that never finished (its worker died, hung or lost its connection); its messages run again in isolated groups",
			"consumer", p.cfg.Consumer, "messages", len(charged), "owner", b.Owner, "group_crashes", groupCrashes)
		p.event(ctx, txinbox.TraceStart{Op: txinbox.OpCharge, Consumer: p.cfg.Consumer, Owner: b.Owner})
	}
	return nil
}

// tookOver logs a group of suspects claimed to run again and tells the Store's Tracer
// (txinbox.OpTakeover).
func (p *Pool) tookOver(ctx context.Context, b *batch) {
	p.eng.Log.Warn("txinbox: taking over messages whose batch never finished",
		"consumer", p.cfg.Consumer, "messages", len(b.msgs), "alone", len(b.msgs) == 1)
	if p.tracer == nil {
		return
	}
	msgs := make([]txinbox.TraceMessage, len(b.msgs))
	for i, c := range b.msgs {
		msgs[i] = traceMessage(c)
	}
	p.event(ctx, txinbox.TraceStart{Op: txinbox.OpTakeover, Consumer: p.cfg.Consumer, Messages: msgs})
}

// event tells the Store's Tracer, if any, about an event d (its Schema filled in), ended at once.
func (p *Pool) event(ctx context.Context, d txinbox.TraceStart) {
	if p.tracer == nil {
		return
	}
	d.Schema = p.store.Schema
	p.tracer.TraceEnd(p.tracer.TraceStart(ctx, d), txinbox.TraceEnd{Op: d.Op})
}

// snoozeEvery is how often the rescuer puts off the messages blocked behind their ordering key.
const snoozeEvery = time.Second

// snoozeBlocked puts off, now and then, the ready messages blocked behind an older message of their
// ordering key (SnoozeBlocked), so that claims stop scanning them: up to ten claims' worth, one claim's
// worth per transaction. Each transaction holds the consumer's snooze lock, which a batch finishing
// messages of ordering keys waits for before it commits (within its statement timeout) and its
// ReadyNext after it (10 s at most): a short one keeps those waits short on a slow server.
func (p *Pool) snoozeBlocked(ctx context.Context) {
	if time.Since(p.snoozedAt) < snoozeEvery {
		return
	}
	p.snoozedAt = time.Now()
	for range 10 {
		var n int64
		err := p.pipelined(ctx, func(db sqlc.DBTX) []error {
			lockErr := schemasql.Queries.LockSnooze(ctx, db, p.snoozeKey)
			var err error
			n, err = schemasql.Queries.SnoozeBlocked(ctx, db, sqlc.SnoozeBlockedParams{
				Consumer: p.cfg.Consumer, SnoozeSeconds: p.snooze().Seconds(), Max: int32(p.claimMax)})
			return []error{lockErr, err}
		})
		if err != nil {
			if ctx.Err() == nil {
				p.eng.Log.Debug("txinbox: snoozing blocked messages failed", "consumer", p.cfg.Consumer, "err", err)
			}
			return
		}
		if n < int64(p.claimMax) {
			return
		}
	}
}
