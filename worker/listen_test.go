package worker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

// The wake-up tests use a poll interval of an hour: a message handled within the test's deadline
// was found through a notification (or Wake), never by polling.
const noPolling = time.Hour

func creditHandlers(e *env) *worker.Handlers {
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
		return applyCredit(ctx, tx, e.Schema, m)
	})
	return hs
}

func (e *env) effects(t *testing.T) int64 { return e.Count(t, `SELECT count(*) FROM {schema}.effects`) }

// An idle pool that never polls, and never polls fast, handles each new message on its notification.
func TestIdlePoolWokenByNotification(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Notify on every receive (no debounce), so that every message below has its own notification.
	client, err := inbox.New(txinbox.Store{DB: e.Pool, Schema: e.Schema, NotifyInterval: time.Nanosecond}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := e.pool(t, creditHandlers(e), func(c *worker.Config) { c.PollInterval = noPolling; worker.SetHotWindow(c, -1) })
	run(t, p)
	waitFor(t, "the listener", func() bool { return worker.ListenerPID(p) != 0 })
	var lat []time.Duration
	for i := range 5 {
		start := time.Now()
		if _, err := client.Receive(context.Background(), inbox.Message{Consumer: "ledger", Key: fmt.Sprint("n-", i), Kind: "credit", Payload: []byte(`{"amount":1}`)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprint("message ", i), func() bool { return e.effects(t) == int64(i+1) })
		lat = append(lat, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("receive to effect visible (includes the 20ms check loop): %v", lat)
	if n := worker.Notifications(p); n < 5 {
		t.Fatalf("notifications received = %d, want at least 5", n)
	}
}

// A burst received one message per statement: only the first receive notifies, the others fall
// within the Client's NotifyInterval (an hour, so that however slow the machine the burst is within
// one interval), and the pool's fast polling after that wake-up finds them, so none waits for the
// poll interval (an hour too). The pool keeps hot for longer than the NotifyInterval, as its derived
// hot window does (TestHotWindowExceedsNotifyInterval).
func TestDebouncedNotificationsAndHotPolling(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client, err := inbox.New(txinbox.Store{DB: e.Pool, Schema: e.Schema, NotifyInterval: time.Hour}, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := e.pool(t, creditHandlers(e), func(c *worker.Config) { c.PollInterval = noPolling; worker.SetHotWindow(c, 2*time.Hour) })
	run(t, p)
	waitFor(t, "the listener", func() bool { return worker.ListenerPID(p) != 0 })
	const n = 300
	for i := range n {
		if _, err := client.Receive(context.Background(), inbox.Message{Consumer: "ledger", Key: fmt.Sprint("b-", i), Kind: "credit", Payload: []byte(`{"amount":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all messages", func() bool { return e.effects(t) == n })
	if got := worker.Notifications(p); got != 1 {
		t.Fatalf("%d messages received one per statement within one NotifyInterval: %d notifications, want 1", n, got)
	}
}

// After a burst the pool goes back to sleep; a message received long after is still woken for.
func TestListenerReconnectsAfterTermination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.pool(t, creditHandlers(e), func(c *worker.Config) { c.PollInterval = noPolling; worker.SetHotWindow(c, -1) })
	run(t, p)
	waitFor(t, "the listener", func() bool { return worker.ListenerPID(p) != 0 })
	for round := range 2 {
		pid := worker.ListenerPID(p)
		var ok bool
		if err := e.Pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1::int)", int32(pid)).Scan(&ok); err != nil || !ok {
			t.Fatalf("terminate listener %d: %v %v", pid, ok, err)
		}
		waitFor(t, "a new listener", func() bool { n := worker.ListenerPID(p); return n != 0 && n != pid })
		e.receive(t, fmt.Sprint("after-reconnect-", round))
		waitFor(t, "the message", func() bool { return e.effects(t) == int64(round+1) })
	}
}

// With listening off (a negative Store.NotifyInterval), or impossible, the pool finds messages by
// polling.
func TestPollingWithoutListen(t *testing.T) {
	t.Parallel()
	for name, mod := range map[string]func(*txinbox.Store, *worker.Config){
		"negative NotifyInterval": func(st *txinbox.Store, _ *worker.Config) { st.NotifyInterval = -1 },
		"connect fails": func(_ *txinbox.Store, c *worker.Config) {
			worker.SetListenConnect(c, func(context.Context) (*pgx.Conn, error) { return nil, errors.New("no route to host") })
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			st := e.Store()
			cfg := worker.Config{PollInterval: 100 * time.Millisecond}
			worker.SetHotWindow(&cfg, -1)
			mod(&st, &cfg)
			p := e.poolOn(t, st, creditHandlers(e), func(c *worker.Config) {
				cfg.Consumer, cfg.Handlers, cfg.Backoff = c.Consumer, c.Handlers, c.Backoff
				*c = cfg
			})
			run(t, p)
			for i := range 3 {
				e.receive(t, fmt.Sprint("p-", i))
				waitFor(t, "the message", func() bool { return e.effects(t) == int64(i+1) })
			}
			if worker.ListenerPID(p) != 0 || worker.Notifications(p) != 0 {
				t.Fatal("the pool listened")
			}
		})
	}
}
