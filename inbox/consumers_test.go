package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// refuseConsumer makes db refuse every message of consumer "refused": a CHECK constraint of the
// test's schema fails the statement that inserts one (check_violation, 23514), an error of the
// statement, as a lost connection would be, not a value the message's own checks let through.
func refuseConsumer(t *testing.T, db *testdb.DB) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(),
		db.SQL(`ALTER TABLE {schema}.inbox ADD CONSTRAINT refused_consumer CHECK (consumer <> 'refused')`)); err != nil {
		t.Fatal(err)
	}
}

// wantRefused fails t unless err is the refusal of refuseConsumer's constraint.
func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || !strings.HasPrefix(constraintName(pgErr), "refused_consumer") {
		t.Fatalf("%s: err = %v, want the refused_consumer check violation", what, err)
	}
}

// violates reads the constraint's name from a check violation's message.
var violates = regexp.MustCompile(`violates check constraint "([^"]+)"`)

// constraintName is the name of the constraint err reports. A Citus coordinator passes on a shard's
// error without its constraint field, so the name is read from the message then; on a shard the
// constraint may be named after it, with the shard's number appended.
func constraintName(err *pgconn.PgError) string {
	if err.ConstraintName != "" {
		return err.ConstraintName
	}
	if m := violates.FindStringSubmatch(err.Message); m != nil {
		return m[1]
	}
	return ""
}

// consumerMessage is a message of kind OrderPaid for consumer.
func consumerMessage(consumer, key string) inbox.Message {
	m := ledgertest.Message(key, `{"amount":1}`)
	m.Consumer = consumer
	return m
}

// ReceiveMany is all or nothing across consumers: a call whose last consumer's statement fails at the
// database returns that error and stores nothing, not even the messages of the consumers whose
// statements ran (and succeeded) before it, in the same transaction.
func TestReceiveManyAllOrNothingAcrossConsumers(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	refuseConsumer(t, db)

	// Consumers in order of first appearance: ledger, audit, then refused, whose statement runs last.
	msgs := []inbox.Message{
		consumerMessage("ledger", "a1"), consumerMessage("audit", "b1"), consumerMessage("ledger", "a2"),
		consumerMessage("refused", "r1"), consumerMessage("audit", "b2"),
	}
	rs, err := c.ReceiveMany(ctx, msgs)
	wantRefused(t, "ReceiveMany", err)
	if rs != nil {
		t.Errorf("receipts of a failed call: %+v, want none", rs)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); got != 0 {
		t.Errorf("%d messages stored by a failed call, want none", got)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`); got != 0 {
		t.Errorf("%d queue rows stored by a failed call, want none", got)
	}

	// Without the refused message, the same call stores every message as new.
	rs, err = c.ReceiveMany(ctx, append(msgs[:3:3], msgs[4]))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Outcome != inbox.Inserted {
			t.Errorf("receipt %d after the failed call: %+v, want Inserted", i, r)
		}
	}
	assertWhole(t, db)
}

// The same through coalesced Receive calls: a shared statement runs the calls of several consumers
// in one transaction, and when one consumer's part fails at the database every call of it gets the
// error and none of their messages is stored.
func TestCoalesceAllOrNothingAcrossConsumers(t *testing.T) {
	t.Parallel()
	c, g, db := gatedClient(t, inbox.Config{CoalesceWait: time.Hour})
	ctx := context.Background()
	refuseConsumer(t, db)

	release := g.hold(0)
	first := goReceive(ctx, c, consumerMessage("ledger", "first"))
	entered(t, g, 0)
	var calls []<-chan result
	for i, m := range []inbox.Message{
		consumerMessage("ledger", "a1"), consumerMessage("audit", "b1"), consumerMessage("refused", "r1"),
	} {
		calls = append(calls, goReceive(ctx, c, m))
		waitQueued(t, c, i+1)
	}
	release()
	if r := get(t, first); r.err != nil || r.rc.Outcome != inbox.Inserted {
		t.Fatalf("first: %+v", r)
	}
	for i, ch := range calls {
		wantRefused(t, fmt.Sprintf("call %d of the shared statement", i), get(t, ch).err)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key <> 'first'`); got != 0 {
		t.Errorf("%d messages of the failed shared statement stored, want none", got)
	}
	assertWhole(t, db)
}
