// Package maintain runs the maintenance of a txinbox schema once for the whole schema, in the one
// maintainer elected among all those running: the rotation of the inbox's generations and the
// deletion of expired idempotency keys (package retention's code), the rotation of the outbox's
// generations (package outbox's retention of sent events), the vacuum and statistics safety nets of
// the tables the workers read, the health warnings (dead row versions, the xmin horizon), the fold of
// the console's roll-ups, and the deletion of the heartbeats of pools that died.
//
// Every runner (package runner, runner.Config.Maintenance) runs one Maintainer, whatever it runs
// besides, so a service made with a runner keeps its inbox and its outbox bounded with no other line;
// [New], then Start and Stop (a [txinbox.Service]), run one on its own. However many run, one leads
// at a time and the others wait to take over.
//
// # Election
//
// The leader holds a lease: a row of table inbox_leader (migration 00010) naming it (Config.Owner)
// and its term, with an end (Config.Lease, 10 s by default) on the server's clock. It renews the
// lease every third of the Lease; the others read the row every third of the Lease and take the
// lease, in a new term, once it has ended. A leader that stops (Stop) ends its lease at once; one whose
// process dies is replaced when its lease ends: within the Lease and a third. A leader that cannot
// renew stops its jobs before the lease it last renewed can end (it counts from the moment it sent
// that renewal, on its own clock), and every run of a job is claimed by a statement that checks the
// lease is still the leader's and not ended, so a leader cut off from the database, or frozen, does not
// start a job after another has taken over.
//
// Why a lease row rather than an advisory lock held by a session: a session-level lock needs a
// connection held for the leader's whole life. Through PgBouncer in transaction mode (a Store with a
// negative NotifyInterval) a session is not a client's, so such a lock would be held by whichever server
// connection ran the statement and never released, or released by another client; and a lock held
// by a host that vanished (no FIN, no RST) lasts until the server's TCP keepalive gives up, minutes to
// hours, with nothing the others can do. A lease needs no connection of its own (every statement is
// one short transaction, fine through PgBouncer), its end is known, and it is the server's clock that
// decides it. On a Citus cluster inbox_leader and inbox_maintenance are tables of the coordinator,
// which the maintainer's statements touch alone. The price: after a crash the schema has no leader for
// up to the Lease (its jobs are periodic, so nothing is lost).
//
// The maintainer runs its statements on the Store's DB, one at a time. When every connection of a
// pgxpool is held by batches for longer than four fifths of the Lease, its renewals wait with them,
// and the leadership moves to a maintainer of another process (a worker pool's pgxpool with
// Concurrency+4 connections never makes it wait).
//
// # Jobs
//
// Each job runs at most once per period: a slot of its interval counted from the Unix epoch, on the
// server's clock. Before a run, the leader claims the period in inbox_maintenance (one row per job):
// the claim succeeds only for a period later than the job's last recorded run, and only while the
// claimant holds an unexpired lease in its term, so no period of a job runs twice, even across a
// change of leader. The row also records who ran it, when it ended and its error. The jobs, their
// names and intervals:
//
//	rotate         1 min (1)       retention.Rotate: a new generation of the inbox once the current
//	                               one is Config.Generation old (default: Store.Retention)
//	expire-keys    1 min (1)       retention.DeleteExpiredKeys
//	outbox-rotate  1 min (1)       the outbox's rotation (outbox.Rotate): a new generation once the
//	                               current one is OutboxWindow old (or Generation, if set and
//	                               shorter), sent events past the OutboxWindow removed; not with a
//	                               negative OutboxWindow
//	vacuum         5 s             VACUUM of inbox_queue above 50,000 dead rows (2)
//	analyze        5 s             ANALYZE of the worker's tables that outgrew their statistics (3)
//	health         1 min           warnings: the xmin horizon (Config.HorizonWarnAge), dead row
//	                               versions (Config.DeadRowsWarnThreshold)
//	rollup         RollupInterval  inbox_rollup_batch folded into inbox_rollup (the console)
//	pools          10 min          heartbeats of pools not seen for an hour deleted
//
// (1) Or every sixth of Config.Generation if that is shorter (at least every second), so that a
// generation lasts at most a sixth longer than Generation. A rotation waits at most 2 s for the
// retired partition's lock; one that times out runs again in the next period.
//
// (2) The safety net for the inbox_queue table, whose rows churn (every message inserts, claims and
// deletes one): the leader reads how many dead row versions PostgreSQL counts in it
// (pg_stat_user_tables.n_dead_tup) and, above 50,000, runs VACUUM (SKIP_LOCKED) on that table alone.
// Autovacuum normally keeps the table small (the migration tunes it to vacuum after 1,000 dead rows),
// but it may be off, or its workers busy with large tables for minutes, and then every claim reads
// through dead rows and slows down. Vacuuming the queue takes milliseconds while its backlog is
// small. It needs the table's owner (as do the migrations); a VACUUM that leaves more dead rows than
// that (not the owner, or an old transaction holding back cleanup, or another session vacuuming it at
// that moment) makes the next check wait 10 seconds, doubling after each such vacuum up to 5 minutes
// (back to every 5 seconds after a vacuum that helped); a warning is logged once it happened twice in
// a row.
//
// (3) The statistics safety net: a table the worker's statements read (inbox_queue and the inbox
// partitions) that has grown to more than 4 times the pages its statistics counted (and by at least
// 1 MiB) is analyzed, so that plans made while it was small are made again. An ANALYZE that leaves a
// table stale (another session was analyzing it, or this role is not its owner) makes the next check
// wait 10 seconds, doubling up to 5 minutes; a warning is logged once it happened twice in a row.
//
// Config.Jobs adds more, run the same way.
//
// # Observability
//
// The maintainer logs (to the Store's Logger) at Info when it becomes the leader and when it stops leading (with its owner,
// term and the reason), at Info each rotation of the inbox's or the outbox's generations (with the
// new generation, the rows copied and the duration) and each run that deleted expired keys, at Debug
// every run of a job, and at Warn a job that failed. The Store's Tracer (txinbox.Store.Tracer) is told
// of the leadership (txinbox.OpLead, from the election to its end) and of each run of a job
// (txinbox.OpJob): package metrics makes of them the gauge txinbox_maintainer_leader{schema, owner}
// and the counter txinbox_maintenance_runs_total{schema, job, outcome}.
package maintain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txinbox/txinbox/internal/owner"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/outboxrot"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/typednil"
	"github.com/txinbox/txinbox/retention"
)

