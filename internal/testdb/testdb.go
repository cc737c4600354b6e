// Package testdb gives each test its own schema on a real PostgreSQL server.
//
// The server is chosen once per test binary, in this order:
//  1. TXINBOX_TEST_DATABASE_URL, if set (it must answer, or the tests fail);
//  2. a server on 127.0.0.1:5432 (user postgres, database postgres), if one answers;
//  3. a PostgreSQL container started with testcontainers-go, if Docker is available;
//  4. otherwise every test fails with a message saying how to provide one.
//
// Each call to New creates a fresh schema named txinbox_test_<random>, migrates it, and drops it when
// the test ends, so tests can run in parallel (t.Parallel) against one server.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// EnvURL names the environment variable that selects the test server.
const EnvURL = "TXINBOX_TEST_DATABASE_URL"

// LocalURL is the server tried when EnvURL is not set.
const LocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	once      sync.Once
	serverURL string
	serverErr error
)

// URL returns the connection string of the chosen server, failing the test if there is none.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(func() { serverURL, serverErr = choose() })
	if serverErr != nil {
		t.Fatal(serverErr)
	}
	return serverURL
}

func choose() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if u := os.Getenv(EnvURL); u != "" {
		if err := ping(ctx, u); err != nil {
			return "", fmt.Errorf("testdb: %s=%q does not answer: %v", EnvURL, u, err)
		}
		return u, nil
	}
	local := ping(ctx, LocalURL)
	if local == nil {
		return LocalURL, nil
	}
	u, err := container(ctx)
	if err == nil {
		return u, nil
	}
	//nolint:staticcheck // ST1005: a multi-line message read by a person setting up the tests, never wrapped
	return "", fmt.Errorf("testdb: no PostgreSQL for the tests.\n"+
		"  - %s is not set;\n  - nothing answers on 127.0.0.1:5432 (%v);\n  - no container could be started (%v).\n"+
		"Set %s=postgres://user:pass@host:5432/db, start PostgreSQL on 127.0.0.1:5432 (user postgres, trust auth), or install Docker.",
		EnvURL, local, err, EnvURL)
}

func ping(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return c.Ping(ctx)
}

func container(ctx context.Context) (u string, err error) {
	defer func() {
		if r := recover(); r != nil { // testcontainers panics when no Docker is found
			err = fmt.Errorf("%v", r)
		}
	}()
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", err
	}
	defer provider.Close()
	if err := provider.Health(ctx); err != nil {
		return "", err
	}
	c, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		tcpostgres.WithDatabase("txinbox"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(time.Minute)))
	if err != nil {
		return "", err
	}
	// The container lives as long as the test binary; Ryuk removes it afterwards.
	return c.ConnectionString(ctx, "sslmode=disable")
}

// DB is one test's isolated schema.
type DB struct {
	Pool   *pgxpool.Pool
	Schema string
	URL    string // server URL (search_path not set)
}

// NewSchema creates an empty schema for t and drops it when t ends.
func NewSchema(t testing.TB) (schema, url string) {
	t.Helper()
	url = URL(t)
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
	return schema, url
}

// New creates a migrated schema for t and a pool on it (closed when t ends).
func New(t testing.TB) *DB {
	t.Helper()
	schema, url := NewSchema(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateSchema(ctx, cfg.ConnConfig, schema); err != nil {
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
	once.Do(func() { serverURL, serverErr = choose() })
	if serverErr != nil {
		panic(serverErr)
	}
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema = "txinbox_example_" + hex.EncodeToString(b)
	cfg, err := pgxpool.ParseConfig(serverURL)
	if err != nil {
		panic(err)
	}
	if err := migrateSchema(ctx, cfg.ConnConfig, schema); err != nil {
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
