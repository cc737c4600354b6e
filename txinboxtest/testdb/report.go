package testdb

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Report logs what a test that gave up waiting needs to say why: the server's sessions that are not
// idle (what they run, what they wait for, how old their transaction and snapshot are), the locks
// they wait for and who holds them, the schema's queue rows (by isolation, mark and whether due), its
// batches in flight or left behind (inbox_batch, whose messages are claimed), and the stacks of this
// process's goroutines; on a Citus coordinator also the sessions of the workers and the distributed
// lock waits. It only logs: a stall seen once in CI can then be read from its log.
func (d *DB) Report(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	section := func(title, query string, args ...any) {
		fmt.Fprintf(&b, "--- %s\n", title)
		rows, err := d.Pool.Query(ctx, d.SQL(query), args...)
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
			return
		}
		vals, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			fmt.Fprintf(&b, "(%v)\n", err)
		}
		for _, v := range vals {
			b.WriteString(v + "\n")
		}
	}
	section("sessions not idle (pid, state, wait, xact age, state age, xmin age, query)", `
		SELECT format('%s %s %s:%s xact=%s state=%s xmin=%s %s', pid, state, wait_event_type, wait_event,
			now() - xact_start, now() - state_change, age(backend_xmin), left(regexp_replace(query, '\s+', ' ', 'g'), 300))
		FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND state IS DISTINCT FROM 'idle' AND backend_type = 'client backend'
		ORDER BY xact_start NULLS LAST`)
	section("locks waited for (waiter, lock, blockers)", `
		SELECT format('%s waits for %s %s on %s (page %s tuple %s xid %s) blocked by %s', l.pid, l.locktype, l.mode,
			coalesce(l.relation::regclass::text, '-'), l.page, l.tuple, l.transactionid, pg_blocking_pids(l.pid))
		FROM pg_locks l WHERE NOT l.granted`)
	var citus bool
	if err := d.Pool.QueryRow(ctx, `SELECT to_regclass('pg_catalog.citus_lock_waits') IS NOT NULL`).Scan(&citus); err == nil && citus {
		// On a Citus coordinator the statements of distributed tables run, and wait, on the workers,
		// which the sections above do not show.
		section("Citus worker sessions not idle (node, global pid, state, wait, state age, query)", `
			SELECT format('node=%s gpid=%s %s %s:%s state=%s %s', nodeid, global_pid, state, wait_event_type, wait_event,
				now() - state_change, left(regexp_replace(query, '\s+', ' ', 'g'), 300))
			FROM citus_stat_activity
			WHERE is_worker_query AND state IS DISTINCT FROM 'idle' AND backend_type = 'client backend'
			ORDER BY nodeid, global_pid`)
		section("Citus lock waits (waiter, blocker, their statements)", `
			SELECT format('gpid %s on node %s waits for gpid %s on node %s: %s / blocker: %s', waiting_gpid, waiting_nodeid,
				blocking_gpid, blocking_nodeid, left(regexp_replace(blocked_statement, '\s+', ' ', 'g'), 200),
				left(regexp_replace(current_statement_in_blocking_process, '\s+', ' ', 'g'), 200))
			FROM citus_lock_waits`)
	}
	section("queue of this schema (consumer, isolate, alone, due, rows, run_at from now)", `
		SELECT format('%s isolate=%s alone=%s due=%s rows=%s run_at %s..%s', consumer, isolate, alone, run_at <= now(),
			count(*), min(run_at - now()), max(run_at - now()))
		FROM {schema}.inbox_queue GROUP BY consumer, isolate, alone, run_at <= now() ORDER BY 1`)
	section("batches of this schema in flight or left behind (consumer, id, owner, xid, messages, age)", `
		SELECT format('%s batch=%s owner=%s xid=%s messages=%s age=%s', consumer, id, owner, xid, cardinality(ids),
			now() - started_at)
		FROM {schema}.inbox_batch ORDER BY consumer, id`)
	var g bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&g, 1)
	fmt.Fprintf(&b, "--- goroutines\n%s", g.String())
	t.Log("testdb: report\n" + b.String())
}
