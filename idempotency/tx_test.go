package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/idempotency"
	"github.com/txinbox/txinbox/txinboxtest/txtest"
)

// txMethods lists every method of pgx.Tx the middleware's transaction covers, each with a writer
// that uses it. TestManagedTxCoversEveryMethod checks that the list is complete;
// TestManagedTxEveryMethod checks that each one's writes are rolled back with a response that is not
// stored and committed exactly once with one that is.
var txMethods = txtest.Methods(txtest.Table{
	Insert:      insertEffect,
	CopyColumns: []string{"key"},
	CopyRow:     func(key string) []any { return []any{key} },
}, txinbox.ErrTxManaged)

func insertEffect(schema string) string {
	return "INSERT INTO " + pgx.Identifier{schema, "effects"}.Sanitize() + " (key) VALUES ($1)"
}

// A method pgx adds to pgx.Tx later must not reach the connection past the middleware unnoticed:
// every method of the interface must be in txMethods, with its behaviour tested.
func TestManagedTxCoversEveryMethod(t *testing.T) {
	it := reflect.TypeOf((*pgx.Tx)(nil)).Elem()
	for i := range it.NumMethod() {
		name := it.Method(i).Name
		if _, ok := txMethods[name]; !ok {
			t.Errorf("pgx.Tx has method %s, which the middleware's transaction does not cover: implement it on managedTx "+
				"in idempotency/idempotency.go (keeping what it sends inside the request's transaction, or refusing it), "+
				"and add a writer for it to txtest.Methods in txinboxtest/txtest/txtest.go", name)
		}
	}
	for name := range txMethods {
		if _, ok := it.MethodByName(name); !ok {
			t.Errorf("txMethods lists %s, which pgx.Tx does not have", name)
		}
	}
}

// Every method of the middleware's transaction: the writes of a request answered 5xx (not stored)
// are all rolled back and its key released; those of a request answered 201 are committed exactly
// once with the stored response, which a retry gets replayed. One request also writes through every
// method in turn.
func TestManagedTxEveryMethod(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	e.exec("CREATE TABLE {schema}.effects (key text PRIMARY KEY)")
	names := txtest.Names(txMethods)
	lo := &txtest.LargeObjects{}
	var mu sync.Mutex
	var failures []string
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
		key := r.Header.Get("Idempotency-Key")
		req := strings.Trim(key, `"`)
		outcome, method, _ := strings.Cut(req, "-")
		use := []string{method}
		if method == "all" {
			use = names
		}
		for _, name := range use {
			if err := txMethods[name](r.Context(), tx, e.db.Schema, req+"/"+name, lo); err != nil {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s: %s: %v", req, name, err))
				mu.Unlock()
			}
		}
		if outcome == "fail" {
			http.Error(w, "failed after writing", http.StatusBadGateway)
			return true
		}
		return false
	}

	var reqs []string
	for _, name := range append(names, "all") {
		reqs = append(reqs, "ok-"+name, "fail-"+name)
	}
	for _, req := range reqs {
		body := `{"amount":1}`
		r := e.post("/transfers", "alice", `"`+req+`"`, body)
		want := http.StatusCreated
		if strings.HasPrefix(req, "fail-") {
			want = http.StatusBadGateway
		}
		if r.status != want {
			t.Errorf("%s: status %d (%s), want %d", req, r.status, r.body, want)
		}
		if want == http.StatusCreated {
			rr := e.post("/transfers", "alice", `"`+req+`"`, body)
			if rr.status != want || rr.header.Get(idempotency.HeaderReplayed) != "true" || rr.body != r.body {
				t.Errorf("%s: retry got %d %q (replayed %q), want the stored response", req, rr.status, rr.body, rr.header.Get(idempotency.HeaderReplayed))
			}
		}
	}
	for _, f := range failures {
		t.Error(f)
	}
	if n := e.runs.Load(); n != int64(len(reqs)) {
		t.Errorf("handler ran %d times, want %d (once per request)", n, len(reqs))
	}
	if n, want := e.count("SELECT count(*) FROM {schema}.transfers"), int64(len(reqs)/2); n != want {
		t.Errorf("%d transfers, want %d (one per stored request)", n, want)
	}
	for _, req := range reqs {
		outcome, method, _ := strings.Cut(req, "-")
		use := []string{method}
		if method == "all" {
			use = names
		}
		kept := outcome == "ok"
		if n := e.count("SELECT count(*) FROM {schema}.idempotency_keys WHERE key = $1", req); kept && n != 1 || !kept && n != 0 {
			t.Errorf("%s: %d stored keys, want stored exactly when answered 201", req, n)
		}
		for _, name := range use {
			key := req + "/" + name
			if name == "LargeObjects" {
				lo.Check(t, e.db.Pool, key, kept)
				continue
			}
			n := e.count("SELECT count(*) FROM {schema}.effects WHERE key = $1", key)
			if kept && n != 1 {
				t.Errorf("%s: %d effects, want exactly 1 (stored response)", key, n)
			}
			if !kept && n != 0 {
				t.Errorf("%s: %d effects survive a response that was not stored, want 0", key, n)
			}
		}
	}
}

