package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// The late-commit path of receiving: a key inserted by a transaction that commits after the receive
// statement's snapshot was taken. The receive statement waits on the unique index for that
// transaction, then its ON CONFLICT skips the key, but its snapshot cannot see the stored row, so the
// client reads it again (LookupKeys) and must report exactly what a plain duplicate or conflict
// reports. Each case steps two connections by hand: connection 1 receives the keys in a transaction
// and holds it open; connection 2 receives the same keys and blocks; once it is seen waiting on a lock,
// connection 1 commits.

// lateReceiver is a Client on a connection of its own, whose backend pid is known.
type lateReceiver struct {
	c   *inbox.Client
	pid uint32
}

func newLateReceiver(t *testing.T, db *testdb.DB) *lateReceiver {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	c, err := inbox.New(txinbox.Store{DB: conn, Schema: db.Schema}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &lateReceiver{c: c, pid: conn.PgConn().PID()}
}

// lateCommit receives held in a transaction on connection 1, starts late on connection 2, waits until
// connection 2 is blocked on a lock, commits connection 1, and returns the receipts of both.
func lateCommit(t *testing.T, db *testdb.DB, c *inbox.Client, lr *lateReceiver, held []inbox.Message,
	late func(ctx context.Context, c *inbox.Client) ([]inbox.Receipt, error)) (heldRs, lateRs []inbox.Receipt, lateErr error) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	heldRs, err = c.ReceiveManyTx(ctx, tx, held)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range heldRs {
		if r.Outcome != inbox.Inserted {
			t.Fatalf("held message %d: %+v, want inserted", i, r)
		}
	}
	type result struct {
		rs  []inbox.Receipt
		err error
	}
	done := make(chan result, 1)
	go func() {
		rs, err := late(ctx, lr.c)
		done <- result{rs, err}
	}()
	deadline := time.Now().Add(2 * time.Minute) // only keeps a broken test from hanging
	for {
		var waiting string
		if err := db.Pool.QueryRow(ctx, `SELECT coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $1`,
			int64(lr.pid)).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == "Lock" {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the second receive returned before connection 1 committed: %+v, %v", r.rs, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting for the second receive to block on the unique index")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		return heldRs, r.rs, r.err
	case <-time.After(2 * time.Minute):
		t.Fatal("gave up waiting for the second receive")
	}
	return nil, nil, nil
}

// wantDuplicate checks a receipt for a duplicate of the stored message id, pending, with no result.
func wantDuplicate(t *testing.T, what string, r inbox.Receipt, id int64) {
	t.Helper()
	if r.Outcome != inbox.Duplicate || r.ID != id || r.State != inbox.StatePending || r.Result != nil || r.Err != nil {
		t.Errorf("%s: %+v, want Duplicate of message %d, state pending, no result, no error", what, r, id)
	}
}

// wantConflict checks a receipt (and its call's error, err) for a conflict with the stored message id.
func wantConflict(t *testing.T, what string, r inbox.Receipt, err error, key string, id int64) {
	t.Helper()
	var kc *inbox.KeyConflictError
	if r.Outcome != inbox.Conflict || r.ID != id || r.State != inbox.StatePending || r.Result != nil ||
		!errors.As(r.Err, &kc) || !errors.Is(r.Err, inbox.ErrKeyConflict) {
		t.Errorf("%s: %+v, want Conflict with message %d, state pending, a *KeyConflictError", what, r, id)
		return
	}
	if *kc != (inbox.KeyConflictError{Consumer: "ledger", Key: key, ID: id}) {
		t.Errorf("%s: %+v, want consumer ledger, key %s, message %d", what, *kc, key, id)
	}
	if err != r.Err { //nolint:errorlint // the very error value the receipt holds, not one it wraps
		t.Errorf("%s: the call returned %v, want the receipt's error", what, err)
	}
}

