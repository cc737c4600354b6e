package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// A Receive of a few messages outside a transaction runs ReceiveBatch's generic plan, made once per
// connection, not a custom plan made at every call (PostgreSQL kept choosing custom plans for it,
// and planning it costs more than running it for one message); the setting that forces it ends with
// the call's own implicit transaction. In a caller's transaction (ReceiveTx) nothing is forced: a
// setting made there would outlive the statement and change how the caller's statements are planned.
func TestSmallReceiveRunsTheGenericPlan(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // one session: its prepared statements are the calls'
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := db.Store()
	st.DB = pool
	c, err := inbox.New(st, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(key string) inbox.Message {
		return inbox.Message{Consumer: "c", Key: key, Kind: "k", Payload: []byte(`{"n":1}`)}
	}
	plans := func() (generic, custom int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)
			FROM pg_prepared_statements WHERE statement LIKE '-- name: ReceiveBatch %'`).Scan(&generic, &custom); err != nil {
			t.Fatal(err)
		}
		return generic, custom
	}
	setting := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		t.Helper()
		var s string
		if err := q.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	const n = 12
	for i := range n {
		if _, err := c.Receive(ctx, msg(fmt.Sprint("r", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ReceiveMany(ctx, []inbox.Message{msg("m1"), msg("m2")}); err != nil {
		t.Fatal(err)
	}
	if generic, custom := plans(); generic != n+1 || custom != 0 {
		t.Fatalf("%d receive calls outside a transaction ran %d generic and %d custom plans of ReceiveBatch; want every one generic", n+1, generic, custom)
	}
	if s := setting(pool); s != "auto" {
		t.Fatalf("after the receives the session's plan_cache_mode is %q, want auto: the setting must end with the call", s)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := c.ReceiveTx(ctx, tx, msg("in-tx")); err != nil {
		t.Fatal(err)
	}
	if s := setting(tx); s != "auto" {
		t.Fatalf("after ReceiveTx the caller's transaction has plan_cache_mode %q, want auto: nothing may be set in it", s)
	}
}
