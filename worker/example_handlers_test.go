package worker_test

// Writing idempotent handlers. The inbox applies a handler's writes once per key, but the same fact
// can still reach a handler twice: under two keys (a producer that resends it with a new message id,
// two producers that report one event), or redelivered after the dedup window (Retention) ended.
// Handlers that write the fact idempotently make those harmless too. Each example below delivers
// one fact more than once and shows what the handler's technique leaves.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// handleAll receives msgs for consumer "example" (all with one ordering key, so that they run in
// this order), runs a pool of handlers until every one of them has completed, and stops it.
func handleAll(db *pgxpool.Pool, schema string, handlers *worker.Handlers, msgs ...inbox.Message) {
	ctx := context.Background()
	client, err := inbox.New(txinbox.Store{DB: db, Schema: schema}, inbox.Config{})
	if err != nil {
		panic(err)
	}
	for i := range msgs {
		msgs[i].Consumer, msgs[i].OrderingKey = "example", "example"
	}
	if _, err := client.ReceiveMany(ctx, msgs); err != nil {
		panic(err)
	}
	events := make(eventLog, 16)
	pool, err := worker.New(txinbox.Store{DB: db, Schema: schema, Tracer: events}, worker.Config{Consumer: "example", Handlers: handlers})
	if err != nil {
		panic(err)
	}
	if err := pool.Start(ctx); err != nil {
		panic(err)
	}
	for completed := 0; completed < len(msgs); {
		if e := <-events; e.End.Outcome == txinbox.OutcomeCompleted {
			completed++
		}
	}
	if err := pool.Stop(ctx); err != nil {
		panic(err)
	}
}

// mustExec runs a statement of the example's setup.
func mustExec(db *pgxpool.Pool, sql string) {
	if _, err := db.Exec(context.Background(), sql); err != nil {
		panic(err)
	}
}

type payment struct {
	PaymentID string `json:"payment_id"`
	Cents     int64  `json:"cents"`
}

// Upsert: the handler inserts the fact under its own business key with ON CONFLICT DO NOTHING, so a
// second copy of it changes nothing; RowsAffected tells the handler whether it was new.
func Example_upsert() {
	db, schema, cleanup := testdb.ForExample()
	defer cleanup()
	payments := pgx.Identifier{schema, "payments"}.Sanitize()
	mustExec(db, "CREATE TABLE "+payments+" (payment_id text PRIMARY KEY, cents bigint NOT NULL)")

	handlers := worker.NewHandlers()
	worker.Handle(handlers, "PaymentReceived", func(ctx context.Context, tx pgx.Tx, m *worker.Message[payment]) error {
		tag, err := tx.Exec(ctx, "INSERT INTO "+payments+" (payment_id, cents) VALUES ($1, $2) ON CONFLICT (payment_id) DO NOTHING",
			m.Payload.PaymentID, m.Payload.Cents)
		if err != nil {
			return err
		}
		fmt.Println(m.Key, "new payment:", tag.RowsAffected() == 1)
		return nil
	})
	// The producer sent payment p-1 twice, with two message ids.
	handleAll(db, schema, handlers,
		inbox.Message{Key: "msg-1", Kind: "PaymentReceived", Payload: []byte(`{"payment_id": "p-1", "cents": 500}`)},
		inbox.Message{Key: "msg-2", Kind: "PaymentReceived", Payload: []byte(`{"payment_id": "p-1", "cents": 500}`)})

	var n, total int64
	if err := db.QueryRow(context.Background(), "SELECT count(*), sum(cents) FROM "+payments).Scan(&n, &total); err != nil {
		panic(err)
	}
	fmt.Println("payments:", n, "total:", total)
	// Output:
	// msg-1 new payment: true
	// msg-2 new payment: false
	// payments: 1 total: 500
}

type stockCounted struct {
	SKU   string `json:"sku"`
	Qty   int64  `json:"qty"`   // the absolute value: what the count found
	Added int64  `json:"added"` // the same change as a delta
}

// Set, not increment: a message that carries the absolute value ("7 in stock") can be applied any
// number of times with the same result, where a delta ("3 more") adds up on every copy. Here the
// message carries both and one handler applies both, to show the difference.
func Example_setNotIncrement() {
	db, schema, cleanup := testdb.ForExample()
	defer cleanup()
	stock := pgx.Identifier{schema, "stock"}.Sanitize()
	mustExec(db, "CREATE TABLE "+stock+" (sku text PRIMARY KEY, qty bigint NOT NULL, naive_qty bigint NOT NULL)")
	mustExec(db, "INSERT INTO "+stock+" VALUES ('sku-1', 4, 4)")

	handlers := worker.NewHandlers()
	worker.Handle(handlers, "StockCounted", func(ctx context.Context, tx pgx.Tx, m *worker.Message[stockCounted]) error {
		_, err := tx.Exec(ctx, "UPDATE "+stock+" SET qty = $2, naive_qty = naive_qty + $3 WHERE sku = $1",
			m.Payload.SKU, m.Payload.Qty, m.Payload.Added)
		return err
	})
	// The stock count of sku-1 (4 before, 7 now) reached the consumer twice.
	handleAll(db, schema, handlers,
		inbox.Message{Key: "count-1", Kind: "StockCounted", Payload: []byte(`{"sku": "sku-1", "qty": 7, "added": 3}`)},
		inbox.Message{Key: "count-1-resent", Kind: "StockCounted", Payload: []byte(`{"sku": "sku-1", "qty": 7, "added": 3}`)})

	var qty, naive int64
	if err := db.QueryRow(context.Background(), "SELECT qty, naive_qty FROM "+stock).Scan(&qty, &naive); err != nil {
		panic(err)
	}
	fmt.Println("set:", qty, "incremented:", naive)
	// Output:
	// set: 7 incremented: 10
}

