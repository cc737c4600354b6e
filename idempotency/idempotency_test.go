package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

const key1 = `"8e03978e-40d5-43e8-bc93-6894a57f9324"`

func TestReplayIsIdentical(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	first := e.post("/transfers", "alice", key1, `{"amount":42}`)
	if first.status != http.StatusCreated || first.body != `{"id":1,"amount":42}` {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	if first.header.Get(idempotency.HeaderReplayed) != "" || first.header.Get("X-Not-Stored") == "" {
		t.Fatalf("first response headers: %v", first.header)
	}
	for i := range 3 {
		again := e.post("/transfers", "alice", key1, `{"amount":42}`)
		if again.status != first.status || again.body != first.body {
			t.Fatalf("replay %d: %d %q, want %d %q", i, again.status, again.body, first.status, first.body)
		}
		for _, h := range []string{"Content-Type", "Location", "Content-Length"} {
			if again.header.Get(h) != first.header.Get(h) {
				t.Fatalf("replay %d: %s = %q, want %q", i, h, again.header.Get(h), first.header.Get(h))
			}
		}
		if again.header.Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("replay %d: %s = %q", i, idempotency.HeaderReplayed, again.header.Get(idempotency.HeaderReplayed))
		}
		if again.header.Get("X-Not-Stored") != "" {
			t.Fatalf("replay %d: a header outside StoredHeaders was replayed", i)
		}
	}
	if n := e.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	if n := e.count("SELECT count(*) FROM {schema}.transfers"); n != 1 {
		t.Fatalf("%d transfers", n)
	}
	// The unquoted form of the same key is the same key.
	bare := e.post("/transfers", "alice", strings.Trim(key1, `"`), `{"amount":42}`)
	if bare.status != http.StatusCreated || bare.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("bare key: %d %v", bare.status, bare.header)
	}
}

func TestStoredResponseCommitsWithBusinessWrite(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	e.post("/transfers", "alice", key1, `{"amount":5}`)
	// One transaction: the transfer and the completed key are both there, and the key holds the
	// response that was sent.
	if n := e.count(`SELECT count(*) FROM {schema}.idempotency_keys k, {schema}.transfers t
		WHERE k.state = 'completed' AND k.status = 201 AND convert_from(k.body, 'UTF8') = '{"id":' || t.id || ',"amount":5}'`); n != 1 {
		t.Fatalf("completed keys matching the transfer: %d", n)
	}
	if n := e.count(`SELECT count(*) FROM {schema}.idempotency_keys WHERE headers = '{"Content-Type":["application/json"],"Location":["/transfers/1"]}'::jsonb`); n != 1 {
		t.Fatalf("stored headers differ")
	}
}

func TestKeyMissingOrInvalid(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	problem(t, e.post("/transfers", "alice", "", `{"amount":1}`), 400, idempotency.ProblemKeyMissing)
	for _, k := range []string{`""`, `"abc`, `"a\b"`, `"abc", "def"`, "abc def", `"` + strings.Repeat("x", 256) + `"`, "a;b", `"é"`} {
		problem(t, e.post("/transfers", "alice", k, `{"amount":1}`), 400, idempotency.ProblemKeyInvalid)
	}
	// The header sent twice.
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/transfers", strings.NewReader(`{"amount":1}`))
	req.Header.Add("Authorization", "Bearer alice")
	req.Header.Add("Idempotency-Key", `"a"`)
	req.Header.Add("Idempotency-Key", `"b"`)
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	problem(t, resp{status: res.StatusCode, header: res.Header, body: string(body)}, 400, idempotency.ProblemKeyInvalid)
	if n := e.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times", n)
	}
}

func TestKeyOptionalAndOtherMethodsPassThrough(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mw, err := idempotency.New(db.Store(), idempotency.Config{KeyOptional: true, Principal: idempotency.HeaderPrincipal("Authorization")})
	if err != nil {
		t.Fatal(err)
	}
	var sawTx []bool
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, ok := idempotency.Tx(r.Context())
		sawTx = append(sawTx, ok)
		w.WriteHeader(http.StatusAccepted)
	}))
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodGet} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "/x", nil)) // no key, no credentials
		if rec.Code != http.StatusAccepted {
			t.Fatalf("%s: %d", method, rec.Code)
		}
	}
	if fmt.Sprint(sawTx) != "[false false false]" {
		t.Fatalf("Tx seen: %v", sawTx)
	}
}

