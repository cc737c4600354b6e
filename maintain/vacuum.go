package maintain

import (
	"context"
	"time"

	"github.com/txinbox/txinbox/internal/schemasql"
)

// Intervals of the safety nets (package documentation, "Jobs"): the period of their jobs. After a run
// that did not help (a vacuum that left more dead rows than the threshold, an ANALYZE that left a
// table stale), the wait before the next check doubles from 2×queueVacuumEvery up to
// queueVacuumBackoff, and is back to queueVacuumEvery after a run that helped (netSchedule).
const (
	queueVacuumEvery   = 5 * time.Second
	queueVacuumBackoff = 5 * time.Minute
)

// safetyNets is the state of the safety nets; only the leader's job goroutine uses it.
type safetyNets struct {
	vacuum, analyze netSchedule
}

// netSchedule is when a safety net may check next (its job's gate), and how it backs off after runs
// that did not help.
type netSchedule struct {
	next      time.Time // earliest next check
	fruitless int       // runs in a row that did not help
	warned    bool      // runs that did not help were logged
}

// at returns the earliest time of the next check.
func (s *netSchedule) at() time.Time { return s.next }

// failed puts the next check queueVacuumBackoff away (the run failed with an error).
func (s *netSchedule) failed() { s.next = time.Now().Add(queueVacuumBackoff) }

// helped brings the checks back to every queueVacuumEvery.
func (s *netSchedule) helped() { s.fruitless = 0 }

// didNotHelp puts the next check 2×queueVacuumEvery away, doubling with each such run in a row up to
// queueVacuumBackoff, and reports whether to warn now: once, at the second such run in a row (a
// single one is also a run that SKIP_LOCKED skipped while another session ran it).
func (s *netSchedule) didNotHelp() (wait time.Duration, warn bool) {
	s.fruitless++
	wait = min(2*queueVacuumEvery<<min(s.fruitless-1, 10), queueVacuumBackoff)
	s.next = time.Now().Add(wait)
	warn = s.fruitless >= 2 && !s.warned
	s.warned = s.warned || warn
	return wait, warn
}

// analyzed are the tables whose statistics the safety net keeps up with their size: the queue and
// the inbox partitions (migration 00006), which the worker's statements read.
var analyzed = []string{"inbox_queue", "inbox_s0", "inbox_s1", "inbox_s2"}

// analyze runs ANALYZE on each table of analyzed that has grown to more than four times the size its
// statistics describe (StaleTables). Autovacuum analyzes a table after 10% of it changed, but it may
// be off or lag, and a generic plan of the worker's statements made while a table was small keeps
// reading the whole table per message until the statistics change (every connection plans again
// after an ANALYZE: docs/design/generic-plans.md, "Generic plans frozen while the tables were
// small"). Errors are logged, never returned.
func (m *Maintainer) analyze(ctx context.Context) {
	v := &m.nets.analyze
	db := m.store.DB
	tables := make([]string, len(analyzed))
	for i, t := range analyzed {
		tables[i] = m.st.Table(t)
	}
	stale, err := schemasql.Queries.StaleTables(ctx, db, tables)
	if err != nil || len(stale) == 0 {
		return
	}
	for _, table := range stale {
		// ANALYZE takes no parameters; the name is one of tables, quoted by pgx.Identifier (schemasql.Schema.Table).
		if _, err := db.Exec(ctx, "ANALYZE (SKIP_LOCKED) "+table); err != nil {
			if ctx.Err() == nil {
				m.log.Warn("txinbox: analyze of a grown table failed; retrying later", "table", table, "err", err)
			}
			v.failed()
			return
		}
	}
	m.log.Debug("txinbox: analyzed tables that outgrew their statistics", "tables", stale)
	still, err := schemasql.Queries.StaleTables(ctx, db, stale)
	if err != nil || len(still) == 0 {
		v.helped()
		return
	}
	// ANALYZE (SKIP_LOCKED) skipped a table that another session was analyzing, or this role is not
	// the owner (ANALYZE only warns). The first passes by the next check; the second lasts: check less
	// and less often.
	if wait, warn := v.didNotHelp(); warn {
		m.log.Warn("txinbox: ANALYZE left tables' statistics stale twice in a row; is this role their owner? checking again less and less often, up to every 5m",
			"tables", still, "retry_in", wait)
	}
}

// vacuum vacuums the queue table if PostgreSQL counts more dead rows in it than the threshold.
// Errors are logged, never returned.
func (m *Maintainer) vacuum(ctx context.Context) {
	v := &m.nets.vacuum
	db := m.store.DB
	threshold := int64(m.cfg.tune.queueVacuumThreshold)
	table := m.st.Table("inbox_queue")
	dead, err := schemasql.Queries.QueueDeadRows(ctx, db, table)
	if err != nil || dead <= threshold {
		return
	}
	start := time.Now()
	// VACUUM takes no parameters; the table name is quoted by pgx.Identifier (schemasql.Schema.Table).
	// SKIP_LOCKED: if another session is vacuuming it right now, skip rather than wait.
	if _, err := db.Exec(ctx, "VACUUM (SKIP_LOCKED) "+table); err != nil {
		if ctx.Err() == nil {
			m.log.Warn("txinbox: vacuum of the queue table failed; retrying later", "table", table, "err", err)
		}
		v.failed()
		return
	}
	after, err := schemasql.Queries.QueueDeadRows(ctx, db, table)
	m.log.Debug("txinbox: vacuumed the queue table", "table", table, "dead_before", dead, "dead_after", after,
		"took", time.Since(start))
	if err != nil || after <= threshold {
		v.helped()
		return
	}
	// Not the owner (VACUUM only warns), a snapshot older than the rows keeps them, or another session
	// was vacuuming the table (SKIP_LOCKED): don't rescan every 5s, but soon enough that a snapshot
	// held for seconds (a report, a slow transaction) does not leave the queue bloating for minutes
	// after it ends.
	if wait, warn := v.didNotHelp(); warn {
		m.log.Warn("txinbox: vacuum left the queue table's dead rows; is this role its owner, or is a long transaction open? checking again less and less often, up to every 5m",
			"table", table, "dead_before", dead, "dead_after", after, "retry_in", wait)
	}
}
