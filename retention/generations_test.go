package retention_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/retention"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// now are the options of a rotation now, whatever the current generation's age.
var now = retention.RotateOptions{Force: true}

// rotate begins a new generation of store's inbox now, failing t on an error.
func rotate(t *testing.T, store txinbox.Store) retention.Rotation {
	t.Helper()
	r, err := retention.Rotate(context.Background(), store, now)
	if err != nil || !r.Rotated {
		t.Fatalf("rotate: %+v %v", r, err)
	}
	return r
}

// receiveOne receives key for consumer ledger with payload and returns its receipt.
func receiveOne(t *testing.T, c *inbox.Client, key, payload string) inbox.Receipt {
	t.Helper()
	r, err := c.Receive(context.Background(), ledgertest.Message(key, payload))
	var conflict *inbox.KeyConflictError
	if err != nil && !errors.As(err, &conflict) {
		t.Fatalf("receive %s: %v", key, err)
	}
	return r
}

// Keys received just before and just after rotations are duplicates in every later generation: the
// receive looks at the other slots, and the rotation copies unfinished messages forward.
func TestDedupAcrossRotations(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	store := db.Store()
	var keys []string
	for gen := range 5 {
		before, after := fmt.Sprintf("before-%d", gen), fmt.Sprintf("after-%d", gen)
		if r := receiveOne(t, c, before, `{"amount":1}`); r.Outcome != inbox.Inserted {
			t.Fatalf("%s: %+v", before, r)
		}
		rotate(t, store)
		if r := receiveOne(t, c, after, `{"amount":1}`); r.Outcome != inbox.Inserted {
			t.Fatalf("%s: %+v", after, r)
		}
		keys = append(keys, before, after)
		for _, k := range keys {
			if r := receiveOne(t, c, k, `{"amount":1}`); r.Outcome != inbox.Duplicate {
				t.Fatalf("generation %d: %s again: %+v, want a Duplicate", gen+1, k, r)
			}
			if r := receiveOne(t, c, k, `{"amount":2}`); r.Outcome != inbox.Conflict {
				t.Fatalf("generation %d: %s with another payload: %+v, want a Conflict", gen+1, k, r)
			}
		}
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); got != int64(len(keys)) {
		t.Fatalf("%d rows stored, want %d", got, len(keys))
	}
}

