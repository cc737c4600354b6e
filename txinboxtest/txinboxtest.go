// Package txinboxtest is the test kit for code that uses txinbox: each test gets its own migrated
// schema on a real PostgreSQL server ([New]); [RunHandler] runs a worker handler on one message in a
// transaction that is rolled back when the test ends, as a pool would run it; [Publish], [Drain] and
// [Recorder] put events into an outbox and relay them to a publisher of the test's; and
// [RequirePublished] and [RequireNotPublished] check what an outbox holds.
//
// The server is chosen once per test binary, in this order:
//  1. TXINBOX_TEST_DATABASE_URL, if set (it must answer, or the tests fail);
//  2. a server on 127.0.0.1:5432 (user postgres, database postgres, no password), if one answers;
//  3. a PostgreSQL container started in-process with testcontainers-go, if Docker is available
//     (DOCKER_HOST is set or a Docker socket exists); it lives until the test binary exits, and
//     testcontainers' reaper removes it then;
//  4. otherwise the test fails with a message saying how to provide one.
//
// Only the last choice runs Docker's client: a test binary that finds its server otherwise never
// contacts Docker. The kit has no package-level setting: what it needs comes in each call.
package txinboxtest

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txinboxtest/pgcontainer"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// EnvURL names the environment variable that selects the test server:
// TXINBOX_TEST_DATABASE_URL.
const EnvURL = testdb.EnvURL

// URL returns the connection string of the chosen server (see the package documentation), failing t
// if there is none.
func URL(t testing.TB) string {
	t.Helper()
	u, err := server()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// server chooses the server once per test binary: testdb's Finder, whose last choice, a container,
// starts in this process.
var server = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), testdb.FindTimeout)
	defer cancel()
	f := testdb.DefaultFinder()
	f.Container = startContainer
	return f.Find(ctx)
})

// startContainer starts a PostgreSQL container with testcontainers-go and returns its URL. The
// container is not removed by this process: testcontainers' reaper removes it once the process has
// exited.
func startContainer(ctx context.Context) (string, error) {
	u, _, err := pgcontainer.Start(ctx)
	return u, err
}

// DB is one test's schema: txinbox's tables migrated into it, and a pool whose connections have it as
// their search_path, so that the test's own tables, created through Pool without a schema name, live
// there too.
type DB struct {
	// Pool is closed when the test ends. Its connections' search_path is Schema.
	Pool *pgxpool.Pool
	// Schema is the test's schema, txinbox_test_<random>; give it as the Schema of txinbox's configs
	// ([DB.Store] does). It is dropped, with everything in it, when the test ends.
	Schema string
	// URL is the server's connection string (without search_path).
	URL string
}

// Store returns the txinbox.Store of the test's schema on its pool, every other field zero (their
// defaults): give it to inbox.New, worker.New, outbox.New, outbox.NewRelay.
func (d *DB) Store() txinbox.Store { return txinbox.Store{DB: d.Pool, Schema: d.Schema} }

// New creates a fresh schema for t on the chosen server, applies txinbox's migrations to it, and
// returns it with a pool (at most 16 connections) whose search_path is that schema. When t ends, the
// pool is closed and the schema dropped. Tests using New may run in parallel (t.Parallel).
func New(t testing.TB) *DB {
	t.Helper()
	url := URL(t)
	schema := testdb.NewSchemaAt(t, url)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := testdb.Migrate(ctx, cfg.ConnConfig, schema); err != nil {
		t.Fatalf("txinboxtest: migrate %s: %v", schema, err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &DB{Pool: pool, Schema: schema, URL: url}
}
