package maintain

import "time"

// Observer is told about a Maintainer's leadership and its jobs' runs (package metrics implements
// it). Its methods must be fast and safe for concurrent use.
type Observer interface {
	// Leader is called when the maintainer becomes the schema's leader (Leading true) and when it
	// stops leading (Leading false).
	Leader(LeaderEvent)
	// Ran is called after each run of a job, once its end is recorded.
	Ran(RunEvent)
}

// LeaderEvent describes a change of a maintainer's leadership.
type LeaderEvent struct {
	Schema string
	// Owner is the maintainer's Config.Owner, and Term the term of its lease.
	Owner string
	Term  int64
	// Leading is true when the maintainer became the leader, false when it stopped.
	Leading bool
	// Reason says why: "elected", "stopped" (Stop, or Start's ctx ended), or why the lease was lost.
	Reason string
}

// RunEvent describes a run of a maintenance job.
type RunEvent struct {
	Schema string
	Owner  string
	Job    string
	// Period is the start of the period the run was for (server clock).
	Period time.Time
	// Duration is how long the job ran, and Err its error (nil when it succeeded).
	Duration time.Duration
	Err      error
}

func (m *Maintainer) observeLeader(leading bool, term int64, reason string) {
	if m.cfg.Observer != nil {
		m.cfg.Observer.Leader(LeaderEvent{Schema: m.store.Schema, Owner: m.cfg.Owner, Term: term, Leading: leading, Reason: reason})
	}
}