// Eight goroutines receive one key at once while a rotation runs, for many keys; at READ COMMITTED
// (Receive) and in REPEATABLE READ transactions (ReceiveTx) whose snapshots may predate the rotation
// (retried on serialization failures, as the caller must): exactly one Inserted per key, the others
// Duplicate or Conflict (by payload), and one row per key.
func TestOneKeyEightReceiversAcrossARotation(t *testing.T) {
	t.Parallel()
	for _, level := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
		t.Run(string(level), func(t *testing.T) {
			t.Parallel()
			c, db := newClient(t)
			store := db.Store()
			ctx := context.Background()
			var serialization atomic.Int64
			receive := func(m inbox.Message, start <-chan struct{}) (inbox.Receipt, error) {
				if level == pgx.ReadCommitted {
					<-start
					r, err := c.Receive(ctx, m)
					if errors.Is(err, inbox.ErrKeyConflict) { // a Conflict is a receipt
						err = nil
					}
					return r, err
				}
				for {
					tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
					if err != nil {
						return inbox.Receipt{}, err
					}
					if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // the snapshot, before the start
						_ = tx.Rollback(ctx)
						return inbox.Receipt{}, err
					}
					if start != nil {
						<-start
						start = nil
					}
					r, err := c.ReceiveTx(ctx, tx, m)
					if err == nil || errors.Is(err, inbox.ErrKeyConflict) { // a Conflict is a receipt: commit
						err = tx.Commit(ctx)
					}
					_ = tx.Rollback(ctx)
					var pgErr *pgconn.PgError
					if errors.As(err, &pgErr) && pgErr.Code == "40001" {
						serialization.Add(1)
						continue
					}
					return r, err
				}
			}
			const trials = 15
			for trial := range trials {
				key := fmt.Sprintf("race-%d", trial)
				start := make(chan struct{})
				var wg sync.WaitGroup
				rs := make([]inbox.Receipt, 8)
				errs := make([]error, 8)
				for i := range 8 {
					payload := `{"amount":1}`
					if i%2 == 1 {
						payload = `{"amount":2}`
					}
					wg.Go(func() { rs[i], errs[i] = receive(ledgertest.Message(key, payload), start) })
				}
				var rotErr error
				wg.Go(func() {
					<-start
					_, rotErr = retention.Rotate(ctx, store, now)
				})
				close(start)
				wg.Wait()
				if rotErr != nil {
					t.Fatalf("trial %d: rotate: %v", trial, rotErr)
				}
				inserted := -1
				for i, r := range rs {
					if errs[i] != nil {
						t.Fatalf("trial %d: receiver %d: %v", trial, i, errs[i])
					}
					if r.Outcome == inbox.Inserted {
						if inserted >= 0 {
							t.Fatalf("trial %d: receivers %d and %d both inserted %s", trial, inserted, i, key)
						}
						inserted = i
					}
				}
				if inserted < 0 {
					t.Fatalf("trial %d: nobody inserted %s: %+v", trial, key, rs)
				}
				for i, r := range rs {
					want := inbox.Duplicate
					if i%2 != inserted%2 {
						want = inbox.Conflict
					}
					if i != inserted && (r.Outcome != want || r.ID != rs[inserted].ID) {
						t.Fatalf("trial %d: receiver %d: %+v, want %v of %d", trial, i, r, want, rs[inserted].ID)
					}
				}
				if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = $1`, key); n != 1 {
					t.Fatalf("trial %d: %d rows of %s", trial, n, key)
				}
			}
			t.Logf("%d trials, %d serialization failures retried", trials, serialization.Load())
		})
	}
}

// A completed key is a Duplicate until its window ends, however many rotations copy it forward, and
// is accepted again only after it: renewed in place when its row is in the current slot, stored anew
// when it is in an older one (which leaves with its slot).
func TestKeyAcceptedAgainOnlyAfterItsWindow(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	store := db.Store()
	ids := ledgertest.Receive(t, c, "here", "older")
	ledgertest.Complete(t, db, time.Hour, ids...)
	for i := range 4 { // generations 1 to 4: copied forward at the 2nd and the 4th
		r := rotate(t, store)
		for _, k := range []string{"here", "older"} {
			if rc := receiveOne(t, c, k, `{"amount":1}`); rc.Outcome != inbox.Duplicate || rc.State != inbox.StateCompleted {
				t.Fatalf("rotation %d (copied %d): %s: %+v, want a Duplicate of the completed message", i+1, r.Copied, k, rc)
			}
		}
	}
	// Both rows were copied into the current slot by the last rotation. Their window ends; the next
	// rotation leaves them in their slot, the previous one now.
	mustExec(t, db, `UPDATE {schema}.inbox SET expires_at = now() - interval '1 second'`)
	rotate(t, store)
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox m JOIN {schema}.inbox_gen g USING (consumer) WHERE m.slot <> g.gen % 3`); got != 2 {
		t.Fatalf("%d expired rows in an older slot, want 2", got)
	}
	for _, k := range []string{"here", "older"} {
		rc := receiveOne(t, c, k, `{"amount":3}`)
		if rc.Outcome != inbox.Inserted {
			t.Fatalf("%s after its window: %+v, want Inserted", k, rc)
		}
		if again := receiveOne(t, c, k, `{"amount":3}`); again.Outcome != inbox.Duplicate || again.ID != rc.ID {
			t.Fatalf("%s received again in its new window: %+v, want a Duplicate of %d", k, again, rc.ID)
		}
	}
	// Renewed in place: a key whose expired row is in the current slot keeps its id.
	id := ledgertest.Receive(t, c, "renewed")[0]
	ledgertest.Complete(t, db, -time.Second, id)
	if rc := receiveOne(t, c, "renewed", `{"amount":1}`); rc.Outcome != inbox.Inserted || rc.ID != id {
		t.Fatalf("renewed: %+v, want Inserted with id %d", rc, id)
	}
	// The retired expired rows are gone after two more rotations; the live ones stay.
	rotate(t, store)
	rotate(t, store)
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); got != 3 {
		t.Fatalf("%d rows, want the 3 live ones", got)
	}
}

