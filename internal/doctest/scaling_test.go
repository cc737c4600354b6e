package doctest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/migrate"
)

// updateDocs rewrites the generated parts of the documents instead of failing on them:
// go test ./internal/doctest -run TestScalingGuideDistributesEveryTable -update-docs
var updateDocs = flag.Bool("update-docs", false, "rewrite the documents' generated blocks")

// distributeSQL is the SQL of docs/scaling.md that distributes the tables by hand, generated from
// migrate.DistributedTables for the schema myschema: what migrate.Distribute runs.
func distributeSQL() string {
	var b strings.Builder
	b.WriteString("SET citus.enable_unsafe_triggers = on;  -- the dead-letter triggers of inbox (migration 00003)\n")
	first := "myschema." + migrate.DistributedTables[0]
	for i, table := range migrate.DistributedTables {
		if i == 0 {
			fmt.Fprintf(&b, "SELECT create_distributed_table('%s', 'consumer');\n", first)
			continue
		}
		fmt.Fprintf(&b, "SELECT create_distributed_table('myschema.%s', 'consumer', colocate_with => '%s');\n", table, first)
	}
	return b.String()
}

// The SQL route of docs/scaling.md distributes exactly the tables that migrate.Distribute does
// (migrate.DistributedTables, in its order, colocated with the first): a table added to the list is
// added to the guide, by -update-docs.
func TestScalingGuideDistributesEveryTable(t *testing.T) {
	const guide = "docs/scaling.md"
	var found *block
	for _, b := range fencedBlocks(t, guide, "sql") {
		if strings.Contains(b.code, "create_distributed_table") {
			if found != nil {
				t.Fatalf("%s:%d and %d: two SQL blocks call create_distributed_table; the guide has one", guide, found.line, b.line)
			}
			found = &b
		}
	}
	if found == nil {
		t.Fatalf("%s has no SQL block that calls create_distributed_table", guide)
	}
	want := distributeSQL()
	if found.code == want {
		return
	}
	if !*updateDocs {
		t.Fatalf("%s:%d: the SQL that distributes the tables is not the one generated from migrate.DistributedTables "+
			"(run this test with -update-docs to write it):\n got:\n%s\nwant:\n%s", guide, found.line, found.code, want)
	}
	path := filepath.Join(repoRoot, guide)
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(text), "\n")
	start := found.line - 1 // the block's first line of code, 0-based
	n := strings.Count(found.code, "\n")
	indent := lines[start][:len(lines[start])-len(strings.TrimLeft(lines[start], " \t"))]
	var repl []string
	for l := range strings.SplitSeq(strings.TrimSuffix(want, "\n"), "\n") {
		repl = append(repl, indent+l)
	}
	lines = append(lines[:start], append(repl, lines[start+n:]...)...)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s:%d: rewritten from migrate.DistributedTables", guide, found.line)
}

// coordinatorTablesLead starts the paragraph of docs/scaling.md that names the tables left on the
// coordinator.
const coordinatorTablesLead = "The other tables stay tables of the coordinator:"

// Every table of a migrated schema is either distributed (migrate.DistributedTables, which the guide's
// SQL lists) or named in the guide as a table of the coordinator, and every table the list names
// exists: a table that a new migration creates must be placed on one side or the other.
func TestScalingGuidePlacesEveryTable(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile(filepath.Join(repoRoot, "docs/scaling.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, para, ok := strings.Cut(string(text), coordinatorTablesLead)
	if !ok {
		t.Fatalf("docs/scaling.md has no paragraph starting %q", coordinatorTablesLead)
	}
	para, _, _ = strings.Cut(para, "\n\n")

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, newDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const schema = "placed"
	if err := migrate.Up(ctx, txinbox.Store{DB: pool, Schema: schema}); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT relname FROM pg_class
		WHERE relnamespace = $1::regnamespace AND relkind IN ('r', 'p') AND NOT relispartition ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		distributed := slices.Contains(migrate.DistributedTables, table)
		coordinator := strings.Contains(para, "`"+table+"`")
		switch {
		case distributed && coordinator:
			t.Errorf("%s is in migrate.DistributedTables and named in docs/scaling.md as a table of the coordinator", table)
		case !distributed && !coordinator:
			t.Errorf("%s is neither in migrate.DistributedTables nor named in docs/scaling.md (%q) as a table of the coordinator",
				table, coordinatorTablesLead)
		}
	}
	for _, table := range migrate.DistributedTables {
		if !slices.Contains(tables, table) {
			t.Errorf("migrate.DistributedTables names %s, which a migrated schema does not hold (%v)", table, tables)
		}
	}
}
