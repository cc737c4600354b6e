package engine_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/engine"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/pgbouncer"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// A user of the engine, as the shared tests drive it: started on a Store of the test's (whose DB may
// lead through a proxy) and the test's logger, it must get one unit of work done that nothing but
// polling can find.
type user struct {
	// start starts the user on store (db's schema), logging to logger, polling every poll; it returns
	// a function that makes one unit of work through db directly and returns a function that reports
	// whether that work is done.
	start func(t *testing.T, db *testdb.DB, store txinbox.Store, logger *slog.Logger, poll time.Duration) (work func() (done func() bool))
	// view and name are what admin pauses to hold that work back: the consumer of the pool's
	// messages, the topic of the relay's events.
	view admin.View
	name string
}

// users are the engine's users, by package: TestEveryEngineUserIsTested keeps the list whole.
var users = map[string]user{
	"github.com/txinbox/txinbox/worker": {start: startPool, view: admin.Inbox, name: "c"},
	"github.com/txinbox/txinbox/outbox": {start: startRelay, view: admin.Outbox, name: "t"},
}

// TestEveryEngineUserIsTested: every package of the module that imports internal/engine (outside
// tests) has an entry in users, so that the shared tests below run on it.
func TestEveryEngineUserIsTested(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "github.com/txinbox/txinbox/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var found []string
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(p.Imports, "github.com/txinbox/txinbox/internal/engine") {
			found = append(found, p.ImportPath)
			if _, ok := users[p.ImportPath]; !ok {
				t.Errorf("package %s runs on internal/engine but has no entry in users: the shared engine tests do not run on it", p.ImportPath)
			}
		}
	}
	if len(found) < 2 {
		t.Fatalf("engine users found: %v; the walk is broken", found)
	}
	for p := range users {
		if !slices.Contains(found, p) {
			t.Errorf("users lists %s, which does not import internal/engine", p)
		}
	}
}

// Behind a pooler that drops notifications (here a proxy that drops every NotificationResponse, as
// PgBouncer in transaction mode does to a LISTEN), every engine user notices that its own check
// notification never comes back, says so, and finds its work by polling.
func TestPoolerDroppingNotificationsFallsBackToPolling(t *testing.T) {
	t.Parallel()
	for name, u := range users {
		t.Run(strings.TrimPrefix(name, "github.com/txinbox/txinbox/"), func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			store := db.Store()
			store.DB = dropNotifications(t, db.Pool)
			logs := &logLines{}
			work := u.start(t, db, store, slog.New(slog.NewTextHandler(logs, nil)), 200*time.Millisecond)
			waitFor(t, "the warning that LISTEN does not work", 60*time.Second, func() bool {
				return logs.has("LISTEN does not work on this connection; polling")
			})
			done := work()
			waitFor(t, "the work found by polling", 30*time.Second, done)
		})
	}
}

// Behind a real PgBouncer in transaction mode (pgx in exec mode, as it needs there), which hands a
// listening session back the notifications of its own transactions but none that another session
// sends while it sits in the pool, every engine user notices that its check notification, sent from
// another connection, never comes back, says so, and finds its work by polling.
func TestPgBouncerTransactionModeFallsBackToPolling(t *testing.T) {
	t.Parallel()
	for name, u := range users {
		t.Run(strings.TrimPrefix(name, "github.com/txinbox/txinbox/"), func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			pool, err := pgxpool.New(context.Background(), pgbouncer.Start(t, db.URL, pgbouncer.Config{})+"&default_query_exec_mode=exec")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			store := db.Store()
			store.DB = pool
			logs := &logLines{}
			work := u.start(t, db, store, slog.New(slog.NewTextHandler(logs, nil)), 200*time.Millisecond)
			waitFor(t, "the warning that LISTEN does not work", 60*time.Second, func() bool {
				return logs.has("LISTEN does not work on this connection; polling")
			})
			done := work()
			waitFor(t, "the work found by polling", 30*time.Second, done)
		})
	}
}

// Behind a real PgBouncer in session mode, each listening connection keeps its server session, and
// every engine user is woken by the notification of work done elsewhere: it polls only once an hour,
// and its fast polling after listening began has ended.
func TestPgBouncerSessionModeWakesByNotification(t *testing.T) {
	t.Parallel()
	for name, u := range users {
		t.Run(strings.TrimPrefix(name, "github.com/txinbox/txinbox/"), func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			pool, err := pgxpool.New(context.Background(), pgbouncer.Start(t, db.URL, pgbouncer.Config{Mode: "session"}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			store := db.Store()
			store.DB = pool
			logs := &logLines{}
			work := u.start(t, db, store, slog.New(slog.NewTextHandler(logs, nil)), time.Hour)
			time.Sleep(3 * time.Second) // listening, and no longer hot
			done := work()
			waitFor(t, "the work woken by its notification", 10*time.Second, done)
			if logs.has("LISTEN does not work") {
				t.Fatal("LISTEN found not to work in session mode")
			}
		})
	}
}

// Every engine user claims nothing of what admin paused (a consumer, a topic), however often it is
// woken and polls (the work's own notification wakes it and it stays hot, claiming every HotPoll,
// for its hot window), and does the work at once when it is resumed: the resume's notification
// wakes it, long before its PollInterval.
func TestPauseHoldsEveryEngineUser(t *testing.T) {
	t.Parallel()
	for name, u := range users {
		t.Run(strings.TrimPrefix(name, "github.com/txinbox/txinbox/"), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.New(t)
			a, err := admin.New(db.Store(), admin.Config{})
			if err != nil {
				t.Fatal(err)
			}
			const poll = time.Minute
			work := u.start(t, db, db.Store(), slog.New(slog.DiscardHandler), poll)
			if ok, err := a.Pause(ctx, u.view, u.name, "test", "downstream broken"); err != nil || !ok {
				t.Fatalf("Pause = %v, %v; want true, nil", ok, err)
			}
			done := work()
			time.Sleep(engine.MinHotWindow + 500*time.Millisecond) // woken by the work, hot, then cold
			if done() {
				t.Fatal("the work of a paused " + u.name + " was done")
			}
			resumed := time.Now()
			if ok, err := a.Resume(ctx, u.view, u.name); err != nil || !ok {
				t.Fatalf("Resume = %v, %v; want true, nil", ok, err)
			}
			waitFor(t, "the work done after the resume", poll/2, done)
			t.Logf("done %v after the resume", time.Since(resumed).Round(time.Millisecond))
		})
	}
}

