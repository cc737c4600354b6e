package idempotency_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/idempotency"
)

// inFlight starts a request with key1 whose handler blocks (after its business write) until the test
// ends or release is called, and returns once the handler is running. Only the first handler call
// blocks: a second one, which must not happen, returns at once.
func inFlight(t *testing.T, e *env) (release func(), first <-chan resp) {
	t.Helper()
	started, finish := make(chan struct{}), make(chan struct{})
	release = sync.OnceFunc(func() { close(finish) })
	t.Cleanup(release) // before the server closes (cleanups run last-in first-out)
	var calls atomic.Int64
	e.hook = func(w http.ResponseWriter, r *http.Request, tx pgx.Tx) bool {
		if calls.Add(1) == 1 {
			close(started)
			<-finish
		}
		return false
	}
	done := make(chan resp, 1)
	go func() {
		r, _ := e.do("/transfers", "alice", key1, `{"amount":7}`)
		done <- r
	}()
	select {
	case <-started:
	case <-time.After(2 * time.Minute): // only keeps a broken test from hanging
		t.Fatal("gave up waiting for the first request's handler")
	}
	return release, done
}

// A retry of a request that is still running gets 409 (key in flight), and the handler is not run
// again; once the first request has completed, the retry gets its stored response.
func TestInFlightRetryGets409(t *testing.T) {
	e := newEnv(t, idempotency.Config{})
	release, first := inFlight(t, e)
	r, err := e.do("/transfers", "alice", key1, `{"amount":7}`)
	if err != nil {
		t.Fatal(err)
	}
	problem(t, r, http.StatusConflict, idempotency.ProblemKeyInFlight)
	if n := e.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times while the first request was in flight, want 1", n)
	}
	release()
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first request: %d %s", r.status, r.body)
	}
	if r := e.post("/transfers", "alice", key1, `{"amount":7}`); r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("retry after completion: %d %v %s, want the stored response replayed", r.status, r.header, r.body)
	}
}

// A request running past its lease keeps its key: it holds the key's row locked, so a retry gets 409
// and cannot take the key over while the handler runs.
func TestInFlightPastLeaseGets409(t *testing.T) {
	e := newEnv(t, idempotency.Config{Lease: time.Millisecond})
	release, first := inFlight(t, e)
	deadline := time.Now().Add(2 * time.Minute)
	for e.count("SELECT count(*) FROM {schema}.idempotency_keys WHERE locked_until > now()") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("gave up waiting for the lease to end")
		}
		time.Sleep(time.Millisecond) // the lease ends on the server clock
	}
	r, err := e.do("/transfers", "alice", key1, `{"amount":7}`)
	if err != nil {
		t.Fatal(err)
	}
	problem(t, r, http.StatusConflict, idempotency.ProblemKeyInFlight)
	if n := e.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1: the retry took the running request's key over", n)
	}
	release()
	if r := <-first; r.status != http.StatusCreated {
		t.Fatalf("first request: %d %s", r.status, r.body)
	}
}
