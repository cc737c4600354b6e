package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/store"
)

// The rollup: a pool counts its finished attempts per minute in memory and adds them to the
// inbox_rollup table (migration 00003) every rollupInterval and when it stops, outside any handler's
// transaction. The operator console draws its throughput chart from it. Counts not yet added when a
// process crashes are lost (the chart is a little low for that minute); a failed add is retried with
// the next one, in memory, up to rollupMaxMinutes minutes of counts.
const (
	rollupInterval    = 5 * time.Second
	rollupKeepMinutes = 2 * 24 * 60 // rows older than two days are deleted by every add
	rollupMaxMinutes  = 60          // minutes of counts kept in memory while adds fail
)

type rollupKey struct {
	consumer string
	minute   int64 // unix seconds of the minute's start
}

type rollupCounts struct{ completed, failed, dead int64 }

// rollup accumulates a pool's finished attempts per consumer and minute.
type rollup struct {
	mu     sync.Mutex
	counts map[rollupKey]*rollupCounts
	off    bool // the table is missing (schema older than version 3): counting stopped

	stop chan struct{}
	done chan struct{}
}

// rollupObserver passes every event to the rollup, then to the pool's Observer, if any.
type rollupObserver struct {
	r    *rollup
	next Observer
}

func (o rollupObserver) Handled(e HandleEvent) {
	o.r.add(e.Consumer, e.Outcome, time.Now())
	if o.next != nil {
		o.next.Handled(e)
	}
}

// Charged passes the event on to the pool's Observer if it is a TakeoverObserver.
func (o rollupObserver) Charged(e ChargeEvent) {
	if t, ok := o.next.(TakeoverObserver); ok {
		t.Charged(e)
	}
}

// TakenOver passes the event on to the pool's Observer if it is a TakeoverObserver.
func (o rollupObserver) TakenOver(e TakeoverEvent) {
	if t, ok := o.next.(TakeoverObserver); ok {
		t.TakenOver(e)
	}
}

func (r *rollup) add(consumer string, outcome Outcome, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.off {
		return
	}
	if r.counts == nil {
		r.counts = map[rollupKey]*rollupCounts{}
	}
	k := rollupKey{consumer: consumer, minute: at.Unix() - at.Unix()%60}
	c := r.counts[k]
	if c == nil {
		c = &rollupCounts{}
		r.counts[k] = c
	}
	switch outcome {
	case OutcomeCompleted:
		c.completed++
	case OutcomeRetry:
		c.failed++
	case OutcomeDead:
		c.failed++
		c.dead++
	}
}

// take removes and returns the counts accumulated so far.
func (r *rollup) take() map[rollupKey]*rollupCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.counts
	r.counts = nil
	return out
}

// putBack returns counts whose add failed, dropping minutes older than rollupMaxMinutes.
func (r *rollup) putBack(counts map[rollupKey]*rollupCounts, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[rollupKey]*rollupCounts{}
	}
	oldest := now.Unix() - rollupMaxMinutes*60
	for k, c := range counts {
		if k.minute < oldest {
			continue
		}
		if have := r.counts[k]; have != nil {
			have.completed += c.completed
			have.failed += c.failed
			have.dead += c.dead
		} else {
			r.counts[k] = c
		}
	}
}

// flush adds the accumulated counts to the table in one statement.
func (p *Pool) flushRollup(ctx context.Context) {
	r := &p.roll
	counts := r.take()
	if len(counts) == 0 {
		return
	}
	// One statement per consumer (a pool counts its own), named in it: see RollupAdd.
	byConsumer := map[string]*sqlc.RollupAddParams{}
	for k, c := range counts {
		a := byConsumer[k.consumer]
		if a == nil {
			a = &sqlc.RollupAddParams{Consumer: k.consumer, KeepMinutes: rollupKeepMinutes}
			byConsumer[k.consumer] = a
		}
		a.Minutes = append(a.Minutes, pgtype.Timestamptz{Time: time.Unix(k.minute, 0), Valid: true})
		a.Completed = append(a.Completed, c.completed)
		a.Failed = append(a.Failed, c.failed)
		a.Dead = append(a.Dead, c.dead)
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var err error
	for _, a := range byConsumer {
		if err = store.Queries.RollupAdd(fctx, p.st.Wrap(p.db), *a); err != nil {
			break
		}
	}
	if err == nil {
		return
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: not migrated to version 3
		r.mu.Lock()
		r.off, r.counts = true, nil
		r.mu.Unlock()
		p.cfg.Logger.Warn("txinbox: no inbox_rollup table (schema older than version 3): throughput is not recorded for the console; run the migrations",
			"consumer", p.cfg.Consumer, "schema", p.store.Schema)
		return
	}
	p.cfg.Logger.Debug("txinbox: adding to the rollup failed; retried with the next add",
		"consumer", p.cfg.Consumer, "err", err)
	r.putBack(counts, time.Now())
}

// runRollup adds the counts every rollupInterval until stopRollup.
func (p *Pool) runRollup(ctx context.Context) {
	r := &p.roll
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.done)
		t := time.NewTicker(rollupInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.flushRollup(ctx)
			case <-r.stop:
				p.flushRollup(ctx) // the last counts, once the runners are done
				return
			}
		}
	}()
}

// stopRollup makes the final add and waits for it.
func (p *Pool) stopRollup() {
	r := &p.roll
	if r.stop == nil {
		return
	}
	close(r.stop)
	<-r.done
}
