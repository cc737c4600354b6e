package natsjs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
	px := newCutProxy(t, u.Host)
	nc, err := nats.Connect("nats://"+px.addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectJitter(0, 0))
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
		px.freeze()
		publish(1) // delivered into the open pull request, held in the proxy
		deadline := time.Now().Add(3 * time.Second)
		for !lost && time.Now().Before(deadline) {
			info := f.info(t)
			lost = info.NumPending == 0 && info.NumAckPending == 1
			time.Sleep(10 * time.Millisecond)
		}
		if !lost {
			t.Logf("attempt %d: the message was not delivered while the proxy held the server's bytes", attempt)
			px.thaw()
			stored("the message published in a failed attempt stored")
			continue
		}
		px.cut()
		if info := f.info(t); info.NumPending != 0 || info.NumAckPending != 1 {
			t.Fatalf("after the cut: %d pending, %d pending acknowledgement; want the lost message pending acknowledgement alone",
				info.NumPending, info.NumAckPending)
		}
		publish(5)
		px.thaw()
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

// cutProxy forwards TCP connections to a server. While frozen it holds every byte from the server;
// cut drops what it holds, closes every connection and refuses new ones until thaw.
type cutProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	open   chan struct{} // closed while not frozen
	refuse bool
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, open: make(chan struct{})}
	close(p.open)
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			refuse := p.refuse
			p.mu.Unlock()
			if refuse {
				_ = client.Close()
				continue
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, client, server)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(server, client); _ = server.Close() }()
			go p.copyHeld(client, server)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.thaw()
	})
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

// copyHeld copies src to dst, holding each chunk while the proxy is frozen; a chunk held when the
// connections are cut is dropped (dst is closed).
func (p *cutProxy) copyHeld(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			open := p.open
			p.mu.Unlock()
			<-open
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *cutProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = make(chan struct{})
}

// cut closes every connection, dropping what the proxy holds, and refuses new connections until thaw.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// thaw lets connections and bytes through again.
func (p *cutProxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = false
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}
