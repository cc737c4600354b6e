package worker

import (
	"context"
	"time"

	"github.com/txinbox/txinbox/internal/store"
)

// Intervals of the queue vacuum safety net (Config.QueueVacuumThreshold).
const (
	queueVacuumEvery   = 5 * time.Second
	queueVacuumBackoff = 5 * time.Minute
)

// queueVacuum is the state of the safety net; only the rescuer goroutine uses it.
type queueVacuum struct {
	next   time.Time // next check
	warned bool      // a vacuum that did not help was logged
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
	if err == nil && after > int64(p.cfg.QueueVacuumThreshold) {
		// Not the owner (VACUUM only warns), or an old snapshot keeps the rows: don't rescan often.
		v.next = time.Now().Add(queueVacuumBackoff)
		if !v.warned {
			v.warned = true
			p.cfg.Logger.Warn("txinbox: vacuum left the queue table's dead rows; is this role its owner, or is a long transaction open? checking every 5m",
				"consumer", p.cfg.Consumer, "table", table, "dead_before", dead, "dead_after", after)
		}
	}
}