// Pending messages and dead letters survive every rotation: the pending ones are processed once
// afterwards, the dead letters keep their seq and can be replayed (once) or discarded, and Clean and
// DiscardOlder still delete what they should.
func TestPendingAndDeadSurviveRotations(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	store := db.Store()
	ctx := context.Background()
	var failing atomic.Bool
	failing.Store(true)
	ledgertest.StartWorker(t, db, &failing)
	dead := ledgertest.Receive(t, c, ledgertest.Keys("dead", 5)...)
	ledgertest.WaitFor(t, "5 dead letters", func() bool { return db.Count(t, `SELECT count(*) FROM {schema}.inbox_dead`) == 5 })
	failing.Store(false)
	var pending []inbox.Message
	for _, k := range ledgertest.Keys("later", 10) {
		m := ledgertest.Message(k, `{"amount":1}`)
		m.NotBefore = time.Now().Add(time.Hour)
		pending = append(pending, m)
	}
	if _, err := c.ReceiveMany(ctx, pending); err != nil {
		t.Fatal(err)
	}
	seqs := func() string {
		var s string
		if err := db.Pool.QueryRow(ctx, db.SQL(`SELECT string_agg(row(seq, id)::text, ',' ORDER BY seq) FROM {schema}.inbox_dead`)).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	deadBefore := seqs()
	for i := range 5 {
		r := rotate(t, store)
		// A message is copied forward every other rotation: it stays in its slot while that is the
		// current and then the previous generation's.
		if want := int64(15 * ((i + 1) % 2)); r.Copied != 15-want {
			t.Fatalf("rotation %d copied %d, want %d", i+1, r.Copied, 15-want)
		}
		if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox m JOIN {schema}.inbox_queue q USING (id, consumer) WHERE m.state = 'pending'`); got != 10 {
			t.Fatalf("rotation %d: %d pending messages with their queue rows, want 10", i+1, got)
		}
		if got := seqs(); got != deadBefore {
			t.Fatalf("rotation %d: dead letters %s, want %s", i+1, got, deadBefore)
		}
	}
	ops, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ops.ReplayDead(ctx, admin.Inbox, dead[0]); err != nil || len(got) != 1 {
		t.Fatalf("replay: %v %v", got, err)
	}
	if got, err := ops.DiscardDead(ctx, admin.Inbox, dead[1]); err != nil || len(got) != 1 {
		t.Fatalf("discard: %v %v", got, err)
	}
	mustExec(t, db, `UPDATE {schema}.inbox_queue SET run_at = now()`)
	ledgertest.WaitFor(t, "the pending and replayed messages to complete", func() bool {
		return db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'completed'`) == 11
	})
	if got := db.Count(t, `SELECT count(*) FROM {schema}.counts WHERE runs <> 1`); got != 0 {
		t.Fatalf("%d messages ran more than once", got)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.counts`); got != 11 {
		t.Fatalf("%d messages ran, want 11", got)
	}
	// Clean deletes expired rows in every slot; DiscardOlder the old dead letters.
	mustExec(t, db, `UPDATE {schema}.inbox SET expires_at = now() - interval '1 second' WHERE state = 'completed'`)
	if r, err := retention.Clean(ctx, store, retention.CleanOptions{}); err != nil || r.Deleted != 11 {
		t.Fatalf("clean: %+v %v", r, err)
	}
	mustExec(t, db, `UPDATE {schema}.inbox SET completed_at = now() - interval '2 days' WHERE state = 'dead'`)
	if d, err := ops.DiscardOlder(ctx, admin.OlderFilter{OlderThan: 24 * time.Hour, States: []inbox.State{inbox.StateDead}}); err != nil || d.Discarded != 3 {
		t.Fatalf("discard older: %d %v", d.Discarded, err)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`) + db.Count(t, `SELECT count(*) FROM {schema}.inbox_dead`); got != 0 {
		t.Fatalf("%d rows left", got)
	}
}

// A consumer's first receive registers it at the current generation, also when rotations ran
// before it existed.
func TestNewConsumerAfterRotations(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	store := db.Store()
	for range 4 {
		rotate(t, store)
	}
	ledgertest.Receive(t, c, "first")
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox_gen g JOIN {schema}.inbox_ring r USING (gen) WHERE g.consumer = 'ledger'`); got != 1 {
		t.Fatal("the new consumer is not at the ring's generation")
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox m WHERE m.slot = 4 % 3`); got != 1 {
		t.Fatal("the message is not in generation 4's slot")
	}
}

