package citus

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// TestMigrationsInPlaceOnDistributedSchema migrates a schema to version 6, distributes it, then
// applies every later migration to the distributed tables in place (00007: fillfactor 45 on the inbox
// partitions; 00008: columns of the queue; 00009 to 00011: new tables, distributed by a second
// Distribute), runs messages through it, goes down to 6 and up again, and runs messages again: every
// shard of every partition gets the setting, and every message takes effect once. (The pools of this
// tree need the latest version: messages run there only.)
func TestMigrationsInPlaceOnDistributedSchema(t *testing.T) {
	ctx := context.Background()
	db, store, m := migratedTo(t, 6)
	schema := store.Schema
	if err := migrate.Distribute(ctx, store); err != nil {
		t.Fatal(err)
	}
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	if _, err := db.Exec(ctx, "CREATE TABLE "+effects+" (n bigint PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	wantFillfactor(t, ctx, db, schema, "80")
	up := func() {
		t.Helper()
		if _, err := m.Up(ctx); err != nil {
			t.Fatal(err)
		}
		if err := migrate.Distribute(ctx, store); err != nil { // the tables the migrations added
			t.Fatal(err)
		}
		wantFillfactor(t, ctx, db, schema, "45")
	}
	up()
	runMessages(t, ctx, store, effects, 1, 1000)
	if _, err := m.DownTo(ctx, 6); err != nil {
		t.Fatal(err)
	}
	wantFillfactor(t, ctx, db, schema, "80")
	up()
	runMessages(t, ctx, store, effects, 1001, 1000)
}

// wantFillfactor checks the fillfactor of the inbox partitions on the coordinator and of each of
// their shards on the workers.
func wantFillfactor(t *testing.T, ctx context.Context, db *pgxpool.Pool, schema, want string) {
	t.Helper()
	// One line per node: the distinct settings of the schema's inbox partitions and their shards.
	const q = `SELECT string_agg(DISTINCT coalesce(array_to_string(c.reloptions, ','), 'none'), ' ')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = %s AND c.relname ~ '^inbox_s[0-9]+(_[0-9]+)?$' AND c.relkind = 'r'`
	var local string
	if err := db.QueryRow(ctx, fmt.Sprintf(q, "$1"), schema).Scan(&local); err != nil {
		t.Fatal(err)
	}
	got := []string{"coordinator: " + local}
	// run_command_on_workers takes the command as text: the schema name goes in as a quoted literal,
	// quoted by the server.
	rows, err := db.Query(ctx, "SELECT nodeport, success, result FROM run_command_on_workers(format($1, quote_literal($2::text)))",
		fmt.Sprintf(q, "%s"), schema)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var port int
		var ok bool
		var result string
		if err := rows.Scan(&port, &ok, &result); err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("worker %d: %s", port, result)
		}
		got = append(got, fmt.Sprintf("worker %d: %s", port, result))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, g := range got {
		if _, setting, _ := strings.Cut(g, ": "); setting != "fillfactor="+want {
			t.Fatalf("want fillfactor=%s on every node, got\n%s", want, strings.Join(got, "\n"))
		}
	}
}

// runMessages receives messages first..first+n-1 and drains them with a batch handler that inserts
// one row per message into effects, then checks that effects holds exactly one row per message so
// far and that every stored message is completed.
func runMessages(t *testing.T, ctx context.Context, store txinbox.Store, effects string, first, n int) {
	t.Helper()
	cl, err := inbox.New(store, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]inbox.Message, n)
	for i := range msgs {
		k := first + i
		msgs[i] = inbox.Message{Consumer: "ledger", Key: fmt.Sprintf("k-%d", k), Kind: "credit", Payload: []byte(fmt.Sprintf(`{"n": %d}`, k))}
	}
	if _, err := cl.ReceiveMany(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	type credit struct {
		N int64 `json:"n"`
	}
	var handled atomic.Int64
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, ms []*worker.Message[credit]) error {
		ns := make([]int64, len(ms))
		for i, m := range ms {
			ns[i] = m.Payload.N
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+effects+" SELECT unnest($1::bigint[])", ns); err != nil {
			return err
		}
		handled.Add(int64(len(ms)))
		return nil
	})
	p, err := worker.New(store, worker.Config{Consumer: "ledger", Handlers: hs})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	last := int64(first + n - 1)
	var count, completed int64
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := store.DB.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{store.Schema, "inbox"}.Sanitize()+
			" WHERE consumer = 'ledger' AND state = 'completed'").Scan(&completed); err != nil {
			t.Fatal(err)
		}
		if completed == last {
			break
		}
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := store.DB.QueryRow(ctx, "SELECT count(*) FROM "+effects).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if count != last || completed != last {
		t.Fatalf("after messages %d to %d: %d effects and %d completed messages, want %d of each", first, last, count, completed, last)
	}
}

