package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txinbox/txinbox/inbox"
)

// LatencyResult is the distribution of receive-to-handler-start latencies.
type LatencyResult struct {
	Rate          int           // target receive rate, messages/s
	PerCall       int           // messages per Receive/ReceiveMany call (and transaction)
	Elapsed       time.Duration // measured phase, from pool start until every message was handled
	Achieved      float64       // receive rate actually achieved, messages/s
	Samples       int           // latencies measured (after the warm-up)
	P50, P95, P99 time.Duration //
	Max           time.Duration //
	// Sorted holds every latency measured, in increasing order (the latency chart's distribution).
	Sorted []time.Duration
	FP     Footprint
}

// LatencySenders is the number of goroutines (and connections) calling Receive in SteadyLatency:
// enough to keep the schedule when a commit takes tens of milliseconds on a busy machine.
const LatencySenders = 32

// clock gives monotonic nanoseconds since its creation.
type clock struct{ base time.Time }

func (c clock) now() int64 { return int64(time.Since(c.base)) }

// SteadyLatency receives messages perCall at a time (Receive when 1, else ReceiveMany: one
// transaction per call, with a default inbox.Client) at rate messages per second for d, from LatencySenders concurrent senders following a fixed schedule, into
// a running pool, and measures the time from Receive returning (the message committed) to its
// handler starting. The first second is a warm-up and not measured.
func (e *Env) SteadyLatency(ctx context.Context, rate, perCall int, d time.Duration, cfg InboxConfig) (LatencyResult, error) {
	res := LatencyResult{Rate: rate, PerCall: perCall}
	s, err := e.newInboxSchema(ctx, "latency", int32(cfg.Concurrency+2+LatencySenders))
	if err != nil {
		return res, err
	}
	defer s.Drop(ctx)
	total := int(d.Seconds() * float64(rate))
	clk := clock{base: time.Now()}
	recvAt := make([]atomic.Int64, total+1)
	handledAt := make([]atomic.Int64, total+1)
	var handled atomic.Int64
	mon := e.StartMonitor(ctx, s.App)
	p, err := s.startPool(ctx, cfg, func(n int) {
		if n >= 1 && n <= total && handledAt[n].CompareAndSwap(0, clk.now()) {
			handled.Add(1)
		}
	})
	if err != nil {
		return res, err
	}
	// Stopped after the measurement: a Stop error changes no result.
	defer func() { _ = stopPool(ctx, p) }()
	jobs := make(chan int, 1024) // the first message of each call
	errc := make(chan error, LatencySenders)
	var wg sync.WaitGroup
	for range LatencySenders {
		wg.Go(func() {
			msgs := make([]inbox.Message, 0, perCall)
			for first := range jobs {
				msgs = msgs[:0]
				for i := first; i < first+perCall && i <= total; i++ {
					msgs = append(msgs, inbox.Message{Consumer: benchConsumer, Key: eventKey(i), Kind: benchKind, Payload: payload(i, 1)})
				}
				var err error
				if perCall == 1 {
					_, err = s.client.Receive(ctx, msgs[0])
				} else {
					_, err = s.client.ReceiveMany(ctx, msgs)
				}
				if err != nil {
					select {
					case errc <- err:
					default:
					}
					continue
				}
				now := clk.now()
				for i := first; i < first+len(msgs); i++ {
					recvAt[i].Store(now)
				}
			}
		})
	}
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 1; i <= total; i += perCall {
		if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
			time.Sleep(w)
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	sent := time.Since(start)
	deadline := time.Now().Add(30 * time.Second)
	for handled.Load() < int64(total) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	res.FP = mon.Stop()
	res.Elapsed = time.Since(start)
	select {
	case err := <-errc:
		return res, err
	default:
	}
	if handled.Load() < int64(total) {
		return res, errors.New("txinbox latency: not every message was handled within 30s")
	}
	res.Achieved = float64(total) / sent.Seconds()
	var lats []time.Duration
	for i := rate + 1; i <= total; i++ { // skip the first second
		lats = append(lats, time.Duration(max(0, handledAt[i].Load()-recvAt[i].Load())))
	}
	slices.Sort(lats)
	res.Samples = len(lats)
	res.P50, res.P95, res.P99 = Percentile(lats, 50), Percentile(lats, 95), Percentile(lats, 99)
	res.Max = lats[len(lats)-1]
	res.Sorted = lats
	return res, nil
}

// IdleResult is the idle wake-up latency: time from Receive returning to the handler starting, for
// a pool that had nothing to do.
type IdleResult struct {
	Config        InboxConfig
	Idle          time.Duration // idle time before each message: Idle to 2×Idle
	PollInterval  time.Duration
	Samples       int
	P50, P95, Max time.Duration
}

// IdleWakeup measures samples idle wake-ups: with the pool idle for idle to 2×idle (make it longer
// than the 1s the pool polls fast after activity, so that its runners are asleep), one message is received
// and the time until its handler starts is measured.
func (e *Env) IdleWakeup(ctx context.Context, samples int, idle time.Duration, cfg InboxConfig) (IdleResult, error) {
	res := IdleResult{Config: cfg, Idle: idle, PollInterval: cfg.PollInterval}
	if res.PollInterval == 0 {
		res.PollInterval = time.Second // worker.Config.PollInterval's default
	}
	s, err := e.newInboxSchema(ctx, "idle", int32(cfg.Concurrency+2))
	if err != nil {
		return res, err
	}
	defer s.Drop(ctx)
	clk := clock{base: time.Now()}
	got := make(chan int64, 1)
	p, err := s.startPool(ctx, cfg, func(int) { got <- clk.now() })
	if err != nil {
		return res, err
	}
	// Stopped after the measurement: a Stop error changes no result.
	defer func() { _ = stopPool(ctx, p) }()
	var lats []time.Duration
	for i := 1; i <= samples; i++ {
		time.Sleep(idle + rand.N(idle)) // random phase against the poll timer
		_, err := s.client.Receive(ctx, inbox.Message{Consumer: benchConsumer, Key: eventKey(i), Kind: benchKind, Payload: payload(i, 1)})
		t0 := clk.now()
		if err != nil {
			return res, err
		}
		select {
		case t := <-got:
			lats = append(lats, time.Duration(max(0, t-t0)))
		case <-time.After(res.PollInterval + 10*time.Second):
			return res, errors.New("txinbox idle wake-up: message not handled")
		}
	}
	slices.Sort(lats)
	res.Samples = len(lats)
	res.P50, res.P95, res.Max = Percentile(lats, 50), Percentile(lats, 95), lats[len(lats)-1]
	return res, nil
}
