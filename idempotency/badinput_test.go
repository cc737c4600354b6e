package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/idempotency"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// Bad input driven through ServeHTTP directly (httptest.NewRequest), so that header values and paths
// no HTTP client would send (NUL, invalid UTF-8) reach the middleware. After every case the handler
// has not run, the stored keys are as they were (count and checksum of every row), and the first
// request's stored response is still replayed.

// direct is a middleware in front of a handler that counts its runs and answers 201, called without
// a server or mux (so Config.Route sees r.URL.Path).
type direct struct {
	t    *testing.T
	db   *testdb.DB
	h    http.Handler
	runs atomic.Int64
}

func newDirect(t *testing.T, cfg idempotency.Config) *direct {
	t.Helper()
	t.Parallel()
	d := &direct{t: t, db: testdb.New(t)}
	if cfg.Principal == nil {
		cfg.Principal = idempotency.HeaderPrincipal("Authorization")
	}
	mw, err := idempotency.New(d.db.Store(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.h = mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := d.runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d}`, n)
	}))
	return d
}

// serve sends method target with the Idempotency-Key header set to key (unless noKey) and an
// Authorization header.
func (d *direct) serve(method, target, key string, noKey bool) resp {
	req := httptest.NewRequest(method, target, strings.NewReader(`{"amount": 1}`))
	req.Header.Set("Authorization", "Bearer alice")
	if !noKey {
		req.Header[idempotency.HeaderKey] = []string{key} // as is: no canonicalisation or checks
	}
	rec := httptest.NewRecorder()
	d.h.ServeHTTP(rec, req)
	return resp{status: rec.Code, header: rec.Header(), body: rec.Body.String()}
}

// snapshot is the row count and a checksum of every column of every stored key.
func (d *direct) snapshot() string {
	d.t.Helper()
	var s string
	err := d.db.Pool.QueryRow(context.Background(), d.db.SQL(`SELECT count(*) || ':' ||
		coalesce(md5(string_agg(k::text, '|' ORDER BY k.id)), '') FROM {schema}.idempotency_keys k`)).Scan(&s)
	if err != nil {
		d.t.Fatal(err)
	}
	return s
}

// stored makes one stored key (key "stored-1", POST /transfers) and returns its response body.
func (d *direct) stored() string {
	d.t.Helper()
	r := d.serve(http.MethodPost, "/transfers", `"stored-1"`, false)
	if r.status != http.StatusCreated || d.runs.Load() != 1 {
		d.t.Fatalf("first request: %d %s, %d runs", r.status, r.body, d.runs.Load())
	}
	return r.body
}

// unchanged fails unless nothing ran, the keys are as before, and the stored response is replayed.
func (d *direct) unchanged(name, before, body string) {
	d.t.Helper()
	if n := d.runs.Load(); n != 1 {
		d.t.Errorf("%s: the handler ran (%d runs in all)", name, n)
	}
	if after := d.snapshot(); after != before {
		d.t.Errorf("%s: stored keys changed: %s -> %s", name, before, after)
	}
	r := d.serve(http.MethodPost, "/transfers", `"stored-1"`, false)
	if r.status != http.StatusCreated || r.body != body || r.header.Get(idempotency.HeaderReplayed) != "true" {
		d.t.Errorf("%s: the stored key no longer replays: %d %q %v", name, r.status, r.body, r.header)
	}
}

func TestBadKeysThroughServeHTTP(t *testing.T) {
	d := newDirect(t, idempotency.Config{})
	body := d.stored()
	before := d.snapshot()
	for _, c := range []struct{ name, key string }{
		{"empty", ""},
		{"blank", "  \t "},
		{"empty quoted", `""`},
		{"NUL bare", "a\x00b"},
		{"NUL quoted", "\"a\x00b\""},
		{"NUL alone", "\x00"},
		{"invalid UTF-8 bare", "\xff"},
		{"invalid UTF-8 quoted", "\"k\xff\""},
		{"UTF-8 bare", "clé"},
		{"over-long bare", strings.Repeat("k", maxKeyLength+1)},
		{"over-long quoted", `"` + strings.Repeat("k", maxKeyLength+1) + `"`},
		{"huge", strings.Repeat("k", 1<<16)},
		{"SQL", `"x'); DELETE FROM idempotency_keys; --"x`},
		{"two keys", `"stored-1", "other"`},
		{"control character", "\"a\nb\""},
	} {
		problem(t, d.serve(http.MethodPost, "/transfers", c.key, false), http.StatusBadRequest, idempotency.ProblemKeyInvalid)
		d.unchanged(c.name, before, body)
	}
	problem(t, d.serve(http.MethodPost, "/transfers", "", true), http.StatusBadRequest, idempotency.ProblemKeyMissing)
	d.unchanged("no header", before, body)
}

// A path that cannot be stored as a route (NUL, invalid UTF-8, too long) is the client's error: 400,
// not 503 (and, with FailOpen, not an unprotected run).
func TestBadRoutesThroughServeHTTP(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailOpen=%v", failOpen), func(t *testing.T) {
			d := newDirect(t, idempotency.Config{FailOpen: failOpen})
			body := d.stored()
			before := d.snapshot()
			for _, target := range []string{
				"/transfers%00", "/%00", "/transfers/%FF", "/a%C3", "/%ED%A0%80", "/x%00%FF",
				"/" + strings.Repeat("r", maxRouteBytes),
			} {
				p := problem(t, d.serve(http.MethodPost, target, `"new-key"`, false), http.StatusBadRequest, idempotency.ProblemRequestInvalid)
				if !strings.Contains(p.Detail, "route") {
					t.Errorf("%s: unclear detail %q", target, p.Detail)
				}
				d.unchanged(target, before, body)
			}
			// The longest route accepted is stored.
			ok := "/" + strings.Repeat("r", maxRouteBytes-1)
			if r := d.serve(http.MethodPost, ok, `"new-key"`, false); r.status != http.StatusCreated {
				t.Fatalf("route of %d bytes: %d %s", maxRouteBytes, r.status, r.body)
			}
		})
	}
}

// A Principal function that returns "" (an anonymous caller, say) is answered 401: an empty principal
// would put all such callers in one shared scope. So is a principal that cannot be stored.
func TestEmptyOrUnstorablePrincipal(t *testing.T) {
	var principal atomic.Value
	principal.Store("alice")
	d := newDirect(t, idempotency.Config{Principal: func(*http.Request) (string, error) { return principal.Load().(string), nil }})
	body := d.stored()
	before := d.snapshot()
	for _, p := range []string{"", "a\x00b", "\xff", strings.Repeat("p", maxPrincipalBytes+1)} {
		principal.Store(p)
		problem(t, d.serve(http.MethodPost, "/transfers", `"stored-1"`, false), http.StatusUnauthorized, idempotency.ProblemUnauthenticated)
		problem(t, d.serve(http.MethodPost, "/transfers", `"anon-1"`, false), http.StatusUnauthorized, idempotency.ProblemUnauthenticated)
		principal.Store("alice")
		d.unchanged(fmt.Sprintf("principal %q", p), before, body)
	}
	principal.Store(strings.Repeat("p", maxPrincipalBytes))
	if r := d.serve(http.MethodPost, "/transfers", `"stored-1"`, false); r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("longest principal: %d %s (a new scope: it runs)", r.status, r.body)
	}
}

// The method is part of the scope: the same key on POST and PATCH of one route runs twice, and each
// is then replayed on its own.
func TestSameKeyTwoMethodsRunsTwice(t *testing.T) {
	d := newDirect(t, idempotency.Config{})
	post := d.serve(http.MethodPost, "/transfers", `"k-1"`, false)
	patch := d.serve(http.MethodPatch, "/transfers", `"k-1"`, false)
	if post.status != http.StatusCreated || patch.status != http.StatusCreated || d.runs.Load() != 2 || post.body == patch.body {
		t.Fatalf("POST %d %s, PATCH %d %s, %d runs; want two runs", post.status, post.body, patch.status, patch.body, d.runs.Load())
	}
	for _, c := range []struct {
		method string
		want   resp
	}{{http.MethodPost, post}, {http.MethodPatch, patch}} {
		r := d.serve(c.method, "/transfers", `"k-1"`, false)
		if r.status != c.want.status || r.body != c.want.body || r.header.Get(idempotency.HeaderReplayed) != "true" {
			t.Errorf("%s again: %d %s, want the replay of %s", c.method, r.status, r.body, c.want.body)
		}
	}
	if n := d.db.Count(t, `SELECT count(DISTINCT method) FROM {schema}.idempotency_keys WHERE key = 'k-1'`); n != 2 || d.runs.Load() != 2 {
		t.Fatalf("%d methods stored, %d runs", n, d.runs.Load())
	}
}

// Bad schema names are refused by New with a *txinbox.ConfigError before anything is created.
func TestBadSchemaNames(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	bad := []string{
		`a"b`, `a.b`, `public.idempotency_keys`, `x"; DROP TABLE t; --`, `x; DROP TABLE idempotency_keys; --`,
		`public"; DROP SCHEMA public CASCADE; --`, `a b`, `1abc`, `schéma`, "a\x00b", "a\nb", strings.Repeat("s", 64),
		`"quoted"`, `x'y`, `$1`, `a-b`,
	}
	candidates := testdb.SchemaCandidates(bad)
	before := testdb.ExistingSchemas(t, db.Pool, candidates)
	for _, s := range bad {
		mw, err := idempotency.New(txinbox.Store{DB: db.Pool, Schema: s}, idempotency.Config{Principal: idempotency.HeaderPrincipal("Authorization")})
		var ce *txinbox.ConfigError
		if !errors.Is(err, txinbox.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != "Store.Schema" || mw != nil {
			t.Errorf("schema %q: %v, %v; want a *txinbox.ConfigError for Store.Schema", s, mw, err)
		}
	}
	if after := testdb.ExistingSchemas(t, db.Pool, candidates); after != before || !strings.Contains(before, "public") {
		t.Fatalf("schemas among %q: %q before, %q after; want the same, public included", candidates, before, after)
	}
}
