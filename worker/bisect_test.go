package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

// bisectSizes are the numbers of messages handed to one batch handler call in the bisection tests:
// a single message, the smallest sets to halve (2, and 3 unevenly), an odd size, a power of
// two and the default HandlerConfig.BatchSize.
var bisectSizes = []int{1, 2, 3, 7, 64, 500}

// errTransient is the failure of a whole call, due to none of its messages.
var errTransient = errors.New("transient failure of the call")

// bisectCall is one call of a batch handler: the keys it was given, and whether it failed.
type bisectCall struct {
	keys   []string
	failed bool
}

// bisectRun is one consumer of the bisection tests: n credit messages received before its pool
// starts (so one claim and one handler call take them all), and the calls its handler got.
type bisectRun struct {
	e        *env
	consumer string
	keys     []string
	bound    int          // the most handler calls the search may make
	claims   atomic.Int32 // batches claimed by its pool (claims that found messages)

	mu        sync.Mutex
	calls     []bisectCall
	multi     int             // calls of more than one message so far
	completed map[string]bool // "key/attempt" of each message of a call that succeeded
	broken    string          // the first wrong call, reported by check at once
}

// newBisectRun receives n messages of a consumer of its own (keys <consumer>-<i>) in e.
func newBisectRun(t *testing.T, e *env, consumer string, n int) *bisectRun {
	t.Helper()
	r := &bisectRun{e: e, consumer: consumer, keys: keys(consumer, n), completed: map[string]bool{}}
	msgs := make([]inbox.Message, n)
	for i, k := range r.keys {
		msgs[i] = inbox.Message{Consumer: consumer, Key: k, Kind: "credit", Payload: []byte(`{"amount": 1}`)}
	}
	if _, err := e.client.ReceiveMany(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	return r
}

// start runs a pool of one runner for r's consumer whose batch handler (BatchSize n, MaxAttempts
// maxAttempts) writes the effects of its messages, then returns fail(msgs, multi), multi being the
// number of earlier calls of more than one message. A wrong call (messages out of claim order, a
// message given again in an attempt after a call of it succeeded, more than bound calls) is noted
// for check, and makes this call and every later one fail. Every claim that takes messages is
// counted: the messages are all received before the pool starts, so the first claim takes them all,
// and a message the bisection leaves undecided (neither completed nor charged when the batch commits)
// is claimed again by a second batch, which check sees.
func (r *bisectRun) start(t *testing.T, maxAttempts, bound int, fail func(msgs []*worker.Message[credit], multi int) error) {
	t.Helper()
	r.bound = bound
	hs := worker.NewHandlers()
	worker.HandleBatch(hs, "credit", func(ctx context.Context, tx pgx.Tx, msgs []*worker.Message[credit]) error {
		c := bisectCall{}
		for _, m := range msgs {
			c.keys = append(c.keys, m.Key)
		}
		r.mu.Lock()
		wrong := func(format string, args ...any) {
			if r.broken == "" {
				r.broken = fmt.Sprintf(format, args...)
			}
		}
		for i, m := range msgs {
			if i > 0 && msgs[i-1].ID >= m.ID {
				wrong("call %d got %v: not in claim order (by id), or a message twice", len(r.calls)+1, c.keys)
			}
			if r.completed[fmt.Sprint(m.Key, "/", m.Attempt)] {
				wrong("call %d got %s again in its attempt %d, after a call of it succeeded", len(r.calls)+1, m.Key, m.Attempt)
			}
		}
		if len(r.calls) >= bound {
			wrong("more than %d handler calls: the search does not end within its bound", bound)
		}
		multi, broken := r.multi, r.broken
		if len(msgs) > 1 {
			r.multi++
		}
		r.mu.Unlock()
		err := applyCredits(ctx, tx, r.e.Schema, msgs) // written first: a failed call's writes roll back
		switch {
		case err != nil:
		case broken != "":
			err = errors.New(broken)
		default:
			err = fail(msgs, multi)
		}
		c.failed = err != nil
		r.mu.Lock()
		defer r.mu.Unlock()
		r.calls = append(r.calls, c)
		if err == nil {
			for _, m := range msgs {
				r.completed[fmt.Sprint(m.Key, "/", m.Attempt)] = true
			}
		}
		return err
	}, worker.HandlerConfig{BatchSize: len(r.keys), MaxAttempts: maxAttempts})
	p := batchPool(t, r.e, nil, hs, func(c *worker.Config) {
		c.Consumer = r.consumer
		// The default Timeout (30s) and Lease: on a loaded machine a statement of the search may
		// stall for seconds, and a timeout would charge a message (these tests are of the search).
		c.Concurrency = 1
	})
	worker.SetClaimHook(p, func(*worker.Pool, []string) { r.claims.Add(1) })
	run(t, p)
}

// String describes r's first calls, for a failure.
func (r *bisectRun) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d handler calls", len(r.calls))
	for i, c := range r.calls[:min(len(r.calls), 12)] {
		fmt.Fprintf(&b, "; %d: %d messages %s..%s (failed: %v)", i+1, len(c.keys), c.keys[0], c.keys[len(c.keys)-1], c.failed)
	}
	return b.String()
}

