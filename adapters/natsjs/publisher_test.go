package natsjs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters/conformance"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/cetest"
	"github.com/txinbox/txinbox/outbox"
)

// pubFixture is a JetStream connection and a stream name unique to the test; the stream is created
// by createStream (deleted when the test ends) and captures name.>.
type pubFixture struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	name string
}

func newPubFixture(t *testing.T) *pubFixture {
	t.Helper()
	url := adaptertest.Broker(t, "NATS", EnvURL, "nats://127.0.0.1:4222")
	nc := connect(t, url)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &pubFixture{nc: nc, js: js, name: strings.ReplaceAll(adaptertest.Name("txinbox_pub"), "-", "_")}
}

func (f *pubFixture) createStream(t *testing.T) {
	t.Helper()
	if _, err := f.js.CreateStream(context.Background(), jetstream.StreamConfig{Name: f.name, Subjects: []string{f.name + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.js.DeleteStream(context.Background(), f.name) })
}

// received returns the messages the stream holds, in stream order, as pubtest sees them (none if the
// stream does not exist).
func (f *pubFixture) received(t *testing.T) []conformance.Received {
	t.Helper()
	ctx := context.Background()
	s, err := f.js.Stream(ctx, f.name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []conformance.Received
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		h := map[string]string{}
		for name := range m.Header {
			h[name] = m.Header.Get(name)
		}
		// A CloudEvents receiver of the SDK (its NATS JetStream binding) reads the message.
		ce, err := cetest.NATS(&nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		out = append(out, conformance.Received{ID: m.Header.Get(jetstream.MsgIDHeader), Payload: m.Data, Headers: h, CloudEvent: ce, CloudEventErr: err})
	}
	return out
}

func newPublisher(t *testing.T, cfg PublisherConfig) *Publisher {
	t.Helper()
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPublisherDeduplicatesByMsgID: the same event published three times (a relay that hands it over
// again) is stored once, under its id as Nats-Msg-Id, even when its own headers carry another
// Nats-Msg-Id; every publish is acknowledged.
func TestPublisherDeduplicatesByMsgID(t *testing.T) {
	t.Parallel()
	f := newPubFixture(t)
	f.createStream(t)
	pub := newPublisher(t, PublisherConfig{JetStream: f.js})
	ev := outbox.Event{ID: "01a21c6e-0000-7000-8000-000000000001", Topic: f.name + ".orders", Payload: []byte(`{"n": 1}`),
		Headers: map[string]string{"nats-msg-id": "forged", "traceparent": conformance.TraceParent}}
	other := ev
	other.ID, other.Topic = "01a21c6e-0000-7000-8000-000000000002", f.name+".invoices"
	for range 3 {
		if err := pub.Publish(context.Background(), []outbox.Event{ev, other}); err != nil {
			t.Fatal(err)
		}
	}
	got := f.received(t)
	if len(got) != 2 || got[0].ID == got[1].ID || (got[0].ID != ev.ID && got[0].ID != other.ID) || (got[1].ID != ev.ID && got[1].ID != other.ID) {
		t.Fatalf("the stream holds %+v, want the two events once each, under their ids", got)
	}
	for _, r := range got {
		if r.Headers["traceparent"] != conformance.TraceParent || r.Headers["nats-msg-id"] != "" {
			t.Errorf("headers %v: want the traceparent, and no forged message id", r.Headers)
		}
	}
}

// TestPublisherRefusals: a subject the stream does not match ExpectStream fails (retried); a subject
// no stream captures fails with ErrNoStream; an invalid subject, a header name NATS cannot carry and a
// message over the server's maximum payload are permanent.
func TestPublisherRefusals(t *testing.T) {
	t.Parallel()
	f := newPubFixture(t)
	f.createStream(t)
	ctx := context.Background()
	wrong := newPublisher(t, PublisherConfig{JetStream: f.js, ExpectStream: "another_stream"})
	err := wrong.Publish(ctx, []outbox.Event{{ID: "a", Topic: f.name + ".x", Payload: []byte(`{}`)}})
	if err == nil || txinbox.IsPermanent(err) {
		t.Errorf("ExpectStream not matched: %v, want a failure to retry", err)
	}
	pub := newPublisher(t, PublisherConfig{JetStream: f.js, AckTimeout: 2 * time.Second})
	big := make([]byte, 8<<20)
	err = pub.Publish(ctx, []outbox.Event{
		{ID: "b", Topic: "nowhere_" + f.name + ".x", Payload: []byte(`{}`)},
		{ID: "c", Topic: f.name + ".*", Payload: []byte(`{}`)},
		{ID: "d", Topic: f.name + " x", Payload: []byte(`{}`)},
		{ID: "e", Topic: f.name + ".x", Payload: []byte(`{}`), Headers: map[string]string{"a:b": "v"}},
		{ID: "f", Topic: f.name + ".x", Payload: big},
		{ID: "g", Topic: f.name + ".x", Payload: []byte(`{}`)},
	})
	var be *outbox.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 6 {
		t.Fatalf("Publish = %v, want a BatchError of 6", err)
	}
	if !errors.Is(be.Errs[0], ErrNoStream) || txinbox.IsPermanent(be.Errs[0]) {
		t.Errorf("subject no stream captures: %v, want ErrNoStream, retried", be.Errs[0])
	}
	for i := 1; i <= 4; i++ {
		if !txinbox.IsPermanent(be.Errs[i]) {
			t.Errorf("event %d: %v, want permanent", i, be.Errs[i])
		}
	}
	if be.Errs[5] != nil {
		t.Errorf("valid event: %v", be.Errs[5])
	}
}

// TestPublisherChecksTopics: with the default Subject (the topic), the Publisher is an
// outbox.TopicChecker that refuses a topic that is not a subject to publish on, which Publish makes
// permanent, so that the relay makes its events dead without publishing them; a subject no stream
// captures passes (a stream may capture it later). With a Subject function, every topic passes.
func TestPublisherChecksTopics(t *testing.T) {
	t.Parallel()
	f := newPubFixture(t)
	pub := newPublisher(t, PublisherConfig{JetStream: f.js})
	var _ outbox.TopicChecker = pub
	for topic, ok := range map[string]bool{
		"orders.created": true, "nowhere_" + f.name + ".x": true,
		"": false, "orders.*": false, "orders.>": false, "orders created": false, "orders..created": false,
	} {
		if err := pub.CheckTopic(topic); (err == nil) != ok {
			t.Errorf("CheckTopic(%q) = %v, want accepted %v", topic, err, ok)
		}
	}
	mapped := newPublisher(t, PublisherConfig{JetStream: f.js, Subject: func(ev outbox.Event) string { return "x." + ev.Key }})
	if err := mapped.CheckTopic("orders.*"); err != nil {
		t.Errorf("CheckTopic with a Subject function: %v, want every topic accepted", err)
	}
}

// TestNewPublisherChecksConfig: a missing JetStream, a negative AckTimeout or Concurrency is a
// *txinbox.ConfigError naming the field.
func TestNewPublisherChecksConfig(t *testing.T) {
	t.Parallel()
	f := newPubFixture(t)
	adaptertest.NegativeFields(t, PublisherConfig{JetStream: f.js}, func(cfg PublisherConfig) error { _, err := NewPublisher(cfg); return err },
		"AckTimeout", "Concurrency")
	_, err := NewPublisher(PublisherConfig{})
	var ce *txinbox.ConfigError
	if !errors.As(err, &ce) || ce.Field != "JetStream" {
		t.Errorf("NewPublisher without JetStream = %v, want a ConfigError naming JetStream", err)
	}
}

// fakeStream answers the publishes on its subject with PubAcks as a stream would, but only once
// hold of them are waiting (or the last ones, after a pause): so a Publish call completes only if it
// keeps that many messages awaiting their PubAck at once. It records the most it saw waiting.
type fakeStream struct {
	mu      sync.Mutex
	waiting []*nats.Msg
	most    int
	seq     int
}

func newFakeStream(t *testing.T, nc *nats.Conn, subject string, hold int) *fakeStream {
	t.Helper()
	fs := &fakeStream{}
	reply := func(msgs []*nats.Msg) {
		for _, m := range msgs {
			fs.mu.Lock()
			fs.seq++
			seq := fs.seq
			fs.mu.Unlock()
			_ = m.Respond([]byte(fmt.Sprintf(`{"stream":"FAKE","seq":%d}`, seq)))
		}
	}
	var timer *time.Timer
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		fs.mu.Lock()
		fs.waiting = append(fs.waiting, m)
		fs.most = max(fs.most, len(fs.waiting))
		var now []*nats.Msg
		if len(fs.waiting) >= hold {
			now, fs.waiting = fs.waiting, nil
		} else if timer == nil {
			timer = time.AfterFunc(time.Second, func() {
				fs.mu.Lock()
				late := fs.waiting
				fs.waiting, timer = nil, nil
				fs.mu.Unlock()
				reply(late)
			})
		}
		fs.mu.Unlock()
		reply(now)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return fs
}

func events(n int, subject string) []outbox.Event {
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = outbox.Event{ID: fmt.Sprintf("01a21c6e-0000-7000-8000-%012d", i), Topic: subject, Payload: []byte(`{}`)}
	}
	return evs
}

// TestPublisherKeepsConcurrencyPending: a call keeps Concurrency messages awaiting their PubAck at
// once, never more, 256 by default: a stream that answers only once that many
// publishes wait gets them that many at a time, and every event of the call is acknowledged well
// before the stream's one-second fallback.
func TestPublisherKeepsConcurrencyPending(t *testing.T) {
	t.Parallel()
	f := newPubFixture(t)
	for _, c := range []int{8, 0} {
		want := c
		if c == 0 {
			want = 256 // PublisherConfig.Concurrency's default
		}
		subject := fmt.Sprintf("fake_%s.c%d", f.name, c)
		fs := newFakeStream(t, f.nc, subject, want)
		pub := newPublisher(t, PublisherConfig{JetStream: f.js, Concurrency: c})
		start := time.Now()
		if err := pub.Publish(context.Background(), events(4*want, subject)); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 900*time.Millisecond {
			t.Errorf("Concurrency %d: %d events took %v: the publisher did not keep %d PubAcks pending", c, 4*want, took, want)
		}
		fs.mu.Lock()
		if fs.seq != 4*want || fs.most != want {
			t.Errorf("Concurrency %d: the stream acknowledged %d publishes with at most %d waiting, want %d with %d", c, fs.seq, fs.most, 4*want, want)
		}
		fs.mu.Unlock()
	}
}

// TestPublisherAckTimeout: a publish whose PubAck never comes (a subscriber that does not answer
// holds the subject) fails after AckTimeout, counted from its own publish, and is retried (not
// permanent); the call's other events are acknowledged.
func TestPublisherAckTimeout(t *testing.T) {
	t.Parallel()
	f := newPubFixture(t)
	f.createStream(t)
	silent := "silent_" + f.name + ".x"
	sub, err := f.nc.Subscribe(silent, func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, PublisherConfig{JetStream: f.js, AckTimeout: 300 * time.Millisecond, Concurrency: 1})
	evs := append(events(1, silent), events(2, f.name+".x")[1])
	start := time.Now()
	err = pub.Publish(context.Background(), evs)
	took := time.Since(start)
	var be *outbox.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 2 {
		t.Fatalf("Publish = %v, want a BatchError of 2", err)
	}
	if !errors.Is(be.Errs[0], context.DeadlineExceeded) || txinbox.IsPermanent(be.Errs[0]) || be.Errs[1] != nil {
		t.Errorf("errors %v, want the silent subject's to be a timeout (retried) and the other event acknowledged", be.Errs)
	}
	if took < 300*time.Millisecond || took > 3*time.Second {
		t.Errorf("the call took %v, want about the AckTimeout (300ms)", took)
	}
	if got := f.received(t); len(got) != 1 || got[0].ID != evs[1].ID {
		t.Errorf("the stream holds %+v, want the second event", got)
	}
}

// holdingStream answers the publishes on its subject with PubAcks as a stream would; once told to
// hold, it answers the next three and holds every later one unanswered, until released (it then
// answers those it held, and every later one).
type holdingStream struct {
	mu     sync.Mutex
	budget int // answers left before holding; -1: not holding
	held   []*nats.Msg
	got    []conformance.Received // the publishes answered
}

func newHoldingStream(t *testing.T, nc *nats.Conn, subject string) *holdingStream {
	t.Helper()
	hs := &holdingStream{budget: -1}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		hs.mu.Lock()
		if hs.budget == 0 {
			hs.held = append(hs.held, m)
			hs.mu.Unlock()
			return
		}
		if hs.budget > 0 {
			hs.budget--
		}
		hs.answer(m)
		hs.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return hs
}

// answer records m and answers it with a PubAck; hs.mu is held.
func (hs *holdingStream) answer(m *nats.Msg) {
	h := map[string]string{}
	for name := range m.Header {
		h[name] = m.Header.Get(name)
	}
	hs.got = append(hs.got, conformance.Received{ID: m.Header.Get(jetstream.MsgIDHeader), Payload: m.Data, Headers: h})
	_ = m.Respond(fmt.Appendf(nil, `{"stream":"HELD","seq":%d}`, len(hs.got)))
}

func (hs *holdingStream) hold() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.budget = 3
}

func (hs *holdingStream) holding() bool {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return len(hs.held) > 0
}

func (hs *holdingStream) release() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.budget = -1
	for _, m := range hs.held {
		hs.answer(m)
	}
	hs.held = nil
}

func (hs *holdingStream) received() []conformance.Received {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return slices.Clone(hs.got)
}