// wantStoredOnce checks that key is stored once, with payload, and queued once.
func wantStoredOnce(t *testing.T, db *testdb.DB, key, payload string) {
	t.Helper()
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = 'ledger' AND key = $1 AND payload = $2::jsonb`, key, payload); n != 1 {
		t.Errorf("%s: %d rows with payload %s, want the first one, unchanged", key, n, payload)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE consumer = 'ledger' AND key = $1`, key); n != 1 {
		t.Errorf("%s: %d rows, want 1", key, n)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue q JOIN {schema}.inbox m USING (id, consumer)
		WHERE m.consumer = 'ledger' AND m.key = $1`, key); n != 1 {
		t.Errorf("%s: %d queue rows, want 1", key, n)
	}
}

// Receive of a key that another transaction stored and committed while the receive waited on it: a
// Duplicate (same payload, whatever its spelling) or a Conflict (another payload), exactly as if the
// key had been committed before.
func TestReceiveLateCommitDuplicateAndConflict(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	lr := newLateReceiver(t, db)
	single := func(m inbox.Message) func(ctx context.Context, c *inbox.Client) ([]inbox.Receipt, error) {
		return func(ctx context.Context, c *inbox.Client) ([]inbox.Receipt, error) {
			r, err := c.Receive(ctx, m)
			return []inbox.Receipt{r}, err
		}
	}

	held, rs, err := lateCommit(t, db, c, lr, []inbox.Message{ledgertest.Message("dup", `{"a": 1, "b": 2}`)}, single(ledgertest.Message("dup", `{"b":2,"a":1}`)))
	if err != nil {
		t.Fatalf("duplicate: %v", err)
	}
	wantDuplicate(t, "duplicate", rs[0], held[0].ID)
	wantStoredOnce(t, db, "dup", `{"a": 1, "b": 2}`)

	held, rs, err = lateCommit(t, db, c, lr, []inbox.Message{ledgertest.Message("conflict", `{"a": 1}`)}, single(ledgertest.Message("conflict", `{"a": 2}`)))
	wantConflict(t, "conflict", rs[0], err, "conflict", held[0].ID)
	wantStoredOnce(t, db, "conflict", `{"a": 1}`)
}

// ReceiveMany with late-committed keys among others, in both orders (duplicate first, conflict first):
// every receipt is matched to its own message.
func TestReceiveManyLateCommit(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	lr := newLateReceiver(t, db)
	for n, dupFirst := range []bool{true, false} {
		dupKey, conflictKey, freshKey := fmt.Sprintf("dup-%d", n), fmt.Sprintf("conflict-%d", n), fmt.Sprintf("fresh-%d", n)
		held := []inbox.Message{ledgertest.Message(dupKey, `{"n": 1}`), ledgertest.Message(conflictKey, `{"n": 2}`)}
		late := []inbox.Message{ledgertest.Message(dupKey, `{"n":1}`), ledgertest.Message(freshKey, `{"n": 3}`), ledgertest.Message(conflictKey, `{"n": 4}`)}
		dup, fresh, conflict := 0, 1, 2
		if !dupFirst {
			late[0], late[2] = late[2], late[0]
			dup, conflict = 2, 0
		}
		heldRs, rs, err := lateCommit(t, db, c, lr, held, func(ctx context.Context, c *inbox.Client) ([]inbox.Receipt, error) {
			return c.ReceiveMany(ctx, late)
		})
		if err != nil || len(rs) != 3 {
			t.Fatalf("dup first %v: %d receipts, %v", dupFirst, len(rs), err)
		}
		what := fmt.Sprintf("dup first %v: ", dupFirst)
		wantDuplicate(t, what+dupKey, rs[dup], heldRs[0].ID)
		wantConflict(t, what+conflictKey, rs[conflict], rs[conflict].Err, conflictKey, heldRs[1].ID)
		if r := rs[fresh]; r.Outcome != inbox.Inserted || r.State != inbox.StatePending || r.ID == 0 ||
			r.ID == heldRs[0].ID || r.ID == heldRs[1].ID || r.Err != nil {
			t.Errorf("%s%s: %+v, want inserted", what, freshKey, r)
		}
		wantStoredOnce(t, db, dupKey, `{"n": 1}`)
		wantStoredOnce(t, db, conflictKey, `{"n": 2}`)
		wantStoredOnce(t, db, freshKey, `{"n": 3}`)
	}
}
