package maintain_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/maintain"
)

// leaderLog is a Store's Tracer that records the leadership of maintainers (txinbox.OpLead): the
// intervals each led; and the runs of their jobs (txinbox.OpJob).
type leaderLog struct {
	// elected, if set, is called when a maintainer is elected, before its jobs start.
	elected func()

	mu     sync.Mutex
	events []leaderAt
	runs   []string // the jobs run, by name, in the order they ended
}

type leaderAt struct {
	Owner   string
	Leading bool
	at      time.Time
}

// leadKey and jobKey are the context keys of the owner of a leadership and of the name of a job.
type (
	leadKey struct{}
	jobKey  struct{}
)

func (l *leaderLog) TraceStart(ctx context.Context, d txinbox.TraceStart) context.Context {
	switch d.Op {
	case txinbox.OpLead:
		if l.elected != nil {
			l.elected()
		}
		l.add(d.Owner, true)
		return context.WithValue(ctx, leadKey{}, d.Owner)
	case txinbox.OpJob:
		return context.WithValue(ctx, jobKey{}, d.Job)
	}
	return ctx
}

func (l *leaderLog) TraceEnd(ctx context.Context, d txinbox.TraceEnd) {
	switch d.Op {
	case txinbox.OpLead:
		owner, _ := ctx.Value(leadKey{}).(string)
		l.add(owner, false)
	case txinbox.OpJob:
		job, _ := ctx.Value(jobKey{}).(string)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.runs = append(l.runs, job)
	}
}

func (l *leaderLog) add(owner string, leading bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, leaderAt{owner, leading, time.Now()})
}

// leading returns the owners leading now, by the events so far.
func (l *leaderLog) leading() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := map[string]bool{}
	for _, e := range l.events {
		now[e.Owner] = e.Leading
	}
	var out []string
	for o, lead := range now {
		if lead {
			out = append(out, o)
		}
	}
	return out
}

// overlaps returns a description of two leaders at once, or "" if each election came after the
// previous leader had stopped.
func (l *leaderLog) overlaps() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	leading := map[string]bool{}
	for _, e := range l.events {
		if e.Leading {
			for o, lead := range leading {
				if lead && o != e.Owner {
					return e.Owner + " became leader while " + o + " led"
				}
			}
		}
		leading[e.Owner] = e.Leading
	}
	return ""
}

// Eight maintainers of one schema started at the same moment contend for the lease at once: exactly
// one leads, and the lease row names it. When it stops, another takes over, and never two lead at
// once. Three rounds of eight new maintainers, each round after the last one's leader stopped.
func TestOneMaintainerLeadsAtATime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	log := &leaderLog{}
	for round := range 3 {
		ms := startTogether(t, e, log, round, 8)
		waitFor(t, "a leader", func() bool { return len(log.leading()) > 0 })
		// Several renewals of the lease (every third of a second), and the others' looks at it.
		time.Sleep(time.Second)
		if o := log.overlaps(); o != "" {
			t.Fatalf("round %d: %s", round, o)
		}
		leaders := log.leading()
		if len(leaders) != 1 {
			t.Fatalf("round %d: leading: %v, want one", round, leaders)
		}
		var first *maintain.Maintainer
		for _, m := range ms {
			if lead, _ := m.Leading(); lead {
				if first != nil {
					t.Fatalf("round %d: %s and %s both report leading", round, first.Owner(), m.Owner())
				}
				first = m
			}
		}
		if first == nil || first.Owner() != leaders[0] {
			t.Fatalf("round %d: the leading maintainer %v is not the one the events name (%v)", round, first, leaders)
		}
		if owner := e.Count(t, `SELECT count(*) FROM {schema}.inbox_leader WHERE owner = $1 AND expires_at > now()`, first.Owner()); owner != 1 {
			t.Fatalf("round %d: the lease row does not name the leader %s", round, first.Owner())
		}
		if err := first.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "another leader", func() bool {
			l := log.leading()
			return len(l) == 1 && l[0] != first.Owner()
		})
		time.Sleep(500 * time.Millisecond)
		if o := log.overlaps(); o != "" {
			t.Fatalf("round %d: %s", round, o)
		}
		if l := log.leading(); len(l) != 1 {
			t.Fatalf("round %d: leading after the handover: %v, want one", round, l)
		}
		for _, m := range ms {
			if err := m.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if l := log.leading(); len(l) != 0 {
			t.Fatalf("round %d: leading after every maintainer stopped: %v", round, l)
		}
	}
}

// startTogether starts n maintainers of e's schema (Lease 1s, Tracer log) at the same moment, and
// stops them when t ends.
func startTogether(t *testing.T, e *env, log *leaderLog, round, n int) []*maintain.Maintainer {
	t.Helper()
	ms := make([]*maintain.Maintainer, n)
	for i := range ms {
		store := e.Store()
		store.Tracer = log
		m, err := maintain.New(store, maintain.Config{Lease: time.Second, Owner: fmt.Sprintf("r%d-m%d", round, i)})
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = m
	}
	var start, started sync.WaitGroup
	start.Add(1)
	for _, m := range ms {
		started.Go(func() {
			start.Wait()
			if err := m.Start(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	start.Done()
	started.Wait()
	t.Cleanup(func() {
		for _, m := range ms {
			_ = m.Stop(context.Background())
		}
	})
	return ms
}

// The maintainer rotates the inbox's generations by itself, once per Generation (nothing else rotates), and
// records each run of the job in inbox_maintenance.
func TestMaintainerRotates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gen := func() int64 { return e.Count(t, `SELECT gen FROM {schema}.inbox_ring`) }
	g0 := gen()
	e.maintainer(t, maintain.Config{Lease: time.Second, Generation: time.Second})
	waitFor(t, "two rotations", func() bool { return gen() >= g0+2 })
	// The job records its end after the rotation commits: wait for that record (a rotation on a
	// Citus coordinator takes seconds).
	waitFor(t, "the rotate job's run recorded as finished", func() bool {
		return e.Count(t, `SELECT count(*) FROM {schema}.inbox_maintenance WHERE job = 'rotate' AND finished_at IS NOT NULL AND error IS NULL`) == 1
	})
	if n := e.Count(t, `SELECT count(*) FROM {schema}.inbox_maintenance WHERE job = 'rotate'`); n != 1 {
		t.Fatalf("inbox_maintenance: %d rows of the job rotate, want 1", n)
	}
}
