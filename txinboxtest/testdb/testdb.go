// Package testdb gives each test its own schema on a real PostgreSQL server.
//
// The server is chosen once per test binary ([Find] with [DefaultFinder]), in this order:
//  1. TXINBOX_TEST_DATABASE_URL, if set (it must answer, or the tests fail);
//  2. a server on 127.0.0.1:5432 (user postgres, database postgres), if one answers;
//  3. a PostgreSQL container, if Docker is available (DOCKER_HOST is set or a Docker socket exists),
//     started by the command txinboxtest/cmd/txinbox-testpg ([Launch]: testcontainers-go in a process
//     of its own, so that this package, and the tests of txinbox's packages, link no Docker client);
//  4. otherwise every test fails with a message saying how to provide one.
//
// Each call to New creates a fresh schema named txinbox_test_<random>, migrates it, and drops it when
// the test ends, so tests can run in parallel (t.Parallel) against one server.
//
// The package is the harness's leaf: it imports no package of txinbox that runs messages (worker,
// outbox, inbox), so that their own tests can use it; the public kit txinboxtest wraps it (with
// [Finder], [NewSchemaAt] and [Migrate]), starting its container in-process. Its only package-level
// state is the memo of the chosen server, which nothing outside it can set.
//
// The package is txinbox's own test support: a program may import it, but its API may change in any
// release (the test kit for code using txinbox is package txinboxtest).
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
)

// server chooses the server once per process, with [DefaultFinder].
var server = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), FindTimeout)
	defer cancel()
	return DefaultFinder().Find(ctx)
})

// URL returns the connection string of the chosen server, failing the test if there is none.
func URL(t testing.TB) string {
	t.Helper()
	u, err := server()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// EnvDistribute is the variable that, set to 1, makes Migrate distribute the migrated tables by
// consumer (migrate.Distribute): the tests then run on a Citus coordinator given in EnvURL (package
// internal/citus sets both).
const EnvDistribute = "TXINBOX_TEST_DISTRIBUTE"

// Migrate applies txinbox's migrations to schema (created if missing), and distributes its tables when
// EnvDistribute is 1. It is the one call of the migration API in the test harnesses (this package
// and txinboxtest).
func Migrate(ctx context.Context, cfg *pgx.ConnConfig, schema string) error {
	m, err := migrate.New(ctx, cfg, txinbox.Store{Schema: schema}, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	if _, err = m.Up(ctx); err != nil || os.Getenv(EnvDistribute) != "1" {
		return err
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(ctx) }()
	return migrate.Distribute(ctx, txinbox.Store{DB: c, Schema: schema})
}

// DB is one test's isolated schema.
type DB struct {
	Pool   *pgxpool.Pool
	Schema string
	URL    string // server URL (search_path not set)
}

// NewSchema creates an empty schema for t on the chosen server and drops it when t ends.
func NewSchema(t testing.TB) (schema, url string) {
	t.Helper()
	url = URL(t)
	return NewSchemaAt(t, url), url
}

// NewSchemaAt creates an empty schema named txinbox_test_<random> on the server url for t and drops it,
// with everything in it, when t ends.
func NewSchemaAt(t testing.TB, url string) (schema string) {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema = "txinbox_test_" + hex.EncodeToString(b)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("testdb: drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("testdb: drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// New creates a migrated schema for t and a pool on it (closed when t ends).
func New(t testing.TB) *DB {
	t.Helper()
	return newAt(t, URL(t))
}

func newAt(t testing.TB, url string) *DB {
	t.Helper()
	schema := NewSchemaAt(t, url)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, cfg.ConnConfig, schema); err != nil {
		t.Fatalf("testdb: migrate %s: %v", schema, err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &DB{Pool: pool, Schema: schema, URL: url}
}

// Count runs a count(*) style query (its text may use the template `{schema}`) and returns the result.
func (d *DB) Count(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := d.Pool.QueryRow(context.Background(), d.SQL(query), args...).Scan(&n); err != nil {
		t.Fatalf("testdb: %s: %v", query, err)
	}
	return n
}

// SQL replaces {schema} in query with the quoted schema name.
func (d *DB) SQL(query string) string {
	return strings.ReplaceAll(query, "{schema}", pgx.Identifier{d.Schema}.Sanitize())
}

// ForExample is New for testable examples, which have no *testing.T: it returns a pool on a fresh
// migrated schema and a function that drops it. It panics if no server can be found.
func ForExample() (pool *pgxpool.Pool, schema string, cleanup func()) {
	url, err := server()
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema = "txinbox_example_" + hex.EncodeToString(b)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	if err := Migrate(ctx, cfg.ConnConfig, schema); err != nil {
		panic(err)
	}
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	return pool, schema, func() {
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	}
}
