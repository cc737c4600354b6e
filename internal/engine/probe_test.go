package engine_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txinbox/txinbox/internal/engine"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// The check after LISTEN is sent from a session other than the listening one. Behind PgBouncer in
// transaction mode, a session is handed back the notifications of its own transactions, so a check
// sent on the listening connection could come back through the one server session that both ran on,
// and the engine would wait for wake-ups that never come. (TestPgBouncerTransactionModeFallsBackToPolling
// shows it behind a real PgBouncer, but which server session PgBouncer hands out decides there; here the
// sending backend's pid, which every notification carries, decides.)
func TestListenCheckIsSentFromAnotherSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	channel := "txinbox_probe_test_" + strings.ReplaceAll(t.Name(), "/", "_")

	// The test's own listener sees every notification on the channel, with the pid that sent it.
	watcher, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = watcher.Close(context.Background()) })
	if _, err := watcher.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	var claims atomic.Int64
	e := startEngine(t, engine.Config{Runners: 1, PollInterval: time.Hour, HotWindow: -1,
		Listen: engine.Listen{Channel: channel, Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.Connect(ctx, db.URL)
		}}}, func() engine.Runner {
		return &fakeRunner{claims: &claims, claim: func() engine.Outcome { return engine.Idle }}
	})

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var probe *pgconn.Notification
	for probe == nil {
		n, err := watcher.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no check notification on %s: %v", channel, err)
		}
		if strings.HasPrefix(n.Payload, engine.ProbePrefix) {
			probe = n
		}
	}
	waitFor(t, "the engine to listen after its check", 30*time.Second, func() bool { return e.ListenPID() != 0 })
	if probe.PID == e.ListenPID() {
		t.Fatalf("the check %q was sent by the listening session (pid %d): behind a pooler in transaction mode it would come back and hide that notifications do not", probe.Payload, probe.PID)
	}
}