func startPool(t *testing.T, db *testdb.DB, store txinbox.Store, logger *slog.Logger, poll time.Duration) func() func() bool {
	hs := worker.NewHandlers()
	worker.Handle(hs, "noop", func(context.Context, pgx.Tx, *worker.Message[json.RawMessage]) error { return nil })
	store.Logger = logger
	p, err := worker.New(store, worker.Config{Consumer: "c", Handlers: hs, PollInterval: poll})
	if err != nil {
		t.Fatal(err)
	}
	runService(t, p)
	client, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	work := func() func() bool {
		if _, err := client.Receive(context.Background(), inbox.Message{Consumer: "c", Key: "k", Kind: "noop", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		return func() bool {
			return db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'completed'`) == 1
		}
	}
	return work
}

func startRelay(t *testing.T, db *testdb.DB, store txinbox.Store, logger *slog.Logger, poll time.Duration) func() func() bool {
	var mu sync.Mutex
	sent := 0
	pub := outbox.PublisherFunc(func(_ context.Context, evs []outbox.Event) error {
		mu.Lock()
		sent += len(evs)
		mu.Unlock()
		return nil
	})
	store.Logger = logger
	r, err := outbox.NewRelay(store, outbox.RelayConfig{Publisher: pub, PollInterval: poll})
	if err != nil {
		t.Fatal(err)
	}
	runService(t, r)
	client, err := outbox.New(db.Store(), outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	work := func() func() bool {
		tx, err := db.Pool.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Publish(context.Background(), tx, outbox.Message{Topic: "t", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return sent == 1
		}
	}
	return work
}

// runService starts s and stops it when the test ends.
func runService(t *testing.T, s interface {
	Start(context.Context) error
	Stop(context.Context) error
}) {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
}

// dropNotifications starts a TCP proxy to pool's server that drops every NotificationResponse the
// server sends, as PgBouncer in transaction mode does to a LISTEN, and returns a pool of
// connections through it (its users' listening connections go through it too).
func dropNotifications(t *testing.T, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	pc := pool.Config()
	cc := pc.ConnConfig
	server := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", server)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
				copyDroppingNotifications(c, s)
			}()
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	p, _ := strconv.Atoi(port)
	cc.Host, cc.Port, cc.TLSConfig, cc.Fallbacks = host, uint16(p), nil, nil
	proxied, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxied.Close)
	return proxied
}

// copyDroppingNotifications copies the server's messages (a type byte and a length) from s to c,
// leaving out every NotificationResponse ('A').
func copyDroppingNotifications(c io.Writer, s io.Reader) {
	var head [5]byte
	for {
		if _, err := io.ReadFull(s, head[:]); err != nil {
			return
		}
		body := make([]byte, int(binary.BigEndian.Uint32(head[1:]))-4)
		if _, err := io.ReadFull(s, body); err != nil {
			return
		}
		if head[0] == 'A' {
			continue
		}
		if _, err := c.Write(append(head[:], body...)); err != nil {
			return
		}
	}
}

// logLines collects the lines a text logger writes.
type logLines struct {
	mu    sync.Mutex
	lines strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines.Write(p)
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.lines.String(), s)
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A negative Store.NotifyInterval turns LISTEN off for every engine user (behind a pooler in
// transaction mode LISTEN cannot work): it finds its work by polling and never sends LISTEN, on any
// connection. With the default NotifyInterval the same user does listen (the check's control).
func TestNegativeNotifyIntervalSendsNoListen(t *testing.T) {
	t.Parallel()
	for name, u := range users {
		for _, notify := range []time.Duration{0, -1} {
			t.Run(fmt.Sprintf("%s/NotifyInterval %v", strings.TrimPrefix(name, "github.com/txinbox/txinbox/"), notify), func(t *testing.T) {
				t.Parallel()
				db := testdb.New(t)
				spy := &listenSpy{}
				pc := db.Pool.Config()
				pc.ConnConfig.Tracer = spy // the listening connection is made with the pool's ConnConfig
				pool, err := pgxpool.NewWithConfig(context.Background(), pc)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				store := db.Store()
				store.DB, store.NotifyInterval = pool, notify
				work := u.start(t, db, store, slog.New(slog.DiscardHandler), 100*time.Millisecond)
				waitFor(t, "the work done", 30*time.Second, work())
				if notify >= 0 {
					waitFor(t, "a LISTEN (the control)", 30*time.Second, func() bool { return spy.listens.Load() > 0 })
				} else if n := spy.listens.Load(); n != 0 {
					t.Errorf("%d LISTEN statements sent with a negative NotifyInterval, want none", n)
				}
			})
		}
	}
}

// listenSpy is a pgx.QueryTracer that counts the LISTEN statements sent.
type listenSpy struct{ listens atomic.Int64 }

func (s *listenSpy) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "LISTEN ") {
		s.listens.Add(1)
	}
	return ctx
}

func (s *listenSpy) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