// Defaults of Config (documented on its fields) and the settings derived from it.
const (
	defaultLease                 = 10 * time.Second
	defaultHorizonWarnAge        = 5 * time.Minute
	defaultDeadRowsWarnThreshold = 1_000_000
	defaultRollupInterval        = time.Minute
	// The retention jobs' period: maxRetentionEvery, or a sixth of the Generation if that is
	// shorter (at least 1s).
	maxRetentionEvery = time.Minute
	// rotateLockTimeout bounds a rotation's wait for the retired partition's lock (the inbox's and
	// the outbox's): a rotation that times out runs again in the job's next period.
	rotateLockTimeout = 2 * time.Second
	// queueVacuumThreshold: above this many dead rows in inbox_queue, the safety net vacuums it.
	queueVacuumThreshold = 50_000
	// healthCheckEvery is the period of the health check.
	healthCheckEvery = time.Minute
)

// Config configures a Maintainer. The zero value is valid.
type Config struct {
	// Lease is how long the leader's lease lasts without a renewal: it renews it every third of it,
	// and another maintainer takes over within the Lease and a third after the leader's process died
	// (at once after a Stop). At least 1s. Default: 10s.
	Lease time.Duration
	// Owner names this maintainer in the lease (inbox_leader.owner), in inbox_maintenance and in the
	// logs; it must be unique among the maintainers of the schema. Default: hostname:pid:random (a
	// runner gives its own Owner).
	Owner string
	// Generation is the length of a generation of the inbox: the job rotate begins a new generation
	// (package retention's Rotate) once the current one is Generation old, retiring the generation
	// before last with the completed messages past their dedup window. Default: Store.Retention (at
	// least 1s), which keeps the copy of each rotation small; a shorter Generation bounds the table
	// tighter (about three generations of messages are stored) but copies more messages still in
	// their window. At least 1s. The rotation jobs (rotate, expire-keys, outbox-rotate) run every
	// minute, or every sixth of the Generation if that is shorter (at least every second), so that a
	// generation lasts at most a sixth longer than Generation. Give every maintainer of the schema the
	// same Generation: the leader's decides.
	Generation time.Duration
	// OutboxWindow is how long the outbox's sent events are kept after they were sent, for audit and
	// replay. The job outbox-rotate runs the outbox's rotation (package outbox's Rotate) in the jobs'
	// period: a new generation of the outbox once the current one is OutboxWindow old, or Generation
	// old if Generation is set and shorter (at least 1s), whose rotation removes the sent events of
	// the generation it retires that were sent more than OutboxWindow ago. (A generation as long as
	// the window keeps each rotation's copy small; a shorter one bounds the table tighter.) An event
	// sent at t is kept until at least t+OutboxWindow and removed by t+OutboxWindow+2×(the outbox's
	// generation + the jobs' period); events not sent yet and dead events are never removed. Default:
	// Store.Retention (7 days unless set). Negative: the maintainer does not rotate the outbox (call
	// outbox.Rotate yourself). Give every maintainer of the schema the same OutboxWindow: the
	// leader's decides.
	OutboxWindow time.Duration
	// HorizonWarnAge: when another session's transaction holding the oldest snapshot (the xmin
	// horizon: vacuum reclaims no row version deleted after it, in any table) has been open longer
	// than this, or a prepared transaction was prepared longer ago, the check logs a warning naming it
	// (pid, application_name, role, state, xact_start, query_start, age; gid for a prepared
	// transaction). A session whose details PostgreSQL hides from the maintainer's role (not superuser
	// nor pg_read_all_stats, another role's session) has no known age and is not warned about.
	// Checked every minute, with DeadRowsWarnThreshold, from PostgreSQL's statistics views (the
	// figures of admin.Health), for the whole schema: at most one record per condition (and table)
	// per check. Default: 5m. Negative: never warn about the horizon.
	HorizonWarnAge time.Duration
	// DeadRowsWarnThreshold: when a txinbox table of the schema counts more dead row versions than
	// this (pg_stat_all_tables.n_dead_tup, an estimate), the check logs a warning naming the table,
	// its dead and live rows, its last vacuums and the session holding the horizon if any. Default:
	// 1,000,000. Negative: never warn about dead rows.
	DeadRowsWarnThreshold int
	// RollupInterval is how often the finished attempts counted by the batches (inbox_rollup_batch)
	// are folded into inbox_rollup, which the console reads: its counts lag by up to this much, and
	// are exact once folded. Rows of inbox_rollup older than two days are deleted by the fold. Default:
	// 1m.
	RollupInterval time.Duration
	// Jobs are more jobs for the leader to run, each at most once per period of its Interval, after
	// the built-in ones (see the package documentation). Their names must differ from the built-in
	// ones and from each other.
	Jobs []Job

	tune tuning // fixed settings; tests change them (export_test.go)
}