func TestUnauthenticated(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	problem(t, e.post("/transfers", "", key1, `{"amount":1}`), 401, idempotency.ProblemUnauthenticated)
	if e.runs.Load() != 0 {
		t.Fatal("handler ran")
	}
}

func TestInFlightConflict(t *testing.T) {
	e := newEnv(t, idempotency.Config{RetryAfter: 1500 * time.Millisecond})
	started, finish := make(chan struct{}), make(chan struct{})
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
		close(started)
		<-finish
		return false
	}
	done := make(chan resp)
	go func() {
		r, _ := e.do("/transfers", "alice", key1, `{"amount":7}`)
		done <- r
	}()
	<-started
	p := e.post("/transfers", "alice", key1, `{"amount":7}`)
	problem(t, p, 409, idempotency.ProblemKeyInFlight)
	if ra := p.header.Get("Retry-After"); ra != "2" {
		t.Fatalf("Retry-After %q, want 2", ra)
	}
	// A different body while in flight is a reuse of the key: 422.
	problem(t, e.post("/transfers", "alice", key1, `{"amount":8}`), 422, idempotency.ProblemKeyReused)
	close(finish)
	if r := <-done; r.status != http.StatusCreated {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	e.hook = nil
	if r := e.post("/transfers", "alice", key1, `{"amount":7}`); r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("after completion: %d %v", r.status, r.header)
	}
	if e.runs.Load() != 1 {
		t.Fatalf("handler ran %d times", e.runs.Load())
	}
}

func TestDifferentRequestSameKey(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	e.post("/transfers", "alice", key1, `{"amount":1}`)
	problem(t, e.post("/transfers", "alice", key1, `{"amount":2}`), 422, idempotency.ProblemKeyReused)
	problem(t, e.post("/transfers?dry_run=1", "alice", key1, `{"amount":1}`), 422, idempotency.ProblemKeyReused)
	if e.runs.Load() != 1 {
		t.Fatalf("handler ran %d times", e.runs.Load())
	}
}

func TestScopedByPrincipalAndRoute(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	a := e.post("/transfers", "alice", key1, `{"amount":1}`)
	b := e.post("/transfers", "bob", key1, `{"amount":1}`)
	o := e.post("/other", "alice", key1, `{"amount":1}`)
	for _, r := range []resp{a, b, o} {
		if r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "" {
			t.Fatalf("%d %v", r.status, r.header)
		}
	}
	if a.body == b.body || a.body == o.body {
		t.Fatalf("shared response: %s %s %s", a.body, b.body, o.body)
	}
	if e.runs.Load() != 3 || e.count("SELECT count(*) FROM {schema}.idempotency_keys") != 3 {
		t.Fatalf("runs %d", e.runs.Load())
	}
	// Credentials are stored hashed.
	if n := e.count("SELECT count(*) FROM {schema}.idempotency_keys WHERE principal LIKE '%alice%'"); n != 0 {
		t.Fatal("credentials stored in clear")
	}
}

func TestServerErrorNotStored(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	fail := true
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
		if fail {
			http.Error(w, "downstream unavailable", http.StatusBadGateway)
			return true
		}
		return false
	}
	r := e.post("/transfers", "alice", key1, `{"amount":3}`)
	if r.status != http.StatusBadGateway || r.body != "downstream unavailable\n" {
		t.Fatalf("%d %q", r.status, r.body)
	}
	if e.count("SELECT count(*) FROM {schema}.transfers") != 0 || e.count("SELECT count(*) FROM {schema}.idempotency_keys") != 0 {
		t.Fatal("a 5xx committed something")
	}
	fail = false
	if r := e.post("/transfers", "alice", key1, `{"amount":3}`); r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("retry: %d %v", r.status, r.header)
	}
	if e.runs.Load() != 2 || e.count("SELECT count(*) FROM {schema}.transfers") != 1 {
		t.Fatal("retry did not run exactly once more")
	}
}

