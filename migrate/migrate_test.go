package migrate_test

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/migrations"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

func tables(t *testing.T, url, schema string) []string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	schema, url := testdb.NewSchema(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := migrate.New(ctx, cfg, txinbox.Store{Schema: schema}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tables(t, url, schema); !slices.Contains(got, "inbox") || !slices.Contains(got, "inbox_queue") || !slices.Contains(got, migrate.VersionTable) {
		t.Fatalf("after up: %s", strings.Join(got, ","))
	}
	if _, err := m.DownTo(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tables(t, url, schema), ","); got != migrate.VersionTable {
		t.Fatalf("after down: %s", got)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Errorf("not applied after up: %+v", s)
		}
	}
	// Up again is a no-op.
	if rs, err := m.Up(ctx); err != nil || len(rs) != 0 {
		t.Fatalf("second up: %v %v", rs, err)
	}
}

// The same files run with the goose CLI, and the state it records is the one Migrate reads.
func TestMigrationsWithGooseCLI(t *testing.T) {
	t.Parallel()
	goose := gooseBinary(t)
	schema, url := testdb.NewSchema(t)
	dsn := url + "&search_path=" + schema
	if !strings.Contains(url, "?") {
		dsn = url + "?search_path=" + schema
	}
	gooseRun := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goose, append([]string{"-dir", "../migrations", "-table", migrate.VersionTable, "postgres", dsn}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("goose %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	gooseRun("up")
	if got := tables(t, url, schema); !slices.Contains(got, "inbox") || !slices.Contains(got, "inbox_queue") {
		t.Fatalf("after goose up: %s", strings.Join(got, ","))
	}
	gooseRun("down-to", "0")
	if got := strings.Join(tables(t, url, schema), ","); got != migrate.VersionTable {
		t.Fatalf("after goose down: %s", got)
	}
	gooseRun("up")
	// Migrate from Go sees the CLI's state and has nothing to do.
	cfg, _ := pgx.ParseConfig(url)
	m, err := migrate.New(context.Background(), cfg, txinbox.Store{Schema: schema}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if rs, err := m.Up(context.Background()); err != nil || len(rs) != 0 {
		t.Fatalf("Migrate after goose up: %v %v", rs, err)
	}
	if out := gooseRun("status"); !strings.Contains(out, "00001_inbox.sql") {
		t.Fatalf("goose status: %s", out)
	}
}

// gooseBinary returns the goose CLI pinned in tools/go.mod: $TXINBOX_GOOSE if set (make builds it),
// else built here.
func gooseBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TXINBOX_GOOSE"); p != "" {
		return p
	}
	out := filepath.Join(t.TempDir(), "goose")
	cmd := exec.Command("go", "build", "-o", out, "github.com/pressly/goose/v3/cmd/goose")
	cmd.Dir = "../tools/goose"
	cmd.Env = append(os.Environ(), "GOFLAGS=-tags=no_clickhouse,no_libsql,no_mssql,no_azuresql,no_mysql,no_sqlite3,no_vertica,no_ydb")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the goose CLI: %v\n%s", err, b)
	}
	return out
}

const migrateChildEnv = "TXINBOX_MIGRATE_CHILD"

func TestMain(m *testing.M) {
	if url := os.Getenv(migrateChildEnv); url != "" {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			err = migrate.Up(ctx, txinbox.Store{DB: conn, Schema: os.Getenv("TXINBOX_MIGRATE_SCHEMA")})
			_ = conn.Close(ctx)
		}
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Several processes migrating one fresh schema at once: all succeed, and it is migrated once.
func TestConcurrentMigrateProcesses(t *testing.T) {
	t.Parallel()
	_, url := testdb.NewSchema(t) // only to reserve cleanup on the server; the schema below is new
	schema := "txinbox_test_mig_" + strings.ReplaceAll(t.Name(), "/", "_")[:8] + randSuffix(t)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), url)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			c.Close(context.Background())
		}
	})
	var wg sync.WaitGroup
	errs := make([]error, 4)
	outs := make([][]byte, 4)
	for i := range 4 {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), migrateChildEnv+"="+url, "TXINBOX_MIGRATE_SCHEMA="+schema)
			outs[i], errs[i] = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("process %d: %v\n%s", i, err, outs[i])
		}
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var applied int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, migrate.VersionTable}.Sanitize()+" WHERE version_id > 0").Scan(&applied); err != nil {
		t.Fatal(err)
	}
	files, _ := fs.Glob(migrations.FS, "*.sql")
	if applied != len(files) {
		t.Fatalf("version rows = %d, want %d (each migration applied once)", applied, len(files))
	}
}

