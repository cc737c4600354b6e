package natsjs

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
)

// orderPlan publishes n messages keyed prefix-0 … prefix-(n-1), in that order, and returns them and
// their keys.
func orderPlan(t *testing.T, f *fixture, prefix string, n int) ([]adaptertest.Msg, []string) {
	t.Helper()
	unique, _ := adaptertest.Plan(prefix, n, 0)
	msgs := make([]*nats.Msg, len(unique))
	keys := make([]string, len(unique))
	for i, m := range unique {
		msgs[i] = event(m.Key, m.Payload)
		keys[i] = m.Key
	}
	f.publish(t, msgs...)
	return unique, keys
}

// settled waits until JetStream holds nothing pending or unacknowledged for the consumer.
func (f *fixture) settled(t *testing.T) {
	t.Helper()
	adaptertest.WaitFor(t, "every message acknowledged", func() bool {
		info := f.info(t)
		return info.NumPending == 0 && info.NumAckPending == 0
	})
}

// TestCrashedConsumersMessagesComeFirst kills a consumer (its connection closed, nothing stored,
// acknowledged or handed back) while it holds the first 30 of 60 messages, and starts another at
// once: JetStream delivers the dead one's messages again only after AckWait, and has the 30 newer
// ones ready before that. The new consumer must store the dead one's messages first: the inbox
// receives all 60 in stream order.
func TestCrashedConsumersMessagesComeFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2*time.Second)
	db := adaptertest.NewDB(t)
	unique, keys := orderPlan(t, f, "crash", 60)
	sink := adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger"}

	jc, nc := f.consumer(t)
	c1 := newConsumer(t, Config{Consumer: jc, Prefetch: 30, BatchConfig: adapters.BatchConfig{BatchSize: 10}, Sink: sink})
	errCrash := errors.New("simulated crash")
	c1.beforeStore = func(batch, size int) error {
		nc.Close() // abrupt: nothing is acknowledged or handed back
		return errCrash
	}
	stop := start(t, c1)
	<-c1.Done()
	if err := stop(); !errors.Is(err, errCrash) {
		t.Fatalf("Stop after the crash: %v, want the crash", err)
	}
	if info := f.info(t); info.NumAckPending != 30 {
		t.Fatalf("the dead consumer holds %d messages, want 30", info.NumAckPending)
	}

	jc2, _ := f.consumer(t)
	c2 := newConsumer(t, Config{Consumer: jc2, Sink: sink})
	stop = start(t, c2)
	f.settled(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	adaptertest.CheckUnique(t, db, "ledger", unique)
	adaptertest.CheckReceivedOrder(t, db, "ledger", keys)
	if info := f.info(t); info.Delivered.Consumer < info.Delivered.Stream+30 {
		t.Errorf("%d deliveries of %d messages: the dead consumer's 30 were not delivered again", info.Delivered.Consumer, info.Delivered.Stream)
	}
}

// TestStopHandsBackInOrder stops a consumer while it holds a batch that cannot be stored (the
// database refuses connections) and its pull request, waiting for more messages, is still open: the
// held batch and then the prefetched messages are handed back, and the next consumer gets every one
// in stream order. AckWait is an hour: a message handed back into the open pull request, or a wait
// for AckWait, would leave the next consumer without it past the test's deadline.
func TestStopHandsBackInOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t, time.Hour)
	db := adaptertest.NewDB(t)
	unique, keys := orderPlan(t, f, "handback", 25)

	sw := adaptertest.NewSwitchDB(adaptertest.DeadPool(t))
	jc, _ := f.consumer(t)
	c1 := newConsumer(t, Config{Consumer: jc, Prefetch: 30, BatchConfig: adapters.BatchConfig{BatchSize: 5},
		Sink: adapters.SinkConfig{Store: txinbox.Store{DB: sw, Schema: db.Schema}, Consumer: "ledger"}})
	stop := start(t, c1)
	adaptertest.WaitFor(t, "failed stores", func() bool { return c1.Stats().Failures >= 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := c1.Stats(); st.Acked != 0 {
		t.Fatalf("stats %+v: acknowledged while the database was down", st)
	}

	jc2, _ := f.consumer(t)
	c2 := newConsumer(t, Config{Consumer: jc2, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema}, Consumer: "ledger"}})
	stop = start(t, c2)
	f.settled(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	adaptertest.CheckUnique(t, db, "ledger", unique)
	adaptertest.CheckReceivedOrder(t, db, "ledger", keys)
}

// TestHoldKeepsBatchFromOthers holds a batch that cannot be stored (the database refuses
// connections) for longer than AckWait: its ack deadline is extended meanwhile (InProgress), so that
// JetStream does not deliver its messages to anyone else. Another client fetching from the same
// JetStream consumer then gets none of them.
func TestHoldKeepsBatchFromOthers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3*time.Second) // InProgress every 750ms: a slow machine has ample slack
	db := adaptertest.NewDB(t)
	orderPlan(t, f, "held", 5)
	sw := adaptertest.NewSwitchDB(adaptertest.DeadPool(t))
	jc, _ := f.consumer(t)
	c := newConsumer(t, Config{Consumer: jc, BatchConfig: adapters.BatchConfig{BatchSize: 5},
		Sink: adapters.SinkConfig{Store: txinbox.Store{DB: sw, Schema: db.Schema}, Consumer: "ledger"}})
	stop := start(t, c)
	adaptertest.WaitFor(t, "a failed store", func() bool { return c.Stats().Failures >= 1 })
	time.Sleep(5 * time.Second) // AckWait passes while the batch is held
	other, _ := f.consumer(t)
	b, err := other.FetchNoWait(5)
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		md, _ := m.Metadata()
		t.Errorf("another client got message %d while the batch was held (delivery %d)", md.Sequence.Stream, md.NumDelivered)
	}
	sw.Set(db.Pool)
	adaptertest.WaitFor(t, "the held batch acknowledged", func() bool { return c.Stats().Acked == 5 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
