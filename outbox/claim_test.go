package outbox_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/txinbox/outbox"
)

// logRecords keeps the warnings a relay logs.
type logRecords struct {
	mu   sync.Mutex
	errs map[string][]string // message -> the "err" attribute of each record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" {
			l.errs[r.Message] = append(l.errs[r.Message], a.Value.String())
		}
		return true
	})
	return nil
}

func (l *logRecords) has(msg, sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs[msg] {
		if strings.Contains(e, sub) {
			return true
		}
	}
	return false
}

// A claim runs as one pipeline (the statement_timeout, the claim lock, the claim) on a pool: the
// ClaimTimeout still bounds its wait for the claim lock (the claim is cancelled by statement_timeout,
// SQLSTATE 57014, and nothing of it is committed), and once the lock is free the next claim takes
// the event, with its first attempt: the cancelled claim charged none.
func TestClaimTimeoutBoundsAPipelinedClaimWaitingForTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.publish(t, msg("t", "k", 1))
	logs := &logRecords{errs: map[string][]string{}}
	rec := newRecorder(t, nil)
	r := e.relay(t, rec, func(c *outbox.RelayConfig) {
		c.Lease, c.ClaimTimeout, c.Concurrency, c.DisableListen = 2*time.Second, 200*time.Millisecond, 1, true
		c.Logger = slog.New(logs)
	})
	holder, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", outbox.ClaimLockKey(r)); err != nil {
		t.Fatal(err)
	}
	run(t, r)
	waitFor(t, `a claim cancelled by statement_timeout (SQLSTATE 57014) logged`, func() bool {
		return logs.has("txinbox: outbox claim failed", "57014")
	})
	if got := e.Count(t, `SELECT count(*) FROM {schema}.outbox_queue WHERE claimed OR attempts_started > 0`); got != 0 {
		t.Fatalf("%d queue rows claimed or charged while the claim lock was held elsewhere, want 0", got)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event sent", func() bool { return e.count(t, "sent") == 1 })
	evs := rec.ackedEvents()
	if len(evs) != 1 || evs[0].Attempt != 1 {
		t.Fatalf("acknowledged %+v, want the event once, at attempt 1", evs)
	}
}