// TestMigration6OnSchemaDistributedAtVersion5 distributes a schema at version 5 (the tables of that
// version, as migrate.Distribute did then) and runs migration 00006 on it. Citus refuses the
// migration's ALTER TABLE on a distributed table; the migration must roll back whole: the schema stays
// at version 5, distributed, with every stored row and still writable. SCALING.md says how far this
// goes.
func TestMigration6OnSchemaDistributedAtVersion5(t *testing.T) {
	ctx := context.Background()
	db, store, m := migratedTo(t, 5)
	schema := store.Schema
	version5 := []string{"inbox", "inbox_queue", "inbox_dead", "inbox_rollup"}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL citus.enable_unsafe_triggers = on"); err != nil {
			return err
		}
		first := pgx.Identifier{schema, version5[0]}.Sanitize()
		colocate := "default"
		for _, table := range version5 {
			name := pgx.Identifier{schema, table}.Sanitize()
			if _, err := tx.Exec(ctx, "SELECT create_distributed_table($1::text, 'consumer', colocate_with => $2::text)", name, colocate); err != nil {
				return fmt.Errorf("distribute %s: %w", name, err)
			}
			colocate = first
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A row stored at version 5 (the current Receive needs version 6: a plain insert).
	inboxTable := pgx.Identifier{schema, "inbox"}.Sanitize()
	insert := func(key string) {
		t.Helper()
		if _, err := db.Exec(ctx, "INSERT INTO "+inboxTable+" (consumer, key, kind, payload, fingerprint) VALUES ('ledger', $1, 'credit', '{}', '\\x00')", key); err != nil {
			t.Fatal(err)
		}
	}
	insert("before")

	_, err = m.UpTo(ctx, 6)
	if err == nil {
		t.Fatal("migration 00006 ran on tables distributed at version 5; SCALING.md says it does not")
	}
	t.Logf("migration 00006 on a schema distributed at version 5: %v", err)
	status, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range status {
		if s.Applied != (s.Version <= 5) {
			t.Fatalf("after the failed migration: version %d applied=%v, want the schema left at version 5", s.Version, s.Applied)
		}
	}
	var distributed int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid IN (SELECT to_regclass(quote_ident($1) || '.' || quote_ident(t)) FROM unnest($2::text[]) t)",
		schema, version5).Scan(&distributed); err != nil {
		t.Fatal(err)
	}
	if distributed != len(version5) {
		t.Fatalf("%d of the %d tables still distributed", distributed, len(version5))
	}
	insert("after")
	var stored int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+inboxTable+" WHERE consumer = 'ledger'").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != 2 {
		t.Fatalf("%d messages stored, want the one from before the failed migration and the one after", stored)
	}
}

// migratedTo gives a test schema of its own on the Citus coordinator, migrated to version, with a
// pool and the migrator (the test skips without a coordinator).
func migratedTo(t *testing.T, version int64) (*pgxpool.Pool, txinbox.Store, *migrate.Migrator) {
	t.Helper()
	url := coordinator(t)
	ctx := context.Background()
	t.Setenv(testdb.EnvURL, url)
	schema, _ := testdb.NewSchema(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	store := txinbox.Store{DB: db, Schema: schema}
	m, err := migrate.New(ctx, cfg.ConnConfig, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	if _, err := m.UpTo(ctx, version); err != nil {
		t.Fatal(err)
	}
	return db, store, m
}
