package pooler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/idempotency"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/maintain"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/runner"
	"github.com/txinbox/txinbox/txinboxtest/pgbouncer"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// syncBuffer is a log sink that several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func poolAt(t *testing.T, url, mode string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	if mode != "" {
		url += "&default_query_exec_mode=" + mode
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestPgBouncerRefusesStatementCache: through PgBouncer in transaction mode, a pgxpool in pgx's
// default query exec mode (cache_statement) is refused when a worker pool or an outbox relay starts,
// with an error matching txinbox.ErrPooler that names default_query_exec_mode=exec; and a statement
// that meets another client's cached prepared statement (two processes, one server connection) fails
// with it too, in a receive (returned) and in the idempotency middleware (logged).
func TestPgBouncerRefusesStatementCache(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	const fix = "default_query_exec_mode=exec"

	store := db.Store()
	store.DB = poolAt(t, pgbouncer.Start(t, db.URL, pgbouncer.Config{}), "", 4)
	hs := worker.NewHandlers()
	worker.Handle(hs, "noop", func(context.Context, pgx.Tx, *worker.Message[json.RawMessage]) error { return nil })
	p, err := worker.New(store, worker.Config{Consumer: "c", Handlers: hs})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); !errors.Is(err, txinbox.ErrPooler) || !strings.Contains(err.Error(), fix) {
		_ = p.Stop(ctx)
		t.Fatalf("worker.Pool.Start = %v, want txinbox.ErrPooler naming %s", err, fix)
	}
	r, err := outbox.NewRelay(store, outbox.RelayConfig{Publisher: outbox.PublisherFunc(func(context.Context, []outbox.Event) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); !errors.Is(err, txinbox.ErrPooler) || !strings.Contains(err.Error(), fix) {
		_ = r.Stop(ctx)
		t.Fatalf("outbox.Relay.Start = %v, want txinbox.ErrPooler naming %s", err, fix)
	}

	// One server connection: the second process's first statement meets the first's prepared one.
	single := pgbouncer.Start(t, db.URL, pgbouncer.Config{PoolSize: 1})
	logs := &syncBuffer{}
	var clients []*inbox.Client
	var servers []*httptest.Server
	for range 2 {
		st := db.Store()
		st.DB = poolAt(t, single, "", 2)
		st.Logger = slog.New(slog.NewTextHandler(logs, nil))
		c, err := inbox.New(st, inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		mw, err := idempotency.New(st, idempotency.Config{Principal: idempotency.HeaderPrincipal("Authorization")})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })))
		t.Cleanup(srv.Close)
		servers = append(servers, srv)
	}
	for i, c := range clients {
		_, err := c.Receive(ctx, inbox.Message{Consumer: "c", Key: fmt.Sprint("k", i), Kind: "noop", Payload: []byte(`{}`)})
		if i == 0 && err != nil {
			t.Fatalf("first process's receive: %v", err)
		}
		if i == 1 && (!errors.Is(err, txinbox.ErrPooler) || !strings.Contains(err.Error(), fix)) {
			t.Fatalf("second process's receive = %v, want txinbox.ErrPooler naming %s", err, fix)
		}
	}
	for i, srv := range servers {
		status := post(t, srv.URL, fmt.Sprint("key-", i))
		if i == 0 && status != http.StatusCreated {
			t.Fatalf("first process's request: %d", status)
		}
		if i == 1 && (status != http.StatusServiceUnavailable || !strings.Contains(logs.String(), fix)) {
			t.Fatalf("second process's request: %d, log:\n%s", status, logs)
		}
	}
}

func post(t *testing.T, url, key string) int {
	t.Helper()
	status, _ := postBody(t, url, key)
	return status
}

