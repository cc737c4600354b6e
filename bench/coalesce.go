package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
)

// CoalesceSenders is the number of goroutines calling Receive in the coalescing benchmarks (and the
// pool's connections, so that uncoalesced calls never wait for a connection).
const CoalesceSenders = 32

// CoalesceResult is one run of single-message Receive calls from CoalesceSenders goroutines.
type CoalesceResult struct {
	Config   CoalesceConfig
	Calls    int           // Receive calls, all goroutines together, each one new message
	Rate     float64       // calls (messages) per second; for a paced run, the rate achieved
	Target   int           // paced runs: the schedule's rate, calls/s; 0 for a closed loop
	Trips    float64       // database round trips per message
	Samples  int           // latencies measured (paced: after the first second)
	P50, P99 time.Duration // latency of a call: closed loop, its duration; paced, from its scheduled start to its return
	Max      time.Duration
	FP       Footprint
}

// CoalesceConfig is the coalescing of a run's inbox.Client.
type CoalesceConfig struct {
	Off  bool          // CoalesceMax 1
	Max  int           // inbox.Config.CoalesceMax; 0: the default
	Wait time.Duration // inbox.Config.CoalesceWait; 0: the default
}

func (c CoalesceConfig) inbox() inbox.Config {
	if c.Off {
		return inbox.Config{CoalesceMax: 1}
	}
	return inbox.Config{CoalesceMax: c.Max, CoalesceWait: c.Wait}
}

func (c CoalesceConfig) String() string {
	if c.Off {
		return "off (CoalesceMax 1)"
	}
	cfg, what := c.inbox(), "defaults"
	if cfg.CoalesceMax != 0 || cfg.CoalesceWait != 0 {
		what = "set"
	}
	if cfg.CoalesceMax == 0 {
		cfg.CoalesceMax = 64 // inbox.Config.CoalesceMax's default
	}
	if cfg.CoalesceWait == 0 {
		cfg.CoalesceWait = 500 * time.Microsecond // inbox.Config.CoalesceWait's default
	}
	return fmt.Sprintf("on (%s: CoalesceMax %d, CoalesceWait %s)", what, cfg.CoalesceMax, cfg.CoalesceWait)
}

