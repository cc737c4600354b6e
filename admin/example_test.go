package admin_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/testdb"
	"github.com/txinbox/txinbox/worker"
)

// waitUntil polls cond every 10ms, as an application would poll a dashboard; it panics if cond is
// still false after a minute (the examples normally wait milliseconds).
func waitUntil(cond func() bool) {
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			panic("example: condition not reached in a minute")
		}
	}
}

type charge struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// A message whose handler gave up (here with worker.Permanent) is dead: kept with its last error,
// its key still taken. Once the cause is fixed, ReplayDead runs it again on the same row.
func ExampleClient_ReplayDead() {
	ctx := context.Background()
	db, schema, cleanup := testdb.ForExample()
	defer cleanup()
	client, err := inbox.NewClient(db, inbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}

	var accountOpened atomic.Bool // the cause of the failure, fixed by an operator below
	handlers := worker.NewHandlers()
	worker.Handle(handlers, "Charge", func(ctx context.Context, tx pgx.Tx, m *worker.Message[charge]) error {
		if !accountOpened.Load() {
			return worker.Permanent(fmt.Errorf("no account %s", m.Payload.Account)) // no retry can help
		}
		fmt.Printf("charged %s %d, attempt %d, previous error %q\n",
			m.Payload.Account, m.Payload.Cents, m.Attempt, m.PreviousError)
		return nil
	})
	pool, err := worker.New(db, worker.Config{Consumer: "billing", Schema: schema, Handlers: handlers})
	if err != nil {
		panic(err)
	}
	if err := pool.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = pool.Stop(ctx) }()

	msg := inbox.Message{Consumer: "billing", Key: "charge-1", Kind: "Charge",
		Payload: []byte(`{"account": "acct-9", "cents": 500}`)}
	if _, err := client.Receive(ctx, msg); err != nil {
		panic(err)
	}
	var dead []inbox.StoredMessage
	waitUntil(func() bool {
		dead, err = client.ListDead(ctx, inbox.DeadFilter{Consumer: "billing"})
		return err == nil && len(dead) == 1
	})
	d := dead[0]
	fmt.Println(d.Key, d.State, "after", d.AttemptsStarted, "attempt:", d.LastError)

	// While it is dead, a redelivery is a duplicate and does not run.
	r, _ := client.Receive(ctx, msg)
	fmt.Println("redelivered:", r.Outcome, r.State)

	accountOpened.Store(true)
	replayed, err := client.ReplayDead(ctx, d.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println("replayed:", len(replayed))
	waitUntil(func() bool {
		m, err := client.GetMessage(ctx, d.ID)
		return err == nil && m.State == inbox.StateCompleted
	})
	// Output:
	// charge-1 dead after 1 attempt: permanent: no account acct-9
	// redelivered: duplicate dead
	// replayed: 1
	// charged acct-9 500, attempt 1, previous error "permanent: no account acct-9"
}

// Migrate creates the schema and txinbox's tables in it; calling it again, from any number of
// processes at start-up, changes nothing. NewMigrator gives finer control (Status, Up, Down).
func ExampleMigrate() {
	ctx := context.Background()
	db, base, cleanup := testdb.ForExample()
	defer cleanup()
	schema := base + "_app" // a schema that does not exist yet
	defer func() { _, _ = db.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE") }()
	connConfig := db.Config().ConnConfig

	m, err := inbox.NewMigrator(ctx, connConfig, schema, nil)
	if err != nil {
		panic(err)
	}
	defer m.Close()
	st, err := m.State(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("before: %+v\n", st)

	for range 2 { // at every start-up
		if err := inbox.Migrate(ctx, connConfig, schema); err != nil {
			panic(err)
		}
	}
	if st, err = m.State(ctx); err != nil {
		panic(err)
	}
	fmt.Printf("after: %+v\n", st)
	status, err := m.Status(ctx)
	if err != nil {
		panic(err)
	}
	pending := 0
	for _, s := range status {
		if !s.Applied {
			pending++
		}
	}
	fmt.Println("migrations pending:", pending)

	client, err := inbox.NewClient(db, inbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	r, err := client.Receive(ctx, inbox.Message{Consumer: "ledger", Key: "evt-1", Kind: "OrderPaid", Payload: []byte(`{}`)})
	fmt.Println(r.Outcome, err)
	// Output:
	// before: {SchemaExists:false Migrated:false}
	// after: {SchemaExists:true Migrated:true}
	// migrations pending: 0
	// inserted <nil>
}

// A completed message's row is its dedup record, kept for the worker's Retention (7 days by
// default; a millisecond here). A Cleaner deletes the records whose window has ended: run its Run
// method in a goroutine of every process that runs workers; RunOnce runs one pass.
func ExampleClient_NewCleaner() {
	ctx := context.Background()
	db, schema, cleanup := testdb.ForExample()
	defer cleanup()
	client, err := inbox.NewClient(db, inbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	handlers := worker.NewHandlers()
	worker.Handle(handlers, "Ping", func(context.Context, pgx.Tx, *worker.Message[struct{}]) error { return nil })
	pool, err := worker.New(db, worker.Config{Consumer: "audit", Schema: schema, Handlers: handlers,
		Retention: time.Millisecond})
	if err != nil {
		panic(err)
	}
	if err := pool.Start(ctx); err != nil {
		panic(err)
	}
	for _, key := range []string{"p-1", "p-2", "p-3"} {
		if _, err := client.Receive(ctx, inbox.Message{Consumer: "audit", Key: key, Kind: "Ping", Payload: []byte(`{}`)}); err != nil {
			panic(err)
		}
	}
	waitUntil(func() bool {
		s, err := client.Stats(ctx)
		return err == nil && len(s) == 1 && s[0].Completed == 3 && s[0].Expired == 3
	})
	if err := pool.Stop(ctx); err != nil {
		panic(err)
	}

	cleaner, err := client.NewCleaner(inbox.CleanerConfig{})
	if err != nil {
		panic(err)
	}
	res, ran, err := cleaner.RunOnce(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("ran: %v, deleted: %d, full pass: %v, done: %v\n", ran, res.Deleted, res.Full, res.Done)

	// The window of p-1 has ended: a new delivery of the key is a new message.
	r, err := client.Receive(ctx, inbox.Message{Consumer: "audit", Key: "p-1", Kind: "Ping", Payload: []byte(`{}`)})
	fmt.Println("p-1 again:", r.Outcome, err)

	_, err = client.NewCleaner(inbox.CleanerConfig{BatchSize: -1})
	fmt.Println("bad config:", errors.Is(err, inbox.ErrInvalidConfig))
	// Output:
	// ran: true, deleted: 3, full pass: true, done: true
	// p-1 again: inserted <nil>
	// bad config: true
}