// tuning holds the maintainer's settings that are fixed or derived (package documentation, "Jobs"),
// which tests may set (export_test.go); a zero field takes the fixed or derived value.
type tuning struct {
	// retentionEvery is the period of the jobs rotate, expire-keys and outbox-rotate; negative: none
	// of them runs.
	retentionEvery time.Duration
	// queueVacuumThreshold: the vacuum safety net's threshold; negative: no vacuum nor statistics
	// safety net.
	queueVacuumThreshold int
	// healthCheckEvery is the period of the health check; negative: no check.
	healthCheckEvery time.Duration
}

// Job is a maintenance job of the schema, run by the leader only, at most once per period of its
// Interval across all maintainers.
type Job struct {
	// Name identifies the job in inbox_maintenance, the logs and the metrics: 1 to 128 letters,
	// digits or _.:/- ([txinbox.ValidateName]).
	Name string
	// Interval is the job's period: it runs once in each slot of Interval counted from the Unix
	// epoch (server clock), soon after the slot begins, and never twice in a slot. At least 1ms.
	Interval time.Duration
	// Run does the job's work. Its ctx ends when the maintainer stops leading; an error is logged at
	// Warn, recorded in inbox_maintenance.error and told to the Store's Tracer (txinbox.OpJob); the
	// job runs again in its next period either way.
	Run func(ctx context.Context) error
}

