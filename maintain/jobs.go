package maintain

import (
	"context"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/outboxrot"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/retention"
)

// job is a job as the leader runs it.
type job struct {
	name     string
	interval time.Duration
	// gate, if set, returns the earliest time the job may run (a safety net that backs off): until
	// then its periods are not claimed.
	gate func() time.Time
	run  func(ctx context.Context) error
}

// Intervals of the built-in jobs that have no setting.
const (
	poolsEvery = 10 * time.Minute // the deletion of dead pools' heartbeats
	poolsGone  = time.Hour        // a heartbeat this old is a pool that died
)

// builtins returns the built-in jobs that cfg turns on (package documentation, "Jobs").
func (m *Maintainer) builtins() []*job {
	var jobs []*job
	if m.inbox != nil {
		every := m.cfg.tune.retentionEvery
		jobs = append(jobs,
			&job{name: "rotate", interval: every, run: m.rotate},
			&job{name: "expire-keys", interval: every, run: m.expireKeys})
		if m.outbox != nil {
			jobs = append(jobs, &job{name: "outbox-rotate", interval: every, run: m.rotateOutbox})
		}
	}
	if m.cfg.tune.queueVacuumThreshold >= 0 {
		jobs = append(jobs,
			&job{name: "vacuum", interval: queueVacuumEvery, gate: m.nets.vacuum.at, run: logged(m.vacuum)},
			&job{name: "analyze", interval: queueVacuumEvery, gate: m.nets.analyze.at, run: logged(m.analyze)})
	}
	if m.cfg.tune.healthCheckEvery > 0 && (m.cfg.HorizonWarnAge >= 0 || m.cfg.DeadRowsWarnThreshold >= 0) {
		jobs = append(jobs, &job{name: "health", interval: m.cfg.tune.healthCheckEvery, run: logged(m.checkHealth)})
	}
	return append(jobs,
		&job{name: "rollup", interval: m.cfg.RollupInterval, run: m.foldRollup},
		&job{name: "pools", interval: poolsEvery, run: m.deleteGonePools})
}

// logged adapts a job that logs its own failures (the safety nets, the health check: a failed read is
// a check skipped) to a job's Run.
func logged(run func(context.Context)) func(context.Context) error {
	return func(ctx context.Context) error {
		run(ctx)
		return nil
	}
}

// rotate begins a new generation of the inbox if the current one is Config.Generation old.
func (m *Maintainer) rotate(ctx context.Context) error {
	r, err := retention.Rotate(ctx, m.store, *m.inbox)
	if r.Rotated {
		m.log.Info("txinbox: rotated generations", "generation", r.Generation, "copied", r.Copied, "duration", r.Duration)
	}
	return err
}

// rotateOutbox begins a new generation of the outbox if the current one is m.outbox.Generation old,
// removing the sent events past m.outbox.Window with the generation it retires.
func (m *Maintainer) rotateOutbox(ctx context.Context) error {
	r, err := outboxrot.Rotate(ctx, m.store.DB, m.store.Schema, *m.outbox)
	if r.Rotated {
		m.log.Info("txinbox: rotated the outbox's generations", "generation", r.Generation, "copied", r.Copied, "duration", r.Duration)
	}
	return err
}

// expireKeys deletes the expired idempotency keys.
func (m *Maintainer) expireKeys(ctx context.Context) error {
	start := time.Now()
	n, err := retention.DeleteExpiredKeys(ctx, m.store)
	if n > 0 {
		m.log.Info("txinbox: deleted expired idempotency keys", "keys_deleted", n, "duration", time.Since(start))
	}
	return err
}

// deleteGonePools deletes the heartbeats of pools that died without stopping.
func (m *Maintainer) deleteGonePools(ctx context.Context) error {
	_, err := schemasql.Queries.DeleteGonePools(ctx, m.st.Wrap(m.store.DB), poolsGone.Seconds())
	return err
}

// runJobs runs the jobs, each when its next period begins, one at a time, until ctx ends (the
// maintainer stops leading). Every job is due at once: a job whose current period another leader ran
// waits for its next one.
func (m *Maintainer) runJobs(ctx context.Context, term int64) {
	next := make([]time.Time, len(m.jobs))
	for ctx.Err() == nil {
		i := 0
		for k := range next {
			if next[k].Before(next[i]) {
				i = k
			}
		}
		sleep(ctx, time.Until(next[i]))
		if ctx.Err() != nil {
			return
		}
		next[i] = m.runJob(ctx, term, m.jobs[i])
	}
}

// periodSlack is how long after the local estimate of its next period's start a job claims it: the
// server's clock decides, and a claim a little early only costs another claim.
const periodSlack = 5 * time.Millisecond

// runJob claims the current period of j for term and, if claimed, runs j and records its end. It
// returns when j is due next.
func (m *Maintainer) runJob(ctx context.Context, term int64, j *job) time.Time {
	now := time.Now()
	if j.gate != nil {
		if at := j.gate(); now.Before(at) {
			return at
		}
	}
	db := m.st.Wrap(m.store.DB)
	c, err := schemasql.Queries.ClaimRun(ctx, db, sqlc.ClaimRunParams{
		IntervalMs: j.interval.Milliseconds(), Owner: m.cfg.Owner, Term: term, Job: j.name,
	})
	if err != nil {
		if ctx.Err() == nil {
			m.log.Debug("txinbox: claiming a maintenance job's period failed; retrying", "job", j.name, "err", err)
		}
		return now.Add(min(j.interval, m.look()))
	}
	next := now.Add(time.Duration(c.NextSeconds*float64(time.Second)) + periodSlack)
	if !c.Claimed {
		// Run already for this period, or this maintainer no longer holds the lease (its renewal
		// finds out and stops the jobs).
		return next
	}
	t := m.store.Tracer
	jctx := ctx
	if t != nil {
		jctx = t.TraceStart(ctx, txinbox.TraceStart{Op: txinbox.OpJob, Schema: m.store.Schema, Owner: m.cfg.Owner, Job: j.name})
	}
	start := time.Now()
	err = j.run(jctx)
	took := time.Since(start)
	m.log.Debug("txinbox: maintenance job ran", "job", j.name, "period", c.Period.Time, "owner", m.cfg.Owner,
		"term", term, "took", took, "err", err)
	if err != nil && ctx.Err() == nil {
		m.log.Warn("txinbox: maintenance job failed; it runs again in its next period", "job", j.name, "err", err)
	}
	errText := ""
	if err != nil {
		errText = truncate(err.Error())
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	if ferr := schemasql.Queries.FinishRun(fctx, db, sqlc.FinishRunParams{Error: errText, Job: j.name, Period: c.Period, Owner: m.cfg.Owner}); ferr != nil {
		m.log.Debug("txinbox: recording the end of a maintenance job's run failed", "job", j.name, "err", ferr)
	}
	cancel()
	if t != nil {
		t.TraceEnd(jctx, txinbox.TraceEnd{Op: txinbox.OpJob, Err: err})
	}
	return next
}

// truncate makes an error's text storable: at most 8 KiB of valid UTF-8 without NUL.
func truncate(s string) string {
	const maxBytes = 8 << 10
	if len(s) > maxBytes {
		s = s[:maxBytes]
	}
	out := make([]rune, 0, len(s))
	for _, r := range s {
		if r != 0 {
			out = append(out, r)
		}
	}
	return string(out)
}
