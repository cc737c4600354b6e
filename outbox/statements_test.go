package outbox_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

const marker = "/* TEMPLATE: schema */"

// outboxObject matches a name of the outbox's tables, sequence and function (migration 00009).
var outboxObject = regexp.MustCompile(`\boutbox(?:_queue|_ring|_s[0-2]|_rotate|_id_seq)?\b`)

// statements returns the statements of queries/outbox.sql by name, without their comment lines.
func statements(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../queries/outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	name := ""
	for _, line := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(line, "-- name: "); ok {
			name = strings.Fields(n)[0]
			out[name] = ""
			continue
		}
		if name == "" || strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		out[name] += line + "\n"
	}
	if len(out) == 0 {
		t.Fatal("no statement in queries/outbox.sql")
	}
	return out
}

// nameTracer records, by the sqlc name at the head of its text ("-- name: X"), every statement run
// on its connections and the error of each that failed.
type nameTracer struct {
	mu     sync.Mutex
	ran    map[string]int
	failed map[string]error
}

type sqlKey struct{}

// The statements of a pipelined batch (the relay's claim) are traced one by one too.
func (tr *nameTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (tr *nameTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	tr.record(d.SQL, d.Err)
}

func (tr *nameTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (tr *nameTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlKey{}, d.SQL)
}

func (tr *nameTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(sqlKey{}).(string)
	tr.record(sql, d.Err)
}

func (tr *nameTracer) record(sql string, err error) {
	rest, ok := strings.CutPrefix(sql, "-- name: ")
	if !ok {
		return
	}
	name := strings.Fields(rest)[0]
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if err != nil {
		tr.failed[name] = err
	} else {
		tr.ran[name]++
	}
}

// Every statement of queries/outbox.sql names each table, sequence and function it uses with the
// schema template, and runs in the Store's schema, whatever the session's search_path: the package's
// whole road (Publish, a relay's claim, record and next-of-key, Start's check, a rotation) runs on
// connections whose search_path is an empty schema, where any unqualified name fails, and every
// statement must have run, none failed. (The outbox has no distribution column: it is not
// distributed, see migration 00009.)
func TestEveryStatementRunsInItsSchema(t *testing.T) {
	t.Parallel()
	stmts := statements(t)
	for name, sql := range stmts {
		for _, loc := range outboxObject.FindAllStringIndex(sql, -1) {
			if !strings.HasSuffix(sql[:loc[0]], marker) {
				t.Errorf("%s: %q is not qualified with the schema template", name, sql[loc[0]:loc[1]])
			}
		}
	}

	db := testdb.New(t)
	empty, _ := testdb.NewSchema(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &nameTracer{ran: map[string]int{}, failed: map[string]error{}}
	cfg.ConnConfig.RuntimeParams["search_path"] = empty
	cfg.ConnConfig.Tracer = tr
	cfg.MaxConns = 8
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := txinbox.Store{DB: pool, Schema: db.Schema}
	if _, err := pool.Exec(ctx, "SELECT * FROM outbox"); err == nil {
		t.Fatal("an unqualified table name works on these connections: the test proves nothing")
	}

	c, err := outbox.New(st, outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := c.Publish(ctx, tx, msg("t", "k1", 1), msg("t", "k2", 2)) // keyed, so that OutboxReadyNext runs
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r, err := outbox.NewRelay(st, outbox.RelayConfig{Publisher: newRecorder(t, nil), PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	outbox.SetSnooze(r, time.Hour)
	run(t, r)
	waitFor(t, "both events sent", func() bool { return db.Count(t, `SELECT count(*) FROM {schema}.outbox WHERE state = 'sent'`) == 2 })
	stop(t, r)
	if _, err := outbox.Rotate(ctx, st, outbox.RotateOptions{Force: true}); err != nil {
		t.Fatal(err)
	}

	tr.mu.Lock()
	defer tr.mu.Unlock()
	for name := range stmts {
		if err := tr.failed[name]; err != nil {
			t.Errorf("%s failed with search_path %s: %v", name, empty, err)
		} else if tr.ran[name] == 0 {
			t.Errorf("%s never ran: add it to this test's road", name)
		}
	}
}