// statements returns the statement rewriter of schema.
func statements(schema string) *schemasql.Schema { return schemasql.New(schema) }

// leaderName is the row of inbox_leader the maintainers contend for.
const leaderName = "maintainer"

var _ txinbox.Service = (*Maintainer)(nil)

// Maintainer is a candidate for the maintenance of one schema: while it leads, it runs the jobs.
// Create it with New, then Start and Stop it.
type Maintainer struct {
	store  txinbox.Store
	st     *schemasql.Schema
	cfg    Config
	log    *slog.Logger
	inbox  *retention.RotateOptions // the inbox's rotation; nil when the retention jobs are off (tests)
	outbox *outboxrot.Options       // the outbox's rotation; nil when the maintainer does not rotate the outbox
	jobs   []*job
	nets   safetyNets // the safety nets' back-off (vacuum.go)

	leading atomic.Bool
	term    atomic.Int64

	life sync.Mutex // guards stop and done
	stop context.CancelFunc
	done chan struct{}
}

// New returns a Maintainer of store's schema. It checks store and cfg (a *[txinbox.ConfigError] says
// which field is wrong) and does not touch the database; Start does.
func New(store txinbox.Store, cfg Config) (*Maintainer, error) {
	store, err := store.Resolve()
	if err != nil {
		return nil, err
	}
	bad := func(field, reason string) (*Maintainer, error) {
		return nil, &txinbox.ConfigError{Field: field, Reason: reason}
	}
	if name, reason := typednil.Field(cfg); name != "" {
		return bad(name, reason)
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	outboxGen := cfg.Generation // the outbox's bound, if set (Config.OutboxWindow)
	defd(&cfg.Lease, defaultLease)
	defd(&cfg.HorizonWarnAge, defaultHorizonWarnAge)
	defd(&cfg.RollupInterval, defaultRollupInterval)
	defd(&cfg.Generation, max(store.Retention, time.Second))
	defd(&cfg.tune.retentionEvery, min(maxRetentionEvery, max(cfg.Generation/6, time.Second)))
	defd(&cfg.tune.healthCheckEvery, healthCheckEvery)
	if cfg.tune.queueVacuumThreshold == 0 {
		cfg.tune.queueVacuumThreshold = queueVacuumThreshold
	}
	if cfg.DeadRowsWarnThreshold == 0 {
		cfg.DeadRowsWarnThreshold = defaultDeadRowsWarnThreshold
	}
	if cfg.Owner == "" {
		cfg.Owner = owner.New()
	}
	switch {
	case cfg.Lease < time.Second:
		return bad("Lease", "must be at least 1s")
	case cfg.RollupInterval < time.Millisecond:
		return bad("RollupInterval", "must be at least 1ms")
	case cfg.Generation < time.Second:
		return bad("Generation", "must be at least 1s")
	}
	m := &Maintainer{store: store, st: statements(store.Schema), cfg: cfg, log: store.Logger.With("schema", store.Schema)}
	if cfg.tune.retentionEvery > 0 {
		m.inbox = &retention.RotateOptions{Generation: cfg.Generation, LockTimeout: rotateLockTimeout}
		if cfg.OutboxWindow >= 0 {
			o := outboxrot.Options{Window: cfg.OutboxWindow, LockTimeout: rotateLockTimeout}.WithDefaults(store.Retention)
			if outboxGen > 0 {
				o.Generation = max(min(o.Window, outboxGen), time.Second)
			}
			m.outbox = &o
		}
	}
	m.jobs = m.builtins()
	for _, j := range cfg.Jobs {
		switch {
		case txinbox.ValidateName(j.Name) != nil:
			return bad("Jobs", fmt.Sprintf("name %q: %v", j.Name, txinbox.ValidateName(j.Name)))
		case j.Interval < time.Millisecond:
			return bad("Jobs", fmt.Sprintf("job %q: Interval must be at least 1ms", j.Name))
		case j.Run == nil:
			return bad("Jobs", fmt.Sprintf("job %q: Run is nil", j.Name))
		}
		m.jobs = append(m.jobs, &job{name: j.Name, interval: j.Interval, run: j.Run})
	}
	seen := map[string]bool{}
	for _, j := range m.jobs {
		if seen[j.name] {
			return bad("Jobs", fmt.Sprintf("two jobs are named %q", j.name))
		}
		seen[j.name] = true
	}
	return m, nil
}

// Owner returns the name of this maintainer in the lease (Config.Owner after defaults).
func (m *Maintainer) Owner() string { return m.cfg.Owner }

// Leading reports whether this maintainer leads the schema's maintenance now, and in which term.
func (m *Maintainer) Leading() (leading bool, term int64) {
	return m.leading.Load(), m.term.Load()
}

// Start checks that the schema has the maintainer's tables (an error matching txinbox.ErrNotMigrated
// if not; if the database cannot be asked, it logs a warning and starts anyway), then runs the
// maintainer in a goroutine of its own until Stop or until ctx ends: it contends for the lease, and
// runs the jobs while it leads. A Maintainer starts once: a second Start returns an error.
func (m *Maintainer) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.life.Lock()
	defer m.life.Unlock()
	if m.done != nil {
		return errors.New("txinbox: the maintainer was already started")
	}
	row, err := schemasql.Queries.MaintainerTables(ctx, m.store.DB, m.st.Table("inbox_leader"), m.st.Table("inbox_maintenance"))
	switch {
	case err != nil:
		m.log.Warn("txinbox: could not check the maintainer's tables; starting anyway", "err", err)
	case !row.Leader || !row.Runs:
		return fmt.Errorf("%w: schema %q: no table inbox_leader or inbox_maintenance (migration 00010), or this role may not write them",
			txinbox.ErrNotMigrated, m.store.Schema)
	}
	runCtx, stop := context.WithCancel(ctx)
	m.stop, m.done = stop, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		m.run(runCtx)
	}(m.done)
	return nil
}

