package maintain_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// TestMaintainerVacuumsChurnedQueue shows the safety net of inbox_queue (package documentation, "Jobs"): with
// autovacuum off for the queue table (as when it is off on the server, or its workers are busy
// elsewhere), the maintainer the pool started vacuums inbox_queue once its dead rows pass the
// threshold, and the dead rows are gone.
//
// The test has a database of its own: what a vacuum can remove depends on the oldest snapshot of its
// database, and in the shared test database another test's transaction may hold one.
func TestMaintainerVacuumsChurnedQueue(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, testdb.NewInDatabase(t))
	v := churnedQueue(t, e)
	before := v.vacuums()
	const n = 600 // each message leaves two dead queue rows: the claimed one and the deleted one
	v.drain(n)
	// Once nothing churns, the next check (every 5s) vacuums whatever is left above the threshold.
	waitFor(t, "the maintainer's vacuum of the queue table, leaving at most 100 dead rows", func() bool {
		return v.vacuums() > before && v.dead() <= 100
	})
	if got := e.Count(t, `SELECT count(*) FROM {schema}.effects`); got != n {
		t.Fatalf("effects = %d, want %d", got, n)
	}
}

// TestMaintainerVacuumsAgainSoonAfterASnapshotEnds: a vacuum that leaves the dead rows because a
// snapshot holds them back is tried again within seconds, not minutes, once the snapshot ends. (The
// safety net waited 5 minutes after any vacuum that did not help, so a report query that ran for a
// few seconds at the wrong time turned the safety net off for 5 minutes while the queue bloated.)
func TestMaintainerVacuumsAgainSoonAfterASnapshotEnds(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, testdb.NewInDatabase(t)) // the snapshot holds back the horizon of its database only
	snap := testdb.HoldSnapshot(t, e.URL)
	v := churnedQueue(t, e)
	before := v.vacuums()
	v.drain(600)
	waitFor(t, "a vacuum of the queue table while the snapshot is held", func() bool { return v.vacuums() > before })
	held := v.vacuums()
	if dead := v.dead(); dead <= 100 {
		t.Fatalf("%d dead queue rows after a vacuum under a held snapshot, want more than 100", dead)
	}
	snap.End()
	waitFor(t, "another vacuum of the queue table, leaving at most 100 dead rows", func() bool {
		return v.vacuums() > held && v.dead() <= 100
	})
}

// A vacuum of the safety net that another session's VACUUM makes skip the queue table (SKIP_LOCKED)
// logs no warning; the next check, seconds later, vacuums. (When every pool ran the safety net, the
// pools of a consumer checked at the same moment, and each but one warned "is this role its owner,
// or is a long transaction open?".)
func TestMaintainerVacuumsAgainAfterAnotherSessionsVacuum(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, testdb.NewInDatabase(t))
	v := churnedQueue(t, e)
	ctx := context.Background()
	// Another session's VACUUM holds the lock VACUUM takes (SHARE UPDATE EXCLUSIVE).
	other, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }()
	if _, err := other.Exec(ctx, "LOCK TABLE "+v.queue+" IN SHARE UPDATE EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	before := v.vacuums()
	logs := &logBuffer{}
	v.logs = logs
	v.drain(600, func(c *worker.Config, m *maintain.Config) {
		// No health check: it reads the whole server's xmin horizon, and warns about any session on it
		// idle in a transaction for HorizonWarnAge. The warnings this test is about are the vacuum's.
		maintain.SetHealthCheckInterval(m, -1)
	})
	waitFor(t, "the maintainer's vacuum while the other session holds the table", func() bool {
		return len(logs.find(t, "txinbox: vacuumed the queue table")) > 0
	})
	if err := other.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a vacuum of the queue table, leaving at most 100 dead rows", func() bool {
		return v.vacuums() > before && v.dead() <= 100
	})
	for _, r := range logs.records(t) {
		if r["level"] == "WARN" {
			t.Errorf("warning logged: %v", r["msg"])
		}
	}
}

// queueChurn is a pool (and its maintainer) with a queue vacuum threshold of 100 whose queue table
// has autovacuum off.
type queueChurn struct {
	t     *testing.T
	e     *env
	queue string
	logs  *logBuffer // the Store's Logger; nil: slog.Default()
}

// churnedQueue turns autovacuum off for e's queue table.
func churnedQueue(t *testing.T, e *env) queueChurn {
	queue := pgx.Identifier{e.Schema, "inbox_queue"}.Sanitize()
	if _, err := e.Pool.Exec(context.Background(), "ALTER TABLE "+queue+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	return queueChurn{t: t, e: e, queue: queue}
}

// vacuums is the count of manual vacuums of the queue table; dead, its dead rows as the statistics
// count them.
func (v queueChurn) vacuums() int64 {
	return v.e.Count(v.t, `SELECT pg_stat_get_vacuum_count(to_regclass($1))`, v.queue)
}

func (v queueChurn) dead() int64 {
	return v.e.Count(v.t, `SELECT pg_stat_get_dead_tuples(to_regclass($1))`, v.queue)
}

// drain receives n messages and runs a pool (its maintainer's vacuum threshold 100, then mod)
// until they are completed.
func (v queueChurn) drain(n int64, mod ...func(*worker.Config, *maintain.Config)) {
	v.e.receive(v.t, keys("v", int(n))...)
	run(v.t, v.e.poolLogging(v.t, v.logs, v.e.creditHandlers(), func(c *worker.Config, m *maintain.Config) {
		maintain.SetQueueVacuumThreshold(m, 100)
		for _, f := range mod {
			f(c, m)
		}
	}))
	waitFor(v.t, "every message completed", func() bool { return v.e.completed(v.t) == n })
}
