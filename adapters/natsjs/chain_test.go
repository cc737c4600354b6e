package natsjs

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/chaintest"
	"github.com/txinbox/txinbox/outbox"
)

func TestMain(m *testing.M) { chaintest.Main(m, chain) }

// chain is JetStream as the link between the chain's two services: a memory stream of the test's
// own, its subject the topic, and a durable pull consumer with AckWait chaintest.AckWait.
var chain = chaintest.Broker{
	Name: "NATS JetStream",
	Setup: func(t *testing.T) chaintest.Params {
		f := newFixture(t, chaintest.AckWait)
		return chaintest.Params{"url": f.url, "stream": f.stream, "durable": f.durable, chaintest.ParamTopic: f.subject}
	},
	Publisher: func(_ context.Context, p chaintest.Params) (outbox.Publisher, error) {
		nc, err := nats.Connect(p["url"])
		if err != nil {
			return nil, err
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(DefaultAckTimeout))
		if err != nil {
			return nil, err
		}
		return NewPublisher(PublisherConfig{JetStream: js})
	},
	Consumer: func(ctx context.Context, p chaintest.Params, sink adapters.SinkConfig, batch adapters.BatchConfig) (chaintest.Consumer, error) {
		nc, err := nats.Connect(p["url"])
		if err != nil {
			return nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, err
		}
		cons, err := js.Consumer(ctx, p["stream"], p["durable"])
		if err != nil {
			return nil, err
		}
		return New(Config{Consumer: cons, Sink: sink, BatchConfig: batch})
	},
}

// TestChain runs the chain through JetStream (chaintest.Run): the relay and the consumer process are
// SIGKILLed and restarted mid-stream, and every event must be applied exactly once, each key in order.
func TestChain(t *testing.T) {
	t.Parallel()
	chaintest.Run(t, chain)
}