func postBody(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "caller")
	req.Header.Set("Idempotency-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}

// TestThroughPgBouncer runs two processes' runners (a worker pool, an outbox relay and a maintainer
// candidate rotating every second or so) and idempotency middlewares through a real PgBouncer in
// transaction mode (pgx in exec mode, migrations run directly, LISTEN left on), with redeliveries,
// concurrent retries of HTTP requests, failing first attempts and rolled-back publishes: every
// message's effect is applied once, every committed event is published once and no rolled-back one,
// every request's effect is applied once with its replays answered alike, the inbox is rotated and no
// maintenance job fails.
//
// In session mode, it runs the same with pgx's defaults (each process's pool smaller: a client holds
// its server connection for its life).
func TestThroughPgBouncer(t *testing.T) {
	t.Parallel()
	t.Run("transaction", func(t *testing.T) {
		t.Parallel()
		throughPgBouncer(t, pgbouncer.Config{PoolSize: 8}, "exec", 12)
	})
	t.Run("session", func(t *testing.T) {
		t.Parallel()
		throughPgBouncer(t, pgbouncer.Config{Mode: "session", PoolSize: 24}, "", 6)
	})
}

func throughPgBouncer(t *testing.T, cfg pgbouncer.Config, mode string, maxConns int32) {
	db := testdb.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, db.SQL(`CREATE TABLE {schema}.effects (source text NOT NULL, key text NOT NULL)`)); err != nil {
		t.Fatal(err)
	}
	firstGen := db.Count(t, `SELECT gen FROM {schema}.inbox_ring`)
	bouncer := pgbouncer.Start(t, db.URL, cfg)
	const (
		messages = 400 // each received twice, by both processes
		events   = 200 // per process; every 10th transaction rolled back
		requests = 60  // keys, each sent three times, alternately to both processes
	)

	var (
		mu        sync.Mutex
		published = map[string]int{}
	)
	pub := outbox.PublisherFunc(func(_ context.Context, evs []outbox.Event) error {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range evs {
			published[e.Key]++
		}
		return nil
	})
	hs := worker.NewHandlers()
	worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[json.RawMessage]) error {
		if _, err := tx.Exec(ctx, db.SQL(`INSERT INTO {schema}.effects (source, key) VALUES ('inbox', $1)`), m.Key); err != nil {
			return err
		}
		if m.Attempt == 1 && strings.HasSuffix(m.Key, "7") {
			return errors.New("first attempt fails") // its insert rolls back; retried
		}
		return nil
	}, worker.HandlerConfig{Backoff: txinbox.Exponential{Base: 20 * time.Millisecond, Jitter: -1}})

	type process struct {
		client *inbox.Client
		out    *outbox.Client
		pool   *pgxpool.Pool
		srv    *httptest.Server
	}
	logs := &syncBuffer{}
	procs := make([]process, 2)
	for i := range procs {
		pool := poolAt(t, bouncer, mode, maxConns)
		store := db.Store()
		store.DB = pool
		store.Logger = slog.New(slog.NewTextHandler(logs, nil)).With("process", i)
		r, err := runner.New(store, runner.Config{
			Pools:       []worker.Config{{Consumer: "billing", Handlers: hs, PollInterval: 100 * time.Millisecond}},
			Relays:      []outbox.RelayConfig{{Publisher: pub, PollInterval: 100 * time.Millisecond}},
			Maintenance: maintain.Config{Generation: 3 * time.Second}, // a rotation every second or so
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := r.Stop(sctx); err != nil {
				t.Error(err)
			}
		})
		client, err := inbox.New(store, inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		out, err := outbox.New(store, outbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		mw, err := idempotency.New(store, idempotency.Config{Principal: idempotency.HeaderPrincipal("Authorization")})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, ok := idempotency.Tx(r.Context())
			if !ok {
				http.Error(w, "no idempotency transaction", http.StatusInternalServerError)
				return
			}
			key := r.Header.Get("Idempotency-Key")
			if _, err := tx.Exec(r.Context(), db.SQL(`INSERT INTO {schema}.effects (source, key) VALUES ('http', $1)`), key); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, "done %s by %d", key, i)
		})))
		t.Cleanup(srv.Close)
		procs[i] = process{client: client, out: out, pool: pool, srv: srv}
	}

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 { // receivers: every message twice, once by each process
		wg.Go(func() {
			for n := g; n < 2*messages; n += 8 {
				m := inbox.Message{Consumer: "billing", Key: fmt.Sprint("m", n%messages), Kind: "credit", Payload: []byte(`{}`)}
				if _, err := procs[n%2].client.Receive(ctx, m); err != nil {
					errs <- fmt.Errorf("receive %s: %w", m.Key, err)
					return
				}
			}
		})
	}
	committed := make([][]string, len(procs))
	for i, pr := range procs { // publishers
		wg.Go(func() {
			for n := range events {
				key := fmt.Sprintf("e%d-%d", i, n)
				err := pgx.BeginFunc(ctx, pr.pool, func(tx pgx.Tx) error {
					if _, err := pr.out.Publish(ctx, tx, outbox.Message{Topic: "credits", Key: key, Payload: []byte(`{}`)}); err != nil {
						return err
					}
					if n%10 == 9 {
						return errRollback
					}
					return nil
				})
				switch {
				case err == nil:
					committed[i] = append(committed[i], key)
				case !errors.Is(err, errRollback):
					errs <- fmt.Errorf("publish %s: %w", key, err)
					return
				}
			}
		})
	}
	bodies := make([][]string, requests)
	for g := range 6 { // HTTP clients: each key three times in turn, to alternate processes
		wg.Go(func() {
			for k := g; k < requests; k += 6 {
				for try := range 3 {
					status, body := postBody(t, procs[(k+try)%2].srv.URL, fmt.Sprint("r", k))
					if status != http.StatusCreated {
						errs <- fmt.Errorf("request r%d, try %d: %d %s", k, try, status, body)
						return
					}
					bodies[k] = append(bodies[k], body)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.Fatalf("log:\n%s", logs)
	}

	want := 0
	for _, c := range committed {
		want += len(c)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		mu.Lock()
		got := len(published)
		mu.Unlock()
		done := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE state = 'completed'`)
		gen := db.Count(t, `SELECT gen FROM {schema}.inbox_ring`)
		if done == messages && got >= want && gen > firstGen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2m: %d of %d messages completed, %d of %d events published, generation %d (%d at start); log:\n%s",
				done, messages, got, want, gen, firstGen, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); n != messages {
		t.Errorf("%d messages stored, want %d (each received twice)", n, messages)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.effects WHERE source = 'inbox'`); n != messages {
		t.Errorf("%d inbox effects, want %d", n, messages)
	}
	if n := db.Count(t, `SELECT count(DISTINCT key) FROM {schema}.effects WHERE source = 'inbox'`); n != messages {
		t.Errorf("%d distinct inbox effects, want %d", n, messages)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE attempts_started > 1`); n != messages/10 {
		t.Errorf("%d messages retried, want %d (those whose first attempt failed)", n, messages/10)
	}
	mu.Lock()
	for _, c := range committed {
		for _, key := range c {
			if published[key] != 1 {
				t.Errorf("event %s published %d times, want 1", key, published[key])
			}
			delete(published, key)
		}
	}
	for key, n := range published {
		t.Errorf("event %s of a rolled-back transaction published %d times", key, n)
	}
	mu.Unlock()
	if n := db.Count(t, `SELECT count(*) FROM {schema}.effects WHERE source = 'http'`); n != requests {
		t.Errorf("%d request effects, want %d", n, requests)
	}
	if n := db.Count(t, `SELECT count(DISTINCT key) FROM {schema}.effects WHERE source = 'http'`); n != requests {
		t.Errorf("%d distinct request effects, want %d", n, requests)
	}
	for k, bs := range bodies {
		if len(bs) != 3 || bs[1] != bs[0] || bs[2] != bs[0] {
			t.Errorf("request r%d answered %q, want one response replayed", k, bs)
		}
	}
	rows, err := db.Pool.Query(ctx, db.SQL(`SELECT job || ': ' || error FROM {schema}.inbox_maintenance WHERE error IS NOT NULL`))
	if err != nil {
		t.Fatal(err)
	}
	failed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(failed) > 0 {
		t.Errorf("maintenance jobs failed: %v %v", failed, err)
	}
	t.Logf("%d messages, %d events committed of %d, %d requests", messages, want, 2*events, requests)
}

var errRollback = errors.New("roll back")
