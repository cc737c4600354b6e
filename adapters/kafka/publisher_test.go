package kafka

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/conformance"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/cetest"
	"github.com/txinbox/txinbox/outbox"
)

// pubCluster is an in-process Kafka cluster (kfake) with one topic of three partitions, whose
// produce requests fail while refuse is set (every partition answers NOT_ENOUGH_REPLICAS: the
// records are not written).
type pubCluster struct {
	c      *kfake.Cluster
	seeds  []string
	topic  string
	refuse atomic.Bool
	// refused counts the produce requests refused.
	refused atomic.Int64
}

func newPubCluster(t *testing.T) *pubCluster {
	t.Helper()
	pc := &pubCluster{topic: adaptertest.Name("txinbox-pub")}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, pc.topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	pc.c, pc.seeds = c, c.ListenAddrs()
	c.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !pc.refuse.Load() {
			return nil, nil, false
		}
		pc.refused.Add(1)
		preq := req.(*kmsg.ProduceRequest)
		resp := preq.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range preq.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.NotEnoughReplicas.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return pc
}

// consume reads the topic from its start in the background and returns what arrived so far, in each
// partition's order.
func (pc *pubCluster) consume(t *testing.T) func() []conformance.Received {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(pc.seeds...), kgo.ConsumeTopics(pc.topic), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []conformance.Received
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				h := map[string]string{}
				for _, rh := range r.Headers {
					h[rh.Key] = string(rh.Value)
				}
				// A CloudEvents receiver of the SDK (its Kafka binding, over the sarama message it would
				// have consumed) reads the record.
				ce, err := cetest.Kafka(r)
				mu.Lock()
				got = append(got, conformance.Received{ID: h[adapters.IdempotencyKeyHeader], Key: string(r.Key), Payload: r.Value, Headers: h,
					CloudEvent: ce, CloudEventErr: err})
				mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return func() []conformance.Received {
		mu.Lock()
		defer mu.Unlock()
		return append([]conformance.Received(nil), got...)
	}
}

