package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/seen"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// seenCounter is a Store's Tracer that counts what the seen-key cache did: the results of its
// look-ups (txinbox.OpSeenGet), and its calls and errors by Op.
type seenCounter struct {
	mu      sync.Mutex
	results map[string]int
	calls   map[txinbox.Op]int
	errors  map[txinbox.Op]int
}

func newSeenCounter() *seenCounter {
	return &seenCounter{results: map[string]int{}, calls: map[txinbox.Op]int{}, errors: map[txinbox.Op]int{}}
}

func (o *seenCounter) TraceStart(ctx context.Context, _ txinbox.TraceStart) context.Context {
	return ctx
}

func (o *seenCounter) TraceEnd(_ context.Context, d txinbox.TraceEnd) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[d.Op]++
	if d.Err != nil {
		o.errors[d.Op]++
	}
	if d.Op == txinbox.OpSeenGet {
		for _, r := range d.Results {
			o.results[r]++
		}
	}
}

func (o *seenCounter) result(r string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.results[r]
}

func (o *seenCounter) errs(op txinbox.Op) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.errors[op]
}

func (o *seenCounter) told(op txinbox.Op) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[op]
}

// tracedStore returns db's Store with the Tracer t.
func tracedStore(db *testdb.DB, t txinbox.OperationTracer) txinbox.Store {
	st := db.Store()
	st.Tracer = t
	return st
}

