package metrics_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txinbox/txinbox/metrics"
	"github.com/txinbox/txinbox/worker"
)

// One Metrics value observes receiving (inbox.Config.Observer) and handling (worker.Config.Observer);
// here a pool's event is fed to it by hand and the registry gathered, as a scrape would.
func Example() {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(metrics.Config{Registerer: reg})
	if err != nil {
		panic(err)
	}
	// client, _ := inbox.New(store, inbox.Config{Observer: m}) // store: the txinbox.Store of every part
	// pool, _ := worker.New(store, worker.Config{Consumer: "ledger", Handlers: hs, Observer: m})
	// qc, _ := metrics.NewQueueCollector(store, metrics.QueueConfig{Consumers: []string{"ledger"}})
	// reg.MustRegister(qc)
	// http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m.Handled(worker.HandleEvent{Consumer: "ledger", Kind: "credit", Outcome: "dead", Reason: "permanent",
		Attempt: 1, Duration: 3 * time.Millisecond})

	families, _ := reg.Gather()
	for _, f := range families {
		for _, s := range f.GetMetric() {
			if c := s.GetCounter(); c != nil && c.GetValue() > 0 {
				fmt.Println(f.GetName(), labels(s.GetLabel()), c.GetValue())
			}
		}
	}
	// Output:
	// txinbox_dead_letters_total consumer=ledger kind=credit reason=permanent 1
	// txinbox_processed_total consumer=ledger kind=credit outcome=dead 1
}

func labels[L interface {
	GetName() string
	GetValue() string
}](ls []L) string {
	out := ""
	for i, l := range ls {
		if i > 0 {
			out += " "
		}
		out += l.GetName() + "=" + l.GetValue()
	}
	return out
}
