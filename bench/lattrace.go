package bench

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// claimTracer is the pgx tracer of SteadyLatency's pool: it follows each message from its claim to
// its handler. Per connection it keeps the last claim (a pipeline holding ClaimBatch or
// ClaimSuspects): its start and end, and how many rows it returned. When a handler's ledger INSERT
// starts on a connection, the message it writes (by its key) is taken by that connection's last
// claim: the handler runs in the claim's transaction, on its connection. Each RecordBatch (on the
// pool's records connection, which carries the same tracer) is kept by the ids of the messages it
// records.
type claimTracer struct {
	clk    clock
	insert string // the handlers' INSERT up to its columns, "INSERT INTO <ledger> " (set before the pool starts)
	// claimOf[n] is 1 + the index in claims of the claim that took message n (0: not seen yet).
	claimOf []atomic.Int64

	mu      sync.Mutex
	last    map[*pgx.Conn]int // connection -> index in claims of its last claim
	claims  []claimSpan
	records map[int64]span // message id -> the RecordBatch that recorded its batch
}

type span struct{ start, end int64 }

type claimSpan struct {
	span
	rows     int  // rows the claim returned (its command tag)
	suspects bool // ClaimSuspects (the rescuer's), not ClaimBatch
}

type claimTraceKey struct{}

// pendingClaim is a claim under way, carried in the context pgx passes from the batch's start to its end.
type pendingClaim struct {
	start    int64
	rows     int
	suspects bool
}

// pendingRecord is a RecordBatch under way.
type pendingRecord struct {
	start int64
	ids   []int64
}

func newClaimTracer(clk clock, messages int) *claimTracer {
	return &claimTracer{clk: clk, claimOf: make([]atomic.Int64, messages+1),
		last: map[*pgx.Conn]int{}, records: map[int64]span{}}
}

// TraceBatchStart implements pgx.BatchTracer.
func (t *claimTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		switch {
		case t.insert != "" && strings.HasPrefix(q.SQL, t.insert):
			t.handled(conn, q.Arguments)
		case strings.Contains(q.SQL, "-- name: Claim"):
			switch stmtName(q.SQL) {
			case "ClaimBatch":
				return context.WithValue(ctx, claimTraceKey{}, &pendingClaim{start: t.clk.now()})
			case "ClaimSuspects":
				return context.WithValue(ctx, claimTraceKey{}, &pendingClaim{start: t.clk.now(), suspects: true})
			}
		}
	}
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer: it counts the rows of the claim.
func (t *claimTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if c, ok := ctx.Value(claimTraceKey{}).(*pendingClaim); ok && d.Err == nil {
		if n := stmtName(d.SQL); n == "ClaimBatch" || n == "ClaimSuspects" {
			c.rows = int(d.CommandTag.RowsAffected())
		}
	}
}

// TraceBatchEnd implements pgx.BatchTracer: the claim ended; it is now its connection's last.
func (t *claimTracer) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	c, ok := ctx.Value(claimTraceKey{}).(*pendingClaim)
	if !ok {
		return
	}
	end := t.clk.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last[conn] = len(t.claims)
	t.claims = append(t.claims, claimSpan{span: span{c.start, end}, rows: c.rows, suspects: c.suspects})
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *claimTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	switch {
	case t.insert != "" && strings.HasPrefix(d.SQL, t.insert):
		t.handled(conn, d.Args)
	case strings.Contains(d.SQL, "-- name: RecordBatch"):
		for _, a := range d.Args {
			if ids, ok := a.([]int64); ok {
				return context.WithValue(ctx, claimTraceKey{}, &pendingRecord{start: t.clk.now(), ids: ids})
			}
		}
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *claimTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	r, ok := ctx.Value(claimTraceKey{}).(*pendingRecord)
	if !ok || d.Err != nil {
		return
	}
	s := span{r.start, t.clk.now()}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range r.ids {
		t.records[id] = s
	}
}

// handled notes that the messages of a handler's INSERT (its first argument: a key, or the keys of
// a batch handler's call) were taken by conn's last claim. A message called again (a batch-mate
// failed) keeps the claim of its first call.
func (t *claimTracer) handled(conn *pgx.Conn, args []any) {
	if len(args) == 0 {
		return
	}
	var keys []string
	switch k := args[0].(type) {
	case string:
		keys = []string{k}
	case []string:
		keys = k
	default:
		return
	}
	t.mu.Lock()
	c, ok := t.last[conn]
	t.mu.Unlock()
	if !ok {
		return
	}
	for _, k := range keys {
		n, err := strconv.Atoi(strings.TrimPrefix(k, "evt-"))
		if err == nil && n >= 1 && n < len(t.claimOf) {
			t.claimOf[n].CompareAndSwap(0, int64(c)+1)
		}
	}
}
