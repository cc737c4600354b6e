package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/bench"
)

type ingestRow struct {
	mode    bench.IngestMode
	clients int
	rates   []float64
	cpu     []cpuPerMsg
	last    bench.IngestResult
	fp      bench.Footprint
}

type latencyRow struct {
	cfg bench.InboxConfig
	res bench.LatencyResult
}

func wakeMode(c bench.InboxConfig) string {
	if c.DisableListen {
		return "polling only (DisableListen)"
	}
	return "LISTEN/NOTIFY (default)"
}

type seenRow struct {
	kind     bench.SeenCacheKind
	rates    []float64
	cpu      []cpuPerMsg
	redisCPU []float64 // µs per message
	last     bench.SeenResult
}

type coalesceRow struct {
	cfg   bench.CoalesceConfig
	rates []float64
	cpu   []cpuPerMsg
	last  bench.CoalesceResult
}

type tuneRow struct {
	system, config string
	rate           float64
	fp             bench.Footprint
	cpu            cpuPerMsg
}

// medianCPU returns the median client and server CPU per message (each median on its own).
func medianCPU(cs []cpuPerMsg) cpuPerMsg {
	var a, b []float64
	for _, c := range cs {
		a, b = append(a, c.client), append(b, c.server)
	}
	return cpuPerMsg{client: bench.Median(a), server: bench.Median(b)}
}

func (c cpuPerMsg) String() string {
	return fmt.Sprintf("%.0f + %.0f = %.0f", c.client, c.server, c.client+c.server)
}

type report struct {
	opts                  options
	machine               bench.Machine
	command               string
	started               time.Time
	elapsed               time.Duration
	loadBefore, loadAfter bench.Load
	quietWaited           time.Duration
	noisy                 []string

	drain   []*drainSystem
	ingest  []*ingestRow
	latency []latencyRow
	idle    []bench.IdleResult
	growth  []bench.GrowthPoint
	sustain *bench.SustainResult
	tune    []tuneRow
	seen    []*seenRow

	coalesce      []*coalesceRow
	coalescePaced []bench.CoalesceResult

	recovery []*recoveryRow
}

func (r *report) markdown(section string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	mode := "full"
	if r.opts.quick {
		mode = "quick"
	}
	switch section {
	case "main":
		p("## Main run (%s mode)\n", mode)
	case "sustain":
		p("## Sustained drain (%s)\n", r.opts.sustain)
	case "tune":
		p("## Tuning sweep (%d messages per drain, one run each)\n", r.opts.n)
	case "seen":
		p("## Seen-key cache (%s mode)\n", mode)
	case "coalesce":
		p("## Coalesced receives (%s mode)\n", mode)
	case "recovery":
		p("## Recovery after a crash (%s mode)\n", mode)
	}
	p("Run %s, took %s. Command:\n", r.started.UTC().Format("2006-01-02 15:04 UTC"), r.elapsed.Round(time.Second))
	p("```sh\n%s\n```\n", r.command)
	r.machineMD(p)
	switch section {
	case "main":
		r.mainMD(p)
	case "sustain":
		r.sustainMD(p)
	case "tune":
		r.tuneMD(p)
	case "seen":
		r.seenMD(p)
	case "coalesce":
		r.coalesceMD(p)
	case "recovery":
		r.recoveryMD(p)
	}
	return b.String()
}

func (r *report) machineMD(p func(string, ...any)) {
	m := r.machine
	p("Machine: %d cores (%s), %.1f GiB memory, Linux %s, %s. PostgreSQL on the same machine, over TCP to 127.0.0.1: %s.\n",
		m.Cores, m.CPU, m.MemoryGB, m.Kernel, m.Go, m.Postgres)
	var kv []string
	for _, k := range m.Order {
		if v, ok := m.Settings[k]; ok {
			kv = append(kv, fmt.Sprintf("%s=%s", k, v))
		}
	}
	p("Server settings: %s.\n", strings.Join(kv, ", "))
	p("Noise: before the run %s; after it %s. Other engineers' tests may have run at the same time: before each measured phase the run waited until the CPU was less than %.0f%% busy over half a second (%s waited in all).",
		r.loadBefore, r.loadAfter, 100*bench.QuietBusy, r.quietWaited.Round(time.Second))
	if len(r.noisy) > 0 {
		p("Noisy phases (started busy with the wait budget spent, or other processes used more than %.0f%% of the machine's CPU during them, the server's background processes included): %s.", 100*bench.OtherLoadNoted, strings.Join(r.noisy, ", "))
	} else {
		p("Every phase started quiet and stayed quiet.")
	}
	p("")
}

