package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txinbox/txinbox/adapters"
	"github.com/txinbox/txinbox/adapters/internal/adaptertest"
	"github.com/txinbox/txinbox/adapters/internal/chaintest"
	"github.com/txinbox/txinbox/outbox"
)

func TestMain(m *testing.M) { chaintest.Main(m, chain) }

// chain is Kafka as the link between the chain's two services: an in-process kfake cluster of the
// test process (the services reach it at its address), a topic of three partitions (each key's
// events go to one of them), and a consumer group whose member has a static instance id, so that a
// consumer process started after a SIGKILL takes its predecessor's place at once instead of waiting
// for its session to time out.
var chain = chaintest.Broker{
	Name: "Kafka",
	Setup: func(t *testing.T) chaintest.Params {
		topic := adaptertest.Name("txinbox-chain")
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return chaintest.Params{"seeds": strings.Join(c.ListenAddrs(), ","), chaintest.ParamTopic: topic}
	},
	Publisher: func(_ context.Context, p chaintest.Params) (outbox.Publisher, error) {
		return NewPublisher(PublisherConfig{Options: []kgo.Opt{kgo.SeedBrokers(strings.Split(p["seeds"], ",")...)}})
	},
	Consumer: func(_ context.Context, p chaintest.Params, sink adapters.SinkConfig, batch adapters.BatchConfig) (chaintest.Consumer, error) {
		return New(Config{Options: []kgo.Opt{kgo.SeedBrokers(strings.Split(p["seeds"], ",")...),
			kgo.ConsumerGroup("billing"), kgo.ConsumeTopics(p[chaintest.ParamTopic]), kgo.InstanceID("billing-1"),
			kgo.FetchMaxWait(100 * time.Millisecond)}, Sink: sink, BatchConfig: batch})
	},
}

// TestChain runs the chain through Kafka (chaintest.Run): the relay and the consumer process are
// SIGKILLed and restarted mid-stream, and every event must be applied exactly once, each key in order.
func TestChain(t *testing.T) {
	t.Parallel()
	chaintest.Run(t, chain)
}