// A handler that ends the middleware's transaction itself commits its writes early: through
// tx.Conn() handed to code running a transaction of its own on it (pgx.BeginFunc(ctx, conn, ...), as
// libraries taking a *pgx.Conn do: PostgreSQL only warns at the nested BEGIN, and the inner COMMIT
// ends the outer transaction), or with a COMMIT statement. Its writes are then committed whatever
// the response: a 5xx must not release the key, or a retry runs the handler (and its writes) again.
func TestManagedTxEndedByHandler(t *testing.T) {
	for name, end := range map[string]func(ctx context.Context, tx pgx.Tx, insert string) error{
		"BeginFunc on Conn": func(ctx context.Context, tx pgx.Tx, insert string) error {
			return pgx.BeginFunc(ctx, tx.Conn(), func(inner pgx.Tx) error {
				_, err := inner.Exec(ctx, insert)
				return err
			})
		},
		"COMMIT through Conn": func(ctx context.Context, tx pgx.Tx, insert string) error {
			if _, err := tx.Conn().Exec(ctx, insert); err != nil {
				return err
			}
			_, err := tx.Conn().Exec(ctx, "COMMIT")
			return err
		},
		"COMMIT statement": func(ctx context.Context, tx pgx.Tx, insert string) error {
			if _, err := tx.Exec(ctx, insert); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "COMMIT")
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, idempotency.Config{})
			e.exec("CREATE TABLE {schema}.effects (key text PRIMARY KEY)")
			e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
				if err := end(r.Context(), tx, e.db.SQL("INSERT INTO {schema}.effects (key) VALUES (gen_random_uuid()::text)")); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return true
				}
				http.Error(w, "failed after the transaction was committed", http.StatusBadGateway)
				return true
			}
			first := e.post("/transfers", "alice", key1, `{"amount":1}`)
			if first.status != http.StatusBadGateway {
				t.Fatalf("first: %d %s", first.status, first.body)
			}
			retry := e.post("/transfers", "alice", key1, `{"amount":1}`)
			if n := e.runs.Load(); n != 1 {
				t.Errorf("handler ran %d times, want once: its writes were committed by the first run", n)
			}
			if n := e.count("SELECT count(*) FROM {schema}.effects"); n != 1 {
				t.Errorf("%d effects, want 1", n)
			}
			if n := e.count("SELECT count(*) FROM {schema}.transfers"); n != 1 {
				t.Errorf("%d transfers, want 1", n)
			}
			if retry.status != first.status || retry.body != first.body || retry.header.Get(idempotency.HeaderReplayed) != "true" {
				t.Errorf("retry: %d %q (replayed %q), want the first response replayed", retry.status, retry.body, retry.header.Get(idempotency.HeaderReplayed))
			}
		})
	}
}

// A response too large to store after the handler ended the transaction: the writes may be
// committed, so the key is not released (a retry gets 409 until the lease ends), and the connection
// goes back to the pool.
func TestManagedTxEndedByHandlerResponseTooLarge(t *testing.T) {
	e := newEnv(t, idempotency.Config{MaxResponseBytes: 10})
	e.exec("CREATE TABLE {schema}.effects (key text PRIMARY KEY)")
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
		if _, err := tx.Exec(r.Context(), "COMMIT"); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return true
		}
		_, _ = w.Write([]byte("more than ten bytes"))
		return true
	}
	problem(t, e.post("/transfers", "alice", key1, `{"amount":1}`), 500, idempotency.ProblemResponseTooLarge)
	problem(t, e.post("/transfers", "alice", key1, `{"amount":1}`), 409, idempotency.ProblemKeyInFlight)
	if n := e.runs.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once", n)
	}
	if n := e.count("SELECT count(*) FROM {schema}.transfers"); n != 1 {
		t.Errorf("%d transfers, want 1 (committed by the handler)", n)
	}
	if n := e.db.Pool.Stat().AcquiredConns(); n != 0 {
		t.Errorf("%d connections still acquired, want 0", n)
	}
}
