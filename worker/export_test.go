package worker

import "time"

// SetClaimHook installs fn to run between a claim's commit and its batch transaction (nil removes it),
// with the keys of the claimed messages. Tests use it to freeze a worker at the worst moment.
func SetClaimHook(fn func(p *Pool, keys []string)) {
	if fn == nil {
		testHookClaimed = nil
		return
	}
	testHookClaimed = func(p *Pool, batch []*claimed) {
		keys := make([]string, len(batch))
		for i, c := range batch {
			keys[i] = c.Key
		}
		fn(p, keys)
	}
}

// ListenerPID returns the backend pid of p's listening connection while it listens, else 0.
func ListenerPID(p *Pool) uint32 { return p.listenPID.Load() }

// Notifications returns the number of notifications p received for its consumer.
func Notifications(p *Pool) int64 { return p.notifications.Load() }

// SetOrderingSnooze sets how long blocked messages are snoozed, returning the previous value. Tests
// set it to hours: a message left snoozed (ReadyNext missed) then never runs and the test fails.
func SetOrderingSnooze(d time.Duration) time.Duration {
	old := orderingSnooze
	orderingSnooze = d
	return old
}