func ratesMD(rs []float64) string {
	if len(rs) == 1 {
		return fmt.Sprintf("%.0f", rs[0])
	}
	parts := make([]string, len(rs))
	for i, x := range rs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

func fpMD(fp bench.Footprint) string {
	rss := fmt.Sprintf("%.0f MiB", fp.PeakRSSMB)
	if !fp.RSSExact {
		rss += " (process peak)"
	}
	return fmt.Sprintf("%s | %d", rss, fp.MaxConns)
}

func (r *report) mainMD(p func(string, ...any)) {
	o := r.opts
	if len(r.drain) > 0 {
		p("### 1. Drain: %d pending messages, the handler inserting one ledger row\n", o.n)
		p("Messages/s from pool start until the last message's transaction committed (median of %d run(s); every run in a fresh schema, after VACUUM ANALYZE and CHECKPOINT). The ledger is checked to hold exactly one row per message. CPU is the CPU time per message, in µs, of this process (client) and of the server backends serving the run's connections (server; WAL writer, checkpointer and other background processes not included): on a 2-core machine a CPU-bound drain cannot beat 2 s / (client + server CPU per message), and CPU per message is much less sensitive to other load than the rate.\n", o.runs)
		p("| System | Guarantee | Configuration | Runs (msg/s) | Median msg/s | txinbox ÷ this | CPU µs/msg client + server | Peak RSS | Max conns |")
		p("|---|---|---|---|---:|---:|---:|---|---:|")
		ref := bench.Median(r.drain[0].rates)
		for _, s := range r.drain {
			m := bench.Median(s.rates)
			p("| %s | %s | %s | %s | **%.0f** | %.2f× | %s | %s |", s.name, s.guarantee, s.config, ratesMD(s.rates), m, ref/m, medianCPU(s.cpu), fpMD(s.fp))
		}
		p("")
		rates := map[string]float64{}
		for _, s := range r.drain {
			rates[s.name] = bench.Median(s.rates)
		}
		if b, raw, noop := rates["txinbox, batch handler"], rates["raw SQL, 100 per tx"], rates["River, no-op"]; b > 0 && raw > 0 && noop > 0 {
			p("Batch handler (issue 13 targets: ≥ 60%% of the raw 100-per-transaction loop, ≥ 1.5× River's no-op drain): **%.0f%%** of raw SQL 100 per tx, **%.2f×** River no-op, %.2f× the single-handler drain.\n",
				100*b/raw, b/noop, b/ref)
		}
	}
	if len(r.ingest) > 0 {
		p("### 2. Ingest: batches of 1,000 messages, 30%% duplicates of stored keys\n")
		p("Offered rows/s (duplicates included), one batch per statement or transaction, median of %d run(s). Payloads are ~120-byte JSON documents; the duplicates are true redeliveries (same payload).\n", o.runs)
		p("| Method | Clients | Runs (rows/s) | Median rows/s | vs COPY (new rows only) | CPU µs/row client + server | Peak RSS | Max conns |")
		p("|---|---:|---|---:|---:|---:|---|---:|")
		ref := map[int]float64{}
		for _, row := range r.ingest {
			if row.mode == bench.IngestCopyNew {
				ref[row.clients] = bench.Median(row.rates)
			}
		}
		for _, row := range r.ingest {
			m := bench.Median(row.rates)
			p("| %s | %d | %s | **%.0f** | %.0f%% | %s | %s |", row.mode, row.clients, ratesMD(row.rates), m, 100*m/ref[row.clients], medianCPU(row.cpu), fpMD(row.fp))
		}
		p("")
	}
	if len(r.latency) > 0 || len(r.idle) > 0 {
		p("### 3. Latency (txinbox, %s)\n", o.inbox)
		p("From `Receive` returning (the message committed) to its handler starting. Messages are received one per `Receive` call (one transaction each; and, in one row, 10 per `ReceiveMany` call every 10 ms), default `inbox.Client`: a NOTIFY at most every %s per consumer, on a fixed schedule by %d senders; the first second is a warm-up. With LISTEN/NOTIFY (the default) a notification wakes the pool; \"polling only\" sets `DisableListen`, so the pool polls every HotPollInterval (10 ms) for HotWindow (1 s) after any activity and every PollInterval (1 s) when cold.\n", txinbox.DefaultNotifyInterval, bench.LatencySenders)
		if len(r.latency) > 0 {
			p("CPU is the CPU time of this process and of the run's server backends (receiving and handling) as a share of the machine's %d cores over the run.\n", r.machine.Cores)
			p("WAL flushes: the server's WAL syncs per second during the phase, and how many commits each carried (group commit). With one commit per message, the disk's fsync time sets the pace: when it slows down (the machine's storage is shared), flushes get fewer and fuller, every commit waits longer, and the senders fall behind their schedule.\n")
			p("| Receive rate | Messages per call | Wake-up | Achieved rate | Samples | p50 | p95 | p99 | max | CPU | WAL flushes/s (commits each) | Peak RSS | Max conns |")
			p("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
			for _, l := range r.latency {
				x := l.res
				cpu := 100 * (x.FP.ClientCPU + x.FP.ServerCPU) / x.Elapsed.Seconds() / float64(r.machine.Cores)
				p("| %d/s | %d | %s | %.0f/s | %d | %s | %s | %s | %s | %.0f%% | %s | %s |", x.Rate, x.PerCall, wakeMode(l.cfg), x.Achieved, x.Samples,
					ms(x.P50), ms(x.P95), ms(x.P99), ms(x.Max), cpu, walMD(x.FP, x.Elapsed), fpMD(x.FP))
			}
			p("")
		}
		if len(r.idle) > 0 {
			p("Idle wake-up: the pool idle (no message for 1.2 s to 2.4 s, longer than its HotWindow, so its runners sleep), one message received, time until its handler starts.\n")
			p("| Wake-up | PollInterval | Samples | p50 | p95 | max |")
			p("|---|---|---:|---:|---:|---:|")
			for _, x := range r.idle {
				p("| %s | %s | %d | %s | %s | %s |", wakeMode(x.Config), x.PollInterval, x.Samples, ms(x.P50), ms(x.P95), ms(x.Max))
			}
			p("")
		}
	}
	if len(r.growth) > 0 {
		p("### 4. Growth: drain of %d messages with completed messages retained in the inbox table\n", o.n)
		p("Retained rows are inserted with `INSERT ... SELECT generate_series` in state completed (plus the messages drained at the earlier levels), then the table is vacuumed and analyzed. One run per level, one schema for all levels.\n")
		p("| Retained completed rows | inbox table + indexes before the drain | Drain msg/s | vs empty | Peak RSS | Max conns |")
		p("|---:|---:|---:|---:|---|---:|")
		for _, g := range r.growth {
			p("| %d | %.0f MiB | **%.0f** | %.0f%% | %s |", g.Retained, g.InboxMB, g.Rate, 100*g.Rate/r.growth[0].Rate, fpMD(g.FP))
		}
		p("")
	}
	p("### 5. Footprint\n")
	p("Peak RSS is this process's VmHWM during the measured phase only (reset through /proc/self/clear_refs after a GC and FreeOSMemory before each phase; it includes the Go runtime and the benchmark's own bookkeeping). Max conns counts the phase's server connections in pg_stat_activity, sampled every 50 ms. Both are in the tables above; the txinbox figures are:\n")
	var rss float64
	var conns int
	if len(r.drain) > 0 {
		rss, conns = r.drain[0].fp.PeakRSSMB, r.drain[0].fp.MaxConns
	}
	for _, l := range r.latency {
		rss, conns = max(rss, l.res.FP.PeakRSSMB), max(conns, l.res.FP.MaxConns)
	}
	for _, g := range r.growth {
		rss, conns = max(rss, g.FP.PeakRSSMB), max(conns, g.FP.MaxConns)
	}
	p("- txinbox worker pool: peak RSS %.0f MiB, at most %d server connections (pool of Concurrency+2; the latency runs add %d sender connections).\n", rss, conns, bench.LatencySenders)
	r.targetsMD(p)
}

func (r *report) targetsMD(p func(string, ...any)) {
	type target struct{ name, want, got string }
	var ts []target
	rate := func(name string) float64 {
		for _, s := range r.drain {
			if s.name == name {
				return bench.Median(s.rates)
			}
		}
		return 0
	}
	if len(r.drain) > 0 {
		tx := rate("txinbox")
		ts = append(ts,
			target{"drain vs River with the same guarantee", "≥ 2×", fmt.Sprintf("%.2f×", tx/rate("River, JobCompleteTx"))},
			target{"drain vs River no-op", "≥ 1.5×", fmt.Sprintf("%.2f×", tx/rate("River, no-op"))},
			target{"drain vs raw SQL 100 per tx", "≥ 60%", fmt.Sprintf("%.0f%%", 100*tx/rate("raw SQL, 100 per tx"))},
		)
	}
	for _, row := range r.ingest {
		if row.mode == bench.IngestReceiveMany {
			var copyRate float64
			for _, c := range r.ingest {
				if c.mode == bench.IngestCopyNew && c.clients == row.clients {
					copyRate = bench.Median(c.rates)
				}
			}
			ts = append(ts, target{fmt.Sprintf("ingest vs COPY (%d client(s))", row.clients), "≥ 50%", fmt.Sprintf("%.0f%%", 100*bench.Median(row.rates)/copyRate)})
		}
	}
	for _, l := range r.latency {
		ts = append(ts, target{fmt.Sprintf("p99 at 1,000/s, %d per call, %s", l.res.PerCall, wakeMode(l.cfg)), "< 25 ms", ms(l.res.P99)})
	}
	for _, x := range r.idle {
		ts = append(ts, target{"idle wake-up p50 / max, " + wakeMode(x.Config), "< 10 ms", ms(x.P50) + " / " + ms(x.Max)})
	}
	if n := len(r.growth); n > 1 {
		g := r.growth[n-1]
		ts = append(ts, target{fmt.Sprintf("drain with %d retained vs empty", g.Retained), "within 20%", fmt.Sprintf("%+.0f%%", 100*(g.Rate/r.growth[0].Rate-1))})
	}
	if len(r.drain) > 0 {
		ts = append(ts, target{"txinbox drain peak RSS", "< 100 MB", fmt.Sprintf("%.0f MiB", r.drain[0].fp.PeakRSSMB)})
	}
	p("### Targets\n")
	p("| Target | Wanted | Measured |")
	p("|---|---|---|")
	for _, t := range ts {
		p("| %s | %s | %s |", t.name, t.want, t.got)
	}
	p("")
}

func (r *report) sustainMD(p func(string, ...any)) {
	s := r.sustain
	p("txinbox (%s) drained while a producer kept receiving (ReceiveMany, 1,000 a call, whenever fewer than 20,000 messages waited). Rate = handler calls per second in each interval. Dead tuples and sizes are read from pg_stat_user_tables at the end of each interval.\n", r.opts.inbox)
	p("| Until | Handled/s | Received | Backlog | inbox_queue dead tuples | inbox_queue size | inbox dead tuples | inbox size | queue autovacuums |")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, iv := range s.Intervals {
		p("| %s | **%.0f** | %d | %d | %d | %.1f MiB | %d | %.0f MiB | %d |", iv.End.Round(time.Second), iv.Rate, iv.Received, iv.Backlog,
			iv.QueueDead, iv.QueueMB, iv.InboxDead, iv.InboxMB, iv.Autovacuums)
	}
	p("")
	p("Decay from the first interval to the last: **%.1f%%** (target: < 20%%). Peak RSS %.0f MiB, at most %d server connections.\n",
		100*s.Decay, s.FP.PeakRSSMB, s.FP.MaxConns)
}

func (r *report) seenMD(p func(string, ...any)) {
	if len(r.seen) == 0 {
		return
	}
	l := r.seen[0].last
	p("Duplicate-heavy ingest: %d clients, each calling `Receive` (one message a call) %d times; 80%% of the messages are redeliveries (same payload) of one of the client's last 1,000 new keys, the rest new keys. inbox.Config.SeenTTL 10 minutes; the clients share one cache. Round trips: database calls per message (statements, counted by a wrapper of the pool). CPU: this process + its PostgreSQL backends, and the Redis server's own (INFO cpu). Median of %d run(s), interleaved.\n",
		l.Clients, l.Messages/l.Clients, len(r.seen[0].rates))
	p("| Seen-key cache | msg/s | DB round trips/msg | Answered by the cache | CPU µs/msg client + server | Redis CPU µs/msg | Peak RSS |")
	p("|---|---:|---:|---:|---:|---:|---|")
	for _, row := range r.seen {
		redisCPU := "–"
		if row.kind == bench.SeenRedis {
			redisCPU = fmt.Sprintf("%.0f", bench.Median(row.redisCPU))
		}
		p("| %s | **%.0f** | %.2f | %.0f%% | %s | %s | %.0f MiB |", row.kind, bench.Median(row.rates), row.last.RoundTrips,
			100*float64(row.last.Cached)/float64(row.last.Messages), medianCPU(row.cpu), redisCPU, row.last.FP.PeakRSSMB)
	}
	p("")
}

func (r *report) coalesceMD(p func(string, ...any)) {
	if len(r.coalesce) == 0 {
		return
	}
	l := r.coalesce[0].last
	p("Closed loop: %d goroutines of one `inbox.Client`, each calling `Receive` (one new message a call) %d times back to back; the pool has %d connections. Latency: each call's duration. Round trips: database calls per message (counted by a wrapper of the pool). Median of %d run(s), interleaved (off, on, off, on...), so both rows see the same machine.\n",
		bench.CoalesceSenders, l.Calls/bench.CoalesceSenders, bench.CoalesceSenders+2, len(r.coalesce[0].rates))
	p("| Coalescing | Runs (msg/s) | msg/s | × off | DB round trips/msg | p50 call | p99 call | CPU µs/msg client + server | WAL flushes / commits (last run) |")
	p("|---|---|---:|---:|---:|---:|---:|---:|---|")
	off := bench.Median(r.coalesce[0].rates)
	for _, row := range r.coalesce {
		m := bench.Median(row.rates)
		p("| %s | %s | **%.0f** | %.2f× | %.2f | %s | %s | %s | %d / %d |", row.cfg, ratesMD(row.rates), m, m/off,
			row.last.Trips, ms(row.last.P50), ms(row.last.P99), medianCPU(row.cpu), row.last.FP.WALFlushes, row.last.FP.Commits)
	}
	p("")
	if len(r.coalescePaced) == 0 {
		return
	}
	pc := r.coalescePaced[0]
	p("Paced: %d calls/s on a fixed schedule for %.0f s, from %d goroutines; a call's latency runs from its scheduled start to its return (so a late sender counts), the first second not measured.\n",
		pc.Target, float64(pc.Calls)/float64(pc.Target), bench.CoalesceSenders)
	p("| Coalescing | Achieved calls/s | Samples | p50 | p99 | max | DB round trips/msg | CPU µs/msg client + server |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, res := range r.coalescePaced {
		p("| %s | %.0f | %d | %s | **%s** | %s | %.2f | %s |", res.Config, res.Rate, res.Samples, ms(res.P50), ms(res.P99), ms(res.Max),
			res.Trips, perMsg(res.FP, res.Calls))
	}
	p("")
}

func (r *report) tuneMD(p func(string, ...any)) {
	p("| System | Configuration | msg/s | CPU µs/msg client + server | Peak RSS | Max conns |")
	p("|---|---|---:|---:|---|---:|")
	for _, t := range r.tune {
		p("| %s | %s | %.0f | %s | %s |", t.system, t.config, t.rate, t.cpu, fpMD(t.fp))
	}
	p("")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

const fileHeader = `# txinbox benchmarks

Written by ` + "`cmd/txbench`" + ` (see its doc comment); each run replaces its own section below. Figures
from one machine: compare the rows of a table with each other, not with other machines.

`

// writeSection replaces (or appends) the section named name in the file at path.
func writeSection(path, name, md string) error {
	begin, end := "<!-- txbench:"+name+":begin -->", "<!-- txbench:"+name+":end -->"
	block := begin + "\n" + md + end + "\n"
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	if s == "" {
		s = fileHeader
	}
	if i := strings.Index(s, begin); i >= 0 {
		if j := strings.Index(s[i:], end); j >= 0 {
			tail := strings.TrimPrefix(s[i+j+len(end):], "\n")
			return os.WriteFile(path, []byte(s[:i]+block+tail), 0o644)
		}
	}
	if !strings.HasSuffix(s, "\n\n") {
		s = strings.TrimRight(s, "\n") + "\n\n"
	}
	return os.WriteFile(path, []byte(s+block), 0o644)
}

// walMD formats the WAL flush rate of a phase and the commits per flush.
func walMD(fp bench.Footprint, elapsed time.Duration) string {
	if fp.WALFlushes <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f (%.1f)", float64(fp.WALFlushes)/elapsed.Seconds(), float64(fp.Commits)/float64(fp.WALFlushes))
}
