package txinboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest"
	"github.com/txinbox/txinbox/worker"
)

type OrderPaid struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// creditOrder is the application's handler: it credits the order once, in the worker's transaction.
func creditOrder(ctx context.Context, tx pgx.Tx, m *worker.Message[OrderPaid]) error {
	if m.Payload.AmountCents <= 0 {
		return txinbox.Permanent(fmt.Errorf("order %s: amount %d", m.Payload.OrderID, m.Payload.AmountCents))
	}
	_, err := tx.Exec(ctx, "INSERT INTO credits (order_id, cents) VALUES ($1, $2)", m.Payload.OrderID, m.Payload.AmountCents)
	if err != nil {
		return err
	}
	return m.SetResult(map[string]any{"credited": m.Payload.AmountCents})
}

// A handler test: a schema of its own with the application's table, the handler run on one message in
// a transaction that the end of the test rolls back. In a test, t is the test's *testing.T; examples
// have none, so this one runs with a stand-in.
func Example() {
	t := newExampleT()
	defer t.end()

	db := txinboxtest.New(t) // migrated schema, dropped at the end; db.Pool's search_path is it
	if _, err := db.Pool.Exec(context.Background(), "CREATE TABLE credits (order_id text PRIMARY KEY, cents bigint)"); err != nil {
		t.Fatal(err)
	}

	run := txinboxtest.RunHandler(t, db.Pool, creditOrder, worker.Message[OrderPaid]{
		Key: "evt-1", Payload: OrderPaid{OrderID: "o-1", AmountCents: 500},
	})
	if run.Err != nil {
		t.Fatal(run.Err)
	}
	var cents int64
	if err := run.Tx.QueryRow(context.Background(), "SELECT cents FROM credits WHERE order_id = 'o-1'").Scan(&cents); err != nil {
		t.Fatal(err)
	}
	fmt.Println("credited", cents, "result", string(run.Result))

	bad := txinboxtest.RunHandler(t, db.Pool, creditOrder, worker.Message[OrderPaid]{
		Payload: OrderPaid{OrderID: "o-2", AmountCents: -1},
	})
	fmt.Println("permanent:", txinbox.IsPermanent(bad.Err))
	// Output:
	// credited 500 result {"credited":500}
	// permanent: true
}

// placeOrder is the application's code under test: it records an order and publishes an event in the
// same transaction (the transactional outbox).
func placeOrder(ctx context.Context, tx pgx.Tx, events *outbox.Client, orderID string, cents int64) error {
	if _, err := tx.Exec(ctx, "INSERT INTO orders (id, cents) VALUES ($1, $2)", orderID, cents); err != nil {
		return err
	}
	_, err := events.Publish(ctx, tx, outbox.Message{Topic: "orders", Key: orderID, Kind: "order.placed",
		Payload: fmt.Appendf(nil, `{"order_id": %q, "cents": %d}`, orderID, cents)})
	return err
}

// An outbox test: the code under test publishes in its own transaction, RequirePublished finds the
// event, and Drain hands the outbox to a Recorder as a relay would hand it to a broker.
func ExampleRequirePublished() {
	t := newExampleT()
	defer t.end()
	ctx := context.Background()

	db := txinboxtest.New(t)
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY, cents bigint)"); err != nil {
		t.Fatal(err)
	}
	events, err := outbox.New(db.Store(), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return placeOrder(ctx, tx, events, "o-1", 500) }); err != nil {
		t.Fatal(err)
	}

	ev := txinboxtest.RequirePublished(t, db.Pool, db.Schema, txinboxtest.Match{Topic: "orders", Key: "o-1"})
	fmt.Println(ev.Kind, ev.State, string(ev.Payload))
	txinboxtest.RequireNotPublished(t, db.Pool, db.Schema, txinboxtest.Match{Topic: "refunds"})

	rec := &txinboxtest.Recorder{} // acknowledges every event
	txinboxtest.Drain(t, db.Store(), outbox.RelayConfig{Publisher: rec})
	for _, e := range rec.Events() {
		fmt.Println("handed over:", e.Topic, e.Key, e.ID == ev.ID)
	}
	fmt.Println(txinboxtest.RequirePublished(t, db.Pool, db.Schema, txinboxtest.Match{Key: "o-1"}).State)
	// Output:
	// order.placed pending {"order_id": "o-1", "cents": 500}
	// handed over: orders o-1 true
	// sent
}

// A Recorder's Fate plays the broker: here it refuses one topic for good, and Drain leaves that
// event dead.
func ExampleDrain() {
	t := newExampleT()
	defer t.end()

	db := txinboxtest.New(t)
	txinboxtest.Publish(t, db.Store(),
		outbox.Message{Topic: "orders", Payload: []byte(`{}`)},
		outbox.Message{Topic: "unroutable", Payload: []byte(`{}`)})
	rec := &txinboxtest.Recorder{Fate: func(ev outbox.Event) error {
		if ev.Topic == "unroutable" {
			return txinbox.Permanent(errors.New("no route"))
		}
		return nil
	}}
	txinboxtest.Drain(t, db.Store(), outbox.RelayConfig{Publisher: rec})
	for _, topic := range []string{"orders", "unroutable"} {
		ev := txinboxtest.RequirePublished(t, db.Pool, db.Schema, txinboxtest.Match{Topic: topic})
		fmt.Printf("%s: %s %q\n", topic, ev.State, ev.LastError)
	}
	// Output:
	// orders: sent ""
	// unroutable: dead "permanent: no route"
}

// exampleT stands in for a *testing.T in Example: the methods the kit calls, with Fatal panicking and
// the cleanups run by end. (Its embedded testing.TB is nil: any other method would panic.)
type exampleT struct {
	testing.TB
	ctx      context.Context
	cancel   context.CancelFunc
	cleanups []func()
}

func newExampleT() *exampleT {
	ctx, cancel := context.WithCancel(context.Background())
	return &exampleT{ctx: ctx, cancel: cancel}
}

func (*exampleT) Helper()                           {}
func (e *exampleT) Context() context.Context        { return e.ctx }
func (e *exampleT) Cleanup(f func())                { e.cleanups = append(e.cleanups, f) }
func (*exampleT) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (*exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (*exampleT) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// end cancels the context and runs the cleanups, last registered first, as the testing package does.
func (e *exampleT) end() {
	e.cancel()
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}
