package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/txinbox/txinbox/bench"
)

// outboxRow is one system over one broker in the outbox drains.
type outboxRow struct {
	sys    bench.OutboxSystem
	broker bench.OutboxBroker
	rates  []float64
	cpu    []cpuPerMsg
	last   bench.OutboxDrainResult
	// publishShare is, per run of the relay, the share of the drain its Publisher calls took (added
	// over its runners: up to Concurrency × 100%).
	publishShare []float64
	// partial describes the runs that did not finish in time (their rate is of what they did).
	partial []string
}

var (
	outboxSystems = []bench.OutboxSystem{bench.OutboxRelay, bench.OutboxWatermill, bench.OutboxRaw}
	outboxBrokers = []bench.OutboxBroker{bench.BrokerNATS, bench.BrokerRabbitMQ}
)

// outboxEvents is the backlog of each outbox drain.
func (o *options) outboxEvents() int {
	switch {
	case o.outboxN > 0:
		return o.outboxN
	case o.quick:
		return 3_000
	default:
		return 20_000
	}
}

// runOutbox drains the same backlog with every system over every broker, the runs interleaved, then
// measures the commit-to-ack latency of each at 1,000 events/s.
func (r *report) runOutbox(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	o := r.opts
	n := o.outboxEvents()
	var rows []*outboxRow
	for _, b := range outboxBrokers {
		for _, s := range outboxSystems {
			rows = append(rows, &outboxRow{sys: s, broker: b})
		}
	}
	for run := 1; run <= o.runs; run++ {
		for _, row := range rows {
			progress("outbox drain %d/%d: %s → %s, %d events", run, o.runs, row.sys, row.broker, n)
			res, err := env.OutboxDrain(ctx, row.sys, row.broker, n, o.outbox)
			if err != nil {
				return fmt.Errorf("outbox drain %s → %s: %w", row.sys, row.broker, err)
			}
			progress("  %.0f events/s (%d of %d acknowledged in %s, %d stored, %d acknowledged twice), CPU %.0f µs/event client + %.0f server",
				res.Rate, res.Acked, n, res.Elapsed.Round(time.Millisecond), res.Stored, res.Repeats,
				res.FP.ClientCPU*1e6/float64(max(res.Acked, 1)), res.FP.ServerCPU*1e6/float64(max(res.Acked, 1)))
			if res.Partial {
				row.partial = append(row.partial, fmt.Sprintf("%d of %d in %s", res.Acked, n, res.Elapsed.Round(time.Second)))
			}
			row.rates = append(row.rates, res.Rate)
			row.cpu = append(row.cpu, perMsg(res.FP, max(res.Acked, 1)))
			row.last = res
			if res.PublishCalls > 0 {
				row.publishShare = append(row.publishShare, res.Publish.Seconds()/res.Elapsed.Seconds())
			}
		}
	}
	r.outbox = rows
	d := 30 * time.Second
	if o.quick {
		d = 4 * time.Second
	}
	r.outboxFor = d
	for _, b := range outboxBrokers {
		for _, s := range outboxSystems {
			progress("outbox latency: %s → %s, 1000 events/s for %s", s, b, d)
			res, err := env.OutboxLatency(ctx, s, b, 1000, d, o.outbox)
			if err != nil {
				return fmt.Errorf("outbox latency %s → %s: %w", s, b, err)
			}
			progress("  p50 %s p99 %s max %s (achieved %.0f/s; %d of %d acknowledged)", res.P50, res.P99, res.Max, res.Achieved, res.Acked, res.Total)
			r.outboxLat = append(r.outboxLat, res)
		}
	}
	return nil
}