// A REPEATABLE READ transaction whose snapshot predates a rotation cannot receive afterwards: its
// snapshot shows the old generation, in which another receiver's key of the new generation is
// invisible, so the receive fails with a serialization error (40001) and stores nothing, instead of
// storing a second message. Retried, it is a Duplicate. (The interleaving of the design study's
// rrdemo, case b.)
func TestRepeatableReadSnapshotOlderThanARotation(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	store := db.Store()
	ledgertest.Receive(t, c, "warm-up") // the consumer is registered
	receiveInOlderSnapshot(t, c, db, "x", func() inbox.Receipt {
		rotate(t, store)
		first := receiveOne(t, c, "x", `{"amount":1}`)
		if first.Outcome != inbox.Inserted {
			t.Fatalf("first receive: %+v", first)
		}
		return first
	})
}

// A REPEATABLE READ transaction whose snapshot predates the rotation that retired the slot of a key's
// message cannot receive the key afterwards: the retired slot is empty to it (TRUNCATE is not MVCC)
// and the message's copy in the new slot is newer than its snapshot, so only the generation lock
// stops it from storing the key again: it fails with a serialization error.
func TestRepeatableReadSnapshotOlderThanARetirement(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	store := db.Store()
	first := receiveOne(t, c, "k", `{"amount":1}`) // generation 0
	rotate(t, store)                               // generation 1: slot 0 is the previous one
	receiveInOlderSnapshot(t, c, db, "k", func() inbox.Receipt {
		if r := rotate(t, store); r.Copied != 1 { // generation 2: slot 0 retired, k copied to slot 2
			t.Fatalf("rotation copied %d, want the pending message", r.Copied)
		}
		return first
	})
}

// receiveInOlderSnapshot takes the snapshot of a REPEATABLE READ transaction, runs then (which
// rotates and returns the receipt of key's stored message), and receives key in that transaction: it
// must fail with a serialization error and store nothing. On one server the snapshot is the
// transaction's first statement's. On Citus a worker's snapshot is taken when the transaction first
// reaches it, after then: the receive sees the stored message and reports a Duplicate of it. Either
// way a retry outside the transaction is a Duplicate, and one row of key is stored.
func receiveInOlderSnapshot(t *testing.T, c *inbox.Client, db *testdb.DB, key string, then func() inbox.Receipt) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // the snapshot
		t.Fatal(err)
	}
	first := then()
	r, err := c.ReceiveTx(ctx, tx, ledgertest.Message(key, `{"amount":1}`))
	var pgErr *pgconn.PgError
	serialization := errors.As(err, &pgErr) && pgErr.Code == "40001"
	if !serialization && (err != nil || r.Outcome != inbox.Duplicate || r.ID != first.ID) {
		t.Fatalf("receive in the older snapshot: %+v %v, want a serialization failure (or, on Citus, a Duplicate of %d)", r, err, first.ID)
	}
	_ = tx.Rollback(ctx)
	if again := receiveOne(t, c, key, `{"amount":1}`); again.Outcome != inbox.Duplicate || again.ID != first.ID {
		t.Fatalf("retried: %+v, want a Duplicate of %d", again, first.ID)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = $1`, key); n != 1 {
		t.Fatalf("%d rows of %s", n, key)
	}
}

// Consumers registered while rotations run all end at the ring's generation: a registration holds
// inbox_ring's row FOR KEY SHARE, so a rotation either waits for it (and then moves the new row too)
// or comes first (and the registration copies the new generation). A consumer left behind would
// insert into a slot that a later rotation retires under its receives.
func TestRegistrationsDuringRotations(t *testing.T) {
	t.Parallel()
	_, db := newClient(t)
	store := db.Store()
	ctx := context.Background()
	for round := range 20 {
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				c, err := inbox.New(db.Store(), inbox.Config{})
				if err != nil {
					t.Error(err)
					return
				}
				<-start
				m := ledgertest.Message("k", `{"amount":1}`)
				m.Consumer = fmt.Sprintf("c-%d-%d", round, i)
				if _, err := c.Receive(ctx, m); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Go(func() {
			<-start
			if _, err := retention.Rotate(ctx, store, now); err != nil {
				t.Error(err)
			}
		})
		close(start)
		wg.Wait()
		if t.Failed() {
			return
		}
		if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox_gen g, {schema}.inbox_ring r WHERE g.gen <> r.gen`); n != 0 {
			t.Fatalf("round %d: %d consumers left at an older generation", round, n)
		}
	}
}