func newPublisher(t *testing.T, cfg PublisherConfig) *Publisher {
	t.Helper()
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestPublisherPermanentAndHeaders: a topic that is not a Kafka topic name and a record over the
// client's maximum size are permanent; the id header replaces an event header of its name, and a
// configured IDHeader is used.
func TestPublisherPermanentAndHeaders(t *testing.T) {
	t.Parallel()
	pc := newPubCluster(t)
	received := pc.consume(t)
	ctx := context.Background()
	pub := newPublisher(t, PublisherConfig{Options: []kgo.Opt{kgo.SeedBrokers(pc.seeds...)}})
	err := pub.Publish(ctx, []outbox.Event{
		{ID: "a", Topic: "orders/created", Payload: []byte(`{}`)},
		{ID: "b", Topic: pc.topic, Payload: make([]byte, 2<<20)},
		{ID: "c", Topic: pc.topic, Key: "k", Payload: []byte(`{}`), Headers: map[string]string{"X-Idempotency-Key": "forged", "traceparent": conformance.TraceParent}},
	})
	var be *outbox.BatchError
	if !errors.As(err, &be) || len(be.Errs) != 3 || !txinbox.IsPermanent(be.Errs[0]) || !txinbox.IsPermanent(be.Errs[1]) || be.Errs[2] != nil {
		t.Fatalf("Publish = %v, want the bad topic and the large record permanent, the third acknowledged", err)
	}
	custom := newPublisher(t, PublisherConfig{Options: []kgo.Opt{kgo.SeedBrokers(pc.seeds...)}, IDHeader: "event-id"})
	if err := custom.Publish(ctx, []outbox.Event{{ID: "d", Topic: pc.topic, Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	adaptertest.WaitFor(t, "both records", func() bool { return len(received()) == 2 })
	for _, r := range received() {
		switch r.Headers["event-id"] {
		case "":
			if r.ID != "c" || r.Key != "k" || r.Headers["traceparent"] != conformance.TraceParent || r.Headers["X-Idempotency-Key"] != "" {
				t.Errorf("record %+v: want id c, key k, the traceparent, no forged id", r)
			}
		case "d":
		default:
			t.Errorf("record %+v", r)
		}
	}
}

// TestNewPublisherChecksConfig: no Options, a client without idempotent writes, or a transactional one
// is a *txinbox.ConfigError naming Options.
func TestNewPublisherChecksConfig(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]kgo.Opt{
		nil,
		{kgo.SeedBrokers("127.0.0.1:9092"), kgo.DisableIdempotentWrite()},
		{kgo.SeedBrokers("127.0.0.1:9092"), kgo.TransactionalID("outbox")},
	} {
		_, err := NewPublisher(PublisherConfig{Options: opts})
		var ce *txinbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != "Options" {
			t.Errorf("NewPublisher(%d options) = %v, want a ConfigError naming Options", len(opts), err)
		}
	}
}

// holdingCluster is an in-process Kafka cluster (kfake) of two brokers with one topic of two
// partitions, partition 0 led by broker 0 and partition 1 by broker 1. While holding, broker 1 leaves
// every produce request unanswered (the records are not written) until released, then writes them:
// the records of partition 1 wait, those of partition 0 are written.
type holdingCluster struct {
	c     *kfake.Cluster
	topic string

	mu      sync.Mutex
	release chan struct{} // closed while not holding
	waiting int           // produce requests held now

	// next is, per partition, the offset after the last record consumed; got the records consumed.
	next map[int32]int64
	got  []conformance.Received
}

func newHoldingCluster(t *testing.T) *holdingCluster {
	t.Helper()
	hc := &holdingCluster{topic: adaptertest.Name("txinbox-held"), release: make(chan struct{}), next: map[int32]int64{}}
	close(hc.release)
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(2, hc.topic))
	if err != nil {
		t.Fatal(err)
	}
	hc.c = c
	t.Cleanup(func() { hc.unhold(); c.Close() })
	for p := range int32(2) {
		if err := c.MoveTopicPartition(hc.topic, p, p); err != nil {
			t.Fatal(err)
		}
	}
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		hc.mu.Lock()
		release := hc.release
		hold := c.CurrentNode() == 1
		select {
		case <-release:
			hold = false
		default:
		}
		if hold {
			hc.waiting++
		}
		hc.mu.Unlock()
		if hold {
			c.SleepControl(func() { <-release })
			hc.mu.Lock()
			hc.waiting--
			hc.mu.Unlock()
		}
		return nil, nil, false
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(hc.topic), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				h := map[string]string{}
				for _, rh := range r.Headers {
					h[rh.Key] = string(rh.Value)
				}
				hc.mu.Lock()
				hc.got = append(hc.got, conformance.Received{ID: h[adapters.IdempotencyKeyHeader], Key: string(r.Key), Payload: r.Value, Headers: h})
				hc.next[r.Partition] = r.Offset + 1
				hc.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return hc
}

func (hc *holdingCluster) hold() {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	hc.release = make(chan struct{})
}

func (hc *holdingCluster) holding() bool {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return hc.waiting > 0
}

func (hc *holdingCluster) unhold() {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	select {
	case <-hc.release:
	default:
		close(hc.release)
	}
}

// received returns the records the cluster stored so far: it waits until the consumer read each
// partition up to its high watermark as of the call.
func (hc *holdingCluster) received(t *testing.T) []conformance.Received {
	t.Helper()
	infos := hc.c.PartitionInfos(hc.topic)
	var got []conformance.Received
	adaptertest.WaitFor(t, "the consumer to read every record stored", func() bool {
		hc.mu.Lock()
		defer hc.mu.Unlock()
		for _, pi := range infos {
			if hc.next[pi.Partition] < pi.HighWatermark {
				return false
			}
		}
		got = slices.Clone(hc.got)
		return true
	})
	return got
}

// TestPublisherChecksTopics: the Publisher is an outbox.TopicChecker that refuses what is not a
// legal Kafka topic name, exactly the topics Publish makes permanent, so that the relay makes their
// events dead without producing them; legal names pass (whether the cluster has them is not asked).
func TestPublisherChecksTopics(t *testing.T) {
	t.Parallel()
	pub := newPublisher(t, PublisherConfig{Options: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}}) // never connects
	var _ outbox.TopicChecker = pub
	for topic, ok := range map[string]bool{
		"orders": true, "orders.created_v2-eu": true, "no-such-topic-yet": true,
		"orders/created": false, "orders created": false, ".": false, "..": false, "é": false,
		string(make([]byte, 250)): false,
	} {
		if err := pub.CheckTopic(topic); (err == nil) != ok {
			t.Errorf("CheckTopic(%q) = %v, want accepted %v", topic, err, ok)
		}
	}
}