func TestServerErrorStoredWhenConfigured(t *testing.T) {
	e := newEnv(t, idempotency.Config{StoreStatus: func(int) bool { return true }})
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
		http.Error(w, "stored failure", http.StatusInternalServerError)
		return true
	}
	e.post("/transfers", "alice", key1, `{"amount":3}`)
	r := e.post("/transfers", "alice", key1, `{"amount":3}`)
	if r.status != 500 || r.body != "stored failure\n" || r.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("%d %q %v", r.status, r.body, r.header)
	}
	if e.runs.Load() != 1 || e.count("SELECT count(*) FROM {schema}.transfers") != 1 {
		t.Fatal("stored 500 did not commit exactly once")
	}
}

func TestClientErrorStored(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	first := e.post("/transfers", "alice", key1, `not json`)
	again := e.post("/transfers", "alice", key1, `not json`)
	if first.status != 400 || again.status != 400 || again.body != first.body || again.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("%d %d %q %q", first.status, again.status, first.body, again.body)
	}
	if e.runs.Load() != 1 {
		t.Fatalf("handler ran %d times", e.runs.Load())
	}
}

func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	closed, err := pgxpool.New(context.Background(), testdb.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	noServer, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(noServer.Close)
	for name, db := range map[string]*pgxpool.Pool{"closed pool": closed, "closed port": noServer} {
		for _, failOpen := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/failOpen=%v", name, failOpen), func(t *testing.T) {
				mw, err := idempotency.New(txinbox.Store{DB: db}, idempotency.Config{FailOpen: failOpen, Principal: idempotency.HeaderPrincipal("Authorization")})
				if err != nil {
					t.Fatal(err)
				}
				ran, hadTx := false, false
				srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					ran = true
					_, hadTx = idempotency.Tx(r.Context())
					b, _ := io.ReadAll(r.Body)
					_, _ = w.Write(b)
				})))
				defer srv.Close()
				e := &env{t: t, srv: srv}
				r := e.post("/", "alice", key1, "hello")
				if failOpen {
					if r.status != 200 || r.body != "hello" || !ran || hadTx {
						t.Fatalf("fail open: %d %q ran=%v tx=%v", r.status, r.body, ran, hadTx)
					}
					return
				}
				problem(t, r, 503, idempotency.ProblemStoreUnavailable)
				if r.header.Get("Retry-After") != "1" || ran {
					t.Fatalf("Retry-After %q, ran %v", r.header.Get("Retry-After"), ran)
				}
			})
		}
	}
}

// Fifty callers send one key at once while the handler is held: exactly one runs it, every other
// one gets 409. Fifty more, after it completed, all get the replay. Then fifty callers race with a
// handler that is not held: whatever the interleaving, it runs once and each caller gets 409 or the
// replay.
func TestConcurrentSameKey(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	const n = 50
	others := make(chan resp, n)
	hold := make(chan struct{})
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool { <-hold; return false }

	wave := func(key string, out chan<- resp) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-start
				r, err := e.do("/transfers", "alice", key, `{"amount":1}`)
				if err != nil {
					t.Error(err)
				}
				out <- r
			})
		}
		close(start)
		wg.Wait()
	}

	results := make(chan resp, n)
	go func() {
		// Release the handler once every other caller has been answered.
		got := []resp{}
		for r := range others {
			got = append(got, r)
			if len(got) == n-1 {
				close(hold)
			}
			results <- r
		}
	}()
	wave(key1, others)
	close(others)
	created, conflicts := 0, 0
	for range n {
		switch r := <-results; {
		case r.status == http.StatusCreated && r.header.Get(idempotency.HeaderReplayed) == "":
			created++
		case r.status == http.StatusConflict:
			problem(t, r, 409, idempotency.ProblemKeyInFlight)
			conflicts++
		default:
			t.Fatalf("unexpected %d %v %s", r.status, r.header, r.body)
		}
	}
	if created != 1 || conflicts != n-1 || e.runs.Load() != 1 {
		t.Fatalf("created %d, conflicts %d, runs %d", created, conflicts, e.runs.Load())
	}

	replays := make(chan resp, n)
	wave(key1, replays)
	close(replays)
	for r := range replays {
		if r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("after completion: %d %v", r.status, r.header)
		}
	}

	e.hook = nil
	mixed := make(chan resp, n)
	wave(`"second-key"`, mixed)
	close(mixed)
	created, replayed := 0, 0
	for r := range mixed {
		switch {
		case r.status == http.StatusCreated && r.header.Get(idempotency.HeaderReplayed) == "":
			created++
		case r.status == http.StatusCreated:
			replayed++
		case r.status == http.StatusConflict:
		default:
			t.Fatalf("unexpected %d %s", r.status, r.body)
		}
	}
	if created != 1 || e.runs.Load() != 2 || e.count("SELECT count(*) FROM {schema}.transfers") != 2 {
		t.Fatalf("second key: created %d, replayed %d, runs %d", created, replayed, e.runs.Load())
	}
}

