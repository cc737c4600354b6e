package natsjs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/tcpproxy"
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

// TestLostDeliveryComesFirst loses a message in transit: the consumer's connection to JetStream
// runs through a proxy, which holds the bytes from the server while a message of the key is
// published (JetStream delivers it into the open pull request: it is pending acknowledgement), then
// drops them and cuts the connection. Newer messages of the key are published before the consumer
// connects again: JetStream has them ready at once, and the lost one only after AckWait. The
// consumer must store the lost one first: the inbox receives the key's messages in stream order.
func TestLostDeliveryComesFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 4*time.Second)
	db := adaptertest.NewDB(t)
	u, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	px := tcpproxy.New(t, u.Host)
	nc, err := nats.Connect("nats://"+px.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	jc, err := js.Consumer(context.Background(), f.stream, f.durable)
	if err != nil {
		t.Fatal(err)
	}
	c := newConsumer(t, Config{Consumer: jc, Sink: adapters.SinkConfig{Store: txinbox.Store{DB: db.Pool, Schema: db.Schema},
		Consumer: "ledger", OrderingKey: adapters.Header("x-account")}})
	stop := start(t, c)

	var keys []string
	publish := func(n int) {
		t.Helper()
		for range n {
			k := fmt.Sprintf("lost-%d", len(keys))
			m := event(k, fmt.Appendf(nil, `{"event_id": %q}`, k))
			m.Header.Set("x-account", "acct-1")
			f.publish(t, m)
			keys = append(keys, k)
		}
	}
	stored := func(what string) {
		t.Helper()
		adaptertest.WaitFor(t, what, func() bool { return adaptertest.InboxCount(t, db, "ledger") == int64(len(keys)) })
		f.settled(t)
	}
	publish(1)
	stored("the first message stored")

	lost := false
	for attempt := 0; attempt < 5 && !lost; attempt++ {
		px.Freeze()
		publish(1) // delivered into the open pull request, held in the proxy
		deadline := time.Now().Add(3 * time.Second)
		for !lost && time.Now().Before(deadline) {
			info := f.info(t)
			lost = info.NumPending == 0 && info.NumAckPending == 1
			time.Sleep(10 * time.Millisecond)
		}
		if !lost {
			t.Logf("attempt %d: the message was not delivered while the proxy held the server's bytes", attempt)
			px.Thaw()
			stored("the message published in a failed attempt stored")
			continue
		}
		px.Cut()
		if info := f.info(t); info.NumPending != 0 || info.NumAckPending != 1 {
			t.Fatalf("after the cut: %d pending, %d pending acknowledgement; want the lost message pending acknowledgement alone",
				info.NumPending, info.NumAckPending)
		}
		publish(5)
		px.Thaw()
	}
	if !lost {
		t.Fatal("no message could be lost in transit")
	}
	stored("every message stored")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	adaptertest.CheckReceivedOrder(t, db, "ledger", keys)
}
