package rabbitmq

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/conformance"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
)

// EnvURL names the variable that points the tests at a broker other than the local default.
const EnvURL = "TXINBOX_TEST_AMQP_URL"

func brokerURL(t *testing.T) string {
	return adaptertest.Broker(t, "RabbitMQ", EnvURL, "amqp://guest:guest@127.0.0.1:5672/")
}

// queue declares a queue unique to the test, deleted when the test ends, and returns its name and a
// channel in confirm mode to publish with.
func queue(t *testing.T, url string) (string, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	name := adaptertest.Name("txinbox-test")
	if _, err := ch.QueueDeclare(name, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(name, false, false, false) })
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return name, ch
}

// publish sends msgs and waits until the broker confirmed every one.
func publish(t *testing.T, ch *amqp.Channel, q string, msgs ...amqp.Publishing) {
	t.Helper()
	ctx := context.Background()
	confs := make([]*amqp.DeferredConfirmation, len(msgs))
	for i, m := range msgs {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, false, false, m)
		if err != nil {
			t.Fatal(err)
		}
		confs[i] = c
	}
	for _, c := range confs {
		if ok, err := c.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
}

func ready(t *testing.T, ch *amqp.Channel, q string) int {
	t.Helper()
	st, err := ch.QueueDeclarePassive(q, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st.Messages
}

func newConsumer(t *testing.T, cfg Config) *Consumer {
	t.Helper()
	cfg.RetryDelay = 20 * time.Millisecond
	cfg.MaxRetryDelay = 100 * time.Millisecond
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// start starts c, stopped when the test ends; stop stops it and returns Stop's result.
func start(t *testing.T, c *Consumer) (stop func() error) {
	t.Helper()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop = func() error { return c.Stop(context.Background()) }
	t.Cleanup(func() { _ = stop() })
	return stop
}

// TestDuplicatesAndCrashes publishes 5,000 messages, 30% of them twice with the same message id, and
// cuts the consumer's TCP connection twice right after a batch committed and before its ack, so that
// the broker redelivers that batch (and everything else unacknowledged). The inbox must hold exactly
// the unique messages, and a worker pool must apply each exactly once.
func TestDuplicatesAndCrashes(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	db := adaptertest.NewDB(t)
	q, ch := queue(t, url)
	unique, all := adaptertest.Plan("rmq", 5000, 30)
	msgs := make([]amqp.Publishing, len(all))
	for i, m := range all {
		msgs[i] = amqp.Publishing{MessageId: m.Key, Type: "credit", ContentType: "application/json", Body: m.Payload,
			Headers: amqp.Table{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	}
	publish(t, ch, q, msgs...)

	var mu sync.Mutex
	var conns []net.Conn
	cfg := Config{URL: url, Queue: q, BatchConfig: adapters.BatchConfig{BatchSize: 100}, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger"}}
	cfg.AMQP.Dial = func(network, addr string) (net.Conn, error) {
		c, err := amqp.DefaultDial(30*time.Second)(network, addr)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	}
	c := newConsumer(t, cfg)
	var kills, killed atomic.Int64
	c.afterStore = func(batch, size int) error {
		if batch == 3 && kills.Load() < 2 { // the third batch of the first two connections
			kills.Add(1)
			killed.Add(int64(size))
			mu.Lock()
			_ = conns[len(conns)-1].Close() // abrupt: no AMQP close, the ack that follows fails
			mu.Unlock()
		}
		return nil
	}
	stop := start(t, c)
	adaptertest.WaitFor(t, "all unique messages stored", func() bool {
		return adaptertest.InboxCount(t, db, "ledger") == int64(len(unique))
	})
	adaptertest.WaitFor(t, "the queue to drain", func() bool {
		st := c.Stats()
		return ready(t, ch, q) == 0 && st.Records-killed.Load() == st.Acked
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(conns) < 3 {
		t.Errorf("%d connections, want at least 3 (two cut)", len(conns))
	}
	mu.Unlock()
	adaptertest.CheckUnique(t, db, "ledger", unique)
	st := c.Stats()
	t.Logf("stats: %+v", st)
	if st.Records < int64(len(all)) || st.Duplicates < int64(len(all)-len(unique)) {
		t.Errorf("stats %+v: want at least %d records and %d duplicates", st, len(all), len(all)-len(unique))
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE headers->>'traceparent' LIKE '00-0af7%' AND kind = 'credit'`); got != int64(len(unique)) {
		t.Errorf("%d messages carry the trace header and kind, want %d", got, len(unique))
	}
	adaptertest.Ledger(t, db, "ledger", unique)
}

// TestDatabaseDown consumes while the database refuses connections: nothing is stored or
// acknowledged (batches are requeued), and once the database is back every message is stored once
// and acknowledged once.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	db := adaptertest.NewDB(t)
	q, ch := queue(t, url)
	unique, _ := adaptertest.Plan("down", 300, 0)
	msgs := make([]amqp.Publishing, len(unique))
	for i, m := range unique {
		msgs[i] = amqp.Publishing{MessageId: m.Key, Type: "credit", Body: m.Payload}
	}
	publish(t, ch, q, msgs...)
	sw := adaptertest.NewSwitchDB(adaptertest.DeadPool(t))
	c := newConsumer(t, Config{URL: url, Queue: q, BatchConfig: adapters.BatchConfig{BatchSize: 50},
		Sink: adapters.SinkConfig{Store: txinbox.Store{DB: sw, Schema: db.Schema}, Consumer: "ledger"}})
	stop := start(t, c)
	adaptertest.WaitFor(t, "failed batches", func() bool { return c.Stats().Failures >= 5 })
	if st := c.Stats(); st.Acked != 0 || st.Records != 0 {
		t.Fatalf("database down, yet stats %+v", st)
	}
	if n := adaptertest.InboxCount(t, db, "ledger"); n != 0 {
		t.Fatalf("inbox holds %d messages while the database was unreachable", n)
	}
	sw.Set(db.Pool)
	adaptertest.WaitFor(t, "every message acknowledged", func() bool { return c.Stats().Acked == int64(len(unique)) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := ready(t, ch, q); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
	adaptertest.CheckUnique(t, db, "ledger", unique)
	if st := c.Stats(); st.Acked != int64(len(unique)) || st.Inserted != int64(len(unique)) {
		t.Errorf("stats %+v: want %d inserted and acked", st, len(unique))
	}
}

// TestUndecodableAndConflict sends a body that is not JSON, a message with no key, a message with no
// kind, and a message that reuses a stored key with another payload: each is acknowledged exactly once,
// the first three stored dead with their raw bytes, the conflicting one dropped with the stored message
// kept.
func TestUndecodableAndConflict(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	db := adaptertest.NewDB(t)
	q, ch := queue(t, url)
	publish(t, ch, q,
		amqp.Publishing{MessageId: "ok-1", Type: "credit", Body: []byte(`{"amount": 1}`)},
		amqp.Publishing{MessageId: "bad-json", Type: "credit", Body: []byte(`{"amount": `)},
		amqp.Publishing{Type: "credit", Body: []byte(`{"no": "key"}`)},
		amqp.Publishing{MessageId: "no-kind", Body: []byte(`{"amount": 3}`)},
		amqp.Publishing{MessageId: "ok-1", Type: "credit", Body: []byte(`{"amount": 2}`)},
		amqp.Publishing{Headers: amqp.Table{"x-idempotency-key": "by-header", "x-kind": "credit", "n": int32(7)}, Body: []byte(`{"amount": 4}`)},
	)
	c := newConsumer(t, Config{URL: url, Queue: q, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger"}})
	stop := start(t, c)
	adaptertest.WaitFor(t, "every message acknowledged", func() bool { return c.Stats().Acked == 6 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := ready(t, ch, q); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
	st := c.Stats()
	if st.Acked != 6 || st.Inserted != 2 || st.Undecodable != 3 || st.Conflicts != 1 {
		t.Errorf("stats %+v: want 6 acked, 2 inserted, 3 undecodable, 1 conflict", st)
	}
	type row struct {
		key, kind, state, lastError, raw string
	}
	rows, err := db.Pool.Query(context.Background(), db.SQL(`SELECT key, kind, state, coalesce(last_error, ''), coalesce(convert_from(raw, 'UTF8'), '')
		FROM {schema}.inbox ORDER BY id`))
	if err != nil {
		t.Fatal(err)
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.key, &r.kind, &r.state, &r.lastError, &r.raw); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	byKey := map[string]row{}
	for _, r := range got {
		byKey[r.key] = r
	}
	if len(got) != 5 {
		t.Fatalf("stored %d rows, want 5: %+v", len(got), got)
	}
	if r := byKey["ok-1"]; r.state != "pending" || r.kind != "credit" {
		t.Errorf("ok-1: %+v", r)
	}
	if r := byKey["by-header"]; r.state != "pending" || r.kind != "credit" {
		t.Errorf("by-header: %+v", r)
	}
	if r := byKey["bad-json"]; r.state != "dead" || r.raw != `{"amount": ` || !strings.Contains(r.lastError, "JSON") {
		t.Errorf("bad-json: %+v", r)
	}
	if r := byKey["no-kind"]; r.state != "dead" || r.kind != "undecodable" || r.raw != `{"amount": 3}` || !strings.Contains(r.lastError, "no kind") {
		t.Errorf("no-kind: %+v", r)
	}
	var hashed int
	for k, r := range byKey {
		if strings.HasPrefix(k, "sha256:") {
			hashed++
			if r.state != "dead" || r.raw != `{"no": "key"}` || !strings.Contains(r.lastError, "idempotency key") {
				t.Errorf("keyless: %+v", r)
			}
		}
	}
	if hashed != 1 {
		t.Errorf("%d rows keyed by content hash, want 1", hashed)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'by-header' AND headers->>'n' = '7'`); got != 1 {
		t.Errorf("numeric header not carried over as text")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Queue: "q", Sink: adapters.SinkConfig{Consumer: "c"}},
		{URL: "amqp://x", Sink: adapters.SinkConfig{Consumer: "c"}},
		{URL: "amqp://x", Queue: "q", Sink: adapters.SinkConfig{Consumer: "c"}}, // no DB
		{URL: "amqp://x", Queue: "q", BatchConfig: adapters.BatchConfig{BatchSize: -1}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// TestShutdownFinishesBatch calls Stop while a batch is in hand (after its commit, before its ack):
// Stop waits until it is acknowledged and returns nil, and the deliveries the consumer had prefetched
// go back to the queue.
func TestShutdownFinishesBatch(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	db := adaptertest.NewDB(t)
	q, ch := queue(t, url)
	unique, _ := adaptertest.Plan("stop", 20, 0)
	for _, m := range unique {
		publish(t, ch, q, amqp.Publishing{MessageId: m.Key, Type: "credit", Body: m.Payload})
	}
	c := newConsumer(t, Config{URL: url, Queue: q, Prefetch: 20, BatchConfig: adapters.BatchConfig{BatchSize: 5, BatchWait: time.Second},
		Sink: adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger"}})
	var size int
	stopped := make(chan error, 1)
	c.afterStore = func(batch, n int) error {
		if batch == 1 {
			size = n
			go func() { stopped <- c.Stop(context.Background()) }()
			<-c.loop.Stopping()
		}
		return nil
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Acked != int64(size) || st.Batches != 1 {
		t.Errorf("stats %+v, want one batch of %d acknowledged", st, size)
	}
	adaptertest.WaitFor(t, "the rest to return to the queue", func() bool { return ready(t, ch, q) == len(unique)-size })
	if n := adaptertest.InboxCount(t, db, "ledger"); n != int64(size) {
		t.Errorf("inbox holds %d, want %d", n, size)
	}
}

// TestNewNamesBadField sets each size and duration of the config negative in turn: New's error names
// that field.
func TestNewNamesBadField(t *testing.T) {
	t.Parallel()
	cfg := Config{URL: "amqp://x", Queue: "q", Sink: adapters.SinkConfig{Store: txinbox.Store{DB: adaptertest.DeadPool(t)}, Consumer: "ledger"}}
	adaptertest.NegativeFields(t, cfg, func(cfg Config) error { _, err := New(cfg); return err },
		append([]string{"Prefetch"}, adaptertest.BatchFields()...)...)
}

// harness is the conformance suite's set-up of its sink tests (CommitFailure,
// StoreFailureKeepsOrder): a queue of the test's own.
func harness(t *testing.T) conformance.SinkSetup {
	url := brokerURL(t)
	q, ch := queue(t, url)
	return conformance.SinkSetup{
		Publish: func(msgs []conformance.Msg) {
			ps := make([]amqp.Publishing, len(msgs))
			for i, m := range msgs {
				ps[i] = amqp.Publishing{MessageId: m.Key, Type: "credit", Body: m.Payload}
			}
			publish(t, ch, q, ps...)
		},
		Start: func(sink adapters.SinkConfig, batchSize int) conformance.Consumer {
			c := newConsumer(t, Config{URL: url, Queue: q, Sink: sink, BatchConfig: adapters.BatchConfig{BatchSize: batchSize}})
			start(t, c)
			return c
		},
		Unacked: func() int { return ready(t, ch, q) },
	}
}
