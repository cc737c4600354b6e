package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/multitracer"

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
	// Breakdown says where each measured message's latency went, from its claim's trace.
	Breakdown LatencyBreakdown
}

// LatencyBreakdown splits the latency of the measured messages in five consecutive parts, traced per
// message (see claimTracer): from Receive returning to the start of the claim that took the message;
// the claim's round trip (its pipeline of ClaimLimits, ClaimBatch and BatchLimits); from the claim's
// end to the start of the RecordBatch that recorded its batch (on the pool's records connection,
// which the runners take turns on); that RecordBatch's round trip; from its end to the handler's
// start (the handlers of the batch's earlier messages run first). The parts add up to the latency.
type LatencyBreakdown struct {
	Traced int // measured messages whose claim and record were traced (the others are left out)
	// Parts holds each part's values, in increasing order, by LatencyParts' index.
	Parts [LatencyParts][]time.Duration
	// Tail is the mean of each part over the slowest 1% of the traced messages (the p99 tail), and
	// TailTotal their mean latency.
	Tail      [LatencyParts]time.Duration
	TailTotal time.Duration
	// Before is the mean number of batch-mates whose handler started before a message's (its last
	// part is theirs, mostly), and TailBefore the same over the slowest 1%.
	Before, TailBefore float64
	// The claims (ClaimBatch) that started in the measured phase, from the first measured message's
	// dispatch to the last handler's start.
	Claims       int
	ClaimsPerSec float64
	EmptyClaims  int     // claims that returned no row
	PerClaim     float64 // mean rows of the claims that returned some
	// HandledClaims counts the claims with a message whose handler's first call ran in their
	// transaction, and Handled those messages (a cross-check of the rows counted).
	HandledClaims, Handled int
	SuspectClaims          int // claims of the rescuer (ClaimSuspects) in the measured phase, not in Claims
	// BeforeReturn counts the messages whose claim started before their Receive returned: their
	// commit happened before the claim's statement took its snapshot, but the acknowledgement reached
	// the sender after the claim was sent (their first part is negative).
	BeforeReturn int
	// BeforeCall counts the messages whose claim ended before their Receive was called: impossible
	// unless the tracing is wrong (a claim cannot take a message not yet committed).
	BeforeCall int
}

// LatencyParts is the number of parts in a LatencyBreakdown.
const LatencyParts = 5

// LatencyPartNames names the parts of a LatencyBreakdown.
var LatencyPartNames = [LatencyParts]string{
	"Receive returned → claim start", "claim round trip", "claim end → RecordBatch start",
	"RecordBatch round trip", "RecordBatch end → handler start",
}

// LatencySenders is the number of goroutines (and connections) calling Receive in SteadyLatency:
// enough to keep the schedule when a commit takes tens of milliseconds on a busy machine.
const LatencySenders = 32

// clock gives monotonic nanoseconds since its creation.
type clock struct{ base time.Time }

func (c clock) now() int64 { return int64(time.Since(c.base)) }

