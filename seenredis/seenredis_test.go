package seenredis_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/admin"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/seenredis"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// redisServer is a redis-server of the test's own, on a free port, without persistence (never the
// shared one on 6379).
type redisServer struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
}

// startRedis starts a server; without a redis-server binary the test fails under CI=true and is
// skipped otherwise.
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found: %v", err)
		}
		t.Skipf("redis-server not found: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &redisServer{t: t, port: port}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.t.TempDir())
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	for range 200 {
		if c, err := net.Dial("tcp", s.addr()); err == nil {
			_ = c.Close()
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	s.t.Fatalf("redis-server did not come up on %s", s.addr())
}

// stop kills the server this test started (by its own process) and waits for it.
func (s *redisServer) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// counter is a Store's Tracer counting the seen-key cache results (txinbox.OpSeenGet) and errors.
type counter struct {
	mu      sync.Mutex
	results map[string]int
	errs    map[txinbox.Op]int
}

func (o *counter) TraceStart(ctx context.Context, _ txinbox.TraceStart) context.Context { return ctx }

func (o *counter) TraceEnd(_ context.Context, d txinbox.TraceEnd) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d.Err != nil {
		o.errs[d.Op]++
	}
	if d.Op == txinbox.OpSeenGet {
		for _, r := range d.Results {
			o.results[r]++
		}
	}
}

func (o *counter) get(r string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.results[r]
}

func newCounter() *counter {
	return &counter{results: map[string]int{}, errs: map[txinbox.Op]int{}}
}

func newCache(t *testing.T, s *redisServer) *seenredis.Cache {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	return seenredis.New(rdb, seenredis.Config{Prefix: "test:" + t.Name() + ":"})
}

func msg(key, payload string) inbox.Message {
	return inbox.Message{Consumer: "ledger", Key: key, Kind: "credit", Payload: []byte(payload)}
}

// receiveAll receives msgs one by one and checks each outcome against want (by key: the first
// payload seen is the stored one).
func receiveAll(t *testing.T, c *inbox.Client, stored map[string]string, msgs []inbox.Message) (cached int) {
	t.Helper()
	for _, m := range msgs {
		r, err := c.Receive(context.Background(), m)
		want := inbox.Duplicate
		switch p, ok := stored[m.Key]; {
		case !ok:
			want = inbox.Inserted
			stored[m.Key] = string(m.Payload)
		case p != string(m.Payload):
			want = inbox.Conflict
		}
		if r.Outcome != want || (err != nil) != (want == inbox.Conflict) {
			t.Fatalf("%s %s: %+v %v, want %v", m.Key, m.Payload, r, err, want)
		}
		if r.Cached {
			cached++
		}
	}
	return cached
}

// wave is n new keys from prefix, then each of them redelivered twice and altered once.
func wave(prefix string, n int) []inbox.Message {
	var out []inbox.Message
	for i := range n {
		out = append(out, msg(fmt.Sprintf("%s%d", prefix, i), fmt.Sprintf(`{"n":%d}`, i)))
	}
	for i := range n {
		k := fmt.Sprintf("%s%d", prefix, i)
		out = append(out, msg(k, fmt.Sprintf(`{"n":%d}`, i)), msg(k, fmt.Sprintf(`{"n":%d,"x":1}`, i)), msg(k, fmt.Sprintf(`{"n":%d}`, i)))
	}
	return out
}

// TestRedisStoppedMidRun: Redis goes away mid-run and comes back. No error reaches the caller,
// nothing is lost, the fallbacks are counted, and hits resume once it is back.
func TestRedisStoppedMidRun(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	db := testdb.New(t)
	o := newCounter()
	store := db.Store()
	store.Tracer = o
	store.SeenCache = newCache(t, srv)
	c, err := inbox.New(store, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]string{}
	if hits := receiveAll(t, c, stored, wave("a", 20)); hits != 40 {
		t.Fatalf("%d cached duplicates with Redis up, want 40", hits)
	}
	srv.stop()
	if hits := receiveAll(t, c, stored, append(wave("b", 10), wave("a", 5)[5:]...)); hits != 0 {
		t.Fatalf("%d cached duplicates with Redis down", hits)
	}
	if fb := o.get("fallback"); fb != 10*4+15 {
		t.Errorf("%d fallbacks, want %d", fb, 10*4+15)
	}
	srv.start()
	// The client reconnects (go-redis probes a refused server about once a second); meanwhile every
	// call still falls back. Keys received while Redis was down (or before it lost its data) are
	// cached again when next seen.
	for deadline := time.Now().Add(time.Minute); ; {
		if receiveAll(t, c, stored, []inbox.Message{msg("b0", `{"n":0}`)}) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no cached duplicate a minute after Redis came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if hits := receiveAll(t, c, stored, wave("c", 10)); hits != 20 {
		t.Fatalf("%d cached duplicates after Redis came back, want 20", hits)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox`); got != int64(len(stored)) {
		t.Errorf("%d rows, want %d", got, len(stored))
	}
}

// TestRedisSharedAndExpiry: two Clients (two processes) share the cache; a key past its window is
// Inserted again although Redis had it; DiscardDead through an admin.Admin given the same Redis cache
// invalidates the Clients' hits.
func TestRedisSharedAndExpiry(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	db := testdb.New(t)
	const retention = time.Second
	newClient := func() *inbox.Client {
		st := db.Store()
		st.SeenCache, st.Retention = newCache(t, srv), retention
		c, err := inbox.New(st, inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := newClient(), newClient()
	ctx := context.Background()
	r, err := a.Receive(ctx, msg("k", `1`))
	if err != nil || r.Outcome != inbox.Inserted {
		t.Fatalf("%+v %v", r, err)
	}
	if d, err := b.Receive(ctx, msg("k", `1`)); err != nil || !d.Cached || d.ID != r.ID {
		t.Fatalf("other client: %+v %v, want a cached duplicate", d, err)
	}
	// Completed as the worker does, with its window of Retention; once it has passed, the key is new.
	if _, err := db.Pool.Exec(ctx, db.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = $1)
		UPDATE {schema}.inbox SET state = 'completed', completed_at = now(), expires_at = now() + make_interval(secs => $2)
		WHERE id = $1`), r.ID, retention.Seconds()); err != nil {
		t.Fatal(err)
	}
	for db.Count(t, fmt.Sprintf(`SELECT count(*) FROM {schema}.inbox WHERE id = %d AND expires_at < now()`, r.ID)) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if again, err := b.Receive(ctx, msg("k", `1`)); err != nil || again.Outcome != inbox.Inserted {
		t.Fatalf("after the window: %+v %v, want Inserted", again, err)
	}
	// Dead, cached by b, discarded through an Admin: b's cache (the same Redis) forgets it.
	if _, err := db.Pool.Exec(ctx, db.SQL(`WITH q AS (DELETE FROM {schema}.inbox_queue WHERE id = $1)
		UPDATE {schema}.inbox SET state = 'dead', completed_at = now() WHERE id = $1`), r.ID); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Receive(ctx, msg("k", `1`)); err != nil || !d.Cached {
		t.Fatalf("%+v %v, want a cached duplicate", d, err)
	}
	st := db.Store()
	st.SeenCache = newCache(t, srv)
	ops, err := admin.New(st, admin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if done, err := ops.DiscardDead(ctx, admin.Inbox, r.ID); err != nil || len(done) != 1 {
		t.Fatalf("%v %v", done, err)
	}
	if again, err := b.Receive(ctx, msg("k", `1`)); err != nil || again.Outcome != inbox.Inserted {
		t.Fatalf("after DiscardDead: %+v %v, want Inserted", again, err)
	}
}

// TestRedisNotOurs: values that are not entries, and a bad epoch, are never taken for hits.
func TestRedisNotOurs(t *testing.T) {
	t.Parallel()
	srv := startRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr()})
	defer rdb.Close()
	c := seenredis.New(rdb, seenredis.Config{Prefix: "p:"})
	ctx := context.Background()
	k := txinbox.SeenKey{Schema: "public", Consumer: "ledger", Key: "x"}
	if err := rdb.Set(ctx, c.Key(k), "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, found, _, err := c.Get(ctx, []txinbox.SeenKey{k})
	if err != nil || found[0] {
		t.Fatalf("garbage value: found %v, %v", found, err)
	}
	if err := rdb.Set(ctx, "p:epoch", "nope", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := c.Get(ctx, []txinbox.SeenKey{k}); err == nil {
		t.Fatal("a bad epoch is not an error")
	}
	// Distinct SeenKeys never share a Redis key.
	if c.Key(txinbox.SeenKey{Schema: "a", Consumer: "bc", Key: "d"}) == c.Key(txinbox.SeenKey{Schema: "ab", Consumer: "c", Key: "d"}) {
		t.Fatal("key collision")
	}
}
