package rabbitmq

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/conformance"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/cetest"
	"github.com/txinbox/txinbox/adapters/internal/pubtest"
	"github.com/txinbox/txinbox/adapters/internal/tcpproxy"
	"github.com/txinbox/txinbox/outbox"
)

// declare declares a queue unique to the test with args, deleted when the test ends, and returns its
// name and a channel in confirm mode on a connection of its own.
func declare(t *testing.T, url string, args amqp.Table) (string, *amqp.Channel) {
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
	name := adaptertest.Name("txinbox-pub")
	if _, err := ch.QueueDeclare(name, false, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(name, false, false, false) })
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	return name, ch
}

// collector consumes a queue (on a connection of its own, auto-ack) and keeps what arrives.
type collector struct {
	mu   sync.Mutex
	got  []conformance.Received
	msgs []amqp.Delivery
}

func collect(t *testing.T, url, q string) *collector {
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
	ds, err := ch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	go func() {
		for d := range ds {
			h := map[string]string{}
			for k, v := range d.Headers {
				h[k] = fmt.Sprint(v)
			}
			// No SDK binding reads AMQP 0-9-1: cetest.AMQP maps the cloudEvents_ headers and the
			// content-type property onto an event with the SDK's setters, as the AMQP binding says,
			// and validates it.
			ce, err := cetest.AMQP(d.Headers, d.ContentType, d.Body)
			c.mu.Lock()
			c.got = append(c.got, conformance.Received{ID: d.MessageId, Payload: d.Body, Headers: h, CloudEvent: ce, CloudEventErr: err})
			c.msgs = append(c.msgs, d)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collector) received() []conformance.Received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]conformance.Received(nil), c.got...)
}

func (c *collector) deliveries() []amqp.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]amqp.Delivery(nil), c.msgs...)
}

func newPublisher(t *testing.T, cfg PublisherConfig) *Publisher {
	t.Helper()
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestPublisherUnroutableIsAFailure: a message that no queue takes is returned by the broker and is a
// failure of its event (ErrUnroutable), while another event of the same call, routed through a
// topic exchange declared by Setup, is acknowledged; with AllowUnroutable the broker's confirm of
// the dropped message counts.
func TestPublisherUnroutableIsAFailure(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	q, _ := declare(t, url, nil)
	exchange := adaptertest.Name("txinbox-pub-x")
	setup := func(ch *amqp.Channel) error {
		if err := ch.ExchangeDeclare(exchange, "topic", false, true, false, false, nil); err != nil {
			return err
		}
		return ch.QueueBind(q, "orders.#", exchange, false, nil)
	}
	c := collect(t, url, q)
	pub := newPublisher(t, PublisherConfig{URL: url, Exchange: exchange, Setup: setup})
	events := []outbox.Event{
		{ID: "evt-routed", Topic: "orders.created", Payload: []byte(`{"n": 1}`)},
		{ID: "evt-nowhere", Topic: "invoices.sent", Payload: []byte(`{"n": 2}`)},
	}
	for range 3 { // the return and its confirm arrive in order every time
		err := pub.Publish(context.Background(), events)
		var be *outbox.BatchError
		if !errors.As(err, &be) || be.Errs[0] != nil || !errors.Is(be.Errs[1], ErrUnroutable) {
			t.Fatalf("Publish = %v, want the routed event acknowledged and the other ErrUnroutable", err)
		}
	}
	adaptertest.WaitFor(t, "the routed event to arrive", func() bool { return len(c.received()) == 3 })
	for _, r := range c.received() {
		if r.ID != "evt-routed" {
			t.Errorf("message %q arrived, want only evt-routed", r.ID)
		}
	}

	loose := newPublisher(t, PublisherConfig{URL: url, Exchange: exchange, Setup: setup, AllowUnroutable: true})
	if err := loose.Publish(context.Background(), events[1:]); err != nil {
		t.Errorf("AllowUnroutable: Publish = %v, want nil (the broker confirmed and dropped it)", err)
	}
}

// TestPublisherConfirmTimeoutIsRetried: the broker's answers stop reaching the publisher (a proxy
// holds them): the message is routed but its confirm does not come within ConfirmTimeout, so the
// event fails (ErrConfirmTimeout) and stays pending, and the next attempts cannot connect. Once the
// answers flow again, the publisher connects again and the event is sent and consumed under its id
// (perhaps twice: the first copy was routed too).
func TestPublisherConfirmTimeoutIsRetried(t *testing.T) {
	t.Parallel()
	broker := brokerURL(t)
	q, _ := declare(t, broker, nil)
	c := collect(t, broker, q)
	u, err := url.Parse(broker)
	if err != nil {
		t.Fatal(err)
	}
	px := tcpproxy.New(t, u.Host)
	u.Host = px.Addr()
	pub := newPublisher(t, PublisherConfig{URL: u.String(), ConfirmTimeout: 300 * time.Millisecond})
	env := pubtest.New(t)
	res := env.Relay(t, pub, func(cfg *outbox.RelayConfig) { cfg.Timeout = 2 * time.Second })

	first := env.Publish(t, true, outbox.Message{Topic: q, Key: "k", Payload: []byte(`{"n": 1}`)})
	env.WaitSent(t, first) // connected through the proxy

	px.Freeze()
	ids := env.Publish(t, true, outbox.Message{Topic: q, Key: "k", Payload: []byte(`{"n": 2}`)})
	adaptertest.WaitFor(t, "two failed attempts while the broker's answers are held", func() bool {
		row := env.Row(t, ids[0])
		return row.AttemptsFailed >= 2 || row.State != "pending" // not pending: the check below fails
	})
	if row := env.Row(t, ids[0]); row.State != "pending" {
		t.Fatalf("event is %s while its confirm cannot arrive, want pending", row.State)
	}
	if r := res.Of(ids[0]); len(r) == 0 || r[0].Outcome != txinbox.OutcomeRetry || !errors.Is(r[0].Err, ErrConfirmTimeout) {
		t.Fatalf("first attempt %+v, want a retry with ErrConfirmTimeout", r)
	}
	px.Thaw()
	env.WaitSent(t, ids)
	adaptertest.WaitFor(t, "the event to arrive", func() bool {
		for _, r := range c.received() {
			if r.ID == ids[0] {
				return true
			}
		}
		return false
	})
}

// TestNewPublisherChecksConfig: a missing URL or a negative ConfirmTimeout is a *txinbox.ConfigError
// naming the field; a Publish after Close fails with ErrPublisherClosed; a header
// name longer than AMQP's 255 bytes is permanent.
func TestNewPublisherChecksConfig(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]PublisherConfig{
		"URL":            {},
		"ConfirmTimeout": {URL: "amqp://localhost/", ConfirmTimeout: -1},
	} {
		_, err := NewPublisher(cfg)
		var ce *txinbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("NewPublisher(%+v) = %v, want a ConfigError naming %s", cfg, err, field)
		}
	}
	p, err := NewPublisher(PublisherConfig{URL: "amqp://localhost/"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(context.Background(), []outbox.Event{{ID: "x", Topic: "t"}}); !errors.Is(err, ErrPublisherClosed) {
		t.Errorf("Publish after Close = %v, want ErrPublisherClosed", err)
	}
	if _, err := publishing(&outbox.Event{ID: "x", Topic: "t", Headers: map[string]string{strings.Repeat("h", 256): "v"}}); !txinbox.IsPermanent(err) {
		t.Errorf("a header name of 256 bytes: %v, want a permanent error", err)
	}
}

// publishGate forwards TCP connections to a broker, the client's side frame by frame. Once told to
// hold, it forwards the next three basic.publish frames (and their content) and holds every later
// frame of that connection but heartbeats: the broker never gets those messages, so it confirms
// none of them. Released, it forwards what it held, in order, and holds nothing more.
type publishGate struct {
	ln net.Listener

	mu     sync.Mutex
	budget int // publishes to forward before holding; -1: not holding
	conns  []*gateConn
}

type gateConn struct {
	client, server net.Conn
	holding        bool
	held           [][]byte // the frames held, in order
}

// AMQP 0-9-1 frame types, and basic.publish's class and method ids.
const (
	frameMethod    = 1
	frameHeartbeat = 8
	classBasic     = 60
	methodPublish  = 40
)

func newPublishGate(t *testing.T, target string) *publishGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &publishGate{ln: ln, budget: -1}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			c := &gateConn{client: client, server: server}
			g.mu.Lock()
			g.conns = append(g.conns, c)
			g.mu.Unlock()
			go func() { _, _ = io.Copy(client, server); _ = client.Close() }()
			go g.pipe(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, c := range g.conns {
			_ = c.client.Close()
			_ = c.server.Close()
		}
	})
	return g
}

