package doctest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// guideSchema is the schema the migrations guide uses.
const guideSchema = "billing"

// gooseBinary returns the goose CLI pinned in tools/goose: $TXINBOX_GOOSE (make's bin/goose), which
// must then exist, else one built here from tools/goose with the Makefile's GOOSE_TAGS. It never
// skips.
func gooseBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TXINBOX_GOOSE"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("TXINBOX_GOOSE=%s: %v", p, err)
		}
		return p
	}
	out := filepath.Join(t.TempDir(), "goose")
	cmd := exec.Command("go", "build", "-o", out, "github.com/pressly/goose/v3/cmd/goose")
	cmd.Dir = filepath.Join(repoRoot, "tools", "goose")
	cmd.Env = append(os.Environ(), "GOFLAGS=-tags="+makeVar(t, "GOOSE_TAGS"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the goose CLI: %v\n%s", err, b)
	}
	return out
}

// newDatabase creates a database on the test server and drops it when t ends; it returns its URL.
func newDatabase(t *testing.T) string {
	t.Helper()
	server := testdb.URL(t)
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("the test server's connection string must be a postgres:// URL here, not %q (%v)", server, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "txinbox_doc_" + hex.EncodeToString(b)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), server)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// guideState is what the schema holds: its tables and functions, and the migrations applied.
type guideState struct {
	objects []string // tables and functions of the schema, sorted
	applied int      // migrations applied
	total   int      // migrations known
}

func readGuideState(t *testing.T, dbURL string) guideState {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT relname FROM pg_class WHERE relnamespace = $1::regnamespace AND relkind IN ('r', 'p')
		UNION ALL SELECT proname FROM pg_proc WHERE pronamespace = $1::regnamespace ORDER BY 1`, guideSchema)
	if err != nil {
		t.Fatal(err)
	}
	var st guideState
	if st.objects, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	m, err := migrate.New(ctx, c.Config(), txinbox.Store{Schema: guideSchema}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	status, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.total = len(status)
	for _, s := range status {
		if s.Applied {
			st.applied++
		}
	}
	return st
}

// docs/migrations.md works as written for a module user: each shell block marked <!-- test: ... -->
// runs, in order, in an empty application module that requires this tree's txinbox (through a replace
// directive) and holds the guide's Go program, against a database of its own, with the pinned goose
// on PATH. A block marked "from scratch" starts without the schema; after a block marked "migrated"
// every migration is applied and each table and function of the schema is named in the guide; after
// one marked "rolled back" none is applied and only the version table is left.
func TestMigrationsGuide(t *testing.T) {
	t.Parallel()
	const guide = "docs/migrations.md"
	text, err := os.ReadFile(filepath.Join(repoRoot, guide))
	if err != nil {
		t.Fatal(err)
	}
	var program string
	for _, b := range fencedBlocks(t, guide, "go") {
		if strings.HasPrefix(b.code, "package main\n") {
			program = b.code
			break
		}
	}
	var steps []block
	for _, b := range fencedBlocks(t, guide, "sh") {
		if strings.HasPrefix(b.comment, "test:") {
			steps = append(steps, b)
		}
	}
	if program == "" || len(steps) == 0 {
		t.Fatalf("%s has no Go program or no shell block marked <!-- test: ... -->", guide)
	}
	// The README's goose commands are the guide's, for another schema.
	readme := fencedBlocks(t, "README.md", "sh")
	i := slices.IndexFunc(readme, func(b block) bool { return strings.Contains(b.code, "goose ") })
	if i < 0 || !slices.ContainsFunc(steps, func(s block) bool {
		return s.code == strings.ReplaceAll(readme[i].code, "myschema", guideSchema)
	}) {
		t.Errorf("README.md has no goose block, or it is not one of the guide's tested blocks (with schema myschema for %s)", guideSchema)
	}
	if _, err := exec.LookPath("psql"); err != nil {
		t.Fatalf("the guide's commands need psql (PostgreSQL's client): %v", err)
	}
	bin := t.TempDir()
	if err := os.Symlink(gooseBinary(t), filepath.Join(bin, "goose")); err != nil {
		t.Fatal(err)
	}
	dbURL := newDatabase(t)
	dir := newAppModule(t, ".")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, goEnv(), "go", "mod", "tidy") // what `go get github.com/txinbox/txinbox@VERSION` leaves

	// The user's environment, with the database and goose: no GOFLAGS of the test's, no PGOPTIONS.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOFLAGS=") && !strings.HasPrefix(kv, "PGOPTIONS=") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	env = append(env, "GOWORK=off", "DATABASE_URL="+dbURL, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for _, s := range steps {
		if strings.Contains(s.comment, "from scratch") {
			if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{guideSchema}.Sanitize()+" CASCADE"); err != nil {
				t.Fatal(err)
			}
		}
		out := run(t, dir, env, "bash", "-euo", "pipefail", "-c", s.code)
		t.Logf("%s:%d (%s):\n%s%s", s.doc, s.line, s.comment, s.code, out)
		st := readGuideState(t, dbURL)
		switch {
		case strings.Contains(s.comment, "migrated"):
			if st.applied != st.total || !slices.Contains(st.objects, "inbox") || !slices.Contains(st.objects, "inbox_queue") {
				t.Fatalf("%s:%d: after the block: %d of %d migrations applied, schema holds %v", s.doc, s.line, st.applied, st.total, st.objects)
			}
			for _, o := range st.objects {
				if !strings.Contains(string(text), "`"+o+"`") {
					t.Errorf("%s: the schema holds %s, which the guide does not name", guide, o)
				}
			}
		case strings.Contains(s.comment, "rolled back"):
			if st.applied != 0 || !slices.Equal(st.objects, []string{migrate.VersionTable}) {
				t.Fatalf("%s:%d: after the block: %d of %d migrations applied, schema holds %v; want none, and %s only",
					s.doc, s.line, st.applied, st.total, st.objects, migrate.VersionTable)
			}
		}
	}
}