func (r *report) outboxMD(p func(string, ...any)) {
	o := r.opts
	n := o.outboxEvents()
	r.provenance(p, "outbox", fmt.Sprintf("backlog of %s events per drain, %s; latency at 1,000 events/s for %s each",
		bench.Thousands(float64(n)), runsMD(o.runs), r.outboxFor))
	p("The same events (a 20-byte JSON payload, no key) are written in PostgreSQL transactions and forwarded to")
	p("NATS JetStream (a file-backed stream of the run's own, each message's Nats-Msg-Id the event id) and to")
	p("RabbitMQ (a durable queue of the run's own, persistent messages, publisher confirms) by:\n")
	for _, s := range outboxSystems {
		p("- **%s**: %s.", s, o.outbox.Describe(s))
	}
	p("")
	p("Throughput: a backlog written first (1,000 events per transaction), then the system started; the time")
	p("until the broker acknowledged every event and the database recorded each as sent. The broker's stream")
	p("or queue is checked to hold every event. Latency: events written one per transaction by %d goroutines", bench.LatencySenders)
	p("on a fixed schedule of 1,000 per second into the running system, from each commit to the broker's")
	p("acknowledgment of that event as the publishing code sees it (the relay's and the raw loop's: the")
	p("batch's, when the last of its acks came; Watermill's: the message's); the first second is not measured.\n")
	p("| System | Broker | Runs (events/s) | Median events/s | vs Watermill | vs raw loop | CPU µs/event client + server |")
	p("|---|---|---|---:|---:|---:|---:|")
	med := map[string]float64{}
	key := func(s bench.OutboxSystem, b bench.OutboxBroker) string { return string(s) + "|" + string(b) }
	for _, row := range r.outbox {
		med[key(row.sys, row.broker)] = bench.Median(row.rates)
	}
	for _, row := range r.outbox {
		m := med[key(row.sys, row.broker)]
		p("| %s | %s | %s | **%.0f** | %.2f× | %.0f%% | %s |", row.sys, row.broker, ratesMD(row.rates), m,
			m/med[key(bench.OutboxWatermill, row.broker)], 100*m/med[key(bench.OutboxRaw, row.broker)], medianCPU(row.cpu))
	}
	p("")
	for _, row := range r.outbox {
		if len(row.partial) > 0 {
			p("- %s → %s did not drain the backlog within the time limit (a minute plus a millisecond per event; 20 s plus that in quick mode): its rate is that of the events acknowledged (%s).",
				row.sys, row.broker, strings.Join(row.partial, "; "))
		}
	}
	for _, b := range outboxBrokers {
		relay := med[key(bench.OutboxRelay, b)]
		p("- %s: relay/Watermill **%.2f×** (target ≥ 3×), relay/raw loop **%.0f%%** (target ≥ 60%%).", b,
			relay/med[key(bench.OutboxWatermill, b)], 100*relay/med[key(bench.OutboxRaw, b)])
	}
	for _, row := range r.outbox {
		if row.sys == bench.OutboxRelay && len(row.publishShare) > 0 {
			p("- Relay → %s: its Publisher calls took %.0f%% of the drain's time, added over its %d runners (median of runs); the rest of each runner's time is its claim and record statements and waits.",
				row.broker, 100*bench.Median(row.publishShare), o.outbox.WithDefaults().Workers)
		}
	}
	p("\n| System | Broker | Achieved events/s | p50 | p95 | p99 | max | p99 < 50 ms | CPU µs/event client + server |")
	p("|---|---|---:|---:|---:|---:|---:|---|---:|")
	var behind []string
	for _, l := range r.outboxLat {
		if l.Behind {
			p("| %s | %s | %.0f | fell behind | | | | no | |", l.System, l.Broker, l.Achieved)
			of := "none of them after the first second"
			if l.Samples > 0 {
				of = "p50 " + ms(l.P50) + " of those after the first second"
			}
			behind = append(behind, fmt.Sprintf("%s → %s: %d of %d events acknowledged by the end of the wait after the last commit (%s)",
				l.System, l.Broker, l.Acked, l.Total, of))
			continue
		}
		ok := "yes"
		if l.P99 >= 50*time.Millisecond {
			ok = "no"
		}
		p("| %s | %s | %.0f | %s | %s | **%s** | %s | %s | %.0f + %.0f |", l.System, l.Broker, l.Achieved, ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max), ok,
			1e6*l.FP.ClientCPU/float64(l.Total), 1e6*l.FP.ServerCPU/float64(l.Total))
	}
	p("")
	p("CPU per event counts everything of the phase: the 32 writers and their transactions (the same for every system) as well as the system forwarding the events.")
	p("")
	for _, b := range behind {
		p("- Fell behind the offered 1,000 events/s: %s.", b)
	}
	if len(behind) > 0 {
		p("")
	}
	chart := bench.BarChart{
		Title: "Outbox relay: events per second forwarded to the broker, by system",
		Subtitle: fmt.Sprintf("Backlog of %s events drained (acknowledged by the broker and recorded as sent); bar: %s, dots: each run. %s, %s.",
			bench.Thousands(float64(n)), runsMD(o.runs), r.started.UTC().Format("2006-01-02"), r.shortMachine()),
		Unit: "events per second",
	}
	for _, row := range r.outbox {
		chart.Bars = append(chart.Bars, bench.Bar{Label: fmt.Sprintf("%s → %s", row.sys, row.broker), Group: string(row.sys),
			Value: med[key(row.sys, row.broker)], Runs: row.rates})
	}
	r.chart(p, "outbox", "Outbox relay: events per second by system and broker (bar: median; dots: each run)", chart.SVG())
}

