package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/txinbox/txinbox/outbox"
)

// A relay's claim takes every event committed before it runs, including those published while it
// waited for the claim lock (another relay's claim holding it) with its transaction already begun.
// The claim once compared run_at (the publishing transaction's start) with now(), its own
// transaction's start: an event published during the wait was left to the next claim, and under load
// every claim left behind the events of about one claim's round trip. Here the relay polls once an
// hour and does not listen, so an event the first claim leaves behind does not go during the test.
// The attempt is recorded as started at the claim statement's start, so never before the event was
// due (its publishing transaction's start).
func TestClaimTakesEventsPublishedWhileItWaitedForTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	rec := newRecorder(t, nil)
	r := e.relay(t, rec, func(c *outbox.RelayConfig) {
		c.Concurrency, c.PollInterval = 1, time.Hour
		outbox.NoListen(c)
		outbox.SetHotWindow(c, -1)
	})
	lock, err := e.Pool.Begin(ctx) // another relay's claim, holding the lock
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	if _, err := lock.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", outbox.ClaimLockKey(r)); err != nil {
		t.Fatal(err)
	}
	run(t, r)
	waitFor(t, "the relay's claim waiting for the lock", func() bool {
		return e.Count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND (classid::bigint << 32 | objid::bigint) = $1`, outbox.ClaimLockKey(r)) == 1
	})
	time.Sleep(10 * time.Millisecond) // the publishing transaction starts strictly later
	ids := e.publish(t, msg("t", "", 1))
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event taken by the claim that waited", func() bool { return len(rec.ackedIDs()) == 1 })
	if got := rec.ackedIDs(); got[0] != ids[0] {
		t.Fatalf("acknowledged %v, want %v", got, ids)
	}
	// The attempt's recorded start is the claim's, not before the event was due.
	if n := e.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE started_at < next_run_at`); n != 0 {
		t.Fatalf("%d events recorded as started before they were due", n)
	}
}
