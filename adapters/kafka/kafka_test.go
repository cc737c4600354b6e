package kafka

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/conformance"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
)

const group = "txinbox-test"

// fixture is an in-process Kafka cluster (kfake) with one topic of three partitions.
type fixture struct {
	seeds []string
	topic string
	cl    *kgo.Client
	adm   *kadm.Client
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	topic := adaptertest.Name("txinbox-test")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &fixture{seeds: seeds, topic: topic, cl: cl, adm: kadm.NewClient(cl)}
}

func (f *fixture) produce(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	if err := f.cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// caughtUp reports whether the group has committed every partition up to its end.
func (f *fixture) caughtUp(t *testing.T) bool {
	t.Helper()
	ctx := context.Background()
	ends, err := f.adm.ListEndOffsets(ctx, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := f.adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return false // the group has not formed yet
	}
	if err != nil {
		t.Fatal(err)
	}
	ok := true
	ends.Each(func(e kadm.ListedOffset) {
		c, found := committed.Lookup(e.Topic, e.Partition)
		if e.Offset > 0 && (!found || c.At != e.Offset) {
			ok = false
		}
	})
	return ok
}

// committed returns the number of offsets the group committed.
func (f *fixture) committed(t *testing.T) int {
	t.Helper()
	os, err := f.adm.FetchOffsets(context.Background(), group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	os.Each(func(o kadm.OffsetResponse) {
		if o.At >= 0 {
			n++
		}
	})
	return n
}

func (f *fixture) config(sink adapters.SinkConfig) Config {
	return Config{
		Options: []kgo.Opt{kgo.SeedBrokers(f.seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(f.topic),
			kgo.FetchMaxWait(100 * time.Millisecond)},
		Sink: sink, BatchConfig: adapters.BatchConfig{RetryDelay: 20 * time.Millisecond, MaxRetryDelay: 100 * time.Millisecond},
	}
}

func newConsumer(t *testing.T, cfg Config) *Consumer {
	t.Helper()
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

func event(key string, payload []byte) *kgo.Record {
	return &kgo.Record{Key: []byte(key), Value: payload, Headers: []kgo.RecordHeader{
		{Key: "x-kind", Value: []byte("credit")},
		{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
	}}
}

var errCrash = errors.New("simulated crash")

// TestDuplicatesAndCrashes produces 5,000 records, 30% of them twice with the same record key (the
// key strategy here: adapters.RecordKey), and crashes two consumers right after a batch committed and
// before its offsets were committed, so that the group consumes that batch again. The inbox must hold
// exactly the unique messages, and a worker pool must apply each exactly once.
func TestDuplicatesAndCrashes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	db := adaptertest.NewDB(t)
	unique, all := adaptertest.Plan("kafka", 5000, 30)
	recs := make([]*kgo.Record, len(all))
	for i, m := range all {
		recs[i] = event(m.Key, m.Payload)
	}
	f.produce(t, recs...)

	cfg := f.config(adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger", Key: adapters.RecordKey()})
	crashes := 0
	for round := range 3 {
		c := newConsumer(t, cfg)
		if round < 2 {
			c.afterStore = func(batch, size int) error {
				if batch == 3 {
					crashes++
					return errCrash
				}
				return nil
			}
			stop := start(t, c)
			<-c.Done()
			if err := stop(); !errors.Is(err, errCrash) {
				t.Fatalf("Stop after the crash: %v, want the crash", err)
			}
			continue
		}
		stop := start(t, c)
		adaptertest.WaitFor(t, "all unique messages stored", func() bool {
			return adaptertest.InboxCount(t, db, "ledger") == int64(len(unique))
		})
		adaptertest.WaitFor(t, "every offset committed", func() bool { return f.caughtUp(t) })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if st := c.Stats(); st.Duplicates == 0 {
			t.Errorf("stats %+v: the last consumer saw no duplicates", st)
		}
	}
	if crashes != 2 {
		t.Fatalf("%d crashes, want 2", crashes)
	}
	adaptertest.CheckUnique(t, db, "ledger", unique)
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE headers->>'traceparent' LIKE '00-0af7%' AND kind = 'credit'`); got != int64(len(unique)) {
		t.Errorf("%d messages carry the trace header and kind, want %d", got, len(unique))
	}
	adaptertest.Ledger(t, db, "ledger", unique)
}

// TestDatabaseDown consumes while the database refuses connections: nothing is stored and no offset
// is committed, and once the database is back every record is stored once and committed.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	db := adaptertest.NewDB(t)
	unique, _ := adaptertest.Plan("down", 300, 0)
	recs := make([]*kgo.Record, len(unique))
	for i, m := range unique {
		recs[i] = event(m.Key, m.Payload)
	}
	f.produce(t, recs...)
	sw := adaptertest.NewSwitchDB(adaptertest.DeadPool(t))
	cfg := f.config(adapters.SinkConfig{Store: txinbox.Store{DB: sw, Schema: db.Schema}, Consumer: "ledger", Key: adapters.RecordKey()})
	cfg.BatchSize = 50
	c := newConsumer(t, cfg)
	stop := start(t, c)
	adaptertest.WaitFor(t, "failed batches", func() bool { return c.Stats().Failures >= 5 })
	if st := c.Stats(); st.Acked != 0 || st.Records != 0 {
		t.Fatalf("database down, yet stats %+v", st)
	}
	if n := f.committed(t); n != 0 {
		t.Fatalf("%d offsets committed while the database was unreachable", n)
	}
	if n := adaptertest.InboxCount(t, db, "ledger"); n != 0 {
		t.Fatalf("inbox holds %d messages while the database was unreachable", n)
	}
	sw.Set(db.Pool)
	adaptertest.WaitFor(t, "every offset committed", func() bool { return f.caughtUp(t) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	adaptertest.CheckUnique(t, db, "ledger", unique)
	if st := c.Stats(); st.Acked != int64(len(unique)) || st.Inserted != int64(len(unique)) {
		t.Errorf("stats %+v: want %d inserted and committed", st, len(unique))
	}
}

// TestUndecodableAndConflict sends a value that is not JSON, a record with no kind, a record without
// the key header (keyed by its coordinates under the default strategy), and a record that reuses a
// stored key with another payload: all are committed, the first two stored dead with their raw bytes,
// the conflicting one dropped with the stored message kept.
func TestUndecodableAndConflict(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	db := adaptertest.NewDB(t)
	rec := func(key, kind, value string) *kgo.Record {
		r := &kgo.Record{Value: []byte(value)}
		if key != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: adapters.IdempotencyKeyHeader, Value: []byte(key)})
		}
		if kind != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: "x-kind", Value: []byte(kind)})
		}
		return r
	}
	f.produce(t, rec("ok-1", "credit", `{"amount": 1}`), rec("bad-json", "credit", `{"amount": `),
		rec("no-kind", "", `{"amount": 3}`), rec("", "credit", `{"amount": 4}`), rec("ok-1", "credit", `{"amount": 2}`))
	c := newConsumer(t, f.config(adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger"}))
	stop := start(t, c)
	adaptertest.WaitFor(t, "every offset committed", func() bool { return f.caughtUp(t) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Acked != 5 || st.Inserted != 2 || st.Undecodable != 2 || st.Conflicts != 1 {
		t.Errorf("stats %+v: want 5 committed, 2 inserted, 2 undecodable, 1 conflict", st)
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'ok-1' AND state = 'pending' AND payload = '{"amount": 1}'`); got != 1 {
		t.Error("ok-1 not stored as first received")
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'bad-json' AND state = 'dead' AND raw = '{"amount": '::bytea AND last_error LIKE '%JSON%'`); got != 1 {
		t.Error("bad-json not stored dead with its raw bytes")
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key = 'no-kind' AND state = 'dead' AND kind = 'undecodable' AND raw = '{"amount": 3}'::bytea`); got != 1 {
		t.Error("no-kind not stored dead with its raw bytes")
	}
	if got := db.Count(t, `SELECT count(*) FROM {schema}.inbox WHERE key ~ $1 AND state = 'pending'`, "^"+f.topic+":[0-2]:[0-9]+$"); got != 1 {
		t.Error("the record without key header is not keyed by its coordinates")
	}
}

// TestShutdownFinishesBatch calls Stop while a batch is in hand (after its commit, before its offset
// commit): Stop waits until its offsets are committed and returns nil.
func TestShutdownFinishesBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	db := adaptertest.NewDB(t)
	unique, _ := adaptertest.Plan("stop", 20, 0)
	recs := make([]*kgo.Record, len(unique))
	for i, m := range unique {
		recs[i] = event(m.Key, m.Payload)
	}
	f.produce(t, recs...)
	cfg := f.config(adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger", Key: adapters.RecordKey()})
	cfg.BatchSize = 5
	c := newConsumer(t, cfg)
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
		t.Errorf("stats %+v, want one batch of %d committed", st, size)
	}
	if f.committed(t) == 0 {
		t.Error("no offset committed")
	}
	if n := adaptertest.InboxCount(t, db, "ledger"); n != int64(size) {
		t.Errorf("inbox holds %d, want %d", n, size)
	}
}

// TestNewNamesBadField sets each size and duration of the config negative in turn: New's error names
// that field.
func TestNewNamesBadField(t *testing.T) {
	t.Parallel()
	cfg := Config{Options: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup(group), kgo.ConsumeTopics("t")},
		Sink: adapters.SinkConfig{Store: txinbox.Store{DB: adaptertest.DeadPool(t)}, Consumer: "ledger"}}
	adaptertest.NegativeFields(t, cfg, func(cfg Config) error { _, err := New(cfg); return err }, adaptertest.BatchFields()...)
}

// uncommitted returns the number of records of the topic above the group's committed offsets.
func (f *fixture) uncommitted(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	ends, err := f.adm.ListEndOffsets(ctx, f.topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := f.adm.FetchOffsets(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		t.Fatal(err)
	}
	n := int64(0)
	ends.Each(func(e kadm.ListedOffset) {
		from := int64(0)
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.At > 0 {
			from = c.At
		}
		n += e.Offset - from
	})
	return int(n)
}

// harness is the conformance suite's set-up of its sink tests (CommitFailure,
// StoreFailureKeepsOrder): a topic of the test's own, whose records go to one partition (one record
// key), in order.
func harness(t *testing.T) conformance.SinkSetup {
	f := newFixture(t)
	return conformance.SinkSetup{
		Publish: func(msgs []conformance.Msg) {
			recs := make([]*kgo.Record, len(msgs))
			for i, m := range msgs {
				recs[i] = event("one-partition", m.Payload)
				recs[i].Headers = append(recs[i].Headers, kgo.RecordHeader{Key: adapters.IdempotencyKeyHeader, Value: []byte(m.Key)})
			}
			f.produce(t, recs...)
		},
		Start: func(sink adapters.SinkConfig, batchSize int) conformance.Consumer {
			cfg := f.config(sink)
			cfg.BatchSize = batchSize
			c := newConsumer(t, cfg)
			start(t, c)
			return c
		},
		Unacked: func() int { return f.uncommitted(t) },
	}
}