// SteadyLatency receives messages perCall at a time (Receive when 1, else ReceiveMany: one
// transaction per call, with a default inbox.Client) at rate messages per second for d, from
// LatencySenders concurrent senders following a fixed schedule, into a running pool, and measures the
// time from Receive returning (the message committed) to its handler starting. The first second is a
// warm-up and not measured. Each message is traced from its claim to its handler (claimTracer), which
// gives the result's Breakdown.
func (e *Env) SteadyLatency(ctx context.Context, rate, perCall int, d time.Duration, cfg InboxConfig) (LatencyResult, error) {
	pc := newPaced(rate, perCall, d)
	// The schema's pgxpool (the pool's and the senders') and the pool's records connection carry the
	// claim tracer, with the Env's own if any.
	tr := newClaimTracer(pc.clk, pc.total)
	prev := e.Tracer
	if prev != nil {
		e.Tracer = multitracer.New(prev, tr)
	} else {
		e.Tracer = tr
	}
	s, err := e.newInboxSchema(ctx, "latency", int32(cfg.Concurrency+2+LatencySenders))
	e.Tracer = prev
	if err != nil {
		return pc.res, err
	}
	defer s.Drop(ctx)
	tr.insert = "INSERT INTO " + s.T("ledger") + " " // before any handler runs
	// Written by the sender of each message, read after they are done.
	callAt, ids := make([]int64, pc.total+1), make([]int64, pc.total+1)
	mon := e.StartMonitor(ctx, s.App)
	p, err := s.startPool(ctx, cfg, pc.handle)
	if err != nil {
		return pc.res, err
	}
	// Stopped after the measurement: a Stop error changes no result.
	defer func() { _ = stopPool(ctx, p) }()
	measuredFrom, err := pc.run(ctx, mon, func(first int, msgs []inbox.Message) error {
		called := pc.clk.now()
		var rs []inbox.Receipt
		var err error
		if len(msgs) == 1 {
			var r inbox.Receipt
			r, err = s.client.Receive(ctx, msgs[0])
			rs = []inbox.Receipt{r}
		} else {
			rs, err = s.client.ReceiveMany(ctx, msgs)
		}
		if err != nil {
			return err
		}
		for i, r := range rs {
			callAt[first+i], ids[first+i] = called, r.ID
		}
		return nil
	})
	if errors.Is(err, errNotHandled) {
		err = fmt.Errorf("%w: %s", err, s.describe(ctx, pc.unhandled()))
	}
	if err != nil {
		return pc.res, err
	}
	pc.res.Breakdown = tr.breakdown(rate+1, pc.total, measuredFrom, callAt, ids, pc.recvAt, pc.handledAt)
	return pc.res, nil
}

// paced is a latency measurement's schedule: messages 1..total, sent perCall at a time at rate
// messages per second, each one's time of receipt (its call returned) and of its handler's start.
type paced struct {
	res               LatencyResult
	clk               clock
	total             int
	recvAt, handledAt []atomic.Int64 // by message number: clk.now() when received, when handled
	handled           atomic.Int64   // messages whose handler started
}

func newPaced(rate, perCall int, d time.Duration) *paced {
	total := int(d.Seconds() * float64(rate))
	return &paced{res: LatencyResult{Rate: rate, PerCall: perCall}, clk: clock{base: time.Now()}, total: total,
		recvAt: make([]atomic.Int64, total+1), handledAt: make([]atomic.Int64, total+1)}
}

// errNotHandled: some message's handler had not started 30 s after the last message was sent.
var errNotHandled = errors.New("latency: not every message was handled within 30s")

// unhandled returns the numbers of the messages whose handler has not started.
func (pc *paced) unhandled() []int {
	var ns []int
	for n := 1; n <= pc.total; n++ {
		if pc.handledAt[n].Load() == 0 {
			ns = append(ns, n)
		}
	}
	return ns
}

// handle notes that the handler of message n started (the first time only).
func (pc *paced) handle(n int) {
	if n >= 1 && n <= pc.total && pc.handledAt[n].CompareAndSwap(0, pc.clk.now()) {
		pc.handled.Add(1)
	}
}

