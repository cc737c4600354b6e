package demo

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txinbox/txinbox/examples/ledger/internal/ledger"
	"github.com/txinbox/txinbox/idempotency"
)

// stats counts the HTTP answers.
type stats struct {
	mu       sync.Mutex
	answers  map[string]int // "<phase>/<kind>/<status>[/replayed]"
	accepted []atomic.Int32 // 202 answers per event
	// resent marks the events one of whose deliveries was sent again after a transport error: its
	// 202 may have been lost on the way back.
	resent  []atomic.Bool
	retries atomic.Int64 // deliveries sent again after a transport error, 409 or 503
	failed  atomic.Int64 // deliveries given up on
}

func newStats() stats { return stats{answers: map[string]int{}} }

func (s *stats) add(key string) {
	s.mu.Lock()
	s.answers[key]++
	s.mu.Unlock()
}

func (s *stats) get(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answers[key]
}

var kindNames = map[kind]string{kEvent: "event", kInvalid: "invalid", kConflictEvent: "conflict-event",
	kCredit: "credit", kConflictCredit: "conflict-credit"}

// send delivers ds from Producers concurrent producers over one keep-alive client. A delivery that
// meets a transport error, a 503 or a 409 (a credit still in flight) is sent again, as a real
// producer would.
func (r *run) send(ctx context.Context, ds []delivery, replay bool) error {
	if r.stats.accepted == nil {
		r.stats.accepted = make([]atomic.Int32, len(r.events))
		r.stats.resent = make([]atomic.Bool, len(r.events))
	}
	phase := "storm"
	if replay {
		phase = "replay"
	}
	r.sent.Store(0)
	r.total.Store(int64(len(ds)))
	var next atomic.Int64
	var wg sync.WaitGroup
	var fatal atomic.Value
	for range r.o.Producers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(len(ds)) {
					return
				}
				status, replayed, err := r.deliver(ctx, ds[i])
				if err != nil {
					if ctx.Err() == nil {
						fatal.CompareAndSwap(nil, err)
						r.stats.failed.Add(1)
					}
					continue
				}
				key := phase + "/" + kindNames[ds[i].kind] + "/" + strconv.Itoa(status)
				if replayed {
					key += "/replayed"
				}
				r.stats.add(key)
				if ds[i].kind == kEvent && status == http.StatusAccepted {
					r.stats.accepted[ds[i].idx].Add(1)
				}
				r.sent.Add(1)
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	if err, _ := fatal.Load().(error); err != nil && r.stats.failed.Load() > int64(len(ds))/10 {
		return fmt.Errorf("demo: too many deliveries failed (%d), last: %w", r.stats.failed.Load(), err)
	}
	return nil
}

// deliver sends one delivery until it gets a final answer.
func (r *run) deliver(ctx context.Context, d delivery) (status int, replayed bool, err error) {
	var path string
	var body []byte
	hdr := http.Header{"Content-Type": {"application/json"}}
	switch d.kind {
	case kEvent:
		path, body = "/v1/events", r.events[d.idx].bodies[b2i(d.alt)]
	case kInvalid:
		path, body = "/v1/events", []byte(invalidBodies[d.idx])
	case kConflictEvent:
		ev := r.events[d.idx].ev
		ev.AmountCents++
		path, body = "/v1/events", eventBody(ev, false)
	case kCredit, kConflictCredit:
		c := r.credits[d.idx]
		path, body = "/v1/credits", c.body
		if d.kind == kConflictCredit {
			body = fmt.Appendf(nil, `{"account_id":%q,"amount_cents":%d}`, c.account, c.amount+1)
		}
		hdr.Set(idempotency.HeaderKey, idempotency.FormatKey(c.key))
		hdr.Set("Authorization", "Bearer ledger-demo-producer")
	}
	delay := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+path, bytes.NewReader(body))
		if err != nil {
			return 0, false, err
		}
		req.Header = hdr.Clone()
		resp, err := r.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
			if status != http.StatusServiceUnavailable && status != http.StatusConflict {
				return status, resp.Header.Get(idempotency.HeaderReplayed) == "true", nil
			}
			err = fmt.Errorf("HTTP %d", status)
		} else if d.kind == kEvent {
			r.stats.resent[d.idx].Store(true)
		}
		if ctx.Err() != nil || attempt == 50 {
			return 0, false, fmt.Errorf("delivery to %s failed %d times: %w", path, attempt, err)
		}
		r.stats.retries.Add(1)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// counts are the live figures shown by the progress line.
