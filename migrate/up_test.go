package migrate_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// TestUpTakesItsConnectionFromTheStore: Up migrates with the settings of a *pgxpool.Pool or a
// *pgx.Conn, and refuses any other DB (here a transaction) with a *ConfigError for Store.DB that
// points at migrate.New, writing nothing.
func TestUpTakesItsConnectionFromTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema, url := testdb.NewSchema(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = migrate.Up(ctx, txinbox.Store{DB: tx, Schema: schema})
	var ce *txinbox.ConfigError
	if !errors.Is(err, txinbox.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != "Store.DB" || !strings.Contains(err.Error(), "migrate.New") {
		t.Fatalf("Up on a transaction: %v", err)
	}
	_ = tx.Rollback(ctx)
	if err := migrate.Up(ctx, txinbox.Store{DB: conn, Schema: schema}); err != nil {
		t.Fatalf("Up on a *pgx.Conn: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename IN ('inbox', 'inbox_queue', 'idempotency_keys')`, schema).Scan(&n); err != nil || n != 3 {
		t.Fatalf("tables after Up: %d %v", n, err)
	}
}