func TestExpiredKeyRunsAgain(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	e.post("/transfers", "alice", key1, `{"amount":1}`)
	// Expire it (what time does), without deleting it (the cleaner has not run yet).
	e.exec("UPDATE {schema}.idempotency_keys SET expires_at = now() - interval '1 second'")
	// An expired key is absent: even another request with it runs.
	r := e.post("/transfers", "alice", key1, `{"amount":2}`)
	if r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "" || r.body != `{"id":2,"amount":2}` {
		t.Fatalf("%d %v %s", r.status, r.header, r.body)
	}
	if r := e.post("/transfers", "alice", key1, `{"amount":2}`); r.header.Get(idempotency.HeaderReplayed) != "true" || r.body != `{"id":2,"amount":2}` {
		t.Fatalf("renewed key: %d %v %s", r.status, r.header, r.body)
	}
	if e.runs.Load() != 2 || e.count("SELECT count(*) FROM {schema}.idempotency_keys WHERE expires_at > now() + interval '23 hours'") != 1 {
		t.Fatalf("runs %d", e.runs.Load())
	}
}

// A key left in flight by a process that died is taken over once its lease has ended, not before.
func TestAbandonedKeyTakenOverAfterLease(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	e.post("/transfers", "alice", key1, `{"amount":1}`) // creates the row with the right scope
	e.exec("UPDATE {schema}.idempotency_keys SET state = 'in_flight', status = NULL, body = NULL, locked_until = now() + interval '1 hour'")
	problem(t, e.post("/transfers", "alice", key1, `{"amount":1}`), 409, idempotency.ProblemKeyInFlight)
	e.exec("UPDATE {schema}.idempotency_keys SET locked_until = now() - interval '1 second'")
	r := e.post("/transfers", "alice", key1, `{"amount":1}`)
	if r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("%d %v", r.status, r.header)
	}
	if n := e.count("SELECT token FROM {schema}.idempotency_keys WHERE state = 'completed'"); n != 2 {
		t.Fatalf("fencing token %d, want 2", n)
	}
}

// A handler running longer than the lease keeps its key: it holds the row locked.
func TestLongHandlerKeepsKey(t *testing.T) {
	e := newEnv(t, idempotency.Config{Lease: time.Millisecond})
	started, finish := make(chan struct{}), make(chan struct{})
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
		close(started)
		<-finish
		return false
	}
	done := make(chan resp)
	go func() {
		r, _ := e.do("/transfers", "alice", key1, `{"amount":1}`)
		done <- r
	}()
	<-started
	for e.count("SELECT count(*) FROM {schema}.idempotency_keys WHERE locked_until > now()") != 0 {
		time.Sleep(time.Millisecond) // wait for the lease to end (server clock)
	}
	problem(t, e.post("/transfers", "alice", key1, `{"amount":1}`), 409, idempotency.ProblemKeyInFlight)
	close(finish)
	if r := <-done; r.status != http.StatusCreated {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if e.runs.Load() != 1 {
		t.Fatalf("runs %d", e.runs.Load())
	}
}

func TestResponseTooLarge(t *testing.T) {
	e := newEnv(t, idempotency.Config{MaxResponseBytes: 100})
	var writeErr error
	big := true
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
		if !big {
			return false
		}
		_, _ = w.Write([]byte(strings.Repeat("a", 60)))
		_, writeErr = w.Write([]byte(strings.Repeat("b", 60)))
		return true
	}
	problem(t, e.post("/transfers", "alice", key1, `{"amount":1}`), 500, idempotency.ProblemResponseTooLarge)
	if !errors.Is(writeErr, idempotency.ErrResponseTooLarge) {
		t.Fatalf("Write error %v", writeErr)
	}
	if e.count("SELECT count(*) FROM {schema}.transfers") != 0 || e.count("SELECT count(*) FROM {schema}.idempotency_keys") != 0 {
		t.Fatal("an oversized response committed something or kept its key")
	}
	big = false
	if r := e.post("/transfers", "alice", key1, `{"amount":1}`); r.status != http.StatusCreated {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
}

