package worker

import (
	"context"
	"time"

	"github.com/txinbox/txinbox/internal/store"
)

// Intervals of the queue vacuum safety net (Config.QueueVacuumThreshold). After a vacuum that left
// more dead rows than the threshold, the wait before the next check doubles from 2×queueVacuumEvery
// up to queueVacuumBackoff, and is back to queueVacuumEvery after a vacuum that helped.
const (
	queueVacuumEvery   = 5 * time.Second
	queueVacuumBackoff = 5 * time.Minute
)

// queueVacuum is the state of the safety nets; only the rescuer goroutine uses it.
type queueVacuum struct {
	next      time.Time // next check
	fruitless int       // vacuums in a row that left more dead rows than the threshold
	warned    bool      // vacuums that did not help were logged

	nextAnalyze      time.Time // next check of the statistics
	analyzeFruitless int       // ANALYZEs in a row that left a table stale
	analyzeWarned    bool      // ANALYZEs that did not help were logged
}

// analyzed are the tables whose statistics the safety net keeps up with their size: the queue and
// the inbox partitions (migration 00006), which the worker's statements read.
var analyzed = []string{"inbox_queue", "inbox_s0", "inbox_s1", "inbox_s2"}

// maybeAnalyze runs ANALYZE on each table of analyzed that has grown to more than four times the size
// its statistics describe (StaleTables), if its check is due. Autovacuum analyzes a table after 10%
// of it changed, but it may be off or lag, and a generic plan of the worker's statements made while a
// table was small keeps reading the whole table per message until the statistics change (every
// connection plans again after an ANALYZE: bench/RESULTS.md, "generic plans frozen"). Errors are
// logged, never returned.
func (v *queueVacuum) maybeAnalyze(ctx context.Context, p *Pool) {
	if p.cfg.QueueVacuumThreshold < 0 || time.Now().Before(v.nextAnalyze) {
		return
	}
	v.nextAnalyze = time.Now().Add(queueVacuumEvery)
	tables := make([]string, len(analyzed))
	for i, t := range analyzed {
		tables[i] = p.st.Table(t)
	}
	stale, err := store.Queries.StaleTables(ctx, p.db, tables)
	if err != nil || len(stale) == 0 {
		return
	}
	for _, table := range stale {
		// ANALYZE takes no parameters; the name is one of tables, quoted by pgx.Identifier (store.Table).
		if _, err := p.db.Exec(ctx, "ANALYZE (SKIP_LOCKED) "+table); err != nil {
			if ctx.Err() == nil {
				p.cfg.Logger.Warn("txinbox: analyze of a grown table failed; retrying later",
					"consumer", p.cfg.Consumer, "table", table, "err", err)
			}
			v.nextAnalyze = time.Now().Add(queueVacuumBackoff)
			return
		}
	}
	p.cfg.Logger.Debug("txinbox: analyzed tables that outgrew their statistics", "consumer", p.cfg.Consumer, "tables", stale)
	still, err := store.Queries.StaleTables(ctx, p.db, stale)
	if err != nil || len(still) == 0 {
		v.analyzeFruitless = 0
		return
	}
	// ANALYZE (SKIP_LOCKED) skipped a table that another session was analyzing (the other pools of
	// the consumer check at the same moment), or this role is not the owner (ANALYZE only warns).
	// The first passes by the next check; the second lasts: check less and less often, and warn only
	// when it happened twice in a row.
	v.analyzeFruitless++
	wait := Exponential{Base: 2 * queueVacuumEvery, Max: queueVacuumBackoff, Jitter: -1}.Delay(v.analyzeFruitless)
	v.nextAnalyze = time.Now().Add(wait)
	if v.analyzeFruitless >= 2 && !v.analyzeWarned {
		v.analyzeWarned = true
		p.cfg.Logger.Warn("txinbox: ANALYZE left tables' statistics stale twice in a row; is this role their owner? checking again less and less often, up to every 5m",
			"consumer", p.cfg.Consumer, "tables", still, "retry_in", wait)
	}
}

// maybe vacuums the queue table if its check is due and PostgreSQL counts more dead rows in it than
// the threshold. Errors are logged, never returned: the safety net must not stop the rescuer.
func (v *queueVacuum) maybe(ctx context.Context, p *Pool) {
	if p.cfg.QueueVacuumThreshold < 0 || time.Now().Before(v.next) {
		return
	}
	v.next = time.Now().Add(queueVacuumEvery)
	table := p.st.Table("inbox_queue")
	dead, err := store.Queries.QueueDeadRows(ctx, p.db, table)
	if err != nil || dead <= int64(p.cfg.QueueVacuumThreshold) {
		return
	}
	start := time.Now()
	// VACUUM takes no parameters; the table name is quoted by pgx.Identifier (store.Table).
	// SKIP_LOCKED: if another pool is vacuuming it right now, skip rather than wait.
	if _, err := p.db.Exec(ctx, "VACUUM (SKIP_LOCKED) "+table); err != nil {
		if ctx.Err() == nil {
			p.cfg.Logger.Warn("txinbox: vacuum of the queue table failed; retrying later",
				"consumer", p.cfg.Consumer, "table", table, "err", err)
		}
		v.next = time.Now().Add(queueVacuumBackoff)
		return
	}
	after, err := store.Queries.QueueDeadRows(ctx, p.db, table)
	p.cfg.Logger.Debug("txinbox: vacuumed the queue table", "consumer", p.cfg.Consumer, "table", table,
		"dead_before", dead, "dead_after", after, "took", time.Since(start))
	if err != nil || after <= int64(p.cfg.QueueVacuumThreshold) {
		v.fruitless = 0
		return
	}
	// Not the owner (VACUUM only warns), a snapshot older than the rows keeps them, or another session
	// was vacuuming the table (SKIP_LOCKED): don't rescan every 5s, but soon enough that a snapshot
	// held for seconds (a report, a slow transaction) does not leave the queue bloating for minutes
	// after it ends.
	v.fruitless++
	wait := Exponential{Base: 2 * queueVacuumEvery, Max: queueVacuumBackoff, Jitter: -1}.Delay(v.fruitless)
	v.next = time.Now().Add(wait)
	// Twice in a row: once is also a VACUUM that SKIP_LOCKED skipped while another session (another
	// pool of the consumer) vacuumed the table.
	if v.fruitless >= 2 && !v.warned {
		v.warned = true
		p.cfg.Logger.Warn("txinbox: vacuum left the queue table's dead rows; is this role its owner, or is a long transaction open? checking again less and less often, up to every 5m",
			"consumer", p.cfg.Consumer, "table", table, "dead_before", dead, "dead_after", after, "retry_in", wait)
	}
}
