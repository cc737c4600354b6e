package worker_test

import (
	"context"
	"hash/fnv"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/worker"
)

// A snooze whose snapshot still shows a key's message k/0 (its batch in flight) puts off the key's
// next message k/1. If k/0's batch could commit while that snooze is still open, a claim taking its
// snapshot then would see k/1 due at the head of its key; reaching k/1 once the snooze has committed,
// it locks the row, finds it snoozed on the recheck and does not return it, but keeps the lock until
// its own batch ends. The finishing worker's ReadyNext, run after its commit, skips a locked row (it
// takes it for a claimed one): k/1 would stay snoozed (an hour here) although nothing holds it back.
// The finishing batch must not commit while such a snooze is open.
//
// The test plays the snooze (LockSnooze, SnoozeBlocked) and the claim (ClaimBatch) itself, against a
// pool of one worker whose rescuer does not snooze. The claim is held between its snapshot and its
// first row by a function statement_timestamp() in the test's schema that its session's search_path
// puts ahead of pg_catalog's; a session queued for the snooze lock keeps ReadyNext back until the
// claim has locked what it locks.
func TestSnoozeOpenAcrossAFinishCannotStrandTheKeysNextMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if e.distributed(t) {
		t.Skip("the test's claim is held by a function of the session's search_path, which Citus does not run on the shards")
	}
	e.handledLog(t)
	ctx := context.Background()
	q := schemasql.New(e.Schema)

	e.receiveSteps(t, []step{{"k", 0}}, nil)
	running, release := make(chan struct{}), make(chan struct{})
	var runningOnce, releaseOnce sync.Once
	releaseHandler := func() { releaseOnce.Do(func() { close(release) }) }
	hs := worker.NewHandlers()
	worker.Handle(hs, "step", func(ctx context.Context, tx pgx.Tx, m *worker.Message[step]) error {
		if m.Payload.Seq == 0 {
			runningOnce.Do(func() { close(running) })
			<-release
		}
		return logHandled(ctx, tx, e.Schema, m.Payload)
	})
	p := e.pool(t, hs, func(c *worker.Config) { c.Concurrency = 1 })
	snoozeKey := worker.SnoozeLockKey(p)
	worker.NoSnoozing(p)
	run(t, p)
	t.Cleanup(releaseHandler) // before the pool stops (cleanups run last first)
	await(t, "k/0 handled", running)

	waiting := func(key int64) int64 {
		return e.Count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND ((classid::bigint << 32) | objid::bigint) = $1`, key)
	}
	begin := func() pgx.Tx {
		tx, err := e.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		return tx
	}
	lockIn := func(tx pgx.Tx, key int64) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key)
			done <- err
		}()
		return done
	}

	// The snooze: its lock, then k/1 received, then its snapshot, which shows k/0 queued.
	snooze := begin()
	if err := schemasql.Queries.LockSnooze(ctx, q.Wrap(snooze), snoozeKey); err != nil {
		t.Fatal(err)
	}
	e.receiveSteps(t, []step{{"k", 1}}, func(m *inbox.Message) {
		m.NotBefore = time.Now().Add(-time.Hour) // due for the snooze, whose now() is its transaction's start
	})
	n, err := schemasql.Queries.SnoozeBlocked(ctx, q.Wrap(snooze), sqlc.SnoozeBlockedParams{
		Consumer: "ledger", SnoozeSeconds: 3600, Max: 10})
	if err != nil || n != 1 {
		t.Fatalf("the test's snooze put off %d messages (%v), want k/1", n, err)
	}
	// A session queued for the snooze lock ahead of the finishing worker.
	gate := begin()
	gated := lockIn(gate, snoozeKey)
	waitFor(t, "the gate queued for the snooze lock", func() bool { return waiting(snoozeKey) == 1 })
	releaseHandler()
	waitFor(t, "the finishing worker queued for the snooze lock", func() bool { return waiting(snoozeKey) == 2 })

	// The claim: its snapshot now, held before its first row.
	h := fnv.New64a()
	h.Write([]byte("hold_claim\x00" + e.Schema))
	holdKey := int64(h.Sum64() >> 1)
	holder := begin()
	if err := <-lockIn(holder, holdKey); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pool.Exec(ctx, e.SQL(`CREATE FUNCTION {schema}.statement_timestamp() RETURNS timestamptz VOLATILE LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_catalog.pg_advisory_xact_lock_shared(current_setting('txinbox_test.hold_claim')::bigint);
			RETURN pg_catalog.statement_timestamp();
		END $$`)); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, e.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	if _, err := conn.Exec(ctx, `SELECT set_config('txinbox_test.hold_claim', $1, false), set_config('search_path', $2, false)`,
		strconv.FormatInt(holdKey, 10), pgx.Identifier{e.Schema}.Sanitize()+", pg_catalog"); err != nil {
		t.Fatal(err)
	}
	claim, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type claimResult struct {
		rows []sqlc.ClaimBatchRow
		err  error
	}
	claimed := make(chan claimResult, 1)
	go func() {
		rows, err := schemasql.Queries.ClaimBatch(ctx, q.Wrap(claim), sqlc.ClaimBatchParams{Consumer: "ledger", Max: 10})
		claimed <- claimResult{rows, err}
	}()
	waitFor(t, "the test's claim held after its snapshot", func() bool { return waiting(holdKey) == 1 })

	// The snooze commits; the gate takes the lock (the finishing worker still waits); the claim goes on.
	if err := snooze.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-gated; err != nil {
		t.Fatal(err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-claimed
	if res.err != nil || len(res.rows) != 0 {
		t.Fatalf("the test's claim returned %d rows (%v), want none", len(res.rows), res.err)
	}
	// The finishing worker goes on; once it has let the lock go, the test's claim ends.
	if err := gate.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after := begin()
	if err := <-lockIn(after, snoozeKey); err != nil {
		t.Fatal(err)
	}
	if err := after.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := claim.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(30 * time.Second) // the snooze is an hour
	for e.count(t, "completed") != 2 {
		if time.Now().After(deadline) {
			e.Report(t)
			t.Fatal("k/1 stayed snoozed after k/0 completed: its key's next message was not made ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
