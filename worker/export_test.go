package worker

import (
	"time"

	"github.com/txinbox/txinbox"
)

// SetClaimHook makes fn run in p after each claim that took messages and before their handlers run,
// in the batch transaction that claimed them (nil removes it), with p and the keys of the claimed
// messages (suspects too). Call it before p.Start. Tests use it to freeze a
// worker at the worst moment; it affects p only, so such tests may run in parallel.
func SetClaimHook(p *Pool, fn func(p *Pool, keys []string)) {
	if fn == nil {
		p.claimHook = nil
		return
	}
	p.claimHook = func(batch []*claimed) {
		keys := make([]string, len(batch))
		for i, c := range batch {
			keys[i] = c.Key
		}
		fn(p, keys)
	}
}

// ListenerPID returns the backend pid of p's listening connection while it listens, else 0.
func ListenerPID(p *Pool) uint32 { return p.eng.ListenPID() }

// Notifications returns the number of notifications p received for its consumer.
func Notifications(p *Pool) int64 { return p.eng.Notifications() }

// SetOrderingSnooze sets how long p's claims snooze messages blocked behind their ordering key (0:
// the default). Call it before p.Start. Tests set it to hours: a message left snoozed (ReadyNext
// missed) then never runs and the test fails.
func SetOrderingSnooze(p *Pool, d time.Duration) { p.orderingSnooze = d }

// LeaseOf returns p's Config.Lease after defaults.
func LeaseOf(p *Pool) time.Duration { return p.cfg.Lease }

// ClaimTimeoutOf returns p's Config.ClaimTimeout after defaults.
func ClaimTimeoutOf(p *Pool) time.Duration { return p.cfg.ClaimTimeout }

// BackoffOf returns p's Config.Backoff after defaults.
func BackoffOf(p *Pool) txinbox.Backoff { return p.cfg.Backoff }