func TestRequestTooLarge(t *testing.T) {
	e := newEnv(t, idempotency.Config{MaxRequestBytes: 16})
	problem(t, e.post("/transfers", "alice", key1, `{"amount":100000000}`), 413, idempotency.ProblemRequestTooLarge)
	// Without a Content-Length (chunked): detected while reading.
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/transfers", io.MultiReader(strings.NewReader(`{"amount":`), strings.NewReader(`100000000}`)))
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Idempotency-Key", key1)
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.Request.ContentLength != -1 && res.Request.ContentLength != 0 {
		t.Fatalf("request had a length: %d", res.Request.ContentLength)
	}
	problem(t, resp{status: res.StatusCode, header: res.Header, body: string(b)}, 413, idempotency.ProblemRequestTooLarge)
	if r := e.post("/transfers", "alice", key1, `{"amount":1}`); r.status != http.StatusCreated {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if e.runs.Load() != 1 {
		t.Fatalf("runs %d", e.runs.Load())
	}
}

func TestHandlerPanicReleasesKey(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool { panic("boom") }
	h := e.mw.Handler(http.HandlerFunc(e.transfer))
	req := httptest.NewRequest(http.MethodPost, "/transfers", strings.NewReader(`{"amount":1}`))
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Idempotency-Key", key1)
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v", p)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	if e.count("SELECT count(*) FROM {schema}.transfers") != 0 || e.count("SELECT count(*) FROM {schema}.idempotency_keys") != 0 {
		t.Fatal("a panicking handler committed something or kept its key")
	}
	e.hook = nil
	if r := e.post("/transfers", "alice", key1, `{"amount":1}`); r.status != http.StatusCreated {
		t.Fatalf("%d %s", r.status, r.body)
	}
}

func TestAbortedTransaction(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
		_, _ = tx.Exec(r.Context(), "SELECT 1/0") // error ignored: the transaction is aborted
		return false
	}
	problem(t, e.post("/transfers", "alice", key1, `{"amount":1}`), 500, idempotency.ProblemStoreFailed)
	if e.count("SELECT count(*) FROM {schema}.transfers") != 0 || e.count("SELECT count(*) FROM {schema}.idempotency_keys") != 0 {
		t.Fatal("an aborted transaction kept something")
	}
}

func TestManagedTx(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	var commitErr, rollbackErr error
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
		commitErr, rollbackErr = tx.Commit(r.Context()), tx.Rollback(r.Context())
		// Savepoints work as usual.
		sp, err := tx.Begin(r.Context())
		if err != nil {
			t.Error(err)
			return false
		}
		_, _ = sp.Exec(r.Context(), "SELECT 1/0")
		if err := sp.Rollback(r.Context()); err != nil {
			t.Error(err)
		}
		return false
	}
	if r := e.post("/transfers", "alice", key1, `{"amount":1}`); r.status != http.StatusCreated {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if !errors.Is(commitErr, txinbox.ErrTxManaged) || !errors.Is(rollbackErr, txinbox.ErrTxManaged) {
		t.Fatalf("commit %v, rollback %v", commitErr, rollbackErr)
	}
	if e.count("SELECT count(*) FROM {schema}.transfers") != 1 {
		t.Fatal("transfer not committed")
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	p := idempotency.HeaderPrincipal("Authorization")
	pool, err := pgxpool.New(context.Background(), testdb.LocalURL) // connects lazily: never used here
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	good := txinbox.Store{DB: pool}
	for name, tc := range map[string]struct {
		store txinbox.Store
		cfg   idempotency.Config
	}{
		"no principal":     {good, idempotency.Config{}},
		"no DB":            {txinbox.Store{}, idempotency.Config{Principal: p}},
		"bad schema":       {txinbox.Store{DB: pool, Schema: "a-b"}, idempotency.Config{Principal: p}},
		"negative expiry":  {good, idempotency.Config{Principal: p, Expiry: -1}},
		"negative request": {good, idempotency.Config{Principal: p, MaxRequestBytes: -1}},
	} {
		if _, err := idempotency.New(tc.store, tc.cfg); !errors.Is(err, txinbox.ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