// Stop ends the maintainer: a leader stops its jobs (a running statement is cancelled) and ends its
// lease, so that another maintainer takes over at its next look. It waits until the maintainer has
// ended or ctx ends; then it returns an error wrapping ctx's. Stopping a Maintainer never started, or
// already stopped, returns nil.
func (m *Maintainer) Stop(ctx context.Context) error {
	m.life.Lock()
	stop, done := m.stop, m.done
	m.life.Unlock()
	if done == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("txinbox: maintainer still running: %w", ctx.Err())
	}
}

// look is how often a maintainer that does not lead reads the lease, and how often the leader renews it.
func (m *Maintainer) look() time.Duration { return m.cfg.Lease / 3 }

// run contends for the lease until ctx ends, leading whenever it holds it.
func (m *Maintainer) run(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		wait, err := m.campaign(ctx)
		if err != nil && ctx.Err() == nil {
			failures++
			if failures == 3 {
				m.log.Warn("txinbox: the maintainer cannot read or take the lease; retrying", "owner", m.cfg.Owner, "err", err)
			} else {
				m.log.Debug("txinbox: the maintainer could not read or take the lease; retrying", "owner", m.cfg.Owner, "err", err)
			}
		} else if err == nil {
			failures = 0
		}
		sleep(ctx, wait)
	}
}

// campaign reads the lease and takes it if nobody holds it; then it leads until it loses the lease or
// ctx ends. It returns how long to wait before the next look.
func (m *Maintainer) campaign(ctx context.Context) (time.Duration, error) {
	db := m.st.Wrap(m.store.DB)
	cur, err := schemasql.Queries.LeaderRead(ctx, db, leaderName)
	if err != nil {
		return m.look(), schemasql.Err(err)
	}
	if cur.Owner != "" && cur.SecondsLeft > 0 {
		// Held: look again when it ends, or a third of the Lease from now if sooner (a leader that
		// stops ends its lease early).
		return min(m.look(), time.Duration(cur.SecondsLeft*float64(time.Second))+leaseSlack), nil
	}
	sent := time.Now()
	terms, err := schemasql.Queries.LeaderElect(ctx, db, sqlcElect(m.cfg.Owner, m.cfg.Lease))
	if err != nil {
		return m.look(), schemasql.Err(err)
	}
	if len(terms) == 0 {
		return m.look(), nil // another candidate took it first
	}
	m.lead(ctx, terms[0], sent, cur.Owner)
	return 0, nil
}

