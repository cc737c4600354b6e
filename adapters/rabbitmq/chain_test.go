package rabbitmq

import (
	"context"
	"testing"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/chaintest"
	"github.com/txinbox/txinbox/outbox"
)

func TestMain(m *testing.M) { chaintest.Main(m, chain) }

// chain is RabbitMQ as the link between the chain's two services: a queue of the test's own, its
// name the topic (the default exchange routes to it).
var chain = chaintest.Broker{
	Name: "RabbitMQ",
	Setup: func(t *testing.T) chaintest.Params {
		url := brokerURL(t)
		q, _ := queue(t, url)
		return chaintest.Params{"url": url, chaintest.ParamTopic: q}
	},
	Publisher: func(_ context.Context, p chaintest.Params) (outbox.Publisher, error) {
		return NewPublisher(PublisherConfig{URL: p["url"]})
	},
	Consumer: func(_ context.Context, p chaintest.Params, sink adapters.SinkConfig, batch adapters.BatchConfig) (chaintest.Consumer, error) {
		return New(Config{URL: p["url"], Queue: p[chaintest.ParamTopic], Sink: sink, BatchConfig: batch})
	},
}

// TestChain runs the chain through RabbitMQ (chaintest.Run): the relay and the consumer process are
// SIGKILLed and restarted mid-stream, and every event must be applied exactly once, each key in order.
func TestChain(t *testing.T) {
	t.Parallel()
	chaintest.Run(t, chain)
}
