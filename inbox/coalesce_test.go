package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
)

// gateDB is a txinbox.DB over a pool that records the ReceiveBatch statements sent through it (the
// number of messages of each, in the order sent), can hold chosen ones until released, and can fail
// them.
type gateDB struct {
	pool    *pgxpool.Pool
	entered chan int // the index of each held statement, when it starts waiting

	mu    sync.Mutex
	sizes []int
	gates map[int]chan struct{} // statement index -> closed to let it go on
	fail  func(keys []string) error
}

func newGateDB(pool *pgxpool.Pool) *gateDB {
	return &gateDB{pool: pool, entered: make(chan int, 16), gates: map[int]chan struct{}{}}
}

// hold makes the i-th ReceiveBatch statement (from 0) wait until the returned func is called.
func (g *gateDB) hold(i int) (release func()) {
	ch := make(chan struct{})
	g.mu.Lock()
	g.gates[i] = ch
	g.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (g *gateDB) statements() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.sizes)
}

func (g *gateDB) Begin(ctx context.Context) (pgx.Tx, error) { return g.pool.Begin(ctx) }
func (g *gateDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return g.pool.Exec(ctx, sql, args...)
}
func (g *gateDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return g.pool.QueryRow(ctx, sql, args...)
}
func (g *gateDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.Contains(sql, "-- name: ReceiveBatch") {
		keys := args[1].([]string)
		g.mu.Lock()
		i := len(g.sizes)
		g.sizes = append(g.sizes, len(keys))
		gate, fail := g.gates[i], g.fail
		g.mu.Unlock()
		if gate != nil {
			g.entered <- i
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if fail != nil {
			if err := fail(keys); err != nil {
				return nil, err
			}
		}
	}
	return g.pool.Query(ctx, sql, args...)
}

// gatedClient returns a coalescing Client whose statements go through a gateDB.
func gatedClient(t *testing.T, cfg inbox.Config) (*inbox.Client, *gateDB, *testdb.DB) {
	t.Helper()
	db := testdb.New(t)
	// The consumer's generation row (00006) exists before the first counted statement: a consumer's
	// first receive otherwise runs ReceiveBatch twice, registering it in between.
	if _, err := db.Pool.Exec(context.Background(), db.SQL(`INSERT INTO {schema}.inbox_gen (consumer, gen) SELECT 'ledger', gen FROM {schema}.inbox_ring`)); err != nil {
		t.Fatal(err)
	}
	g := newGateDB(db.Pool)
	c, err := inbox.New(txinbox.Store{DB: g, Schema: db.Schema}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, g, db
}

type result struct {
	rc  inbox.Receipt
	err error
}

// goReceive runs c.Receive(ctx, m) in a goroutine; its result arrives on the channel.
func goReceive(ctx context.Context, c *inbox.Client, m inbox.Message) <-chan result {
	ch := make(chan result, 1)
	go func() {
		rc, err := c.Receive(ctx, m)
		ch <- result{rc, err}
	}()
	return ch
}

// waitQueued waits until n Receive calls of c wait in its open group.
func waitQueued(t *testing.T, c *inbox.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // only keeps a broken test from hanging
	for inbox.QueuedCalls(c) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", inbox.QueuedCalls(c), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func entered(t *testing.T, g *gateDB, want int) {
	t.Helper()
	select {
	case i := <-g.entered:
		if i != want {
			t.Fatalf("statement %d held, want %d", i, want)
		}
	case <-time.After(time.Minute): // only keeps a broken test from hanging
		t.Fatalf("statement %d never sent", want)
	}
}

func get(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Minute): // only keeps a broken test from hanging
		t.Fatal("Receive did not return")
		return result{}
	}
}