// leaseSlack is how long after a lease's end a candidate looks at it: the server's clock decides.
const leaseSlack = 10 * time.Millisecond

// lead runs the jobs and renews the lease of term, taken by a statement sent at sent, until the lease
// is lost or ctx ends (then it ends the lease).
func (m *Maintainer) lead(ctx context.Context, term int64, sent time.Time, previous string) {
	lease := m.cfg.Lease
	valid := sent.Add(lease) // the lease ends no sooner than this, on this clock
	m.term.Store(term)
	m.leading.Store(true)
	m.log.Info("txinbox: this maintainer now leads the schema's maintenance", "owner", m.cfg.Owner, "term", term,
		"previous_owner", previous, "lease", lease)
	if t := m.store.Tracer; t != nil {
		ctx = t.TraceStart(ctx, txinbox.TraceStart{Op: txinbox.OpLead, Schema: m.store.Schema, Owner: m.cfg.Owner})
	}

	jctx, stopJobs := context.WithCancel(ctx)
	jobsDone := make(chan struct{})
	go func() {
		defer close(jobsDone)
		m.runJobs(jctx, term)
	}()

	// A leader that cannot renew stops its jobs margin before its lease can end.
	margin := lease / 5
	db := m.st.Wrap(m.store.DB)
	t := time.NewTimer(m.look())
	defer t.Stop()
	reason := ""
	for reason == "" {
		select {
		case <-ctx.Done():
			reason = "stopped"
			continue
		case <-t.C:
		}
		at := time.Now()
		rctx, cancel := context.WithDeadline(ctx, valid.Add(-margin))
		n, err := schemasql.Queries.LeaderRenew(rctx, db, sqlcRenew(m.cfg.Owner, term, lease))
		cancel()
		switch {
		case ctx.Err() != nil:
			reason = "stopped"
		case err == nil && n == 1:
			valid = at.Add(lease)
			t.Reset(m.look())
		case err == nil:
			reason = "the lease was lost (it ended before its renewal, and another maintainer may hold it)"
		case time.Until(valid) <= margin:
			reason = "the lease could not be renewed before its end: " + err.Error()
		default:
			m.log.Debug("txinbox: renewing the maintainer's lease failed; retrying", "owner", m.cfg.Owner, "term", term, "err", err)
			t.Reset(min(m.look(), lease/10))
		}
	}
	stopJobs()
	<-jobsDone
	if reason == "stopped" {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if _, err := schemasql.Queries.LeaderResign(rctx, db, sqlcResign(m.cfg.Owner, term)); err != nil {
			m.log.Debug("txinbox: ending the maintainer's lease failed; another maintainer takes over when it ends", "owner", m.cfg.Owner, "err", err)
		}
		cancel()
	}
	m.leading.Store(false)
	m.log.Info("txinbox: this maintainer stopped leading the schema's maintenance", "owner", m.cfg.Owner, "term", term, "reason", reason)
	if t := m.store.Tracer; t != nil {
		t.TraceEnd(ctx, txinbox.TraceEnd{Op: txinbox.OpLead, Reason: reason})
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func sqlcElect(owner string, lease time.Duration) sqlc.LeaderElectParams {
	return sqlc.LeaderElectParams{Name: leaderName, Owner: owner, LeaseSeconds: lease.Seconds()}
}

func sqlcRenew(owner string, term int64, lease time.Duration) sqlc.LeaderRenewParams {
	return sqlc.LeaderRenewParams{Name: leaderName, Owner: owner, Term: term, LeaseSeconds: lease.Seconds()}
}

func sqlcResign(owner string, term int64) sqlc.LeaderResignParams {
	return sqlc.LeaderResignParams{Name: leaderName, Owner: owner, Term: term}
}
