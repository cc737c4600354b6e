package natsjs

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/conformance"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
)

// EnvURL names the variable that points the tests at a NATS server other than the local default.
const EnvURL = "TXINBOX_TEST_NATS_URL"

type fixture struct {
	url, stream, durable, subject string
	js                            jetstream.JetStream
}

// newFixture creates a memory stream and a durable pull consumer unique to the test, deleted when the
// test ends. ackWait is the consumer's AckWait: short where a test wants the redeliveries after a crash
// to come quickly, long where it counts deliveries exactly (a slow store on a loaded machine must not
// cause a redelivery there).
func newFixture(t *testing.T, ackWait time.Duration) *fixture {
	t.Helper()
	url := adaptertest.Broker(t, "NATS", EnvURL, "nats://127.0.0.1:4222")
	nc := connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ReplaceAll(adaptertest.Name("txinbox_test"), "-", "_")
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	if _, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "inbox", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait}); err != nil {
		t.Fatal(err)
	}
	return &fixture{url: url, stream: name, durable: "inbox", subject: name + ".events", js: js}
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// consumer returns the durable consumer over a connection of its own (closed when the test ends).
func (f *fixture) consumer(t *testing.T) (jetstream.Consumer, *nats.Conn) {
	t.Helper()
	nc := connect(t, f.url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := js.Consumer(context.Background(), f.stream, f.durable)
	if err != nil {
		t.Fatal(err)
	}
	return c, nc
}

// publish sends msgs and waits until JetStream stored every one.
func (f *fixture) publish(t *testing.T, msgs ...*nats.Msg) {
	t.Helper()
	for _, m := range msgs {
		m.Subject = f.subject
		if _, err := f.js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-f.js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("publishing did not complete")
	}
}

func (f *fixture) info(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := f.js.Consumer(context.Background(), f.stream, f.durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info
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

func event(key string, payload []byte) *nats.Msg {
	m := nats.NewMsg("")
	m.Header.Set(adapters.IdempotencyKeyHeader, key)
	m.Header.Set("x-kind", "credit")
	m.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	m.Data = payload
	return m
}

// TestDuplicatesAndCrashes publishes 5,000 messages, 30% of them twice with the same
// x-idempotency-key (Nats-Msg-Id would have JetStream drop the copies itself), and closes the
// consumer's connection twice right after a batch committed and before its acks, so that JetStream
// redelivers that batch. The inbox must hold exactly the unique messages, and a worker pool must apply
// each exactly once.
func TestDuplicatesAndCrashes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, time.Second)
	db := adaptertest.NewDB(t)
	unique, all := adaptertest.Plan("nats", 5000, 30)
	msgs := make([]*nats.Msg, len(all))
	for i, m := range all {
		msgs[i] = event(m.Key, m.Payload)
	}
	t0 := time.Now()
	f.publish(t, msgs...)
	t.Logf("published in %v", time.Since(t0))

	sink := adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger"}
	var killed atomic.Int64
	for round := range 3 {
		jc, nc := f.consumer(t)
		c := newConsumer(t, Config{Consumer: jc, Sink: sink})
		if round < 2 {
			c.afterStore = func(batch, size int) error {
				if batch == 3 {
					killed.Add(int64(size))
					nc.Close() // abrupt: the acks that follow fail
				}
				return nil
			}
			start(t, c)
			<-c.Done()
			t.Logf("round %d done at %v", round, time.Since(t0))
			continue
		}
		stop := start(t, c)
		adaptertest.WaitFor(t, "all unique messages stored", func() bool {
			return adaptertest.InboxCount(t, db, "ledger") == int64(len(unique))
		})
		adaptertest.WaitFor(t, "every message acknowledged", func() bool {
			info := f.info(t)
			return info.NumPending == 0 && info.NumAckPending == 0
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("consumed at %v", time.Since(t0))
	}
	if killed.Load() == 0 {
		t.Fatal("no batch was cut off")
	}
	adaptertest.CheckUnique(t, db, "ledger", unique)
	if info := f.info(t); info.Delivered.Consumer <= info.Delivered.Stream {
		t.Errorf("no redelivery happened: %d deliveries of %d messages", info.Delivered.Consumer, info.Delivered.Stream)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE headers->>'traceparent' LIKE '00-0af7%' AND kind = 'credit'`); got != int64(len(unique)) {
		t.Errorf("%d messages carry the trace header and kind, want %d", got, len(unique))
	}
	adaptertest.Ledger(t, db, "ledger", unique)
	t.Logf("ledger checked at %v", time.Since(t0))
}

// TestDatabaseDown consumes while the database refuses connections: nothing is stored or
// acknowledged (batches are negatively acknowledged with a delay), and once the database is back every
// message is stored once and acknowledged once.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, time.Minute)
	db := adaptertest.NewDB(t)
	unique, _ := adaptertest.Plan("down", 300, 0)
	msgs := make([]*nats.Msg, len(unique))
	for i, m := range unique {
		msgs[i] = event(m.Key, m.Payload)
	}
	f.publish(t, msgs...)
	sw := adaptertest.NewSwitchDB(adaptertest.DeadPool(t))
	jc, _ := f.consumer(t)
	c := newConsumer(t, Config{Consumer: jc, BatchConfig: adapters.BatchConfig{BatchSize: 50}, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: sw, Schema: db.Schema}, Consumer: "ledger"}})
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
	adaptertest.WaitFor(t, "the consumer to settle", func() bool {
		info := f.info(t)
		return info.NumPending == 0 && info.NumAckPending == 0
	})
	adaptertest.CheckUnique(t, db, "ledger", unique)
	if st := c.Stats(); st.Acked != int64(len(unique)) || st.Inserted != int64(len(unique)) {
		t.Errorf("stats %+v: want %d inserted and acked", st, len(unique))
	}
}

// TestUndecodableAndConflict sends a body that is not JSON, a message with no key, and a message that
// reuses a stored key with another payload: each is acknowledged exactly once, the first two stored
// dead with their raw bytes, the conflicting one dropped with the stored message kept. Keys come from
// Nats-Msg-Id (the default strategy).
func TestUndecodableAndConflict(t *testing.T) {
	t.Parallel()
	f := newFixture(t, time.Minute)
	db := adaptertest.NewDB(t)
	withID := func(id, body string) *nats.Msg {
		m := nats.NewMsg("")
		if id != "" {
			m.Header.Set(MsgIDHeader, id)
		}
		m.Data = []byte(body)
		return m
	}
	conflicting := event("ok-1", []byte(`{"amount": 2}`))
	f.publish(t, withID("ok-1", `{"amount": 1}`), withID("bad-json", `{"amount": `), withID("", `{"no": "key"}`), conflicting)
	jc, _ := f.consumer(t)
	c := newConsumer(t, Config{Consumer: jc, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger", DefaultKind: "credit"}})
	stop := start(t, c)
	adaptertest.WaitFor(t, "every message acknowledged", func() bool { return c.Stats().Acked == 4 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	adaptertest.WaitFor(t, "the consumer to settle", func() bool {
		info := f.info(t)
		return info.NumPending == 0 && info.NumAckPending == 0
	})
	if info := f.info(t); info.Delivered.Consumer != 4 {
		t.Errorf("%d deliveries of 4 messages", info.Delivered.Consumer)
	}
	st := c.Stats()
	if st.Acked != 4 || st.Inserted != 1 || st.Undecodable != 2 || st.Conflicts != 1 {
		t.Errorf("stats %+v: want 4 acked, 1 inserted, 2 undecodable, 1 conflict", st)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'ok-1' AND state = 'pending' AND payload = '{"amount": 1}'`); got != 1 {
		t.Error("ok-1 not stored as first received")
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'bad-json' AND state = 'dead' AND raw = '{"amount": '::bytea AND last_error LIKE '%JSON%'`); got != 1 {
		t.Error("bad-json not stored dead with its raw bytes")
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key LIKE 'sha256:%' AND state = 'dead' AND raw = '{"no": "key"}'::bytea`); got != 1 {
		t.Error("keyless message not stored dead under its content hash")
	}
}

// TestCoordinatesKey keys messages by stream sequence (adapters.Coordinates): distinct messages with
// the same content are all stored.
func TestCoordinatesKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, time.Minute)
	db := adaptertest.NewDB(t)
	f.publish(t, event("same", []byte(`{}`)), event("same", []byte(`{}`)), event("same", []byte(`{}`)))
	jc, _ := f.consumer(t)
	c := newConsumer(t, Config{Consumer: jc, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger", Key: adapters.Coordinates()}})
	stop := start(t, c)
	adaptertest.WaitFor(t, "every message acknowledged", func() bool { return c.Stats().Acked == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{f.stream + ":0:1", f.stream + ":0:2", f.stream + ":0:3"} {
		if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = $1`, k); got != 1 {
			t.Errorf("key %s stored %d times", k, got)
		}
	}
}

// TestStopsOnClosedConnection closes the consumer's connection: the consumer stops on its own (Done
// is closed), Stop returns why, and a new consumer cannot start on the closed connection.
func TestStopsOnClosedConnection(t *testing.T) {
	t.Parallel()
	f := newFixture(t, time.Minute)
	db := adaptertest.NewDB(t)
	jc, nc := f.consumer(t)
	c := newConsumer(t, Config{Consumer: jc, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger"}})
	stop := start(t, c)
	nc.Close()
	select {
	case <-c.Done():
	case <-time.After(time.Minute):
		t.Fatal("the consumer did not stop after its connection closed")
	}
	closed := func(err error) bool {
		return err != nil && (errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed) || strings.Contains(err.Error(), "closed"))
	}
	if err := stop(); !closed(err) {
		t.Errorf("Stop after the connection closed: %v", err)
	}
	c2 := newConsumer(t, Config{Consumer: jc, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger"}})
	if err := c2.Start(context.Background()); !closed(err) {
		t.Errorf("Start on a closed connection: %v", err)
	}
}

// TestShutdownFinishesBatch calls Stop while a batch is in hand (after its commit, before its acks):
// Stop waits until it is acknowledged and returns nil (NAKing what it had prefetched), and the next
// consumer gets the rest.
func TestShutdownFinishesBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, time.Minute)
	db := adaptertest.NewDB(t)
	unique, _ := adaptertest.Plan("stop", 20, 0)
	for _, m := range unique {
		f.publish(t, event(m.Key, m.Payload))
	}
	jc, _ := f.consumer(t)
	c := newConsumer(t, Config{Consumer: jc, Prefetch: 20, BatchConfig: adapters.BatchConfig{BatchSize: 5, BatchWait: time.Second},
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
	if n := adaptertest.InboxCount(t, db, "ledger"); n != int64(size) {
		t.Errorf("inbox holds %d, want %d", n, size)
	}
	if info := f.info(t); info.AckFloor.Stream < uint64(size) {
		t.Errorf("ack floor %d, want at least %d", info.AckFloor.Stream, size)
	}
	// The rest is delivered again to the next consumer.
	jc2, _ := f.consumer(t)
	c2 := newConsumer(t, Config{Consumer: jc2, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger"}})
	stop := start(t, c2)
	adaptertest.WaitFor(t, "every message acknowledged", func() bool {
		info := f.info(t)
		return info.NumPending == 0 && info.NumAckPending == 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	adaptertest.CheckUnique(t, db, "ledger", unique)
}

// TestNewNamesBadField sets each size and duration of the config negative in turn: New's error names
// that field.
func TestNewNamesBadField(t *testing.T) {
	t.Parallel()
	f := newFixture(t, time.Minute)
	jc, _ := f.consumer(t)
	cfg := Config{Consumer: jc, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: adaptertest.DeadPool(t)}, Consumer: "ledger"}}
	adaptertest.NegativeFields(t, cfg, func(cfg Config) error { _, err := New(cfg); return err },
		append([]string{"Prefetch"}, adaptertest.BatchFields()...)...)
}

// harness is the conformance suite's set-up of its sink tests (CommitFailure,
// StoreFailureKeepsOrder): a stream and durable consumer of the test's own.
func harness(t *testing.T) conformance.SinkSetup {
	f := newFixture(t, time.Minute)
	return conformance.SinkSetup{
		Publish: func(msgs []conformance.Msg) {
			ms := make([]*nats.Msg, len(msgs))
			for i, m := range msgs {
				ms[i] = event(m.Key, m.Payload)
			}
			f.publish(t, ms...)
		},
		Start: func(sink adapters.SinkConfig, batchSize int) conformance.Consumer {
			jc, _ := f.consumer(t)
			c := newConsumer(t, Config{Consumer: jc, Sink: sink, BatchConfig: adapters.BatchConfig{BatchSize: batchSize}})
			start(t, c)
			return c
		},
		Unacked: func() int {
			// The stream holds only the published messages; every one up to the ack floor is acknowledged.
			s, err := f.js.Stream(context.Background(), f.stream)
			if err != nil {
				t.Fatal(err)
			}
			si, err := s.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return int(si.State.LastSeq - f.info(t).AckFloor.Stream)
		},
	}
}