// assertWhole checks that every stored message has its queue row and every queue row its message:
// nothing is stored in part.
func assertWhole(t *testing.T, db *testdb.DB) {
	t.Helper()
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox m FULL JOIN {schema}.inbox_queue q USING (id, consumer)
		WHERE m.id IS NULL OR q.id IS NULL`); n != 0 {
		t.Fatalf("%d messages stored in part (an inbox row without its queue row or the reverse)", n)
	}
}

func TestCoalesceConfig(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, cfg := range []inbox.Config{{CoalesceMax: -1}, {CoalesceWait: -time.Millisecond}} {
		_, err := inbox.New(db.Store(), cfg)
		var ce *txinbox.ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("%+v: err = %v, want a ConfigError", cfg, err)
		}
		want := "CoalesceMax"
		if cfg.CoalesceWait != 0 {
			want = "CoalesceWait"
		}
		if ce.Field != want {
			t.Errorf("%+v: ConfigError names %q, want %q", cfg, ce.Field, want)
		}
	}
	c, err := inbox.New(db.Store(), inbox.Config{})
	if err != nil || inbox.QueuedCalls(c) < 0 {
		t.Fatalf("the default Client does not coalesce (%v)", err)
	}
	if c, _ := inbox.New(db.Store(), inbox.Config{CoalesceMax: 1}); inbox.QueuedCalls(c) >= 0 {
		t.Error("CoalesceMax 1 coalesces")
	}
	conn, err := pgx.Connect(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if c, _ := inbox.New(txinbox.Store{DB: conn, Schema: db.Schema}, inbox.Config{}); inbox.QueuedCalls(c) >= 0 {
		t.Error("a Client on a *pgx.Conn coalesces")
	}
}

// Calls arriving while a shared statement runs wait for it, then share the next one: one statement
// for all of them, each with its own receipt; a key sent by two of them is stored once (the other
// call gets a Duplicate or a Conflict of it), and an invalid message fails only its own call.
func TestCoalesceSharesOneStatement(t *testing.T) {
	t.Parallel()
	c, g, db := gatedClient(t, inbox.Config{CoalesceWait: time.Hour})
	ctx := context.Background()
	release := g.hold(0)
	first := goReceive(ctx, c, ledgertest.Message("first", `{"n": 0}`))
	entered(t, g, 0)

	var queued []inbox.Message
	for i := range 6 {
		queued = append(queued, ledgertest.Message(fmt.Sprintf("k%d", i), fmt.Sprintf(`{"n": %d}`, i)))
	}
	queued = append(queued, ledgertest.Message("same", `{"a": 1, "b": 2}`), ledgertest.Message("same", `{"b":2,"a":1}`), // one jsonb
		ledgertest.Message("clash", `{"v": 1}`), ledgertest.Message("clash", `{"v": 2}`))
	var chans []<-chan result
	for i, m := range queued {
		chans = append(chans, goReceive(ctx, c, m))
		waitQueued(t, c, i+1) // one at a time: the group's order is the order of arrival
	}
	bad := ledgertest.Message("", `{}`)
	if r := get(t, goReceive(ctx, c, bad)); !errors.Is(r.err, txinbox.ErrInvalidMessage) {
		t.Fatalf("invalid message: %+v, want a ValidationError", r)
	}
	waitQueued(t, c, len(queued)) // the invalid one never joined
	release()
	if r := get(t, first); r.err != nil || r.rc.Outcome != inbox.Inserted {
		t.Fatalf("first: %+v", r)
	}
	byKey := map[string][]result{}
	for i, ch := range chans {
		r := get(t, ch)
		byKey[queued[i].Key] = append(byKey[queued[i].Key], r)
	}
	if got := g.statements(); !slices.Equal(got, []int{1, len(queued)}) {
		t.Fatalf("ReceiveBatch statements of %v messages, want [1 %d]", got, len(queued))
	}
	for i := range 6 {
		if r := byKey[fmt.Sprintf("k%d", i)][0]; r.err != nil || r.rc.Outcome != inbox.Inserted || r.rc.State != inbox.StatePending {
			t.Errorf("k%d: %+v", i, r)
		}
	}
	same := byKey["same"]
	if same[0].err != nil || same[0].rc.Outcome != inbox.Inserted ||
		same[1].err != nil || same[1].rc.Outcome != inbox.Duplicate || same[1].rc.ID != same[0].rc.ID || same[1].rc.State != inbox.StatePending {
		t.Errorf("same key twice: %+v", same)
	}
	clash := byKey["clash"]
	var kc *inbox.KeyConflictError
	if clash[0].err != nil || clash[0].rc.Outcome != inbox.Inserted || clash[1].rc.Outcome != inbox.Conflict ||
		!errors.As(clash[1].err, &kc) || kc.ID != clash[0].rc.ID || clash[1].rc.ID != clash[0].rc.ID {
		t.Errorf("clashing key twice: %+v", clash)
	}
	if n := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); n != 9 {
		t.Errorf("%d messages stored, want 9", n)
	}
	assertWhole(t, db)
}

// A group that reaches CoalesceMax calls is sent at once, without waiting for the running statement.
func TestCoalesceMaxSendsAFullGroup(t *testing.T) {
	t.Parallel()
	c, g, _ := gatedClient(t, inbox.Config{CoalesceMax: 3, CoalesceWait: time.Hour})
	ctx := context.Background()
	release := g.hold(0)
	defer release()
	first := goReceive(ctx, c, ledgertest.Message("first", `{}`))
	entered(t, g, 0)
	var chans []<-chan result
	for i := range 3 {
		chans = append(chans, goReceive(ctx, c, ledgertest.Message(fmt.Sprintf("k%d", i), `{}`)))
	}
	for i, ch := range chans {
		if r := get(t, ch); r.err != nil || r.rc.Outcome != inbox.Inserted {
			t.Fatalf("k%d: %+v", i, r)
		}
	}
	if got := g.statements(); !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("ReceiveBatch statements of %v messages, want [1 3]", got)
	}
	release()
	if r := get(t, first); r.err != nil || r.rc.Outcome != inbox.Inserted {
		t.Fatalf("first: %+v", r)
	}
}

// With CoalesceMax 1 a call never waits for another's statement.
func TestCoalesceOff(t *testing.T) {
	t.Parallel()
	c, g, _ := gatedClient(t, inbox.Config{CoalesceMax: 1})
	ctx := context.Background()
	release := g.hold(0)
	defer release()
	first := goReceive(ctx, c, ledgertest.Message("first", `{}`))
	entered(t, g, 0)
	if r := get(t, goReceive(ctx, c, ledgertest.Message("second", `{}`))); r.err != nil || r.rc.Outcome != inbox.Inserted {
		t.Fatalf("second: %+v", r)
	}
	release()
	if r := get(t, first); r.err != nil || r.rc.Outcome != inbox.Inserted {
		t.Fatalf("first: %+v", r)
	}
}

// A call whose ctx ends before its statement has finished returns ctx.Err() at once. Queued and not
// sent, its message is left out and not stored; sent with others, the statement goes on and stores
// it; sent alone, the statement is cancelled and stores nothing. Never an inbox row without its
// queue row.
func TestCoalesceCallerGivesUp(t *testing.T) {
	t.Parallel()
	c, g, db := gatedClient(t, inbox.Config{CoalesceWait: time.Hour})
	bg := context.Background()
	release0, release1 := g.hold(0), g.hold(1)
	defer release0()
	defer release1()

	// Statement 0: one call, held.
	aloneCtx, cancelAlone := context.WithCancel(bg)
	defer cancelAlone()
	alone := goReceive(aloneCtx, c, ledgertest.Message("alone", `{}`))
	entered(t, g, 0)

	// Queued behind it: "shared-1", "shared-2" and "left-out"; the last gives up before being sent.
	sharedCtx, cancelShared := context.WithCancel(bg)
	defer cancelShared()
	shared1 := goReceive(sharedCtx, c, ledgertest.Message("shared-1", `{}`))
	waitQueued(t, c, 1)
	shared2 := goReceive(bg, c, ledgertest.Message("shared-2", `{}`))
	waitQueued(t, c, 2)
	leftCtx, cancelLeft := context.WithCancel(bg)
	left := goReceive(leftCtx, c, ledgertest.Message("left-out", `{}`))
	waitQueued(t, c, 3)
	cancelLeft()
	if r := get(t, left); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("left-out: %+v, want context.Canceled", r)
	}
	waitQueued(t, c, 2)

	// The lone call gives up: its statement, which nobody waits for, is cancelled.
	cancelAlone()
	if r := get(t, alone); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("alone: %+v, want context.Canceled", r)
	}
	// Its end sends the group of shared-1 and shared-2 (statement 1, held); shared-1 gives up.
	entered(t, g, 1)
	cancelShared()
	if r := get(t, shared1); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("shared-1: %+v, want context.Canceled", r)
	}
	release1()
	if r := get(t, shared2); r.err != nil || r.rc.Outcome != inbox.Inserted {
		t.Fatalf("shared-2: %+v", r)
	}
	if got := g.statements(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("ReceiveBatch statements of %v messages, want [1 2]", got)
	}
	var stored []string
	rows, err := db.Pool.Query(bg, db.SQL(`SELECT key FROM {schema}.inbox ORDER BY key`))
	if err != nil {
		t.Fatal(err)
	}
	if stored, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored, []string{"shared-1", "shared-2"}) {
		t.Fatalf("stored %v, want [shared-1 shared-2]", stored)
	}
	assertWhole(t, db)
}

// A database error of a shared statement fails every call of it; a value PostgreSQL refuses fails
// only its own call (the statement is sent again one message at a time).
func TestCoalesceStatementErrors(t *testing.T) {
	t.Parallel()
	c, g, db := gatedClient(t, inbox.Config{CoalesceWait: time.Hour})
	ctx := context.Background()
	broken := errors.New("connection lost")
	g.fail = func(keys []string) error {
		switch {
		case slices.Contains(keys, "down"):
			return broken
		case slices.Contains(keys, "refused"):
			return &pgconn.PgError{Code: "22P02", Message: "invalid input syntax for type json"}
		}
		return nil
	}
	run := func(keys ...string) []result {
		held := len(g.statements())
		release := g.hold(held)
		first := goReceive(ctx, c, ledgertest.Message("first-"+keys[0], `{}`))
		entered(t, g, held)
		var chans []<-chan result
		for i, k := range keys {
			chans = append(chans, goReceive(ctx, c, ledgertest.Message(k, `{}`)))
			waitQueued(t, c, i+1)
		}
		release()
		if r := get(t, first); r.err != nil {
			t.Fatalf("first: %+v", r)
		}
		var out []result
		for _, ch := range chans {
			out = append(out, get(t, ch))
		}
		return out
	}
	for i, r := range run("a1", "down", "a2") {
		if !errors.Is(r.err, broken) {
			t.Errorf("call %d of the failed statement: %+v, want its error", i, r)
		}
	}
	rs := run("b1", "refused", "b2")
	if !errors.Is(rs[1].err, txinbox.ErrInvalidMessage) {
		t.Errorf("refused value: %+v, want a ValidationError", rs[1])
	}
	for _, i := range []int{0, 2} {
		if rs[i].err != nil || rs[i].rc.Outcome != inbox.Inserted {
			t.Errorf("call %d sharing a refused value's statement: %+v", i, rs[i])
		}
	}
	var keys []string
	rows, err := db.Pool.Query(ctx, db.SQL(`SELECT key FROM {schema}.inbox ORDER BY key`))
	if err != nil {
		t.Fatal(err)
	}
	if keys, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if want := []string{"b1", "b2", "first-a1", "first-b1"}; !slices.Equal(keys, want) {
		t.Errorf("stored %v, want %v", keys, want)
	}
	assertWhole(t, db)
}

// stormSend is one Receive call of a coalescing storm.
type stormSend struct {
	key     string
	variant int // 0: the payload; 1: the same jsonb written otherwise; 2: another payload
	giveUp  bool
}

func (s stormSend) message() inbox.Message {
	n := strings.TrimPrefix(s.key, "k")
	switch s.variant {
	case 1:
		return ledgertest.Message(s.key, fmt.Sprintf(`{ "amount" : %s, "n" : 1 }`, n))
	case 2:
		return ledgertest.Message(s.key, fmt.Sprintf(`{"n": 1, "amount": %s, "altered": true}`, n))
	}
	return ledgertest.Message(s.key, fmt.Sprintf(`{"n": 1, "amount": %s}`, n))
}

// TestCoalesceStorm: 32 goroutines call Receive, one message each, each key sent 1 to 3 times
// (identical, the same jsonb written otherwise, or another payload), shuffled. Exactly the unique
// keys are stored, each whole, and every receipt is what a call of its own would have returned: one
// Inserted per key, Duplicate for the same jsonb as the stored message, Conflict otherwise. With
// giving up, some calls' ctx ends at a random moment: such a call returns ctx.Err() or its receipt,
// and its message is stored or not, whole.
func TestCoalesceStorm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cfg    inbox.Config
		cache  txinbox.SeenCache
		giveUp bool
	}{
		{name: "default", cfg: inbox.Config{}},
		{name: "small groups", cfg: inbox.Config{CoalesceMax: 3, CoalesceWait: time.Microsecond}},
		{name: "seen cache", cache: newLRU(t)},
		{name: "giving up", cfg: inbox.Config{}, giveUp: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			rec := &tracerec.Recorder{}
			g := newGateDB(db.Pool)
			c, err := inbox.New(txinbox.Store{DB: g, Schema: db.Schema, Tracer: rec, SeenCache: tc.cache}, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(13, 4))
			const keys = 400
			var sends []stormSend
			for k := range keys {
				for range 1 + r.IntN(3) {
					sends = append(sends, stormSend{key: fmt.Sprintf("k%d", k), variant: r.IntN(3), giveUp: tc.giveUp && r.IntN(4) == 0})
				}
			}
			r.Shuffle(len(sends), func(i, j int) { sends[i], sends[j] = sends[j], sends[i] })
			results := make([]result, len(sends))
			work := make(chan int)
			var wg sync.WaitGroup
			for range 32 {
				wg.Go(func() {
					for i := range work {
						ctx, cancel := context.WithCancel(context.Background())
						if sends[i].giveUp {
							time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, cancel)
						}
						rc, err := c.Receive(ctx, sends[i].message())
						cancel()
						results[i] = result{rc, err}
					}
				})
			}
			for i := range sends {
				work <- i
			}
			close(work)
			wg.Wait()
			t.Logf("%d calls, %d ReceiveBatch statements", len(sends), len(g.statements()))
			if n := len(rec.Ops(txinbox.OpReceive)); n != len(sends) || rec.Open() != 0 || rec.Err() != nil {
				t.Errorf("tracer: %d receives ended, %d operations open (%v), want %d and none", n, rec.Open(), rec.Err(), len(sends))
			}

			type row struct {
				id      int64
				altered bool
			}
			stored := map[string]row{}
			rows, err := db.Pool.Query(context.Background(), db.SQL(`SELECT key, id, payload ? 'altered' FROM {schema}.inbox`))
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var k string
				var rw row
				if err := rows.Scan(&k, &rw.id, &rw.altered); err != nil {
					t.Fatal(err)
				}
				stored[k] = rw
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			assertWhole(t, db)

			inserted := map[string]int{}
			answered := map[string]bool{} // keys with at least one receipt
			for i, s := range sends {
				res := results[i]
				if res.err != nil && !errors.Is(res.err, inbox.ErrKeyConflict) {
					if s.giveUp && errors.Is(res.err, context.Canceled) {
						continue
					}
					t.Fatalf("%+v: %v", s, res.err)
				}
				answered[s.key] = true
				st, ok := stored[s.key]
				if !ok {
					t.Fatalf("%+v: receipt %+v, but nothing stored", s, res.rc)
				}
				if res.rc.ID != st.id {
					t.Fatalf("%+v: receipt %+v, stored id %d", s, res.rc, st.id)
				}
				want := inbox.Duplicate
				if (s.variant == 2) != st.altered {
					want = inbox.Conflict
				}
				switch res.rc.Outcome {
				case inbox.Inserted:
					inserted[s.key]++
					if want != inbox.Duplicate {
						t.Fatalf("%+v: inserted, but the stored payload differs", s)
					}
				case inbox.Duplicate:
					if want != inbox.Duplicate || (res.rc.Cached != (res.rc.State == "")) || res.err != nil {
						t.Fatalf("%+v: %+v, want %v", s, res.rc, want)
					}
				case inbox.Conflict:
					var kc *inbox.KeyConflictError
					if want != inbox.Conflict || !errors.As(res.err, &kc) || kc.ID != st.id {
						t.Fatalf("%+v: %+v (%v), want %v", s, res.rc, res.err, want)
					}
				default:
					t.Fatalf("%+v: %+v", s, res.rc)
				}
			}
			for k := range stored {
				if inserted[k] > 1 {
					t.Errorf("%s: %d Inserted receipts", k, inserted[k])
				}
				if inserted[k] == 0 && !tc.giveUp {
					t.Errorf("%s: stored without an Inserted receipt", k)
				}
			}
			if !tc.giveUp && len(stored) != keys {
				t.Errorf("%d keys stored, want %d", len(stored), keys)
			}
			for k := range answered {
				if _, ok := stored[k]; !ok {
					t.Errorf("%s answered but not stored", k)
				}
			}
		})
	}
}
