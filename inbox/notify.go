package inbox

import (
	"sync"
	"sync/atomic"
	"time"
)

// Wake-up notifications.
//
// A receiving statement that inserts a new message may also send a PostgreSQL notification on
// Store.NotifyChannel, with the consumer as payload. It is delivered when the receiving transaction
// commits (never if it rolls back), and worker pools listening on the channel claim at once instead of
// at their next poll.
//
// PostgreSQL serialises the commits of all notifying transactions of a cluster: each holds a global
// lock from the start of its commit until its commit record is flushed to disk, so a NOTIFY in every
// transaction divides a cluster's commit rate several times over (the measurement is in
// docs/design/wake-up.md, "The cost of a NOTIFY"). So a Client notifies at most once per
// Store.NotifyInterval for each consumer. The messages received in between are found by the pools'
// polling, which stays fast (every 10ms) for a while after any activity, notifications included (1s,
// or twice NotifyInterval if that is longer: worker.Config.PollInterval): since that window exceeds
// NotifyInterval, no message waits for a full poll interval, and a longer NotifyInterval costs no
// latency. At the default of 50ms a busy
// Client sends at most 20 notifications a second per consumer, which holds the lock a small share of
// the time (docs/design/wake-up.md).
//
// One case is not covered: a message received in a transaction of the caller (ReceiveTx) that is
// debounced by a notification whose own transaction commits much later waits until that commit or
// the pool's next poll, whichever comes first.

// notifier debounces the notifications of one Client: at most one per interval per consumer.
type notifier struct {
	interval time.Duration // Store.NotifyInterval: negative, never notify
	channel  string        // Store.NotifyChannel
	last     sync.Map      // consumer -> *atomic.Int64: monotonic time (ns since epoch) of its last notification
}

// epoch anchors the monotonic clock of the notifiers.
var epoch = time.Now()

// notifyGrant is a consumer allowed to notify by one statement, with the time it replaced, to give the
// slot back if the statement inserts nothing for it.
type notifyGrant struct {
	last      *atomic.Int64
	prev, now int64
	consumer  string
}

// grant returns the consumers among consumers whose interval has passed, each once, and takes their
// turn: the statement that follows may notify for them.
func (n *notifier) grant(consumers []string) []notifyGrant {
	if n.interval <= 0 {
		return nil
	}
	var grants []notifyGrant
	now := int64(time.Since(epoch)) + int64(n.interval) // > 0 on the first call, so 0 means never
	for _, consumer := range consumers {
		if hasGrant(grants, consumer) {
			continue
		}
		v, ok := n.last.Load(consumer)
		if !ok {
			v, _ = n.last.LoadOrStore(consumer, new(atomic.Int64))
		}
		last := v.(*atomic.Int64)
		prev := last.Load()
		if now-prev >= int64(n.interval) && last.CompareAndSwap(prev, now) {
			grants = append(grants, notifyGrant{last: last, prev: prev, now: now, consumer: consumer})
		}
	}
	return grants
}

// settle gives the turn back to the granted consumers for which nothing was inserted (all
// duplicates, or the statement failed), so that their next new message notifies.
func (n *notifier) settle(grants []notifyGrant, inserted map[string]bool) {
	for _, g := range grants {
		if !inserted[g.consumer] {
			g.last.CompareAndSwap(g.now, g.prev) // no notification was sent: give the turn back
		}
	}
}

func hasGrant(gs []notifyGrant, consumer string) bool {
	for _, g := range gs {
		if g.consumer == consumer {
			return true
		}
	}
	return false
}
