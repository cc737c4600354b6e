package maintain_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

const (
	horizonWarning  = "txinbox: an old transaction holds back vacuum: no dead row version of any table is reclaimed until it ends (pg_terminate_backend(pid) ends it)"
	deadRowsWarning = "txinbox: a txinbox table has many dead row versions: autovacuum is behind, or an old transaction holds them (see horizon_*)"
)

// TestHealthWarnings holds a snapshot open in another session (BEGIN ISOLATION LEVEL REPEATABLE READ;
// SELECT 1), as a forgotten psql session would, and runs a pool whose maintainer has tiny thresholds:
// it logs at Warn
// the session holding back the horizon, by pid, application name, state and transaction start, and
// the queue table whose dead rows the snapshot keeps.
func TestHealthWarnings(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, testdb.NewInDatabase(t)) // the snapshot holds back the horizon of its database only
	snap := testdb.HoldSnapshot(t, e.URL)
	const n = 20
	e.receive(t, keys("h", n)...)
	logs := &logBuffer{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.poolLogging(t, logs, hs, func(c *worker.Config, m *maintain.Config) {
		maintain.SetHealthCheckInterval(m, 10*time.Millisecond)
		m.HorizonWarnAge = time.Nanosecond
		m.DeadRowsWarnThreshold = n - 1 // every message leaves one dead queue row (deleted by its finish)
		maintain.SetQueueVacuumThreshold(m, -1)
	}))
	waitFor(t, "every message completed", func() bool { return e.completed(t) == n })

	// The test's own connections may hold a snapshot for a moment: wait until a warning names the
	// held one.
	pid := fmt.Sprint(snap.PID)
	var warned map[string]any
	waitFor(t, "a warning naming the held snapshot", func() bool {
		for _, r := range logs.find(t, horizonWarning) {
			if fmt.Sprint(r["pid"]) == pid {
				warned = r
				return true
			}
		}
		return false
	})
	if warned["level"] != "WARN" || warned["schema"] != e.Schema || warned["application_name"] != snap.ApplicationName ||
		warned["state"] != "idle in transaction" || warned["xact_start"] == nil || warned["age"] == nil || warned["threshold"] == nil {
		t.Fatalf("horizon warning %v", warned)
	}
	waitFor(t, "a warning about the queue table's dead rows", func() bool {
		for _, r := range logs.find(t, deadRowsWarning) {
			if r["table"] == "inbox_queue" {
				warned = r
				return true
			}
		}
		return false
	})
	if warned["level"] != "WARN" || warned["schema"] != e.Schema || warned["dead_rows"].(float64) < n || warned["horizon_pid"] == nil {
		t.Fatalf("dead rows warning %v", warned)
	}
}

// TestHorizonWarningOff: a negative HorizonWarnAge turns the horizon's warning off, while the dead
// rows' warning, logged by the same checks, shows that they ran with a snapshot held.
func TestHorizonWarningOff(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, testdb.NewInDatabase(t))
	testdb.HoldSnapshot(t, e.URL)
	const n = 10
	e.receive(t, keys("o", n)...)
	logs := &logBuffer{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	run(t, e.poolLogging(t, logs, hs, func(c *worker.Config, m *maintain.Config) {
		maintain.SetHealthCheckInterval(m, 10*time.Millisecond)
		m.HorizonWarnAge = -1
		m.DeadRowsWarnThreshold = n - 1 // every message leaves one dead queue row (deleted by its finish)
		maintain.SetQueueVacuumThreshold(m, -1)
	}))
	waitFor(t, "a warning about the queue table's dead rows", func() bool {
		for _, r := range logs.find(t, deadRowsWarning) {
			if r["table"] == "inbox_queue" && r["horizon_pid"] != nil {
				return true
			}
		}
		return false
	})
	if r := logs.find(t, horizonWarning); len(r) > 0 {
		t.Fatalf("warned about the horizon with HorizonWarnAge -1: %v", r)
	}
}
