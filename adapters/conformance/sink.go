package conformance

import (
	"context"
	"testing"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
)

// Msg is one message a sink test has the broker deliver: its key and its body.
type Msg struct {
	// Key is where the adapter's default key strategy reads it (the message id, or the
	// x-idempotency-key header).
	Key string
	// Payload is the message's body, a JSON document.
	Payload []byte
}

// Consumer is what the sink tests use of a broker adapter's consumer (rabbitmq.Consumer,
// natsjs.Consumer, kafka.Consumer; a webhook Receiver behind its server).
type Consumer interface {
	Stats() adapters.Stats
	Stop(ctx context.Context) error
}

// SinkSetup is what a broker gives the tests CommitFailure and StoreFailureKeepsOrder: a source of its
// own on a real broker (a queue, a stream with a durable consumer, a topic with a consumer group) and
// consumers of it.
type SinkSetup struct {
	// Publish sends msgs to the source and returns once the broker stored them, each with kind
	// "credit", its Payload as body and its Key where the adapter's default key strategy reads it
	// (the message id, or the x-idempotency-key header), in the order of msgs, which the broker keeps
	// (one queue, one stream, one partition).
	Publish func(msgs []Msg)
	// Start starts a new consumer of the source that stores into sink (its Key left to the adapter's
	// default) with short retry delays and batches of batchSize (0: the adapter's default, its
	// prefetch left to its default), and returns it; the test stops it.
	Start func(sink adapters.SinkConfig, batchSize int) Consumer
	// Unacked returns how many of the published messages the broker holds unacknowledged, to be
	// delivered again, while no consumer runs. The tests poll it until it is what it must be (a
	// broker may settle after Stop returned: RabbitMQ requeues when the channel closes, JetStream
	// acknowledgements are asynchronous).
	Unacked func() int
}

// commitFailure checks that an adapter acknowledges only what is stored. While every commit of its
// store transaction fails (adaptertest.RefuseCommits), a consumer must acknowledge nothing and
// store nothing, and the broker must still hold every message once the consumer stopped; once commits
// succeed again, a new consumer gets the messages again (they were not acknowledged) and stores each
// exactly once.
func commitFailure(t *testing.T, db *adaptertest.DB, h SinkSetup) {
	t.Helper()
	ctx := context.Background()
	unique, _ := adaptertest.Plan("commit", 20, 0)
	h.Publish(msgs(unique))
	allow := adaptertest.RefuseCommits(t, db)
	sink := adapters.SinkConfig{Store: db.Store(), Consumer: "ledger"}

	c := h.Start(sink, 0)
	adaptertest.WaitFor(t, "failed stores or an acknowledgement", func() bool {
		st := c.Stats()
		return st.Failures >= 3 || st.Acked > 0
	})
	st := c.Stats()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop while commits fail: %v", err)
	}
	if st.Acked != 0 || st.Batches != 0 {
		t.Fatalf("every commit failed, yet %d messages were acknowledged in %d batches (stats %+v)", st.Acked, st.Batches, st)
	}
	if n := adaptertest.InboxCount(t, db, "ledger"); n != 0 {
		t.Fatalf("every commit failed, yet the inbox holds %d messages", n)
	}
	adaptertest.WaitFor(t, "the broker to hold every message unacknowledged after the failed commits", func() bool {
		return h.Unacked() == len(unique)
	})

	allow()
	c2 := h.Start(sink, 0)
	adaptertest.WaitFor(t, "every message acknowledged once commits succeed", func() bool { return c2.Stats().Acked >= int64(len(unique)) })
	if err := c2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c2.Stats(); st.Acked != int64(len(unique)) || st.Inserted != int64(len(unique)) || st.Failures != 0 {
		t.Errorf("stats %+v after commits succeed again: want %d inserted and acknowledged, no failure", st, len(unique))
	}
	adaptertest.WaitFor(t, "the broker to count every message acknowledged", func() bool { return h.Unacked() == 0 })
	adaptertest.CheckUnique(t, db, "ledger", unique)
}

// storeFailureKeepsOrder checks that a batch that cannot be stored is held and stored again
// before any later message, so the inbox receives the messages in the order the broker delivers
// them (the order a worker.Pool runs the messages of an ordering key in). It publishes 60 messages,
// starts a consumer with batches of 10 (so that later messages wait prefetched behind the first
// batch) while every connection to the database is refused, lets at least three stores fail, gives
// the database back, and checks that the inbox holds each message once, received in publishing order
// (message ids ascending with it), and that the consumer acknowledged each once.
func storeFailureKeepsOrder(t *testing.T, db *adaptertest.DB, h SinkSetup) {
	t.Helper()
	ctx := context.Background()
	unique, _ := adaptertest.Plan("order", 60, 0)
	h.Publish(msgs(unique))
	sw := adaptertest.NewSwitchDB(adaptertest.DeadPool(t))
	c := h.Start(adapters.SinkConfig{Store: txinbox.Store{DB: sw, Schema: db.Schema}, Consumer: "ledger"}, 10)
	adaptertest.WaitFor(t, "failed stores", func() bool { return c.Stats().Failures >= 3 })
	sw.Set(db.Pool)
	adaptertest.WaitFor(t, "every message acknowledged once the database is back", func() bool { return c.Stats().Acked >= int64(len(unique)) })
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Acked != int64(len(unique)) || st.Inserted != int64(len(unique)) {
		t.Errorf("stats %+v: want %d inserted and acknowledged", st, len(unique))
	}
	adaptertest.CheckUnique(t, db, "ledger", unique)
	want := make([]string, len(unique))
	for i, m := range unique {
		want[i] = m.Key
	}
	adaptertest.CheckReceivedOrder(t, db, "ledger", want)
}

// msgs returns the plan's messages as the set-up's Publish takes them.
func msgs(plan []adaptertest.Msg) []Msg {
	out := make([]Msg, len(plan))
	for i, m := range plan {
		out[i] = Msg(m)
	}
	return out
}
