package idempotency_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/idempotency"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// A middleware on a schema without its table (migrations not run) answers every request with
// ProblemNotMigrated (500, no Retry-After: retrying cannot help until the operator migrates), whose
// detail says to run migrate.Up or the command, instead of 503 "retry" forever; and FailOpen does not
// run the request unprotected because the table is missing. A schema that exists without the table
// and a schema that does not exist alike.
func TestUnmigratedSchemaIsNamedNotRetried(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	empty := db.Schema + "_empty"
	if _, err := db.Pool.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{empty}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{empty}.Sanitize()+" CASCADE")
	})
	for _, schema := range []string{empty, db.Schema + "_missing"} {
		for _, failOpen := range []bool{false, true} {
			mw, err := idempotency.New(txinbox.Store{DB: db.Pool, Schema: schema}, idempotency.Config{
				Principal: idempotency.HeaderPrincipal("Authorization"), FailOpen: failOpen})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusCreated)
			})))
			for range 2 { // the same answer each time
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transfers", strings.NewReader(`{"amount": 1}`))
				req.Header.Set("Authorization", "alice")
				req.Header.Set("Idempotency-Key", `"k-1"`)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var p idempotency.Problem
				err = json.NewDecoder(resp.Body).Decode(&p)
				_ = resp.Body.Close()
				if err != nil {
					t.Fatalf("schema %s, FailOpen %v: status %d, body not a problem: %v", schema, failOpen, resp.StatusCode, err)
				}
				if resp.StatusCode != http.StatusInternalServerError || p.Type != idempotency.ProblemNotMigrated || p.Status != resp.StatusCode {
					t.Fatalf("schema %s, FailOpen %v: %d %+v; want 500 %s", schema, failOpen, resp.StatusCode, p, idempotency.ProblemNotMigrated)
				}
				if !strings.Contains(p.Detail, "migrate.Up") || !strings.Contains(p.Detail, "txinbox migrate up") {
					t.Errorf("detail %q does not say to run migrate.Up or txinbox migrate up", p.Detail)
				}
				if ra := resp.Header.Get("Retry-After"); ra != "" {
					t.Errorf("Retry-After %q on an answer that no retry changes", ra)
				}
			}
			srv.Close()
			if n := runs.Load(); n != 0 {
				t.Fatalf("schema %s, FailOpen %v: the handler ran %d times unprotected", schema, failOpen, n)
			}
		}
	}
}