// traceOutbox drains a backlog with the relay over each broker with every statement traced, and
// prints where the time goes: per statement, and the relay's Publisher calls.
func traceOutbox(ctx context.Context, o options, env *bench.Env) error {
	n := o.outboxEvents()
	for _, b := range outboxBrokers {
		st := bench.NewStatementStats()
		env.Tracer = st
		res, err := env.OutboxDrain(ctx, bench.OutboxRelay, b, n, o.outbox)
		env.Tracer = nil
		if err != nil {
			return err
		}
		fmt.Printf("txinbox relay → %s, drain of %d events (%s): %.0f events/s in %s; Publisher: %d calls, %s in all (%.0f µs/event, %.0f%% of the drain over %d runners)\n\n",
			b, n, o.outbox.Describe(bench.OutboxRelay), res.Rate, res.Elapsed.Round(time.Millisecond), res.PublishCalls, res.Publish.Round(time.Millisecond),
			float64(res.Publish.Microseconds())/float64(n), 100*res.Publish.Seconds()/res.Elapsed.Seconds(), o.outbox.WithDefaults().Workers)
		st.Write(os.Stdout, n)
		fmt.Println()
	}
	return nil
}

// outboxAB drains the same backlog with the relay claiming in one pipeline (its own way on a pool)
// and in an explicit transaction (bench.OutboxConfig.ClaimInTx), alternating, o.outboxAB times
// each to each broker, and prints the runs and their medians.
func outboxAB(ctx context.Context, o options, env *bench.Env, progress func(string, ...any)) error {
	n := o.outboxEvents()
	type variant struct {
		name  string
		cfg   bench.OutboxConfig
		rates map[bench.OutboxBroker][]float64
	}
	inTx := o.outbox
	inTx.ClaimInTx = true
	vs := []*variant{{name: "claim pipelined", cfg: o.outbox}, {name: "claim in an explicit transaction", cfg: inTx}}
	for _, v := range vs {
		v.rates = map[bench.OutboxBroker][]float64{}
	}
	for run := 1; run <= o.outboxAB; run++ {
		for _, b := range outboxBrokers {
			for _, v := range vs {
				progress("relay → %s, %s, run %d/%d: %d events", b, v.name, run, o.outboxAB, n)
				res, err := env.OutboxDrain(ctx, bench.OutboxRelay, b, n, v.cfg)
				if err != nil {
					return err
				}
				progress("  %.0f events/s", res.Rate)
				v.rates[b] = append(v.rates[b], res.Rate)
			}
		}
	}
	fmt.Printf("Relay drains of %d events (%s), alternating (`%s`):\n\n", n, o.outbox.Describe(bench.OutboxRelay), command())
	fmt.Println("| Broker | Claim | Runs (events/s) | Median events/s |")
	fmt.Println("|---|---|---|---:|")
	for _, b := range outboxBrokers {
		for _, v := range vs {
			fmt.Printf("| %s | %s | %s | **%.0f** |\n", b, v.name, ratesMD(v.rates[b]), bench.Median(v.rates[b]))
		}
	}
	return nil
}