type customerChanged struct {
	ID      string `json:"id"`
	Email   string `json:"email"`
	Version int64  `json:"version"`
}

// Conditional update on a version column: the row keeps the version of the change it holds, and a
// change is applied only if it is newer. A copy of an applied change, or a stale one that arrives
// late (published before a newer one, or sent again), updates nothing.
func Example_versionColumn() {
	db, schema, cleanup := testdb.ForExample()
	defer cleanup()
	customers := pgx.Identifier{schema, "customers"}.Sanitize()
	mustExec(db, "CREATE TABLE "+customers+" (id text PRIMARY KEY, email text NOT NULL, version bigint NOT NULL)")

	handlers := worker.NewHandlers()
	worker.Handle(handlers, "CustomerChanged", func(ctx context.Context, tx pgx.Tx, m *worker.Message[customerChanged]) error {
		tag, err := tx.Exec(ctx, "INSERT INTO "+customers+" AS c (id, email, version) VALUES ($1, $2, $3) "+
			"ON CONFLICT (id) DO UPDATE SET email = excluded.email, version = excluded.version WHERE c.version < excluded.version",
			m.Payload.ID, m.Payload.Email, m.Payload.Version)
		if err != nil {
			return err
		}
		fmt.Println("version", m.Payload.Version, "applied:", tag.RowsAffected() == 1)
		return nil
	})
	handleAll(db, schema, handlers,
		inbox.Message{Key: "cust-1:v1", Kind: "CustomerChanged", Payload: []byte(`{"id": "cust-1", "email": "a@example.com", "version": 1}`)},
		inbox.Message{Key: "cust-1:v2", Kind: "CustomerChanged", Payload: []byte(`{"id": "cust-1", "email": "b@example.com", "version": 2}`)},
		// Version 1 again, resent by the producer after version 2.
		inbox.Message{Key: "cust-1:v1:resent", Kind: "CustomerChanged", Payload: []byte(`{"id": "cust-1", "email": "a@example.com", "version": 1}`)})

	var email string
	var version int64
	if err := db.QueryRow(context.Background(), "SELECT email, version FROM "+customers).Scan(&email, &version); err != nil {
		panic(err)
	}
	fmt.Println("stored:", email, version)
	// Output:
	// version 1 applied: true
	// version 2 applied: true
	// version 1 applied: false
	// stored: b@example.com 2
}

// mailService stands for a service outside the database, such as an e-mail or payment API, that
// deduplicates requests by an idempotency key the caller chooses.
type mailService struct {
	mu        sync.Mutex
	keys      map[string]bool
	delivered int
}

// Send delivers an e-mail unless a request with key was already accepted, and reports whether it
// delivered one.
func (s *mailService) Send(key, to string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[key] {
		return false
	}
	s.keys[key] = true
	s.delivered++
	return true
}

type signedUp struct {
	Email string `json:"email"`
}

// Effects outside the transaction: an e-mail cannot be rolled back. When an attempt fails after the
// call (here its own write fails; a crash before the commit does the same), the retry calls again.
// Passing m.Key as the outside service's idempotency key makes that second call a no-op; a key made
// afresh per call (a random id) would send the e-mail twice.
func Example_outsideEffect() {
	db, schema, cleanup := testdb.ForExample()
	defer cleanup()
	welcomed := pgx.Identifier{schema, "welcomed"}.Sanitize()
	mustExec(db, "CREATE TABLE "+welcomed+" (email text PRIMARY KEY)")
	mailer := &mailService{keys: map[string]bool{}}

	handlers := worker.NewHandlers()
	worker.Handle(handlers, "SignedUp", func(ctx context.Context, tx pgx.Tx, m *worker.Message[signedUp]) error {
		sent := mailer.Send(m.Key, m.Payload.Email)
		fmt.Println("attempt", m.Attempt, "e-mail delivered:", sent)
		if m.Attempt == 1 {
			return errors.New("database write failed") // after the e-mail: this attempt rolls back
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+welcomed+" VALUES ($1)", m.Payload.Email)
		return err
	}, worker.HandlerConfig{Backoff: txinbox.BackoffFunc(func(int) time.Duration { return 10 * time.Millisecond })})
	handleAll(db, schema, handlers,
		inbox.Message{Key: "signup-42", Kind: "SignedUp", Payload: []byte(`{"email": "ada@example.com"}`)})

	fmt.Println("e-mails delivered:", mailer.delivered)
	// Output:
	// attempt 1 e-mail delivered: true
	// attempt 2 e-mail delivered: false
	// e-mails delivered: 1
}
