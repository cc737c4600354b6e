package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// StatementStats is a pgx.QueryTracer that adds up, per statement, how many times it ran and how
// long the client waited for it (round trip and server execution). Statements are named by their
// sqlc name (the `-- name:` comment) or their first words.
type StatementStats struct {
	mu    sync.Mutex
	stats map[string]*stmtStat
}

type stmtStat struct {
	calls int
	total time.Duration
}

type traceKey struct{}

type traceStart struct {
	name  string
	start time.Time
}

// NewStatementStats returns an empty tracer.
func NewStatementStats() *StatementStats { return &StatementStats{stats: map[string]*stmtStat{}} }

// TraceQueryStart implements pgx.QueryTracer.
func (s *StatementStats) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, traceStart{name: stmtName(d.SQL), start: time.Now()})
}

// TraceQueryEnd implements pgx.QueryTracer.
func (s *StatementStats) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	s.end(ctx)
}

// TraceBatchStart implements pgx.BatchTracer: a pipelined batch is one entry, named after its
// statements.
func (s *StatementStats) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var names []string
	for _, q := range d.Batch.QueuedQueries {
		names = append(names, stmtName(q.SQL))
	}
	return context.WithValue(ctx, traceKey{}, traceStart{name: "pipeline: " + strings.Join(names, "; "), start: time.Now()})
}

// TraceBatchQuery implements pgx.BatchTracer.
func (s *StatementStats) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (s *StatementStats) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	s.end(ctx)
}

// Reset forgets everything traced so far (StartMonitor calls it: only measured phases count).
func (s *StatementStats) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = map[string]*stmtStat{}
}

func (s *StatementStats) end(ctx context.Context) {
	t, ok := ctx.Value(traceKey{}).(traceStart)
	if !ok {
		return
	}
	d := time.Since(t.start)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats[t.name]
	if st == nil {
		st = &stmtStat{}
		s.stats[t.name] = st
	}
	st.calls++
	st.total += d
}

func stmtName(sql string) string {
	sql = strings.TrimSpace(sql)
	if rest, ok := strings.CutPrefix(sql, "-- name: "); ok {
		if f := strings.Fields(rest); len(f) > 0 {
			return f[0]
		}
	}
	f := strings.Fields(sql)
	if len(f) > 3 {
		f = f[:3]
	}
	if len(f) > 0 && strings.EqualFold(f[0], "INSERT") && len(f) > 2 {
		f[2] = f[2][strings.LastIndexByte(f[2], '.')+1:] // drop the benchmark's schema name
	}
	return strings.Join(f, " ")
}

// Write prints the statements by total time, with calls and time per message for n messages.
func (s *StatementStats) Write(w io.Writer, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.stats))
	var all time.Duration
	for k, v := range s.stats {
		names = append(names, k)
		all += v.total
	}
	sort.Slice(names, func(i, j int) bool { return s.stats[names[i]].total > s.stats[names[j]].total })
	fmt.Fprintf(w, "| Statement | Calls | Calls/msg | Mean | Client wait µs/msg | Share |\n|---|---:|---:|---:|---:|---:|\n")
	for _, k := range names {
		v := s.stats[k]
		fmt.Fprintf(w, "| %s | %d | %.3f | %s | %.1f | %.0f%% |\n", k, v.calls, float64(v.calls)/float64(n),
			(v.total / time.Duration(v.calls)).Round(time.Microsecond), float64(v.total.Microseconds())/float64(n),
			100*float64(v.total)/float64(all))
	}
}
