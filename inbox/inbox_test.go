package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/limits"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

func newClient(t *testing.T) (*inbox.Client, *testdb.DB) {
	t.Helper()
	db := testdb.New(t)
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c, db
}

// getMessage reads the stored message id through an admin.Admin of db's store.
func getMessage(ctx context.Context, db *testdb.DB, id int64) (inbox.StoredMessage, error) {
	a, err := admin.New(db.Store(), admin.Config{})
	if err != nil {
		return inbox.StoredMessage{}, err
	}
	return a.GetMessage(ctx, id)
}

func TestReceiveDuplicateAndConflict(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()

	r, err := c.Receive(ctx, ledgertest.Message("k1", `{"a": 1, "b": 2}`))
	if err != nil || r.Outcome != inbox.Inserted || r.ID == 0 {
		t.Fatalf("first receive: %+v, %v", r, err)
	}
	// Same document, other key order and spacing: a duplicate (fingerprints are over jsonb).
	for range 4 {
		d, err := c.Receive(ctx, ledgertest.Message("k1", `{"b":2,"a":1}`))
		if err != nil || d.Outcome != inbox.Duplicate || d.ID != r.ID || d.State != inbox.StatePending {
			t.Fatalf("duplicate: %+v, %v", d, err)
		}
	}
	x, err := c.Receive(ctx, ledgertest.Message("k1", `{"a": 2}`))
	var kc *inbox.KeyConflictError
	if !errors.Is(err, inbox.ErrKeyConflict) || !errors.As(err, &kc) || x.Outcome != inbox.Conflict || kc.ID != r.ID {
		t.Fatalf("conflict: %+v, %v", x, err)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE payload = '{"a":1,"b":2}'`); got != 1 {
		t.Fatalf("stored rows = %d, want the original one unchanged", got)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox_queue`); got != 1 {
		t.Fatalf("queue rows = %d, want 1", got)
	}
	// Another consumer gets its own copy.
	m := ledgertest.Message("k1", `{"a": 1, "b": 2}`)
	m.Consumer = "audit"
	if r2, err := c.Receive(ctx, m); err != nil || r2.Outcome != inbox.Inserted {
		t.Fatalf("fan-out receive: %+v, %v", r2, err)
	}
}

// roundTrips counts what a connection sends to the server: statements (queries, including BEGIN and
// COMMIT) and the preparations of new statements, each a round trip of its own.
type roundTrips struct {
	statements, prepares atomic.Int64
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.statements.Add(1)
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A pipeline (a small receive's GenericPlan and ReceiveBatch) is one round trip.
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.statements.Add(1)
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

func (r *roundTrips) TracePrepareEnd(_ context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	if !d.AlreadyPrepared {
		r.prepares.Add(1)
	}
}

// ReceiveMany sends one statement per call (or one pipeline: GenericPlan ahead of it), one round
// trip, whatever the batch holds (new messages, duplicates of stored ones and of each other,
// conflicts): counted by a tracer on the client's own connection.
func TestReceiveManyOneRoundTrip(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	cc.Tracer = rt
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	c, err := inbox.New(txinbox.Store{DB: conn, Schema: db.Schema}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The first statement on the connection is also prepared (a round trip of its own, once).
	if _, err := c.Receive(ctx, ledgertest.Message("old", `1`)); err != nil {
		t.Fatal(err)
	}
	// roundTrip runs f and fails t unless it sent exactly one statement and prepared nothing.
	roundTrip := func(what string, f func() error) {
		t.Helper()
		s0, p0 := rt.statements.Load(), rt.prepares.Load()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if s, p := rt.statements.Load()-s0, rt.prepares.Load()-p0; s != 1 || p != 0 {
			t.Errorf("%s: %d statements and %d preparations sent, want 1 statement and none", what, s, p)
		}
	}
	var rs []inbox.Receipt
	roundTrip("ReceiveMany", func() (err error) {
		rs, err = c.ReceiveMany(ctx, []inbox.Message{
			ledgertest.Message("a", `1`), ledgertest.Message("old", `1`), ledgertest.Message("b", `2`), ledgertest.Message("a", `1`), ledgertest.Message("b", `3`), ledgertest.Message("old", `2`),
		})
		return err
	})
	want := []inbox.Outcome{inbox.Inserted, inbox.Duplicate, inbox.Inserted, inbox.Duplicate, inbox.Conflict, inbox.Conflict}
	for i, r := range rs {
		if r.Outcome != want[i] {
			t.Errorf("receipt %d: %v, want %v (%+v)", i, r.Outcome, want[i], r)
		}
	}
	if rs[3].ID != rs[0].ID || rs[4].ID != rs[2].ID {
		t.Errorf("in-batch duplicates must point at the first occurrence: %+v", rs)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); got != 3 {
		t.Fatalf("rows = %d, want 3", got)
	}
	// Other batch sizes use the same statement (nothing new to prepare).
	for _, n := range []int{1, 2, 17, 100} {
		batch := make([]inbox.Message, n)
		for i := range batch {
			batch[i] = ledgertest.Message(fmt.Sprintf("n%d-%d", n, i), fmt.Sprint(i))
		}
		roundTrip(fmt.Sprintf("ReceiveMany of %d", n), func() error { _, err := c.ReceiveMany(ctx, batch); return err })
	}
}

func TestReceiveInvalidWritesNothing(t *testing.T) {
	t.Parallel()
	c, db := newClient(t)
	ctx := context.Background()
	if _, err := c.Receive(ctx, ledgertest.Message("keep", `{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", limits.KeyBytes+1)
	cases := map[string]inbox.Message{
		"empty key":        ledgertest.Message("", `1`),
		"long key":         ledgertest.Message(long, `1`),
		"nul key":          ledgertest.Message("a\x00b", `1`),
		"bad utf8 key":     ledgertest.Message("a\xffb", `1`),
		"bad consumer":     {Consumer: "led ger", Key: "k", Kind: "K", Payload: []byte(`1`)},
		"empty kind":       {Consumer: "ledger", Key: "k", Kind: "", Payload: []byte(`1`)},
		"invalid json":     ledgertest.Message("k", `{"x":`),
		"empty payload":    ledgertest.Message("k", ``),
		"nul in json":      ledgertest.Message("k", `{"x":"a\u0000b"}`),
		"huge payload":     ledgertest.Message("k", `"`+strings.Repeat("x", 1<<20)+`"`),
		"bad header":       {Consumer: "ledger", Key: "k", Kind: "K", Payload: []byte(`1`), Headers: map[string]string{"a\x00": "b"}},
		"bad ordering key": {Consumer: "ledger", Key: "k", Kind: "K", Payload: []byte(`1`), OrderingKey: "a\nb"},
	}
	for name, m := range cases {
		_, err := c.ReceiveMany(ctx, []inbox.Message{ledgertest.Message("fine", `1`), m})
		var ve *txinbox.ValidationError
		if !errors.Is(err, txinbox.ErrInvalidMessage) || !errors.As(err, &ve) || ve.Index != 1 {
			t.Errorf("%s: err = %v, want a *ValidationError for index 1", name, err)
		}
	}
	// An escaped backslash followed by u0000 is ordinary text and accepted.
	if _, err := c.Receive(ctx, ledgertest.Message("escaped", `{"x":"\\u0000"}`)); err != nil {
		t.Errorf("escaped backslash: %v", err)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key IN ('keep', 'escaped')`); got != 2 {
		t.Fatalf("rows = %d", got)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); got != 2 {
		t.Fatalf("invalid batches wrote rows: %d", got)
	}
}