// run sends every message on the schedule from LatencySenders goroutines, each call a send of up to
// PerCall messages (first is the number of msgs[0]), waits up to 30 s for every handler to start,
// stops mon and fills pc.res. It returns when (clk.now()) the first measured message, after the first
// second, was dispatched.
func (pc *paced) run(ctx context.Context, mon *Monitor, send func(first int, msgs []inbox.Message) error) (measuredFrom int64, err error) {
	rate, perCall, total, res := pc.res.Rate, pc.res.PerCall, pc.total, &pc.res
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
				if err := send(first, msgs); err != nil {
					select {
					case errc <- err:
					default:
					}
					continue
				}
				now := pc.clk.now()
				for i := first; i < first+len(msgs); i++ {
					pc.recvAt[i].Store(now)
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
		if measuredFrom == 0 && i > rate {
			measuredFrom = pc.clk.now()
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	sent := time.Since(start)
	deadline := time.Now().Add(30 * time.Second)
	for pc.handled.Load() < int64(total) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	res.FP = mon.Stop()
	res.Elapsed = time.Since(start)
	select {
	case err := <-errc:
		return 0, err
	default:
	}
	if pc.handled.Load() < int64(total) {
		return 0, errNotHandled
	}
	res.Achieved = float64(total) / sent.Seconds()
	var lats []time.Duration
	for i := rate + 1; i <= total; i++ { // skip the first second
		lats = append(lats, time.Duration(max(0, pc.handledAt[i].Load()-pc.recvAt[i].Load())))
	}
	slices.Sort(lats)
	res.Samples = len(lats)
	res.P50, res.P95, res.P99 = Percentile(lats, 50), Percentile(lats, 95), Percentile(lats, 99)
	res.Max = lats[len(lats)-1]
	res.Sorted = lats
	return measuredFrom, nil
}

// breakdown splits the latencies of messages first..last (see LatencyBreakdown), with the claims
// that started from measuredFrom to the last of their handlers' starts.
func (t *claimTracer) breakdown(first, last int, measuredFrom int64, callAt, ids []int64, recvAt, handledAt []atomic.Int64) LatencyBreakdown {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b LatencyBreakdown
	type traced struct {
		total  time.Duration
		parts  [LatencyParts]time.Duration
		before int // batch-mates whose handler started before its own
	}
	// The handlers' starts of each claim's messages, in increasing order.
	starts := map[int64][]int64{}
	for i := 1; i <= last; i++ {
		if ci := t.claimOf[i].Load(); ci != 0 {
			starts[ci-1] = append(starts[ci-1], handledAt[i].Load())
		}
	}
	for _, hs := range starts {
		slices.Sort(hs)
	}
	var msgs []traced
	measuredTo := measuredFrom
	before := 0
	for i := first; i <= last; i++ {
		h := handledAt[i].Load()
		measuredTo = max(measuredTo, h)
		ci := t.claimOf[i].Load()
		r, ok := t.records[ids[i]]
		if ci == 0 || !ok {
			continue
		}
		c := t.claims[ci-1]
		recv := recvAt[i].Load()
		if c.start < recv {
			b.BeforeReturn++
		}
		if c.end < callAt[i] {
			b.BeforeCall++
		}
		m := traced{total: time.Duration(h - recv), parts: [LatencyParts]time.Duration{
			time.Duration(c.start - recv), time.Duration(c.end - c.start), time.Duration(r.start - c.end),
			time.Duration(r.end - r.start), time.Duration(h - r.end)}}
		m.before, _ = slices.BinarySearch(starts[ci-1], h)
		before += m.before
		msgs = append(msgs, m)
		for k, v := range m.parts {
			b.Parts[k] = append(b.Parts[k], v)
		}
	}
	b.Traced = len(msgs)
	if b.Traced > 0 {
		b.Before = float64(before) / float64(b.Traced)
	}
	for k := range b.Parts {
		slices.Sort(b.Parts[k])
	}
	if len(msgs) > 0 {
		slices.SortFunc(msgs, func(x, y traced) int { return cmp.Compare(y.total, x.total) })
		tail := msgs[:max(1, len(msgs)/100)]
		for _, m := range tail {
			b.TailTotal += m.total
			b.TailBefore += float64(m.before) / float64(len(tail))
			for k, v := range m.parts {
				b.Tail[k] += v
			}
		}
		b.TailTotal /= time.Duration(len(tail))
		for k := range b.Tail {
			b.Tail[k] /= time.Duration(len(tail))
		}
	}
	perClaim := map[int64]int{}
	for i := range t.claimOf {
		if ci := t.claimOf[i].Load(); ci != 0 {
			perClaim[ci-1]++
		}
	}
	rows := 0
	for i, c := range t.claims {
		if c.start < measuredFrom || c.start > measuredTo {
			continue
		}
		if c.suspects {
			b.SuspectClaims++
			continue
		}
		b.Claims++
		if n := perClaim[int64(i)]; n > 0 {
			b.HandledClaims++
			b.Handled += n
		}
		if c.rows == 0 {
			b.EmptyClaims++
		}
		rows += c.rows
	}
	if measuredTo > measuredFrom {
		b.ClaimsPerSec = float64(b.Claims) / time.Duration(measuredTo-measuredFrom).Seconds()
	}
	if b.Claims > b.EmptyClaims {
		b.PerClaim = float64(rows) / float64(b.Claims-b.EmptyClaims)
	}
	return b
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
