package outbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/outbox"
	"github.com/txinbox/txinbox/txinboxtest/tracerec"
)

// holdingPublisher blocks its first call until release is closed, ignoring its ctx (a Publish call
// that hangs past the lease), then returns result; later calls return nil at once.
type holdingPublisher struct {
	held, release chan struct{}
	result        error
	once          sync.Once
	calls         atomic.Int64
}

func newHolding(result error) *holdingPublisher {
	return &holdingPublisher{held: make(chan struct{}), release: make(chan struct{}), result: result}
}

func (p *holdingPublisher) Publish(context.Context, []outbox.Event) error {
	p.calls.Add(1)
	err := error(nil)
	p.once.Do(func() {
		close(p.held)
		<-p.release
		err = p.result
	})
	return err
}

// snapshot is everything a relay could change about the event: its outbox row and its queue row.
func (e *env) snapshot(t *testing.T) string {
	t.Helper()
	var s string
	if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT row(m.*, q.*)::text
		FROM {schema}.outbox m LEFT JOIN {schema}.outbox_queue q USING (id)`)).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// claim returns the event's queue row: its token, owner and whether it is claimed.
func (e *env) claim(t *testing.T) (token int64, owner string, claimed bool) {
	t.Helper()
	if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT token, coalesce(owner, ''), claimed FROM {schema}.outbox_queue`)).
		Scan(&token, &owner, &claimed); err != nil {
		t.Fatal(err)
	}
	return
}

// A relay whose Publish call hangs past its lease finds, when the call returns, that another relay
// has taken the event over: whatever its Publisher answered (acknowledged, failed, refused), it
// records nothing, the other relay's claim is untouched, and its Store's Tracer is told nothing of an
// outcome (txinbox.OpRelayed: metrics would count the event twice). The other relay then sends the
// event once, and its Tracer is told that once; the attempts count both claims and no failure.
func TestFencedStaleRelayRecordsNothing(t *testing.T) {
	t.Parallel()
	for name, result := range map[string]error{
		"acknowledged": nil,
		"failed":       errors.New("broker unavailable"),
		"refused":      txinbox.Permanent(errors.New("refused")),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.publish(t, msg("t", "k", 1))
			pa, pb := newHolding(result), newHolding(nil)
			oa, ob := &tracerec.Recorder{}, &tracerec.Recorder{}
			a := relayOn(t, e.traced(oa), pa, func(c *outbox.RelayConfig) {
				c.Owner, c.Concurrency = "relay-A", 1
				outbox.NoListen(c)
				c.Lease, c.Timeout, c.PollInterval = 500*time.Millisecond, 200*time.Millisecond, time.Hour
			})
			b := relayOn(t, e.traced(ob), pb, func(c *outbox.RelayConfig) { c.Owner = "relay-B"; outbox.NoListen(c) })
			run(t, a)
			await(t, "relay A's Publish call", pa.held)
			tokenA, owner, _ := e.claim(t)
			if owner != "relay-A" {
				t.Fatalf("owner %q after A's claim", owner)
			}
			run(t, b)
			t.Cleanup(func() { close(pb.release) })
			await(t, "relay B's Publish call, after A's lease ended", pb.held)
			tokenB, owner, claimed := e.claim(t)
			if owner != "relay-B" || tokenB <= tokenA || !claimed {
				t.Fatalf("after B's takeover: owner %q, token %d (A's was %d), claimed %v", owner, tokenB, tokenA, claimed)
			}
			held := e.snapshot(t)

			close(pa.release) // A's call returns, long after its lease
			stop(t, a)        // A has recorded what it would
			if now := e.snapshot(t); now != held {
				t.Fatalf("relay A, fenced out, changed B's claim:\n  B's claim: %s\n  after A:   %s", held, now)
			}
			if got := oa.Ops(txinbox.OpRelayed); len(got) != 0 {
				t.Errorf("relay A, fenced out, told its Tracer %+v, want nothing: it recorded nothing", got)
			}

			pb.release <- struct{}{} // B's call returns
			waitFor(t, "B to send the event", func() bool { return e.count(t, "sent") == 1 })
			var started, failed int
			var token int64
			if err := e.Pool.QueryRow(context.Background(), e.SQL(`SELECT attempts_started, attempts_failed, token FROM {schema}.outbox`)).
				Scan(&started, &failed, &token); err != nil {
				t.Fatal(err)
			}
			if started != 2 || failed != 0 || token != tokenB {
				t.Errorf("sent with %d attempts started, %d failed, token %d; want 2, 0, %d (B's)", started, failed, token, tokenB)
			}
			stop(t, b) // B has told its Tracer
			if got := ob.Ops(txinbox.OpRelayed); len(got) != 1 || got[0].End.Outcome != txinbox.OutcomeSent || got[0].Start.Attempt != 2 {
				t.Errorf("relay B told its Tracer %+v, want the event sent once, at attempt 2", got)
			}
			for _, r := range []*tracerec.Recorder{oa, ob} {
				if err := r.Err(); err != nil || r.Open() != 0 {
					t.Errorf("hooks: %v, %d operations not ended", err, r.Open())
				}
			}
			if n := pa.calls.Load() + pb.calls.Load(); n != 2 {
				t.Errorf("%d Publish calls, want 2 (A's stale one and B's)", n)
			}
		})
	}
}
