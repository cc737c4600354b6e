// Package plantest reads the generic plans of txinbox's statements in tests.
//
// PostgreSQL runs a prepared statement with a generic plan (made without the parameters' values)
// from its sixth run on when it costs no more than the custom plans before it, and always under
// plan_cache_mode = force_generic_plan. EXPLAIN of a statement with parameters plans it with their
// values (a custom plan), so a generic plan is read with EXPLAIN EXECUTE of a prepared statement.
//
// The package is txinbox's own test support: a program may import it, but its API may change in any
// release (the test kit for code using txinbox is package txinboxtest).
package plantest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// ExplainGeneric runs sql with args on conn as PostgreSQL runs a prepared statement with a generic
// plan, under EXPLAIN (ANALYZE, FORMAT JSON), in a transaction it rolls back, and returns the plan.
// The plan is made now, for the tables as they are.
func ExplainGeneric(t testing.TB, conn *pgx.Conn, sql string, args []any) []byte {
	t.Helper()
	f := Freeze(t, conn, sql, args)
	defer f.Close()
	return f.Explain(args)
}

// Frozen is a statement prepared on a connection whose generic plan is made once, as PostgreSQL
// keeps it for a prepared statement until a table it reads is analyzed or altered, however much the
// tables grow meanwhile.
type Frozen struct {
	t    testing.TB
	conn *pgx.Conn
	name string
	sql  string
	n    int // parameters
}

// Freeze prepares sql on conn and makes its generic plan now, for the tables as they are (EXPLAIN
// EXECUTE with args, which plans without running). The connection runs every prepared statement with
// its generic plan (plan_cache_mode = force_generic_plan) until Close; keep it for the plans' reads.
func Freeze(t testing.TB, conn *pgx.Conn, sql string, args []any) *Frozen {
	t.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	f := &Frozen{t: t, conn: conn, name: "txinbox_plantest_" + hex.EncodeToString(b), sql: sql, n: len(args)}
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "PREPARE "+f.name+" AS "+sql); err != nil {
		f.Close()
		t.Fatalf("prepare %s: %v", firstLine(sql), err)
	}
	rows, err := conn.Query(ctx, "EXPLAIN EXECUTE "+f.call(), append([]any{pgx.QueryExecModeSimpleProtocol}, args...)...)
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		f.Close()
		t.Fatalf("plan %s: %v", firstLine(sql), err)
	}
	return f
}

// call is "name($1, ..., $n)".
func (f *Frozen) call() string {
	ps := make([]string, f.n)
	for i := range ps {
		ps[i] = fmt.Sprintf("$%d", i+1)
	}
	return f.name + "(" + strings.Join(ps, ", ") + ")"
}

// Explain runs the frozen plan with args under EXPLAIN (ANALYZE, FORMAT JSON), in a transaction it
// rolls back, and returns the plan.
func (f *Frozen) Explain(args []any) []byte {
	f.t.Helper()
	ctx := context.Background()
	tx, err := f.conn.Begin(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var plan []byte
	// EXPLAIN EXECUTE takes no parameters of its own: pgx writes the values into the text (simple
	// protocol, quoted by pgx).
	args = append([]any{pgx.QueryExecModeSimpleProtocol}, args...)
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE "+f.call(), args...).Scan(&plan); err != nil {
		f.t.Fatalf("explain %s: %v", firstLine(f.sql), err)
	}
	return plan
}

// Close deallocates the statement and gives the connection its default plan_cache_mode again.
func (f *Frozen) Close() {
	ctx := context.Background()
	_, _ = f.conn.Exec(ctx, "DEALLOCATE "+f.name)
	_, _ = f.conn.Exec(ctx, "RESET plan_cache_mode")
}

func firstLine(sql string) string { return strings.SplitN(sql, "\n", 2)[0] }

// LastStatement is a pgx.QueryTracer that records the text and arguments of the last statement sent
// whose text starts with Prefix (a sqlc statement's "-- name: X " line), for ExplainGeneric.
type LastStatement struct {
	Prefix string

	mu   sync.Mutex
	sql  string
	args []any
}

// TraceQueryStart implements pgx.QueryTracer.
func (l *LastStatement) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, l.Prefix) {
		l.mu.Lock()
		l.sql, l.args = d.SQL, d.Args
		l.mu.Unlock()
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (l *LastStatement) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Connect opens a connection to url, closed when t ends, that records the last statement whose text
// starts with prefix.
func Connect(t testing.TB, url, prefix string) (*pgx.Conn, *LastStatement) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	rec := &LastStatement{Prefix: prefix}
	cfg.Tracer = rec
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn, rec
}

// Last returns the text and a copy of the arguments of the last statement recorded.
func (l *LastStatement) Last() (sql string, args []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sql, append([]any(nil), l.args...)
}

// Node is one node of a plan, with the fields the checks read.
type Node struct {
	Type, Relation, IndexCond string
	Loops, Rows, Removed      float64
	Raw                       map[string]any
}

// Nodes returns every node of plan (EXPLAIN (ANALYZE, FORMAT JSON) output).
func Nodes(t testing.TB, plan []byte) []Node {
	t.Helper()
	var doc any
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	var out []Node
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if typ, ok := v["Node Type"].(string); ok {
				num := func(k string) float64 { f, _ := v[k].(float64); return f }
				rel, _ := v["Relation Name"].(string)
				cond, _ := v["Index Cond"].(string)
				out = append(out, Node{Type: typ, Relation: rel, IndexCond: cond, Loops: num("Actual Loops"),
					Rows: num("Actual Rows"), Removed: num("Rows Removed by Filter") + num("Rows Removed by Join Filter"), Raw: v})
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	return out
}

// CheckLinear fails t if a node of plan ran more than limit times, or handled more than limit rows
// in all its loops (rows returned and rows removed by its filters), and then logs the plan.
func CheckLinear(t testing.TB, name string, plan []byte, limit int) {
	t.Helper()
	bad := false
	for _, n := range Nodes(t, plan) {
		if handled := n.Loops * (n.Rows + n.Removed); n.Loops > float64(limit) || handled > float64(limit) {
			t.Errorf("%s: %s %s ran %v times and handled %v rows (at most %d expected)", name, n.Type, n.Relation, n.Loops, handled, limit)
			bad = true
		}
	}
	if bad {
		t.Logf("%s plan:\n%s", name, plan)
	}
}
