package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/idempotency"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// The limits documented on ParseKey, Config.Route and Config.Principal.
const (
	maxKeyLength      = 255
	maxRouteBytes     = 1024
	maxPrincipalBytes = 512
)

// env is one test's schema, a business table (transfers), and a server running the middleware in
// front of a handler that inserts a transfer in the middleware's transaction.
type env struct {
	t    *testing.T
	db   *testdb.DB
	mw   *idempotency.Middleware
	srv  *httptest.Server
	runs atomic.Int64 // handler executions
	// hook, when set, runs in the handler after the insert; it may write the response itself (and
	// return true) to replace the default 201.
	hook func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool
}

func newEnv(t *testing.T, cfg idempotency.Config) *env {
	t.Helper()
	t.Parallel()
	e := &env{t: t, db: testdb.New(t)}
	e.exec("CREATE TABLE {schema}.transfers (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, amount integer NOT NULL)")
	if cfg.Principal == nil {
		cfg.Principal = idempotency.HeaderPrincipal("Authorization")
	}
	mw, err := idempotency.New(e.db.Store(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.mw = mw
	mux := http.NewServeMux()
	mux.Handle("POST /transfers", mw.Handler(http.HandlerFunc(e.transfer)))
	mux.Handle("POST /other", mw.Handler(http.HandlerFunc(e.transfer)))
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Pool.Exec(context.Background(), e.db.SQL(sql), args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) count(sql string, args ...any) int64 {
	e.t.Helper()
	return e.db.Count(e.t, sql, args...)
}

func (e *env) transfer(w http.ResponseWriter, r *http.Request) {
	e.runs.Add(1)
	tx, ok := idempotency.Tx(r.Context())
	if !ok {
		http.Error(w, "no transaction", http.StatusInternalServerError)
		return
	}
	var in struct{ Amount int }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, "bad json: "+err.Error(), http.StatusBadRequest)
		return
	}
	var id int64
	if err := tx.QueryRow(r.Context(), e.db.SQL("INSERT INTO {schema}.transfers (amount) VALUES ($1) RETURNING id"), in.Amount).Scan(&id); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if e.hook != nil && e.hook(w, r, tx) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/transfers/%d", id))
	w.Header().Set("X-Not-Stored", "original only")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d,"amount":%d}`, id, in.Amount)
}

type resp struct {
	status int
	header http.Header
	body   string
}

// post sends POST path with body; key "" sends no Idempotency-Key header; principal "" sends no
// Authorization header.
func (e *env) post(path, principal, key, body string) resp {
	e.t.Helper()
	r, err := e.do(path, principal, key, body)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) do(path, principal, key, body string) (resp, error) {
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return resp{}, err
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if principal != "" {
		req.Header.Set("Authorization", "Bearer "+principal)
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: string(b)}, err
}

// problem checks that r is a problem document of type typ with status.
func problem(t *testing.T, r resp, status int, typ string) idempotency.Problem {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want %q", ct, "application/problem+json")
	}
	var p idempotency.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Type != typ || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want type %s status %d with title and detail", p, typ, status)
	}
	if r.header.Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("problem carries %s", idempotency.HeaderReplayed)
	}
	return p
}
