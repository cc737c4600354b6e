package maintain_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/maintain"
)

// cutDB is a Store.DB through which a test cuts a maintainer's renewals of its lease (they fail, as
// they would for a leader cut off from the database or frozen) and watches its claims of job periods.
type cutDB struct {
	txinbox.DB
	renewCut atomic.Bool // every LeaderRenew fails
	gone     atomic.Bool // the lease ended under the leader, which has not been elected since

	mu        sync.Mutex
	claimed   int      // claims that claimed a period
	goneSent  int      // claims sent while gone (and answered)
	goneTaken []string // claims sent while gone that claimed a period: the bug
}

func (d *cutDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if strings.HasPrefix(sql, "-- name: LeaderRenew ") && d.renewCut.Load() {
		return pgconn.CommandTag{}, errors.New("the test cut this renewal off")
	}
	return d.DB.Exec(ctx, sql, args...)
}

func (d *cutDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !strings.HasPrefix(sql, "-- name: ClaimRun ") {
		return d.DB.QueryRow(ctx, sql, args...)
	}
	gone := d.gone.Load() // before the claim is sent: QueryRow may run it before it returns
	return claimRow{Row: d.DB.QueryRow(ctx, sql, args...), d: d, gone: gone, args: args}
}

// claimRow is the answer to a ClaimRun, whose first column says whether the period was claimed.
type claimRow struct {
	pgx.Row
	d    *cutDB
	gone bool // sent while the lease was gone
	args []any
}

func (r claimRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if err != nil {
		return err
	}
	claimed, ok := dest[0].(*bool)
	if !ok {
		return fmt.Errorf("ClaimRun's first column is not claimed (bool) but %T", dest[0])
	}
	r.d.mu.Lock()
	defer r.d.mu.Unlock()
	if *claimed {
		r.d.claimed++
	}
	if r.gone {
		r.d.goneSent++
		if *claimed {
			r.d.goneTaken = append(r.d.goneTaken, fmt.Sprintf("%v", r.args))
		}
	}
	return nil
}

func (d *cutDB) counts() (claimed, goneSent int, goneTaken []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.claimed, d.goneSent, append([]string(nil), d.goneTaken...)
}

// A leader whose lease ended under it while it goes on running (its renewals fail, so it has not
// found out: a leader cut off from the database, or frozen) claims no period of any job until it is
// elected again, whether its lease row merely ended or another candidate took it; once it leads again,
// its jobs run again. The maintainer's only frequent job is "tick" (every 10ms), so that it sends
// claims all the time.
func TestLeaderWhoseLeaseEndedClaimsNoPeriodUntilItLeadsAgain(t *testing.T) {
	t.Parallel()
	for _, how := range []struct {
		name string
		// end ends the lease of owner in term (the statement's text may use {schema}).
		end string
		// other: the lease went to another candidate, whose lease the test ends once the
		// maintainer found it lost.
		other bool
	}{
		{name: "ended", end: `UPDATE {schema}.inbox_leader SET expires_at = now() - interval '1 second' WHERE owner = $1 AND term = $2`},
		{name: "taken", end: `UPDATE {schema}.inbox_leader SET owner = 'another', term = term + 1, elected_at = now(), renewed_at = now(),
			expires_at = now() + interval '1 hour' WHERE owner = $1 AND term = $2`, other: true},
	} {
		t.Run(how.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			db := &cutDB{DB: e.Pool}
			db.renewCut.Store(true) // from the start: the leader believes in its first lease until 4/5 of it
			store := e.Store()
			store.DB = db
			// The lease is back once the maintainer is elected (it tells its Tracer before its jobs
			// start, and after the jobs of its last term ended).
			log := &leaderLog{elected: func() { db.gone.Store(false) }}
			store.Tracer = log
			var ticks atomic.Int64
			// Lease 20s: with its renewals cut, the leader runs its jobs for 16s after its election
			// (time for many claims), and it tries to renew 6.7s after it.
			cfg := maintain.Config{Lease: 20 * time.Second, Owner: "m",
				Jobs: []maintain.Job{{Name: "tick", Interval: 10 * time.Millisecond, Run: func(context.Context) error {
					ticks.Add(1)
					return nil
				}}}}
			maintain.SetRetentionEvery(&cfg, -1)
			maintain.SetQueueVacuumThreshold(&cfg, -1)
			maintain.SetHealthCheckInterval(&cfg, -1)
			m := maintainerOf(t, store, cfg)
			waitFor(t, "the maintainer leading and running tick", func() bool {
				lead, _ := m.Leading()
				return lead && ticks.Load() > 0
			})
			_, term := m.Leading()
			if claimed, _, _ := db.counts(); claimed == 0 {
				t.Fatal("tick ran, but no claim was seen claiming a period: the watch of the claims is broken")
			}

			if n := e.Count(t, `WITH u AS (`+how.end+` RETURNING 1) SELECT count(*) FROM u`, m.Owner(), term); n != 1 {
				t.Fatalf("ending the lease of %s in term %d changed %d rows, want 1", m.Owner(), term, n)
			}
			db.gone.Store(true)
			const claims = 5
			waitFor(t, fmt.Sprintf("%d claims sent after the lease ended", claims), func() bool {
				_, sent, taken := db.counts()
				return sent >= claims || len(taken) > 0 || !db.gone.Load()
			})
			_, sent, taken := db.counts()
			if len(taken) > 0 {
				t.Fatalf("after its lease ended, the maintainer claimed periods (ClaimRun arguments interval_ms, owner, term, job): %v", taken)
			}
			if lead, now := m.Leading(); sent < claims || !lead || now != term {
				t.Fatalf("the maintainer stopped leading (leading %v, term %d) after %d claims: it must go on believing in its lease (term %d) for this test", lead, now, sent, term)
			}

			// Its renewals go through again: it finds the lease lost, and is elected again once the
			// lease is free.
			db.renewCut.Store(false)
			if how.other {
				waitFor(t, "the maintainer finding its lease lost", func() bool { lead, _ := m.Leading(); return !lead })
				if n := e.Count(t, `WITH u AS (UPDATE {schema}.inbox_leader SET expires_at = now() WHERE owner = 'another' RETURNING 1) SELECT count(*) FROM u`); n != 1 {
					t.Fatalf("ending the other candidate's lease changed %d rows, want 1", n)
				}
			}
			waitFor(t, "the maintainer leading again", func() bool { lead, now := m.Leading(); return lead && now > term })
			before := ticks.Load()
			waitFor(t, "tick running again", func() bool { return ticks.Load() > before })
			if _, _, taken := db.counts(); len(taken) > 0 {
				t.Fatalf("after its lease ended and before it led again, the maintainer claimed periods (ClaimRun arguments interval_ms, owner, term, job): %v", taken)
			}
		})
	}
}