type counts struct {
	queued, credited, dead, retries int64
}

func (r *run) counts(ctx context.Context) (counts, error) {
	var c counts
	err := r.db.QueryRow(ctx, r.q(`
SELECT (SELECT count(*) FROM {schema}.inbox_queue),
       (SELECT count(*) FROM {schema}.ledger_entries WHERE source = 'event'),
       count(*) FILTER (WHERE state = 'dead'),
       coalesce(sum(attempts_started - 1) FILTER (WHERE attempts_started > 1), 0)
FROM {schema}.inbox WHERE consumer = $1`), ledger.Consumer).Scan(&c.queued, &c.credited, &c.dead, &c.retries)
	return c, err
}

// progress shows the live progress until the returned function is called.
func (r *run) progress(ctx context.Context) func() {
	if r.o.Progress == nil {
		return func() {}
	}
	every := 2 * time.Second
	if r.o.TTY {
		every = 200 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		start := time.Now()
		var lastSent int64
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				if r.o.TTY {
					fmt.Fprint(r.o.Progress, "\r\033[K")
				}
				return
			case <-t.C:
			}
			c, err := r.counts(ctx)
			if err != nil {
				continue
			}
			sent, now := r.sent.Load(), time.Now()
			rate := float64(sent-lastSent) / now.Sub(last).Seconds()
			if rate < 0 {
				rate = 0
			}
			lastSent, last = sent, now
			line := fmt.Sprintf("%5.1fs %-6s sent %s/%s %s/s | credited %s/%s | queued %s | retries %s | dead %s | %s",
				now.Sub(start).Seconds(), r.phase.Load().(string), num(sent), num(r.total.Load()), num(int64(rate)),
				num(c.credited), num(int64(len(r.events)-1)), num(c.queued), num(c.retries), num(c.dead), r.crash.status())
			if r.o.TTY {
				fmt.Fprint(r.o.Progress, "\r\033[K"+line)
			} else {
				fmt.Fprintln(r.o.Progress, line)
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// waitDrained waits until no message of the run is pending or being processed (the queue is empty).
// It waits as long as the drain moves on: it gives up only when Timeout passes without a message
// leaving the queue, and then returns false and says how far the drain got and at what rate.
func (r *run) waitDrained(ctx context.Context) (bool, string) {
	start := time.Now()
	first, low := int64(-1), int64(-1) // queue length at the start, and the lowest seen
	lastProgress := start
	for ctx.Err() == nil {
		var n int64
		if err := r.db.QueryRow(ctx, r.q(`SELECT count(*) FROM {schema}.inbox_queue`)).Scan(&n); err == nil {
			if n == 0 {
				return true, ""
			}
			if low < 0 || n < low {
				if first < 0 {
					first = n
				}
				low, lastProgress = n, time.Now()
			}
		}
		if quiet := time.Since(lastProgress); quiet > r.o.Timeout {
			elapsed := time.Since(start)
			return false, fmt.Sprintf("no message left the queue for %s (%s into the drain): %d queued, %.1f left it a second before; "+
				"a machine too slow for the demo, or a stuck worker", secs(quiet), secs(elapsed), low, float64(max(first-low, 0))/elapsed.Seconds())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false, ctx.Err().Error()
}

// totals are the ledger's totals at one moment.
type totals struct {
	entries, sum, balances int64
}

func (r *run) totals(ctx context.Context) (totals, error) {
	var t totals
	err := r.db.QueryRow(ctx, r.q(`SELECT (SELECT count(*) FROM {schema}.ledger_entries),
		(SELECT coalesce(sum(amount_cents), 0) FROM {schema}.ledger_entries),
		(SELECT coalesce(sum(balance_cents), 0) FROM {schema}.accounts)`)).Scan(&t.entries, &t.sum, &t.balances)
	return t, err
}

// crashInfo records the crash of the child worker.
type crashInfo struct {
	mu          sync.Mutex
	pid         int
	started     bool
	killed      bool
	eventID     string // the message whose handler hung
	uncommitted int64  // entries the hung batch had written
	claims      int64  // messages claimed by the child when it was killed
	handled     int64
	err         error
}

func (c *crashInfo) status() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.killed:
		return "child killed"
	case c.err != nil:
		return "child failed"
	case c.started:
		return "child working"
	}
	return ""
}

// startCrashChild starts `ledger work` as a child process that hangs, holding its batch transaction
// open with entries written, after HangAfter messages; it is then killed with SIGKILL and onDead
// runs (it starts the in-process workers). If the child never gets there within 30 seconds, onDead
// runs anyway and the crash is reported as not done. The returned function (idempotent) kills the
// child if it is still alive and waits for it.
func (r *run) startCrashChild(ctx context.Context, faults *Faults, onDead func()) func() {
	args := []string{"work", "--database-url", r.o.URL, "--schema", r.o.Schema,
		"--workers", "1", "--batch-size", strconv.Itoa(r.o.BatchSize), "--lease", r.o.Lease.String(),
		"--timeout", r.o.HandlerTime.String(), "--poll", r.o.Poll.String(), "--max-attempts", strconv.Itoa(r.o.MaxAttempts),
		"--owner", childOwner, "--log-level", "error",
		"--fail-first-percent", strconv.FormatFloat(faults.FailFirstPercent, 'f', -1, 64),
		"--poison", r.events[r.poison].ev.EventID,
		"--hang-after", strconv.FormatInt(r.o.HangAfter, 10), "--print-on-hang"}
	cmd := r.o.ChildCommand(args)
	cmd.Stderr = r.o.ChildStderr
	var once sync.Once
	dead := func() { once.Do(onDead) }
	fail := func(err error) {
		r.crash.mu.Lock()
		r.crash.err = err
		r.crash.mu.Unlock()
		dead()
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fail(err)
		return func() {}
	}
	if err := cmd.Start(); err != nil {
		fail(err)
		return func() {}
	}
	r.crash.mu.Lock()
	r.crash.started, r.crash.pid = true, cmd.Process.Pid
	r.crash.mu.Unlock()
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 || f[0] != "HANG" {
				continue
			}
			// The child hangs in a handler, its batch transaction open: count its claims, kill it.
			var claims int64
			_ = r.db.QueryRow(ctx, r.q(`SELECT coalesce(sum(cardinality(ids)), 0) FROM {schema}.inbox_batch WHERE owner = $1`),
				childOwner).Scan(&claims)
			killErr := cmd.Process.Kill() // SIGKILL
			n, _ := strconv.ParseInt(f[2], 10, 64)
			r.crash.mu.Lock()
			r.crash.killed = killErr == nil
			r.crash.eventID, r.crash.uncommitted, r.crash.claims, r.crash.handled = f[1], n, claims, r.o.HangAfter
			if killErr != nil {
				r.crash.err = killErr
			}
			r.crash.mu.Unlock()
			break
		}
		_, _ = io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		r.crash.mu.Lock()
		if !r.crash.killed && r.crash.err == nil {
			r.crash.err = fmt.Errorf("the child exited before hanging: %v", err)
		}
		r.crash.mu.Unlock()
		dead()
	}()
	go func() {
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			r.crash.mu.Lock()
			if r.crash.err == nil && !r.crash.killed {
				r.crash.err = errors.New("the child did not reach its crash point within 30s")
			}
			r.crash.mu.Unlock()
			dead()
		case <-ctx.Done():
		}
	}()
	var end sync.Once
	return func() {
		end.Do(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
	}
}
