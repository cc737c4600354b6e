package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/examples/ledger/internal/api"
	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/worker"
)

// childArgsEnv carries the arguments of a child `ledger` command run by re-executing the test binary
// (the demo's crash child).
const childArgsEnv = "LEDGER_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if v := os.Getenv(childArgsEnv); v != "" {
		var args []string
		if err := json.Unmarshal([]byte(v), &args); err != nil {
			panic(err)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, args, os.Stdout, os.Stderr, testChildCommand)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// testChildCommand runs `ledger <args>` as this test binary.
func testChildCommand(args []string) *exec.Cmd {
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgsEnv+"="+string(b))
	return cmd
}

// brokerURL returns the URL of a message broker for t: the environment variable env if set, else def.
// If nothing answers at its address, t fails when CI=true (CI must not pass without the brokers it
// needs) and is skipped otherwise, with a message naming env. It is a copy of the adapters' test helper
// (adapters/internal/adaptertest.Broker), which this module cannot import.
func brokerURL(t testing.TB, name, env, def string) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		u = def
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("%s: bad URL %q: %v", env, u, err)
	}
	c, err := net.DialTimeout("tcp", pu.Host, 3*time.Second)
	if err != nil {
		msg := fmt.Sprintf("%s is not reachable at %s (%v); set %s or start it", name, pu.Host, err, env)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	_ = c.Close()
	return u
}

// env is one test's schema with the ledger's tables, its API on an httptest server, and (with
// workers) an in-process worker pool.
type env struct {
	*testdb.DB
	srv  *httptest.Server
	pool *worker.Pool
}

func newEnv(t *testing.T, workers bool) *env {
	t.Helper()
	db := testdb.New(t)
	ctx := context.Background()
	if err := ledger.Migrate(ctx, db.Pool.Config().ConnConfig, db.Schema); err != nil {
		t.Fatal(err)
	}
	e := &env{DB: db}
	wake := func() {}
	if workers {
		l, err := ledger.New(db.Store())
		if err != nil {
			t.Fatal(err)
		}
		hs := worker.NewHandlers()
		l.Register(hs, nil)
		e.pool, err = worker.New(db.Store(), worker.Config{Consumer: ledger.Consumer, Handlers: hs,
			Concurrency: 2, PollInterval: 20 * time.Millisecond, Lease: 3 * time.Second, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.pool.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = e.pool.Stop(sctx)
		})
		wake = e.pool.Wake
	}
	h, err := api.New(api.Config{DB: db.Pool, Schema: db.Schema, Wake: wake})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("response %d %q: %v", r.status, r.body, err)
	}
}

func (e *env) do(t *testing.T, method, path, body string, header ...string) response {
	t.Helper()
	return request(t, e.srv.Client(), method, e.srv.URL+path, body, header...)
}

// waitFor polls cond until it holds (a correctness wait: the deadline only stops a broken test).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// balances returns every account's balance, and checks that each equals the sum of its entries.
func (e *env) balances(t *testing.T) map[string]int64 {
	t.Helper()
	if n := e.Count(t, `SELECT count(*) FROM {schema}.accounts a
		FULL JOIN (SELECT account_id, sum(amount_cents) AS s, count(*) AS n FROM {schema}.ledger_entries GROUP BY 1) x
		ON x.account_id = a.account_id
		WHERE a.account_id IS NULL OR x.account_id IS NULL OR a.balance_cents <> x.s OR a.entries <> x.n`); n != 0 {
		t.Fatalf("%d accounts whose balance is not the sum of their entries", n)
	}
	rows, err := e.Pool.Query(context.Background(), e.SQL(`SELECT account_id, balance_cents FROM {schema}.accounts`))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range must(pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		ID  string
		Bal int64
	}])) {
		out[r.ID] = r.Bal
	}
	return out
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
