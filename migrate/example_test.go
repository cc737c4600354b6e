package migrate_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// Up creates the schema and txinbox's tables in it; calling it again, from any number of processes
// at start-up, changes nothing. New gives finer control (State, Status, Up, Down).
func ExampleUp() {
	ctx := context.Background()
	db, base, cleanup := testdb.ForExample()
	defer cleanup()
	schema := base + "_app" // a schema that does not exist yet
	defer func() { _, _ = db.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE") }()
	connConfig := db.Config().ConnConfig

	m, err := migrate.New(ctx, connConfig, txinbox.Store{Schema: schema}, nil)
	if err != nil {
		panic(err)
	}
	defer m.Close()
	st, err := m.State(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("before: %+v\n", st)

	store := txinbox.Store{DB: db, Schema: schema}
	for range 2 { // at every start-up
		if err := migrate.Up(ctx, store); err != nil {
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

	client, err := inbox.New(store, inbox.Config{})
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
