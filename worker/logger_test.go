package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// logBuffer collects a JSON slog handler's output; safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// find returns the records whose message is msg, failing the test on a line that is not JSON.
func (b *logBuffer) find(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range b.records(t) {
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// records returns every record, failing the test on a line that is not JSON.
func (b *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	text := b.buf.String()
	b.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// A claim that fails (here: the queue table is missing) is logged at WARN with the consumer and the
// database error, and the pool claims again after it is fixed.
func TestLogClaimFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	logs := &logBuffer{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	// Start checks the tables, so they go away once the pool runs.
	run(t, e.poolOn(t, e.storeLogging(logs), hs, worker.NoListen))
	if _, err := e.Pool.Exec(ctx, e.SQL(`ALTER TABLE {schema}.inbox_queue RENAME TO inbox_queue_away`)); err != nil {
		t.Fatal(err)
	}
	const msg = "txinbox: claim failed"
	waitFor(t, "a claim failure logged", func() bool { return len(logs.find(t, msg)) > 0 })
	r := logs.find(t, msg)[0]
	if r["level"] != "WARN" || r["consumer"] != "ledger" {
		t.Errorf("record %v: want level WARN, consumer ledger", r)
	}
	if err, _ := r["err"].(string); !strings.Contains(err, "inbox_queue") || !strings.Contains(err, "42P01") {
		t.Errorf("record err = %q, want the missing relation (SQLSTATE 42P01)", r["err"])
	}
	if _, err := e.Pool.Exec(ctx, e.SQL(`ALTER TABLE {schema}.inbox_queue_away RENAME TO inbox_queue`)); err != nil {
		t.Fatal(err)
	}
	e.receive(t, "a")
	waitFor(t, "the message to complete once claims work again", func() bool { return e.count(t, "completed") == 1 })
}

// A handler that breaks its batch transaction (its connection is terminated) has its failure recorded;
// the rollback of the batch is logged at WARN with the consumer, the number of messages and the
// culprit.
func TestLogBatchRolledBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.receive(t, "killer")
	var id int64
	if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT id FROM {schema}.inbox WHERE key = 'killer'`)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	var killed atomic.Bool
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		if err := applyCredit(ctx, tx, e.Schema, m); err != nil {
			return err
		}
		if killed.CompareAndSwap(false, true) {
			_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
			return err
		}
		return nil
	})
	run(t, e.poolOn(t, e.storeLogging(logs), hs, worker.NoListen))
	waitFor(t, "completion after the failure", func() bool { return e.count(t, "completed") == 1 })
	if _, started, failed, _ := e.state(t, "killer"); started != 2 || failed != 1 || !strings.Contains(e.lastFailure(t, "killer"), "57P01") {
		lastErr := e.lastFailure(t, "killer")
		t.Errorf("killer: started %d, failed %d, last_error %q; want the terminated attempt recorded", started, failed, lastErr)
	}
	rs := logs.find(t, "txinbox: batch rolled back")
	if len(rs) != 1 {
		t.Fatalf("%d batch rollbacks logged, want 1", len(rs))
	}
	r := rs[0]
	if r["level"] != "WARN" || r["consumer"] != "ledger" || r["messages"] != float64(1) {
		t.Errorf("record %v: want level WARN, consumer ledger, messages 1", r)
	}
	if err, _ := r["err"].(string); !strings.HasPrefix(err, fmt.Sprintf("message %d: ", id)) {
		t.Errorf("record err = %q, want it to name message %d", r["err"], id)
	}
}

// notAPool is a DB that is not a *pgxpool.Pool: the pool has no connection to listen on.
type notAPool struct{ *pgxpool.Pool }

// Without a connection to LISTEN on, the pool says so at INFO, with its consumer and poll interval.
func TestLogPollingOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logs := &logBuffer{}
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	p, err := worker.New(txinbox.Store{DB: notAPool{e.Pool}, Schema: e.Schema, Logger: logs.logger()}, worker.Config{Consumer: "ledger",
		Handlers: hs, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	run(t, p)
	rs := logs.find(t, "txinbox: no connection to LISTEN on (the Store's DB is not a *pgxpool.Pool); polling only")
	if len(rs) != 1 {
		t.Fatalf("%d records, want 1", len(rs))
	}
	if r := rs[0]; r["level"] != "INFO" || r["consumer"] != "ledger" || r["poll_interval"] != float64(20*time.Millisecond) {
		t.Errorf("record %v: want level INFO, consumer ledger, poll_interval 20ms in ns", r)
	}
	e.receive(t, "polled")
	waitFor(t, "the message to be found by polling", func() bool { return e.count(t, "completed") == 1 })
}
