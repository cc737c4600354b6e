package schemasql_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