// CoalesceLoop has CoalesceSenders goroutines call Receive perSender times each, back to back, one
// new message a call, with the coalescing cfg, and reports the rate and the calls' durations.
func (e *Env) CoalesceLoop(ctx context.Context, cfg CoalesceConfig, perSender int) (CoalesceResult, error) {
	res := CoalesceResult{Config: cfg, Calls: CoalesceSenders * perSender}
	return res, e.coalesceRun(ctx, &res, func(cl *inbox.Client, clk clock, lats []time.Duration) (time.Duration, error) {
		errc := make(chan error, CoalesceSenders)
		var wg sync.WaitGroup
		start := time.Now()
		for s := range CoalesceSenders {
			wg.Go(func() {
				for i := range perSender {
					n := s*perSender + i + 1
					t0 := clk.now()
					if _, err := cl.Receive(ctx, inbox.Message{Consumer: benchConsumer, Key: eventKey(n), Kind: benchKind, Payload: payload(n, 1)}); err != nil {
						errc <- err
						return
					}
					lats[n-1] = time.Duration(clk.now() - t0)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(errc)
		return elapsed, <-errc
	})
}

// CoalescePaced calls Receive at rate calls per second for d, on a fixed schedule, from
// CoalesceSenders goroutines, one new message a call, with the coalescing cfg. A call's latency
// runs from its scheduled start (not from when a sender was free to make it) to its return; the
// first second is not measured.
func (e *Env) CoalescePaced(ctx context.Context, cfg CoalesceConfig, rate int, d time.Duration) (CoalesceResult, error) {
	total := int(d.Seconds() * float64(rate))
	res := CoalesceResult{Config: cfg, Calls: total, Target: rate}
	return res, e.coalesceRun(ctx, &res, func(cl *inbox.Client, clk clock, lats []time.Duration) (time.Duration, error) {
		type job struct {
			n  int
			at int64 // scheduled start, clk time
		}
		jobs := make(chan job, total)
		errc := make(chan error, CoalesceSenders)
		var wg sync.WaitGroup
		for range CoalesceSenders {
			wg.Go(func() {
				for j := range jobs {
					if _, err := cl.Receive(ctx, inbox.Message{Consumer: benchConsumer, Key: eventKey(j.n), Kind: benchKind, Payload: payload(j.n, 1)}); err != nil {
						errc <- err
						return
					}
					lats[j.n-1] = time.Duration(clk.now() - j.at)
				}
			})
		}
		interval := time.Second / time.Duration(rate)
		start := time.Now()
		base := clk.now()
		for i := 1; i <= total; i++ {
			at := time.Duration(i-1) * interval
			if w := time.Until(start.Add(at)); w > 0 {
				time.Sleep(w)
			}
			jobs <- job{n: i, at: base + int64(at)}
		}
		close(jobs)
		wg.Wait()
		elapsed := time.Since(start)
		close(errc)
		if err := <-errc; err != nil {
			return elapsed, err
		}
		// The first second is a warm-up.
		copy(lats, lats[min(rate, len(lats)):])
		return elapsed, nil
	})
}

// coalesceRun runs one coalescing phase in a fresh schema: load calls Receive res.Calls times
// through cl, filling lats (one latency per call), and returns the time it took.
func (e *Env) coalesceRun(ctx context.Context, res *CoalesceResult,
	load func(cl *inbox.Client, clk clock, lats []time.Duration) (time.Duration, error)) error {
	name := "coalesce_on"
	if res.Config.Off {
		name = "coalesce_off"
	}
	s, err := e.newInboxSchema(ctx, name, CoalesceSenders+2)
	if err != nil {
		return err
	}
	defer s.Drop(ctx)
	var trips atomic.Int64
	cl, err := inbox.New(txinbox.Store{DB: countingDB{s.Pool, &trips}, Schema: s.Name}, res.Config.inbox())
	if err != nil {
		return err
	}
	// Open the pool's connections and prepare the statement on each, outside the clock.
	var wg sync.WaitGroup
	for i := range CoalesceSenders {
		wg.Go(func() {
			off, _ := inbox.New(txinbox.Store{DB: s.Pool, Schema: s.Name}, inbox.Config{CoalesceMax: 1})
			_, _ = off.Receive(ctx, inbox.Message{Consumer: benchConsumer, Key: fmt.Sprintf("warm-%d", i), Kind: benchKind, Payload: []byte(`{}`)})
		})
	}
	wg.Wait()
	if err := s.Settle(ctx); err != nil {
		return err
	}
	trips.Store(0)
	lats := make([]time.Duration, res.Calls)
	clk := clock{base: time.Now()}
	mon := e.StartMonitor(ctx, s.App)
	elapsed, err := load(cl, clk, lats)
	res.FP = mon.Stop()
	if err != nil {
		return err
	}
	res.Rate = float64(res.Calls) / elapsed.Seconds()
	res.Trips = float64(trips.Load()) / float64(res.Calls)
	if res.Target > 0 {
		lats = lats[:max(0, res.Calls-res.Target)]
	}
	if len(lats) == 0 {
		return errors.New("txbench coalesce: no latency measured")
	}
	slices.Sort(lats)
	res.Samples = len(lats)
	res.P50, res.P99, res.Max = Percentile(lats, 50), Percentile(lats, 99), lats[len(lats)-1]
	stored, err := s.rowCount(ctx)
	if err != nil {
		return err
	}
	if want := int64(res.Calls + CoalesceSenders); stored != want {
		return fmt.Errorf("txbench coalesce: %d rows stored, want %d", stored, want)
	}
	return nil
}
