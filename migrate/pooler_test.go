package migrate_test

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/txinboxtest/pgbouncer"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// TestUpRefusesAPooler: migrations need a session of their own (goose's session advisory lock, and
// search_path set at connection start), which PgBouncer 1.18 does not give them: in transaction
// mode, or in session mode (it refuses the search_path startup parameter, or drops it when told to
// ignore it), Up, Migrator.Up and Migrator.Down return an error matching txinbox.ErrPooler at once
// and write nothing; directly, Up migrates. It runs in a database of its own: without the check, the
// cases that drop search_path would migrate its public schema.
func TestUpRefusesAPooler(t *testing.T) {
	t.Parallel()
	server := throwawayDatabase(t, testdb.URL(t))
	for _, c := range []struct {
		name string
		cfg  pgbouncer.Config
	}{
		{"transaction", pgbouncer.Config{}},
		{"transaction ignoring search_path", pgbouncer.Config{Settings: []string{"ignore_startup_parameters = search_path"}}},
		{"session", pgbouncer.Config{Mode: "session"}},
		{"session ignoring search_path", pgbouncer.Config{Mode: "session", Settings: []string{"ignore_startup_parameters = search_path"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := pgbouncer.Start(t, server, c.cfg)
			schema := testdb.NewSchemaAt(t, server)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cfg, err := pgxpool.ParseConfig(url + "&default_query_exec_mode=exec")
			if err != nil {
				t.Fatal(err)
			}
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			err = migrate.Up(ctx, txinbox.Store{DB: pool, Schema: schema})
			if !errors.Is(err, txinbox.ErrPooler) {
				t.Fatalf("Up through PgBouncer: %v, want txinbox.ErrPooler", err)
			}
			t.Log(err)
			m, err := migrate.New(ctx, cfg.ConnConfig, txinbox.Store{Schema: schema}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if _, err := m.Up(ctx); !errors.Is(err, txinbox.ErrPooler) {
				t.Fatalf("Migrator.Up through PgBouncer: %v, want txinbox.ErrPooler", err)
			}
			if _, err := m.Down(ctx); !errors.Is(err, txinbox.ErrPooler) {
				t.Fatalf("Migrator.Down through PgBouncer: %v, want txinbox.ErrPooler", err)
			}
			if got := tables(t, server, schema); len(got) != 0 {
				t.Fatalf("tables written through PgBouncer: %v", got)
			}
			direct, err := pgx.ParseConfig(server)
			if err != nil {
				t.Fatal(err)
			}
			if err := migrate.Up(ctx, txinbox.Store{DB: mustConnect(t, direct), Schema: schema}); err != nil {
				t.Fatalf("Up directly: %v", err)
			}
		})
	}
}

func mustConnect(t *testing.T, cfg *pgx.ConnConfig) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// throwawayDatabase creates a database on the server of serverURL, drops it when t ends, and
// returns its URL.
func throwawayDatabase(t *testing.T, serverURL string) string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	name := pgx.Identifier{"txinbox_test_pooler_" + strconv.FormatInt(time.Now().UnixNano(), 36)}.Sanitize()
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + strings.Trim(name, `"`)
	return u.String()
}