func randSuffix(t *testing.T) string {
	s, _ := testdb.NewSchema(t)
	return s[len(s)-6:]
}

// schemaExists reports whether schema exists.
func schemaExists(t *testing.T, url, schema string) bool {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var ok bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// NewMigrator, State, Status, Down and DownTo write nothing to a schema that does not exist or was
// never migrated; Up creates it.
func TestMigratorReadOnlyUntilUp(t *testing.T) {
	t.Parallel()
	existing, url := testdb.NewSchema(t) // exists, never migrated
	missing := existing + "_missing"     // never created (unless by a bug: then dropped below)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), url)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{missing}.Sanitize()+" CASCADE")
			c.Close(context.Background())
		}
	})
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	files, _ := fs.Glob(migrations.FS, "*.sql")
	for _, tc := range []struct {
		schema string
		want   migrate.SchemaState
	}{{missing, migrate.SchemaState{}}, {existing, migrate.SchemaState{SchemaExists: true}}} {
		m, err := migrate.New(ctx, cfg, txinbox.Store{Schema: tc.schema}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := m.State(ctx); err != nil || st != tc.want {
			t.Errorf("%s: state %+v, %v; want %+v", tc.schema, st, err, tc.want)
		}
		st, err := m.Status(ctx)
		if err != nil || len(st) != len(files) {
			t.Fatalf("%s: status %+v, %v", tc.schema, st, err)
		}
		for i, s := range st {
			if s.Applied || s.Name != files[i] {
				t.Errorf("%s: status %+v, want %s not applied", tc.schema, s, files[i])
			}
		}
		if rs, err := m.Down(ctx); err != nil || len(rs) != 0 {
			t.Errorf("%s: down: %+v, %v; want nothing to roll back", tc.schema, rs, err)
		}
		if rs, err := m.DownTo(ctx, 0); err != nil || len(rs) != 0 {
			t.Errorf("%s: down to 0: %+v, %v; want nothing to roll back", tc.schema, rs, err)
		}
		m.Close()
		if got := schemaExists(t, url, tc.schema); got != tc.want.SchemaExists {
			t.Errorf("%s: exists = %v after read-only calls", tc.schema, got)
		}
		if got := tables(t, url, tc.schema); len(got) != 0 {
			t.Errorf("%s: tables %v after read-only calls", tc.schema, got)
		}
	}

	// Up creates the missing schema; after rolling everything back, Down has nothing to do.
	m, err := migrate.New(ctx, cfg, txinbox.Store{Schema: missing}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if rs, err := m.Up(ctx); err != nil || len(rs) != len(files) {
		t.Fatalf("up: %+v, %v", rs, err)
	}
	if st, err := m.State(ctx); err != nil || st != (migrate.SchemaState{SchemaExists: true, Migrated: true}) {
		t.Fatalf("state after up: %+v, %v", st, err)
	}
	for range files {
		if rs, err := m.Down(ctx); err != nil || len(rs) != 1 {
			t.Fatalf("down: %+v, %v", rs, err)
		}
	}
	if rs, err := m.Down(ctx); err != nil || len(rs) != 0 {
		t.Fatalf("down with nothing applied: %+v, %v; want no result and no error", rs, err)
	}
}