// check waits until every message of r is completed or dead, then checks that each message of
// poison is dead after one attempt, charged once with its own error ("poison <key>"), and every other
// message completed in its first attempt, never charged, its effect applied exactly once. A wrong call
// fails it at once.
func (r *bisectRun) check(t *testing.T, poison ...string) {
	t.Helper()
	e := r.e
	broken := func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.broken
	}
	// The search of n messages makes up to batchBound calls in one transaction (about 2,000 for 500
	// messages that fail in every call of several): progress is the handler calls made.
	waitProgress(t, "all settled", func() bool {
		return broken() != "" ||
			e.Count(t, `SELECT count(*) FROM `+msgView+` m WHERE consumer = $1 AND state IN ('completed', 'dead')`, r.consumer) == int64(len(r.keys))
	}, func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.calls)
	})
	if b := broken(); b != "" {
		t.Fatalf("%s (%v)", b, r)
	}
	if n := r.claims.Load(); n != 1 {
		t.Fatalf("%d batches claimed the messages, want 1: the bisection left messages undecided, for another batch to run (%v)", n, r)
	}
	rows, err := e.Pool.Query(context.Background(), e.SQL(`SELECT key, state, attempts_started, attempts_failed, coalesce(last_error, '')
		FROM `+msgView+` m WHERE consumer = $1 ORDER BY id`), r.consumer)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		key, state      string
		started, failed int
		lastErr         string
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (m row, err error) {
		return m, row.Scan(&m.key, &m.state, &m.started, &m.failed, &m.lastErr)
	})
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	first, calls := r.calls[0], len(r.calls)
	r.mu.Unlock()
	if len(first.keys) != len(r.keys) || first.failed != (len(r.keys) > 1) {
		t.Fatalf("first call: %d messages (failed: %v), want all %d (failed if more than one)", len(first.keys), first.failed, len(r.keys))
	}
	bad := 0
	for _, m := range got {
		ok := m.state == "completed" && m.started == 1 && m.failed == 0 && m.lastErr == ""
		if slices.Contains(poison, m.key) {
			ok = m.state == "dead" && m.started == 1 && m.failed == 1 && strings.Contains(m.lastErr, "poison "+m.key)
		}
		if !ok {
			if bad++; bad <= 5 {
				t.Errorf("%s: %s, %d started, %d failed, error %q", m.key, m.state, m.started, m.failed, m.lastErr)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d messages wrongly decided (poison %v); %v", bad, len(r.keys), poison, r)
	}
	want := len(r.keys) - len(poison)
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = ANY($1)`, r.keys); n != int64(want) {
		t.Fatalf("effects = %d, want %d", n, want)
	}
	if n := e.Count(t, `SELECT count(*) FROM {schema}.effects WHERE key = ANY($1)`, poison); n != 0 {
		t.Fatalf("%d poison effects kept", n)
	}
	t.Logf("%d handler calls (bound %d)", calls, r.bound)
}

// A batch handler whose calls of several messages fail for a reason that is none of the messages'
// (the whole first call; the first call and then its first half; every call of more than one
// message), while each message alone succeeds: the bisection charges no one. Every message completes
// in its first attempt, exactly once, with no failure counted and no error kept; none is dead. The
// sizes make every branch of the search run: a left half that succeeds (the culprit then inferred in
// the right half and called alone), a left half that fails (the right half left for the next round),
// rounds after rounds, uneven halves. The calls stay within the bisection's bound, each round of
// the search counted as the search of one culprit (batchBound).
func TestBatchHandlerTransientFailureChargesNoOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runs := 0
	for _, tc := range []struct {
		name   string
		rounds func(n int) int // the most rounds of the search among n messages
		fail   func(msgs []*worker.Message[credit], multi int) error
	}{
		{"the whole call", func(int) int { return 1 }, func(msgs []*worker.Message[credit], multi int) error {
			if len(msgs) > 1 && multi == 0 {
				return errTransient
			}
			return nil
		}},
		{"the whole call and its first half", func(int) int { return 2 }, func(msgs []*worker.Message[credit], multi int) error {
			if len(msgs) > 1 && multi < 2 {
				return errTransient
			}
			return nil
		}},
		// Each round decides at least 2 messages: the left one of the last two, and the right one, inferred.
		{"every call of several messages", func(n int) int { return (n + 1) / 2 }, func(msgs []*worker.Message[credit], multi int) error {
			if len(msgs) > 1 {
				return errTransient
			}
			return nil
		}},
	} {
		for _, n := range bisectSizes {
			t.Run(fmt.Sprintf("%s/%d", tc.name, n), func(t *testing.T) {
				runs++
				r := newBisectRun(t, e, fmt.Sprintf("t%d", runs), n)
				r.start(t, 3, batchBound(tc.rounds(n), n), tc.fail)
				r.check(t)
			})
		}
	}
}

// One poison message among n (first, in the middle, last), failing every call it is in with its own
// error (an ordinary error, or a BatchErrors naming it), plus one transient failure of the whole first
// call: only the poison is charged, with its own error (MaxAttempts 1: dead at once); every other
// message completes in its first attempt, exactly once, never charged; the calls stay within the
// bound of 2 culprits (batchBound).
func TestBatchHandlerTransientFailureChargesOnlyThePoison(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runs := 0
	for _, named := range []bool{false, true} {
		for _, n := range bisectSizes[1:] {
			for _, pos := range slices.Compact([]int{0, n / 2, n - 1}) {
				t.Run(fmt.Sprintf("named=%v/%d/at %d", named, n, pos), func(t *testing.T) {
					runs++
					r := newBisectRun(t, e, fmt.Sprintf("p%d", runs), n)
					poison := r.keys[pos]
					r.start(t, 1, batchBound(2, n), func(msgs []*worker.Message[credit], multi int) error {
						if len(msgs) > 1 && multi == 0 {
							return errTransient
						}
						for _, m := range msgs {
							if m.Key != poison {
								continue
							}
							if named {
								return worker.BatchErrors{m.ID: fmt.Errorf("poison %s", m.Key)}
							}
							return fmt.Errorf("poison %s", m.Key)
						}
						return nil
					})
					r.check(t, poison)
				})
			}
		}
	}
}