// pipe forwards c's client frames to its server, or holds them.
func (g *publishGate) pipe(c *gateConn) {
	defer c.server.Close()
	r := bufio.NewReader(c.client)
	proto := make([]byte, 8) // "AMQP" 0 0 9 1
	if _, err := io.ReadFull(r, proto); err != nil {
		return
	}
	if _, err := c.server.Write(proto); err != nil {
		return
	}
	for {
		head := make([]byte, 7) // type, channel, payload size
		if _, err := io.ReadFull(r, head); err != nil {
			return
		}
		frame := make([]byte, 7+int(binary.BigEndian.Uint32(head[3:]))+1) // and the frame-end octet
		copy(frame, head)
		if _, err := io.ReadFull(r, frame[7:]); err != nil {
			return
		}
		g.mu.Lock()
		if !c.holding && g.budget >= 0 && frame[0] == frameMethod && len(frame) >= 12 &&
			binary.BigEndian.Uint16(frame[7:]) == classBasic && binary.BigEndian.Uint16(frame[9:]) == methodPublish {
			if g.budget == 0 {
				c.holding = true
			} else {
				g.budget--
			}
		}
		var err error
		if c.holding && frame[0] != frameHeartbeat {
			c.held = append(c.held, frame)
		} else {
			_, err = c.server.Write(frame)
		}
		g.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (g *publishGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.budget = 3
}

func (g *publishGate) holding() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		if c.holding {
			return true
		}
	}
	return false
}

func (g *publishGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.budget = -1
	for _, c := range g.conns {
		for _, f := range c.held {
			if _, err := c.server.Write(f); err != nil {
				break
			}
		}
		c.holding, c.held = false, nil
	}
}

// drain returns a function that takes every message waiting in the queue q (basic.get, on a
// connection of its own) and returns all it took so far: a message the broker confirmed before the
// call is among them.
func drain(t *testing.T, url, q string) func() []conformance.Received {
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
	var mu sync.Mutex
	var got []conformance.Received
	return func() []conformance.Received {
		mu.Lock()
		defer mu.Unlock()
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return slices.Clone(got)
			}
			h := map[string]string{}
			for k, v := range d.Headers {
				h[k] = fmt.Sprint(v)
			}
			got = append(got, conformance.Received{ID: d.MessageId, Payload: d.Body, Headers: h})
		}
	}
}
