package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/txinbox/txinbox/inbox"
)

// SustainInterval is one reporting interval of a sustained drain.
type SustainInterval struct {
	End         time.Duration // since the start
	Handled     int64         // handler calls in the interval
	Received    int64         // messages received in the interval
	Rate        float64       // handled per second
	Backlog     int64         // messages received and not yet handled at the end
	QueueDead   int64         // n_dead_tup of inbox_queue at the end
	QueueMB     float64       // inbox_queue size with indexes at the end
	InboxMB     float64       // inbox size with indexes at the end
	InboxDead   int64         // n_dead_tup of inbox at the end
	Autovacuums int64         // autovacuum runs of inbox_queue so far
}

// SustainResult is a sustained drain.
type SustainResult struct {
	Duration  time.Duration
	Interval  time.Duration
	Intervals []SustainInterval
	Decay     float64 // 1 - rate(last interval) / rate(first interval)
	FP        Footprint
}

// Sustain keeps receiving (ReceiveMany, 1,000 a call, whenever fewer than 20,000 messages wait) and
// draining for d, and reports the drain rate per interval (a minute, or d/10 if d is shorter than
// ten minutes).
func (e *Env) Sustain(ctx context.Context, d time.Duration, cfg InboxConfig) (SustainResult, error) {
	res := SustainResult{Duration: d, Interval: time.Minute}
	if d < 10*time.Minute {
		res.Interval = d / 10
	}
	s, err := e.newInboxSchema(ctx, "sustain", int32(cfg.Concurrency+3))
	if err != nil {
		return res, err
	}
	defer s.Drop(ctx)
	var handled, received atomic.Int64
	mon := e.StartMonitor(ctx, s.App)
	p, err := s.startPool(ctx, cfg, func(int) { handled.Add(1) })
	if err != nil {
		return res, err
	}
	// Stopped after the measurement: a Stop error changes no result.
	defer func() { _ = stopPool(ctx, p) }()
	pctx, stopProducer := context.WithCancel(ctx)
	defer stopProducer()
	perr := make(chan error, 1)
	go func() {
		defer close(perr)
		const batch, backlog = 1000, 20_000
		next := 1
		msgs := make([]inbox.Message, batch)
		for pctx.Err() == nil {
			if received.Load()-handled.Load() >= backlog {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			for i := range msgs {
				msgs[i] = inbox.Message{Consumer: benchConsumer, Key: eventKey(next), Kind: benchKind, Payload: payload(next, int64(next%100+1))}
				next++
			}
			if _, err := s.client.ReceiveMany(pctx, msgs); err != nil {
				if pctx.Err() == nil {
					perr <- err
				}
				return
			}
			received.Add(batch)
		}
	}()
	start := time.Now()
	var lastH, lastR int64
	for i := 1; time.Duration(i)*res.Interval <= d; i++ {
		select {
		case <-time.After(time.Until(start.Add(time.Duration(i) * res.Interval))):
		case err := <-perr:
			return res, fmt.Errorf("sustain: receive: %w", err)
		case <-ctx.Done():
			return res, ctx.Err()
		}
		h, r := handled.Load(), received.Load()
		iv := SustainInterval{End: time.Since(start), Handled: h - lastH, Received: r - lastR, Backlog: r - h}
		iv.Rate = float64(iv.Handled) / res.Interval.Seconds()
		lastH, lastR = h, r
		var qb, mb int64
		// inbox is partitioned (migration 00006): its figures are the sums over its partitions.
		_ = e.Admin.QueryRow(ctx, `SELECT q.n_dead_tup, q.autovacuum_count,
				(SELECT coalesce(sum(m.n_dead_tup), 0) FROM pg_stat_user_tables m
				 WHERE m.relid IN (SELECT relid FROM pg_partition_tree($2::regclass)))::bigint,
				pg_total_relation_size(q.relid),
				(SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree($2::regclass))::bigint
			FROM pg_stat_user_tables q
			WHERE q.schemaname = $1 AND q.relname = 'inbox_queue'`, s.Name, s.T("inbox")).
			Scan(&iv.QueueDead, &iv.Autovacuums, &iv.InboxDead, &qb, &mb)
		iv.QueueMB, iv.InboxMB = float64(qb)/(1<<20), float64(mb)/(1<<20)
		e.Log.Info("sustain", "t", iv.End.Round(time.Second), "rate", int(iv.Rate), "backlog", iv.Backlog,
			"queue_dead", iv.QueueDead, "queue_mb", fmt.Sprintf("%.1f", iv.QueueMB))
		res.Intervals = append(res.Intervals, iv)
	}
	stopProducer()
	res.FP = mon.Stop()
	if n := len(res.Intervals); n > 1 && res.Intervals[0].Rate > 0 {
		res.Decay = 1 - res.Intervals[n-1].Rate/res.Intervals[0].Rate
	}
	return res, nil
}
