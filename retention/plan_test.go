package retention_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/retention"
)

// lastReceive records the text and arguments of the last ReceiveBatch statement sent on a connection.
type lastReceive struct {
	mu   sync.Mutex
	sql  string
	args []any
}

func (l *lastReceive) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "-- name: ReceiveBatch ") {
		l.mu.Lock()
		l.sql, l.args = d.SQL, d.Args
		l.mu.Unlock()
	}
	return ctx
}

func (l *lastReceive) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A generic plan of ReceiveBatch made while the current generation's partition looks empty (just
// truncated by a rotation, never analyzed) must still find each key by the unique key (consumer, key):
// one that joined the batch's keys by consumer alone read every row of the partition for every key,
// and receives slowed as the partition filled (bench/RESULTS.md, "Retention by generations"). The
// plan is read with EXPLAIN on a connection that forces generic plans.
func TestReceivePlanProbesKeysAfterRotation(t *testing.T) {
	t.Parallel()
	_, db := newClient(t)
	cl := newCleaner(t, db, retention.Config{})
	ctx := context.Background()
	rotate(t, cl)
	rotate(t, cl) // the current slot was truncated and has no statistics
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	rec := &lastReceive{}
	cfg.Tracer = rec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	c, err := inbox.New(txinbox.Store{DB: conn, Schema: db.Schema}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []inbox.Message
	for _, k := range keyRange("k", 20) {
		msgs = append(msgs, msg(k, `{"amount":1}`))
	}
	if _, err := c.ReceiveMany(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+rec.sql, rec.args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var nodes []map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if rel, _ := v["Relation Name"].(string); strings.HasPrefix(rel, "inbox_s") {
				nodes = append(nodes, v)
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
	var doc any
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	walk(doc)
	if len(nodes) == 0 {
		t.Fatalf("no scan of the inbox partitions in the plan:\n%s", plan)
	}
	for _, n := range nodes {
		cond, _ := n["Index Cond"].(string)
		if !strings.Contains(cond, "key =") {
			t.Errorf("%s on %s with index condition %q: not a probe of (consumer, key)\n%s", n["Node Type"], n["Relation Name"], cond, plan)
			return
		}
	}
}