func newLRU(t *testing.T) *seen.LRU {
	t.Helper()
	l, err := seen.NewLRU(seen.LRUConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// seenClient returns a Client of db with cache (nil: none), the dedup window retention (0: the
// default) and a counting Tracer.
func seenClient(t *testing.T, db *testdb.DB, cache txinbox.SeenCache, retention time.Duration) (*inbox.Client, *seenCounter) {
	t.Helper()
	o := newSeenCounter()
	st := tracedStore(db, o)
	st.SeenCache, st.Retention = cache, retention
	c, err := inbox.New(st, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c, o
}

// storm is a redelivery storm: unique messages, then batches mixing exact redeliveries, redeliveries
// with other white space (the same jsonb: Duplicate, decided by the database), altered payloads
// (Conflict) and new keys, in a fixed pseudo-random order.
func storm(seed uint64) [][]inbox.Message {
	r := rand.New(rand.NewPCG(seed, 1))
	var batches [][]inbox.Message
	next := 0
	for range 60 {
		n := 1 + r.IntN(8)
		var b []inbox.Message
		for range n {
			switch p := r.IntN(10); {
			case next == 0 || p < 2:
				b = append(b, ledgertest.Message(fmt.Sprintf("k%d", next), fmt.Sprintf(`{"n":%d}`, next)))
				next++
			case p < 7:
				k := r.IntN(next)
				b = append(b, ledgertest.Message(fmt.Sprintf("k%d", k), fmt.Sprintf(`{"n":%d}`, k)))
			case p < 8:
				k := r.IntN(next)
				b = append(b, ledgertest.Message(fmt.Sprintf("k%d", k), fmt.Sprintf(`{ "n" : %d }`, k)))
			default:
				k := r.IntN(next)
				b = append(b, ledgertest.Message(fmt.Sprintf("k%d", k), fmt.Sprintf(`{"n":%d,"altered":true}`, k)))
			}
		}
		batches = append(batches, b)
	}
	return batches
}

// TestSeenRedeliveryStorm receives the same storm with and without a cache (one message at a time
// and in batches): the outcomes are identical, the unique set is stored once, every redelivery is a
// Duplicate and every altered payload a Conflict; the cache answered some of them.
func TestSeenRedeliveryStorm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	batches := storm(7)
	run := func(cache txinbox.SeenCache) ([]inbox.Outcome, *seenCounter, *testdb.DB) {
		db := testdb.New(t)
		c, o := seenClient(t, db, cache, time.Hour)
		var out []inbox.Outcome
		for i, b := range batches {
			if i%2 == 0 {
				rs, err := c.ReceiveMany(ctx, b)
				if err != nil {
					t.Fatal(err)
				}
				for j, r := range rs {
					if r.Outcome == inbox.Conflict && !errors.Is(r.Err, inbox.ErrKeyConflict) {
						t.Fatalf("conflict without a KeyConflictError: %+v", r)
					}
					if r.Cached && (r.Outcome != inbox.Duplicate || r.ID == 0 || r.State != "" || r.Result != nil) {
						t.Fatalf("cached receipt %+v", r)
					}
					_ = j
					out = append(out, r.Outcome)
				}
				continue
			}
			for _, m := range b {
				r, err := c.Receive(ctx, m)
				if (r.Outcome == inbox.Conflict) != errors.Is(err, inbox.ErrKeyConflict) {
					t.Fatalf("receive %s: %+v, %v", m.Key, r, err)
				}
				if err != nil && r.Outcome != inbox.Conflict {
					t.Fatal(err)
				}
				out = append(out, r.Outcome)
			}
		}
		return out, o, db
	}
	plain, _, plainDB := run(nil)
	cached, o, cachedDB := run(newLRU(t))
	if len(plain) != len(cached) {
		t.Fatalf("%d receipts without the cache, %d with it", len(plain), len(cached))
	}
	for i := range plain {
		if plain[i] != cached[i] {
			t.Errorf("message %d: %v without the cache, %v with it", i, plain[i], cached[i])
		}
	}
	// The unique set: one row per key, with its first payload. The first occurrence of a key in its
	// batch is a Conflict exactly when its payload is altered, and an Inserted or a Duplicate otherwise
	// (later ones are compared with it).
	var unique int64
	first := map[string]bool{}
	n := 0
	for _, b := range batches {
		inBatch := map[string]bool{}
		for _, m := range b {
			altered := strings.Contains(string(m.Payload), "altered")
			switch {
			case !first[m.Key]:
				first[m.Key] = true
				unique++
				if cached[n] != inbox.Inserted {
					t.Errorf("message %d (%s, new): %v", n, m.Key, cached[n])
				}
			case inBatch[m.Key]:
			case (cached[n] == inbox.Conflict) != altered || (cached[n] != inbox.Duplicate) != altered:
				t.Errorf("message %d (%s, altered %v): %v", n, m.Key, altered, cached[n])
			}
			inBatch[m.Key] = true
			n++
		}
	}
	for _, db := range []*testdb.DB{plainDB, cachedDB} {
		if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE payload = jsonb_build_object('n', substr(key, 2)::int)`); got != unique {
			t.Errorf("%d rows stored with their first payload, want %d", got, unique)
		}
		if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); got != unique {
			t.Errorf("%d rows stored, want %d", got, unique)
		}
	}
	if o.result("hit") == 0 || o.result("mismatch") == 0 || o.result("miss") == 0 {
		t.Errorf("cache results %v: want hits, misses and mismatches", o.results)
	}
}

// TestSeenConcurrentStorm runs storms from 4 clients sharing one cache and one table: each key is
// inserted exactly once, and a receipt is a Conflict exactly when its payload differs from the stored
// one (altered or not), a Duplicate otherwise.
func TestSeenConcurrentStorm(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cache := newLRU(t)
	type got struct {
		key     string
		altered bool
		outcome inbox.Outcome
		repeat  bool // not the first occurrence of its key in its batch (compared with that one)
	}
	var mu sync.Mutex
	var all []got
	var wg sync.WaitGroup
	for w := range 4 {
		c, _ := seenClient(t, db, cache, time.Hour)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range storm(uint64(w)) {
				rs, err := c.ReceiveMany(context.Background(), b)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inBatch := map[string]bool{}
				for i, r := range rs {
					all = append(all, got{b[i].Key, strings.Contains(string(b[i].Payload), "altered"), r.Outcome, inBatch[b[i].Key]})
					inBatch[b[i].Key] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rows, err := db.Pool.Query(context.Background(), db.SQL(`SELECT key, payload ? 'altered' FROM {schema}.inbox`))
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for rows.Next() {
		var k string
		var altered bool
		if err := rows.Scan(&k, &altered); err != nil {
			t.Fatal(err)
		}
		stored[k] = altered
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	inserted := map[string]int{}
	for _, g := range all {
		altered, ok := stored[g.key]
		switch {
		case !ok:
			t.Fatalf("%s is not stored", g.key)
		case g.outcome == inbox.Inserted:
			inserted[g.key]++
		case g.repeat:
		case (g.outcome == inbox.Conflict) != (g.altered != altered):
			t.Errorf("%s (altered %v, stored altered %v): %v", g.key, g.altered, altered, g.outcome)
		}
	}
	for k := range stored {
		if inserted[k] != 1 {
			t.Errorf("%s inserted %d times", k, inserted[k])
		}
	}
}

// TestSeenExpiry: an entry never outlives the key's dedup window. The key is cached when inserted
// (for the Store's Retention), completes with that window, and once the window has passed it
// is Inserted again, although the cache had it.
func TestSeenExpiry(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const retention = shortWindow
	c, o := seenClient(t, db, newLRU(t), retention)
	ctx := context.Background()
	r, err := c.Receive(ctx, ledgertest.Message("exp", `{"a":1}`))
	if err != nil || r.Outcome != inbox.Inserted {
		t.Fatalf("%+v %v", r, err)
	}
	if d, err := c.Receive(ctx, ledgertest.Message("exp", `{"a":1}`)); err != nil || !d.Cached || d.ID != r.ID {
		t.Fatalf("redelivery within the window: %+v %v, want a cached duplicate", d, err)
	}
	ledgertest.Complete(t, db, retention, r.ID) // as the worker does: expires_at = now() + Retention
	waitExpired(t, db, r.ID)
	again, err := c.Receive(ctx, ledgertest.Message("exp", `{"a":1}`))
	if err != nil || again.Outcome != inbox.Inserted || again.Cached {
		t.Fatalf("after the window: %+v %v, want Inserted", again, err)
	}
	if o.result("hit") != 1 {
		t.Errorf("hits %d, want 1", o.result("hit"))
	}
}

// shortWindow is the dedup window of the tests that wait for one to end: long enough for the
// statements a test runs within it (a first receive on a Citus coordinator busy creating the other
// tests' distributed schemas took more than a second), short enough to wait out.
const shortWindow = 5 * time.Second

func waitExpired(t *testing.T, db *testdb.DB, id int64) {
	t.Helper()
	for db.Count(t, fmt.Sprintf(`SELECT count(*) FROM {schema}.inbox WHERE id = %d AND expires_at < now()`, id)) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSeenCompletedDuplicateNotCached: a Duplicate of a completed message may be near the end of its
// window, so it is not cached: after the window it is Inserted again, although the cache's entries
// live an hour (the cached Client's Store.Retention).
func TestSeenCompletedDuplicateNotCached(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	plain, _ := seenClient(t, db, nil, 0)
	ctx := context.Background()
	r, err := plain.Receive(ctx, ledgertest.Message("done", `1`))
	if err != nil {
		t.Fatal(err)
	}
	ledgertest.Complete(t, db, shortWindow, r.ID)
	c, o := seenClient(t, db, newLRU(t), time.Hour)
	if d, err := c.Receive(ctx, ledgertest.Message("done", `1`)); err != nil || d.Outcome != inbox.Duplicate || d.Cached || d.State != inbox.StateCompleted {
		t.Fatalf("duplicate of a completed message: %+v %v", d, err)
	}
	waitExpired(t, db, r.ID)
	if again, err := c.Receive(ctx, ledgertest.Message("done", `1`)); err != nil || again.Outcome != inbox.Inserted {
		t.Fatalf("after the window: %+v %v, want Inserted", again, err)
	}
	if o.result("hit") != 0 {
		t.Errorf("hits %d, want 0", o.result("hit"))
	}
}

// TestSeenTxRollbackNotCached: what a rolled-back transaction inserted, or saw as a duplicate of its
// own insert, is not cached; after a commit, Remember caches it.
func TestSeenTxRollbackNotCached(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cache := newLRU(t)
	c, _ := seenClient(t, db, cache, time.Hour)
	ctx := context.Background()
	batch := []inbox.Message{ledgertest.Message("t1", `1`), ledgertest.Message("t1", `1`), ledgertest.Message("t2", `2`)}

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReceiveTx(ctx, tx, ledgertest.Message("t1", `1`)); err != nil {
		t.Fatal(err)
	}
	rs, err := c.ReceiveManyTx(ctx, tx, batch) // t1: Duplicates of this transaction's own row
	if err != nil || rs[0].Outcome != inbox.Duplicate {
		t.Fatalf("%+v %v", rs, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if cache.Len() != 0 {
		t.Fatalf("the cache holds %d entries after a rollback", cache.Len())
	}
	// Remember after a rollback would be a caller's bug; what the caller does right: commit, then Remember.
	tx, err = db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rs, err = c.ReceiveManyTx(ctx, tx, batch)
	if err != nil || rs[0].Outcome != inbox.Inserted {
		t.Fatalf("after the rollback: %+v %v", rs, err)
	}
	if cache.Len() != 0 {
		t.Fatalf("the cache holds %d entries before the commit", cache.Len())
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	c.Remember(ctx, batch, rs)
	if cache.Len() != 2 {
		t.Fatalf("the cache holds %d entries after Remember, want 2", cache.Len())
	}
	for _, m := range batch {
		if d, err := c.Receive(ctx, m); err != nil || !d.Cached {
			t.Errorf("%s after the commit: %+v %v, want a cached duplicate", m.Key, d, err)
		}
	}
}

// TestSeenDeletedKeysAreNew: keys deleted early through an Admin given the Client's cache
// (DiscardDead, DiscardPending, DiscardOlder) are accepted again at once: the cache is invalidated.
func TestSeenDeletedKeysAreNew(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cache := newLRU(t)
	c, o := seenClient(t, db, cache, time.Hour)
	st := tracedStore(db, o)
	st.SeenCache = cache
	a, err := admin.New(st, admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := ledgertest.Receive(t, c, "dead", "pending", "purged")
	for _, k := range []string{"dead", "pending", "purged"} {
		if d, err := c.Receive(ctx, ledgertest.Message(k, `{"amount":1}`)); err != nil || !d.Cached {
			t.Fatalf("%s: %+v %v, want a cached duplicate", k, d, err)
		}
	}
	if _, err := db.Pool.Exec(ctx, db.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = $1)
		UPDATE {schema}.inbox SET state = 'dead', completed_at = now() - interval '1 hour' WHERE id = $1`), ids[0]); err != nil {
		t.Fatal(err)
	}
	check := func(key string) {
		t.Helper()
		r, err := c.Receive(ctx, ledgertest.Message(key, `{"amount":1}`))
		if err != nil || r.Outcome != inbox.Inserted {
			t.Fatalf("%s after its deletion: %+v %v, want Inserted", key, r, err)
		}
	}
	if done, err := a.DiscardDead(ctx, admin.Inbox, ids[0]); err != nil || len(done) != 1 {
		t.Fatalf("%v %v", done, err)
	}
	check("dead")
	if d, err := a.DiscardPending(ctx, admin.PendingFilter{IDs: ids[1:2]}); err != nil || len(d.Discarded) != 1 {
		t.Fatalf("%+v %v", d, err)
	}
	check("pending")
	// Cached again (a duplicate of a pending message), then completed and discarded by age.
	for i := range 2 {
		if d, err := c.Receive(ctx, ledgertest.Message("purged", `{"amount":1}`)); err != nil || d.Outcome != inbox.Duplicate || d.Cached != (i == 1) {
			t.Fatalf("%d: %+v %v", i, d, err)
		}
	}
	ledgertest.Complete(t, db, time.Hour, ids[2])
	if d, err := a.DiscardOlder(ctx, admin.OlderFilter{OlderThan: 0}); err != nil || d.Discarded != 1 {
		t.Fatalf("discard older: %d %v", d.Discarded, err)
	}
	check("purged")
	if o.told(txinbox.OpSeenInvalidate) != 3 || o.errs(txinbox.OpSeenInvalidate) != 0 {
		t.Errorf("%d invalidations told, %d failed; want 3 and 0", o.told(txinbox.OpSeenInvalidate), o.errs(txinbox.OpSeenInvalidate))
	}
}

// failingCache fails every call, as a cache that is down does.
type failingCache struct{ calls atomic.Int64 }

var errCacheDown = errors.New("cache down")

func (f *failingCache) Get(context.Context, []txinbox.SeenKey) ([]txinbox.SeenEntry, []bool, uint64, error) {
	f.calls.Add(1)
	return nil, nil, 0, errCacheDown
}

func (f *failingCache) Put(context.Context, uint64, []txinbox.SeenKey, []txinbox.SeenEntry, []time.Duration) error {
	f.calls.Add(1)
	return errCacheDown
}

func (f *failingCache) Invalidate(context.Context) error { f.calls.Add(1); return errCacheDown }

// slowCache answers only when ctx ends (a cache that hangs).
type slowCache struct{ failingCache }

func (s *slowCache) Get(ctx context.Context, _ []txinbox.SeenKey) ([]txinbox.SeenEntry, []bool, uint64, error) {
	<-ctx.Done()
	return nil, nil, 0, ctx.Err()
}

// TestSeenCacheFailureFallsBack: a cache that fails or hangs never fails a receive call: the database
// answers, and the fallback is counted.
func TestSeenCacheFailureFallsBack(t *testing.T) {
	t.Parallel()
	for _, cache := range []txinbox.SeenCache{&failingCache{}, &slowCache{}} {
		db := testdb.New(t)
		o := newSeenCounter()
		st := tracedStore(db, o)
		st.SeenCache = cache
		c, err := inbox.New(st, inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		want := []inbox.Outcome{inbox.Inserted, inbox.Duplicate, inbox.Conflict}
		for i, m := range []inbox.Message{ledgertest.Message("f", `1`), ledgertest.Message("f", `1`), ledgertest.Message("f", `2`)} {
			r, err := c.Receive(ctx, m)
			if r.Outcome != want[i] || (err != nil) != (want[i] == inbox.Conflict) {
				t.Fatalf("%T: receive %d: %+v %v", cache, i, r, err)
			}
		}
		if got := o.result("fallback"); got != 3 {
			t.Errorf("%T: %d fallbacks, want 3", cache, got)
		}
		if o.errs(txinbox.OpSeenGet) != 3 {
			t.Errorf("%T: %d get errors, want 3", cache, o.errs(txinbox.OpSeenGet))
		}
	}
}

func TestSeenConfigErrors(t *testing.T) {
	t.Parallel()
	if _, err := seen.NewLRU(seen.LRUConfig{MaxBytes: -1}); !errors.Is(err, txinbox.ErrInvalidConfig) {
		t.Errorf("negative MaxBytes: %v", err)
	}
}

// TestSeenInvalidMessageWithCachedKey: a message whose key and payload are cached but whose headers
// are invalid is still rejected, and nothing of its batch is written.
func TestSeenInvalidMessageWithCachedKey(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	c, _ := seenClient(t, db, newLRU(t), time.Hour)
	ctx := context.Background()
	if _, err := c.Receive(ctx, ledgertest.Message("v", `1`)); err != nil {
		t.Fatal(err)
	}
	bad := ledgertest.Message("v", `1`)
	bad.Headers = map[string]string{"x": "\x01"}
	_, err := c.ReceiveMany(ctx, []inbox.Message{ledgertest.Message("new", `1`), bad})
	var ve *txinbox.ValidationError
	if !errors.As(err, &ve) || ve.Index != 1 || ve.Field != "headers" {
		t.Fatalf("%v, want a ValidationError for message 1's headers", err)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'new'`); got != 0 {
		t.Error("a message of the rejected batch was stored")
	}
}

// TestSeenRepeatOfConflictNotCached: within a batch, the repeat of a conflicting message is a
// Conflict too (as TestReceiveManyRepeatOfConflict shows without a cache). Its payload must not be
// cached as the key's: a later copy is a Conflict, as without a cache.
func TestSeenRepeatOfConflictNotCached(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	c, _ := seenClient(t, db, newLRU(t), time.Hour)
	ctx := context.Background()
	if _, err := c.Receive(ctx, ledgertest.Message("k", `{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	altered := ledgertest.Message("k", `{"n":2}`)
	// Missed by the cache together (a mismatch), so both go to the database.
	rs, err := c.ReceiveMany(ctx, []inbox.Message{altered, altered})
	if err != nil || rs[0].Outcome != inbox.Conflict {
		t.Fatalf("%+v %v", rs, err)
	}
	if r, err := c.Receive(ctx, altered); r.Outcome != inbox.Conflict || r.Cached || !errors.Is(err, inbox.ErrKeyConflict) {
		t.Fatalf("altered copy after the batch: %+v %v, want a Conflict", r, err)
	}
}
