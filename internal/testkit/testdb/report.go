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
// they wait for and who holds them, the schema's queue by claim and owner, and the stacks of this
// process's goroutines. It only logs: a stall seen once in CI can then be read from its log.
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
	section("queue of this schema (claimed, owner, rows, lease left)", `
		SELECT format('%s %s %s %s..%s', claimed, coalesce(owner, '-'), count(*), min(run_at - now()), max(run_at - now()))
		FROM {schema}.inbox_queue GROUP BY claimed, owner ORDER BY claimed, owner`)
	var g bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&g, 1)
	fmt.Fprintf(&b, "--- goroutines\n%s", g.String())
	t.Log("testdb: report\n" + b.String())
}
