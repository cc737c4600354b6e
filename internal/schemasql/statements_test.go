package schemasql_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txinbox/txinbox/internal/schemasql"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// subscriptOfArrayParameter matches an element read by subscript from an array parameter, such as
// `(@keys::text[])[i]` or `($3::text[])[s.i]`.
var subscriptOfArrayParameter = regexp.MustCompile(`\(\s*[@$]\w+::\w+\[\]\s*\)\s*\[`)

// TestStatementsReadArrayParametersSideBySide keeps every statement in queries/ reading its array
// parameters with unnest (ROWS FROM for several side by side), never element by element with a
// subscript: PostgreSQL finds element i of an array of a variable-length type (text, jsonb, bytea)
// by walking it from its first element, so a statement reading element i of each row of a batch of
// n cost n²/2 steps per array. FinishBatch did so with four text arrays: about 5 µs of server CPU per
// message at a batch of 500, 9% of a batch-handler drain's server CPU (docs/design/drain-limits.md,
// "Batch handler: the guarantees' statements").
func TestStatementsReadArrayParametersSideBySide(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "queries", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no queries/*.sql found")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := ""
		for i, line := range strings.Split(string(b), "\n") {
			if n, ok := strings.CutPrefix(line, "-- name: "); ok {
				name = strings.Fields(n)[0]
			}
			if strings.HasPrefix(strings.TrimSpace(line), "--") {
				continue
			}
			for _, m := range subscriptOfArrayParameter.FindAllString(line, -1) {
				t.Errorf("%s:%d (%s): %q reads an array parameter by subscript; read it with unnest (ROWS FROM) instead",
					filepath.Base(f), i+1, name, m)
			}
		}
	}
}

// TestStatementsTakeNoJSONParameter keeps every generated statement (internal/sqlc) free of json and
// jsonb parameters: sqlc types them []byte, which pgx's exec and simple-protocol modes (those a pooler
// in transaction mode needs: docs/operations.md, "PgBouncer") send as bytea, and PostgreSQL refuses
// the value ("invalid input syntax for type json"). Cast such a parameter from text instead,
// (@headers::text)::jsonb, and pass a string. Each statement is prepared, unnamed, on a migrated
// schema, and the types the server gives its parameters are read.
func TestStatementsTakeNoJSONParameter(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	st := schemasql.New(db.Schema)
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	files, err := filepath.Glob(filepath.Join("..", "sqlc", "*.sql.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no internal/sqlc/*.sql.go found: %v", err)
	}
	n := 0
	for _, f := range files {
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				for _, v := range s.(*ast.ValueSpec).Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					sql, err := strconv.Unquote(lit.Value)
					if err != nil || !strings.HasPrefix(sql, "-- name: ") {
						continue
					}
					name := strings.Fields(sql)[2]
					n++
					sd, err := conn.Conn().PgConn().Prepare(ctx, "", st.SQL(sql), nil)
					if err != nil {
						t.Errorf("%s: prepare: %v", name, err)
						continue
					}
					for i, oid := range sd.ParamOIDs {
						if oid == pgtype.JSONOID || oid == pgtype.JSONBOID {
							t.Errorf("%s: parameter $%d is json or jsonb: cast it from text, (@name::text)::jsonb", name, i+1)
						}
					}
				}
			}
		}
	}
	if n < 50 {
		t.Fatalf("%d statements found in internal/sqlc: the walk is broken", n)
	}
	t.Logf("%d statements prepared", n)
}
