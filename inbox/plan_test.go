package inbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/plantest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// The generic plan of ReceiveBatch (the one PostgreSQL uses from a prepared statement's sixth run on)
// must probe the inbox a bounded number of times per message. One that ran the check for a live row
// of each key in another slot inside an anti join, once per key for every key of the batch, made a
// ReceiveMany of 1,000 new messages take over a second from its sixth call on (docs/design/generic-plans.md,
// "ReceiveMany's generic plan"). The generic plan is run with EXPLAIN ANALYZE, in a transaction
// rolled back, and no node may handle more than a few rows per message.
func TestReceiveManyGenericPlanProbesEachKeyOnce(t *testing.T) {
	t.Parallel()
	_, db := newClient(t)
	ctx := context.Background()
	conn, rec, c := recordingClient(t, db)
	const n = 200
	batch := func(first int) []inbox.Message { return keyedMessages(first, n) }
	if _, err := c.ReceiveMany(ctx, batch(0)); err != nil {
		t.Fatal(err)
	}
	// The same statement with the next n keys (new messages: every key is checked for a live row in
	// another slot, then inserted).
	sql, args := rec.Last()
	if err := receiveArgsWithKeys(args, batch(n)); err != nil {
		t.Fatal(err)
	}
	plan := plantest.ExplainGeneric(t, conn, sql, args)
	scans := 0
	for _, node := range plantest.Nodes(t, plan) {
		if strings.HasPrefix(node.Relation, "inbox_s") {
			scans++
		}
	}
	if scans == 0 {
		t.Fatalf("no scan of the inbox partitions in the plan:\n%s", plan)
	}
	plantest.CheckLinear(t, "ReceiveBatch", plan, 3*n)
}

// receiveArgsWithKeys replaces the keys argument of a ReceiveBatch call (the first text array of
// len(msgs) elements, by position in the statement: @keys is its second parameter) with msgs' keys.
func receiveArgsWithKeys(args []any, msgs []inbox.Message) error {
	if len(args) < 2 {
		return fmt.Errorf("ReceiveBatch had %d arguments", len(args))
	}
	keys, ok := args[1].([]string)
	if !ok || len(keys) != len(msgs) {
		return fmt.Errorf("ReceiveBatch's second argument is %T, not the %d keys", args[1], len(msgs))
	}
	fresh := make([]string, len(msgs))
	for i, m := range msgs {
		fresh[i] = m.Key
	}
	args[1] = fresh
	return nil
}

// A receive of new messages must not read the queue. The generic plan of ReceiveBatch, made while the
// queue was small and none of its rows claimed (so the statistics say a claimed row is never found),
// read every queue row of the consumer once per statement, for as long as the plan lived (until the
// next ANALYZE): docs/design/receive-queue-probe.md. The plan is made at that point
// (plantest.Freeze) and run after the queue has grown. Only a key that has a stored row may probe
// the claim state (now the batches in flight, inbox_batch).
func TestReceiveManyGenericPlanReadsNoQueueForNewMessages(t *testing.T) {
	t.Parallel()
	grow, db := newClient(t)
	ctx := context.Background()
	conn, rec, c := recordingClient(t, db)
	const n = 20
	batch := keyedMessages
	tables := []string{"inbox_queue", "inbox_s0", "inbox_s1", "inbox_s2"}
	for _, table := range tables {
		// Where autovacuum runs, keep it off, so that the statistics stay those of the small queue.
		if _, err := db.Pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{db.Schema, table}.Sanitize()+" SET (autovacuum_enabled = false)"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ReceiveMany(ctx, batch(0, n)); err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		if _, err := db.Pool.Exec(ctx, "VACUUM (ANALYZE) "+pgx.Identifier{db.Schema, table}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	sql, args := rec.Last()
	frozen := plantest.Freeze(t, conn, sql, args)
	defer frozen.Close()
	for i := range 3 {
		if _, err := grow.ReceiveMany(ctx, batch(1000+i*1000, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	if err := receiveArgsWithKeys(args, batch(5000, n)); err != nil {
		t.Fatal(err)
	}
	plan := frozen.Explain(args)
	for _, node := range plantest.Nodes(t, plan) {
		// The claim state: the queue rows, and the batches in flight that list the claimed messages
		// (inbox_batch, migration 00011).
		if (node.Relation == "inbox_queue" || node.Relation == "inbox_batch") && node.Type != "ModifyTable" && node.Loops > 0 {
			t.Errorf("%s was read for new messages: %s, %v loops, %v rows, %v removed", node.Relation, node.Type, node.Loops, node.Rows, node.Removed)
		}
	}
	plantest.CheckLinear(t, "ReceiveBatch", plan, 3*n)
}

// recordingClient returns a connection to db's server that records the last ReceiveBatch statement,
// and a Client of db's schema on it.
func recordingClient(t *testing.T, db *testdb.DB) (*pgx.Conn, *plantest.LastStatement, *inbox.Client) {
	t.Helper()
	conn, rec := plantest.Connect(t, db.URL, "-- name: ReceiveBatch ")
	c, err := inbox.New(txinbox.Store{DB: conn, Schema: db.Schema}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return conn, rec, c
}

// keyedMessages returns n messages with keys k<first> to k<first+n-1> (five digits).
func keyedMessages(first, n int) []inbox.Message {
	msgs := make([]inbox.Message, n)
	for i := range msgs {
		msgs[i] = ledgertest.Message(fmt.Sprintf("k%05d", first+i), `{"amount":1}`)
	}
	return msgs
}
