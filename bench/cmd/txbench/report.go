package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

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
	raw *bench.RawLatencyConfig // the raw SQL floor instead of txinbox (cfg unused)
	res bench.LatencyResult
}

// system and wake say who took the row's messages and how it learnt of them.
func (l latencyRow) system() string {
	if l.raw != nil {
		return "raw SQL"
	}
	return "txinbox"
}

func (l latencyRow) wake() string {
	if l.raw != nil {
		return fmt.Sprintf("polling: a loop whose claim took nothing sleeps %s", l.raw.Poll)
	}
	return wakeMode(l.cfg)
}

func wakeMode(c bench.InboxConfig) string {
	if c.NoListen {
		return "polling only (no LISTEN)"
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

// report is what one run of txbench measured, and writes it as sections of RESULTS.md and as charts.
type report struct {
	opts                  options
	machine               bench.Machine
	command               string
	started               time.Time
	elapsed               time.Duration
	loadBefore, loadAfter bench.Load
	quietWaited           time.Duration
	// noise lists, per section, the phases of that section that ran with the machine busy.
	noise map[string][]string
	// done holds the sections whose benchmark completed.
	done map[string]bool

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

	outbox    []*outboxRow
	outboxLat []bench.OutboxLatencyResult
	// outboxFor is how long each outbox latency row wrote events.
	outboxFor time.Duration

	// latencyFor is how long each latency row received messages.
	latencyFor time.Duration

	// chartDir is where charts are written (charts/ beside the output file); empty: no chart.
	chartDir string
}

// sectionTitles are the headings of the sections txbench writes, by section name (the name in the
// section's markers), in the order of RESULTS.md.
var sectionTitles = map[string]string{
	"machine":        "Machine",
	"drain":          "Drain",
	"ingest":         "Ingest",
	"latency":        "Latency",
	"idle":           "Idle wake-up",
	"growth":         "Growth",
	"footprint":      "Footprint",
	"sustain":        "Sustained drain",
	"seen":           "Seen-key cache",
	"coalesce":       "Coalesced receives",
	"coalesce-paced": "Coalesced receives, paced",
	"recovery":       "Recovery after a crash",
	"outbox":         "Outbox relay",
	"tune":           "Tuning sweep",
}

// noted runs f, the benchmark of section, records the phases that ran noisy during it as the noise of
// section, and marks section done if f succeeded.
func (r *report) noted(env *bench.Env, section string, f func() error) error {
	before := len(env.NoisyPhases)
	err := f()
	r.noise[section] = append(r.noise[section], env.NoisyPhases[before:]...)
	if err == nil {
		r.done[section] = true
	}
	return err
}

// sectionOrder is the order of the sections txbench writes (machine aside).
var sectionOrder = []string{"drain", "ingest", "latency", "idle", "growth", "footprint", "outbox", "sustain", "seen", "coalesce", "coalesce-paced", "recovery", "tune"}

// doneSections lists the sections whose benchmarks completed, in order; footprint is done when any
// benchmark of the main run is.
func (r *report) doneSections() []string {
	if r.done["drain"] || r.done["ingest"] || r.done["latency"] || r.done["growth"] {
		r.done["footprint"] = true
	}
	var out []string
	for _, s := range sectionOrder {
		if r.done[s] {
			out = append(out, s)
		}
	}
	return out
}

func (r *report) mode() string {
	if r.opts.quick {
		return "quick"
	}
	return "full"
}

// markdown returns the section named name: its heading, where its figures come from, and its table.
func (r *report) markdown(section string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("## %s\n", sectionTitles[section])
	switch section {
	case "machine":
		r.machineMD(p)
	case "drain":
		r.drainMD(p)
	case "ingest":
		r.ingestMD(p)
	case "latency":
		r.latencyMD(p)
	case "idle":
		r.idleMD(p)
	case "growth":
		r.growthMD(p)
	case "footprint":
		r.footprintMD(p)
	case "sustain":
		r.sustainMD(p)
	case "tune":
		r.tuneMD(p)
	case "seen":
		r.seenMD(p)
	case "coalesce":
		r.coalesceMD(p)
	case "coalesce-paced":
		r.coalescePacedMD(p)
	case "recovery":
		r.recoveryMD(p)
	case "outbox":
		r.outboxMD(p)
	}
	return b.String()
}

// shortMachine names the machine in a few words: enough to tell two machines apart.
func (r *report) shortMachine() string {
	m := r.machine
	pg := m.Postgres
	if f := strings.Fields(pg); len(f) >= 2 {
		pg = f[0] + " " + f[1]
	}
	return fmt.Sprintf("%d cores (%s), Linux %s, %s", m.Cores, m.CPU, m.Kernel, pg)
}

// runsMD says how many runs a figure is the median of.
func runsMD(n int) string {
	if n == 1 {
		return "one run"
	}
	return fmt.Sprintf("median of %d runs", n)
}

// provenance writes where a section's figures come from: the command, its mode and sizes (detail),
// when and where it ran, and the phases that ran with the machine busy.
func (r *report) provenance(p func(string, ...any), section, detail string) {
	if detail != "" {
		detail = ": " + detail
	}
	p("Measured by `%s` (%s mode%s), %s, on %s.", r.command, r.mode(), detail, r.started.UTC().Format("2006-01-02 15:04 UTC"), r.shortMachine())
	if section == "footprint" {
		p("")
	} else if n := r.noise[section]; len(n) > 0 {
		p("Noisy phases (started busy with the wait budget spent, or other processes used more than %.0f%% of the machine's CPU during them): %s.\n",
			100*bench.OtherLoadNoted, strings.Join(n, ", "))
	} else {
		p("Every phase started quiet and stayed quiet.\n")
	}
}

// chart writes a chart and its Markdown image line, if charts are written.
func (r *report) chart(p func(string, ...any), name, alt string, svg []byte) {
	if r.chartDir == "" {
		return
	}
	if _, err := bench.WriteChart(r.chartDir, name, svg); err != nil {
		fmt.Fprintf(os.Stderr, "txbench: chart %s: %v\n", name, err)
		return
	}
	p("![%s](%s)\n", alt, filepath.ToSlash(filepath.Join(filepath.Base(r.chartDir), name+".svg")))
}

func (r *report) machineMD(p func(string, ...any)) {
	m := r.machine
	p("As the last run of txbench printed it (`%s`, %s mode, %s, took %s):\n", r.command, r.mode(),
		r.started.UTC().Format("2006-01-02 15:04 UTC"), r.elapsed.Round(time.Second))
	p("- %d cores (%s), %.1f GiB memory, Linux %s, %s.", m.Cores, m.CPU, m.MemoryGB, m.Kernel, m.Go)
	p("- PostgreSQL on the same machine, over TCP to 127.0.0.1: %s.", m.Postgres)
	var kv []string
	for _, k := range m.Order {
		if v, ok := m.Settings[k]; ok {
			kv = append(kv, fmt.Sprintf("%s=%s", k, v))
		}
	}
	p("- Server settings: %s.", strings.Join(kv, ", "))
	p("- Other load: before the run %s; after it %s. Before each measured phase the run waited until the CPU was less than %.0f%% busy over half a second (%s waited in all).\n",
		r.loadBefore, r.loadAfter, 100*bench.QuietBusy, r.quietWaited.Round(time.Second))
	p("A section measured by another run names its machine in its first line; figures from different machines compare with each other only as ratios.\n")
}

func ratesMD(rs []float64) string {
	parts := make([]string, len(rs))
	for i, x := range rs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}

// drainGroup is the colour group of a drain system in the chart: txinbox, River or raw SQL.
func drainGroup(name string) string {
	g, _, _ := strings.Cut(name, ",")
	return g
}

func (r *report) drainMD(p func(string, ...any)) {
	o := r.opts
	r.provenance(p, "drain", fmt.Sprintf("%s pending messages per drain, %s", bench.Thousands(float64(o.n)), runsMD(o.runs)))
	rates := map[string]float64{}
	for _, s := range r.drain {
		rates[s.name] = bench.Median(s.rates)
	}
	raw := rates["raw SQL, 100 per tx"]
	p("| System | Guarantee | Configuration | Runs (msg/s) | Median msg/s | vs raw SQL, 100 per tx | CPU µs/msg client + server |")
	p("|---|---|---|---|---:|---:|---:|")
	for _, s := range r.drain {
		m := rates[s.name]
		share := "–"
		if raw > 0 {
			share = fmt.Sprintf("%.0f%%", 100*m/raw)
		}
		p("| %s | %s | %s | %s | **%.0f** | %s | %s |", s.name, s.guarantee, s.config, ratesMD(s.rates), m, share, medianCPU(s.cpu))
	}
	p("")
	single, batch, noop, tx := rates["txinbox"], rates["txinbox, batch handler"], rates["River, no-op"], rates["River, JobCompleteTx"]
	if single > 0 && batch > 0 && noop > 0 && tx > 0 && raw > 0 {
		p("Ratios of the medians: batch handler %.0f%% of raw SQL 100 per tx, %.2f× River no-op, %.2f× the single handler; single handler %.2f× River with JobCompleteTx.\n",
			100*batch/raw, batch/noop, batch/single, single/tx)
	}
	chart := bench.BarChart{
		Title: "Drain: messages per second by system",
		Subtitle: fmt.Sprintf("%s pending messages, one ledger row each; bar: %s, dots: each run. %s, %s.",
			bench.Thousands(float64(o.n)), runsMD(o.runs), r.started.UTC().Format("2006-01-02"), r.shortMachine()),
		Unit: "messages per second",
	}
	for _, s := range r.drain {
		chart.Bars = append(chart.Bars, bench.Bar{Label: s.name, Group: drainGroup(s.name), Value: rates[s.name], Runs: s.rates})
	}
	r.chart(p, "drain", "Drain: messages per second by system (bar: median; dots: each run)", chart.SVG())
}

func (r *report) ingestMD(p func(string, ...any)) {
	r.provenance(p, "ingest", fmt.Sprintf("%s rows per run, %s", bench.Thousands(float64(r.ingest[0].last.Rows)), runsMD(r.opts.runs)))
	p("| Method | Clients | Runs (rows/s) | Median rows/s | vs COPY (new rows only) | CPU µs/row client + server |")
	p("|---|---:|---|---:|---:|---:|")
	ref := map[int]float64{}
	for _, row := range r.ingest {
		if row.mode == bench.IngestCopyNew {
			ref[row.clients] = bench.Median(row.rates)
		}
	}
	for _, row := range r.ingest {
		m := bench.Median(row.rates)
		p("| %s | %d | %s | **%.0f** | %.0f%% | %s |", row.mode, row.clients, ratesMD(row.rates), m, 100*m/ref[row.clients], medianCPU(row.cpu))
	}
	p("")
}

func (r *report) latencyMD(p func(string, ...any)) {
	r.provenance(p, "latency", fmt.Sprintf("%s per row, the first second not counted; the pool %s", r.latencyFor, r.opts.inbox))
	p("| System | Receive rate | Messages per call | Wake-up | Achieved rate | Samples | p50 | p95 | p99 | max | CPU | CPU µs/msg client + server | WAL flushes/s (commits each) |")
	p("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, l := range r.latency {
		x := l.res
		cpu := 100 * (x.FP.ClientCPU + x.FP.ServerCPU) / x.Elapsed.Seconds() / float64(r.machine.Cores)
		msgs := float64(x.Samples + x.Rate) // the first second's too
		p("| %s | %d/s | %d | %s | %.0f/s | %d | %s | %s | **%s** | %s | %.0f%% | %.0f + %.0f | %s |", l.system(), x.Rate, x.PerCall, l.wake(), x.Achieved, x.Samples,
			ms(x.P50), ms(x.P95), ms(x.P99), ms(x.Max), cpu, 1e6*x.FP.ClientCPU/msgs, 1e6*x.FP.ServerCPU/msgs, walMD(x.FP, x.Elapsed))
	}
	p("")
	p("CPU per message counts everything of the phase: the 32 senders and their receives (a commit each) as well as the pool.")
	for _, l := range r.latency {
		if c := l.raw; c != nil {
			p("The raw SQL row is the floor of the same guarantee at the same rate: each message one INSERT ... ON CONFLICT (key)")
			p("DO NOTHING in a transaction of its own, and %d connections each looping over a transaction that claims up to %d pending", c.Clients, c.PerTx)
			p("rows (FOR UPDATE SKIP LOCKED), inserts each one's ledger row with a statement of its own, marks them done and commits;")
			p("its latency runs from the INSERT returning to the ledger insert starting. No attempts, leases, fencing, retries,")
			p("ordering or notifications.")
		}
	}
	p("")
	r.latencyBreakdownMD(p)
	chart := bench.LineChart{
		Title: "Latency from receive to handler start, at 1,000 messages per second",
		Subtitle: fmt.Sprintf("Share of the messages whose handler started within the time on the X axis (log scale). %s, %s.",
			r.started.UTC().Format("2006-01-02"), r.shortMachine()),
		XLabel: "milliseconds from Receive returning to the handler starting", YLabel: "messages (%)",
		LogX: true, XMin: 0.1, YMin: 0, YMax: 100, YFormat: func(v float64) string { return fmt.Sprintf("%.0f%%", v) },
	}
	for _, l := range r.latency {
		chart.Series = append(chart.Series, bench.CDFSeries(fmt.Sprintf("%s, %d per call, %s", l.system(), l.res.PerCall, l.wake()), l.res.Sorted))
	}
	r.chart(p, "latency-cdf", "Latency from receive to handler start at 1,000 messages/s, cumulative distribution per configuration", chart.SVG())
}

// latencyBreakdownMD writes where the latency of each row goes, traced per message.
func (r *report) latencyBreakdownMD(p func(string, ...any)) {
	p("Where the latency goes, traced per message by a pgx tracer on the pool's connections (its cost, a lock and a map look-up")
	p("per claim, RecordBatch and handler statement, is in the figures above): the claim that took a message is the last claim")
	p("of the connection its handler's INSERT ran on; its batch's RecordBatch is found by the message's id. The five parts")
	p("follow each other and add up to the latency; p50, p95 and p99 are each part's own, and the p99 tail row is each part's")
	p("mean over the slowest 1%% of the messages.")
	p("")
	h := "| Messages per call | Wake-up | Statistic |"
	for _, n := range bench.LatencyPartNames {
		h += " " + n + " |"
	}
	p("%s Total |", h)
	p("|---:|---|---|%s---:|", strings.Repeat("---:|", bench.LatencyParts))
	for _, l := range r.latency {
		b := l.res.Breakdown
		if b.Traced == 0 {
			continue
		}
		row := func(stat string, part func(k int) time.Duration, total time.Duration, bold bool) {
			line := fmt.Sprintf("| %d | %s | %s |", l.res.PerCall, wakeMode(l.cfg), stat)
			for k := range bench.LatencyParts {
				v := msFine(part(k))
				if bold {
					v = "**" + v + "**"
				}
				line += " " + v + " |"
			}
			p("%s %s |", line, msFine(total))
		}
		for _, q := range []float64{50, 95, 99} {
			row(fmt.Sprintf("p%.0f", q), func(k int) time.Duration { return bench.Percentile(b.Parts[k], q) }, bench.Percentile(l.res.Sorted, q), false)
		}
		row("p99 tail (mean)", func(k int) time.Duration { return b.Tail[k] }, b.TailTotal, true)
	}
	p("")
	p("Claims in the measured phase (from the first measured message to the last handler's start):")
	p("")
	p("| Messages per call | Wake-up | Messages traced | Claims/s | Claims that took nothing | Messages per claim that took some | Batch-mates handled before a message: mean, slowest 1%% | Claim started before Receive returned | Claim ended before Receive was called |")
	p("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, l := range r.latency {
		b := l.res.Breakdown
		if b.Traced == 0 {
			continue
		}
		claims := fmt.Sprintf("%.0f", b.ClaimsPerSec)
		if b.SuspectClaims > 0 {
			claims += fmt.Sprintf(" (+ %d ClaimSuspects in all)", b.SuspectClaims)
		}
		empty := "-"
		if b.Claims > 0 {
			empty = fmt.Sprintf("%d of %d (%.0f%%)", b.EmptyClaims, b.Claims, 100*float64(b.EmptyClaims)/float64(b.Claims))
		}
		p("| %d | %s | %d of %d | %s | %s | %.1f | %.1f, %.1f | %d | %d |", l.res.PerCall, wakeMode(l.cfg), b.Traced, l.res.Samples, claims, empty,
			b.PerClaim, b.Before, b.TailBefore, b.BeforeReturn, b.BeforeCall)
	}
	p("")
	p("The handlers of a batch's messages run one after the other, in its transaction: a message's last part is mostly the")
	p("handlers of the batch-mates before it.")
	p("A claim can start before the Receive of a message it takes returns: the commit precedes the claim's snapshot, but its")
	p("acknowledgement reaches the sender after the claim was sent (the first part is then negative). A claim that ended")
	p("before the Receive was even called would mean a mistraced message: that count is expected to be 0.")
	p("")
}

// msFine formats d in milliseconds with two decimals.
func msFine(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func (r *report) idleMD(p func(string, ...any)) {
	r.provenance(p, "idle", fmt.Sprintf("idle %s to %s before each message", r.idle[0].Idle, 2*r.idle[0].Idle))
	p("| Wake-up | PollInterval | Samples | p50 | p95 | max |")
	p("|---|---|---:|---:|---:|---:|")
	for _, x := range r.idle {
		p("| %s | %s | %d | %s | %s | **%s** |", wakeMode(x.Config), x.PollInterval, x.Samples, ms(x.P50), ms(x.P95), ms(x.Max))
	}
	p("")
}

func (r *report) growthMD(p func(string, ...any)) {
	r.provenance(p, "growth", fmt.Sprintf("drains of %s messages, one run per level", bench.Thousands(float64(r.opts.n))))
	p("| Retained completed rows | inbox table + indexes before the drain | Drain msg/s | vs none retained |")
	p("|---:|---:|---:|---:|")
	for _, g := range r.growth {
		p("| %s | %.0f MiB | **%.0f** | %.0f%% |", bench.Thousands(float64(g.Retained)), g.InboxMB, g.Rate, 100*g.Rate/r.growth[0].Rate)
	}
	p("")
}

func (r *report) footprintMD(p func(string, ...any)) {
	r.provenance(p, "footprint", "the phases of the sections above measured by the same run")
	p("| Phase | Peak RSS of the process | Most server connections |")
	p("|---|---:|---:|")
	row := func(phase string, fp bench.Footprint) {
		rss := fmt.Sprintf("%.0f MiB", fp.PeakRSSMB)
		if !fp.RSSExact {
			rss += " (process peak)"
		}
		p("| %s | %s | %d |", phase, rss, fp.MaxConns)
	}
	if r.done["drain"] {
		for _, s := range r.drain {
			row("drain: "+s.name, s.fp)
		}
	}
	if r.done["ingest"] {
		for _, x := range r.ingest {
			row(fmt.Sprintf("ingest: %s, %d client(s)", x.mode, x.clients), x.fp)
		}
	}
	if r.done["latency"] {
		for _, l := range r.latency {
			row(fmt.Sprintf("latency: %s, %d per call, %s (%d sender connections included)", l.system(), l.res.PerCall, l.wake(), bench.LatencySenders), l.res.FP)
		}
	}
	if r.done["growth"] {
		for _, g := range r.growth {
			row(fmt.Sprintf("growth: drain with %s retained", bench.Thousands(float64(g.Retained))), g.FP)
		}
	}
	p("")
}

func (r *report) sustainMD(p func(string, ...any)) {
	s := r.sustain
	r.provenance(p, "sustain", fmt.Sprintf("%s, the pool %s", r.opts.sustain, r.opts.inbox))
	p("| Until | Handled/s | Received | Backlog | inbox_queue dead tuples | inbox_queue size | inbox dead tuples | inbox size | queue autovacuums |")
	p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, iv := range s.Intervals {
		p("| %s | **%.0f** | %d | %d | %d | %.1f MiB | %d | %.0f MiB | %d |", iv.End.Round(time.Second), iv.Rate, iv.Received, iv.Backlog,
			iv.QueueDead, iv.QueueMB, iv.InboxDead, iv.InboxMB, iv.Autovacuums)
	}
	p("")
	p("Change from the first interval to the last: **%+.1f%%**. Peak RSS %.0f MiB, at most %d server connections.\n",
		-100*s.Decay, s.FP.PeakRSSMB, s.FP.MaxConns)
}

func (r *report) seenMD(p func(string, ...any)) {
	l := r.seen[0].last
	r.provenance(p, "seen", fmt.Sprintf("%d clients × %s Receive calls, 80%% redeliveries, %s",
		l.Clients, bench.Thousands(float64(l.Messages/l.Clients)), runsMD(len(r.seen[0].rates))))
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
	l := r.coalesce[0].last
	r.provenance(p, "coalesce", fmt.Sprintf("%d goroutines × %s Receive calls, %s, off and on interleaved",
		bench.CoalesceSenders, bench.Thousands(float64(l.Calls/bench.CoalesceSenders)), runsMD(len(r.coalesce[0].rates))))
	p("| Coalescing | Runs (msg/s) | msg/s | × off | DB round trips/msg | p50 call | p99 call | CPU µs/msg client + server | WAL flushes / commits (last run) |")
	p("|---|---|---:|---:|---:|---:|---:|---:|---|")
	off := bench.Median(r.coalesce[0].rates)
	for _, row := range r.coalesce {
		m := bench.Median(row.rates)
		p("| %s | %s | **%.0f** | %.2f× | %.2f | %s | %s | %s | %d / %d |", row.cfg, ratesMD(row.rates), m, m/off,
			row.last.Trips, ms(row.last.P50), ms(row.last.P99), medianCPU(row.cpu), row.last.FP.WALFlushes, row.last.FP.Commits)
	}
	p("")
}

func (r *report) coalescePacedMD(p func(string, ...any)) {
	pc := r.coalescePaced[0]
	r.provenance(p, "coalesce-paced", fmt.Sprintf("%s calls/s for %.0f s from %d goroutines", bench.Thousands(float64(pc.Target)),
		float64(pc.Calls)/float64(pc.Target), bench.CoalesceSenders))
	p("| Coalescing | Achieved calls/s | Samples | p50 | p99 | max | DB round trips/msg | CPU µs/msg client + server |")
	p("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, res := range r.coalescePaced {
		p("| %s | %.0f | %d | %s | **%s** | %s | %.2f | %s |", res.Config, res.Rate, res.Samples, ms(res.P50), ms(res.P99), ms(res.Max),
			res.Trips, perMsg(res.FP, res.Calls))
	}
	p("")
}

func (r *report) tuneMD(p func(string, ...any)) {
	r.provenance(p, "tune", fmt.Sprintf("%s messages per drain, one run each", bench.Thousands(float64(r.opts.n))))
	p("| System | Configuration | msg/s | CPU µs/msg client + server | Peak RSS | Max conns |")
	p("|---|---|---:|---:|---|---:|")
	for _, t := range r.tune {
		p("| %s | %s | %.0f | %s | %.0f MiB | %d |", t.system, t.config, t.rate, t.cpu, t.fp.PeakRSSMB, t.fp.MaxConns)
	}
	p("")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// walMD formats the WAL flush rate of a phase and the commits per flush.
func walMD(fp bench.Footprint, elapsed time.Duration) string {
	if fp.WALFlushes <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f (%.1f)", float64(fp.WALFlushes)/elapsed.Seconds(), float64(fp.Commits)/float64(fp.WALFlushes))
}
