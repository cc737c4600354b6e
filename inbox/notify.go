package inbox

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txinbox/txinbox/internal/sqlc"
	"github.com/txinbox/txinbox/internal/store"
)

// Wake-up notifications.
//
// A receiving statement that inserts a new message may also send a PostgreSQL notification on
// NotifyChannel(schema), with the consumer as payload. It is delivered when the receiving transaction
// commits (never if it rolls back), and worker pools listening on the channel claim at once instead of
// at their next poll.
//
// PostgreSQL serialises the commits of all notifying transactions of a cluster: each holds a global
// lock from the start of its commit until its commit record is flushed to disk, so a NOTIFY in every
// transaction divides a cluster's commit rate several times over (the measurement is in
// bench/RESULTS.md, "Figures formerly in the docs"). So a Client notifies at most once per
// Config.NotifyInterval for each consumer. The messages received in between are found by the pools'
// polling, which stays fast (worker.Config.HotPollInterval, 10ms) for a while after any activity,
// notifications included (worker.Config.HotWindow, 1s): as long as HotWindow exceeds NotifyInterval,
// no message waits for a full poll interval, and a longer NotifyInterval costs no latency. At the default of 50ms a busy
// Client sends at most 20 notifications a second per consumer, which holds the lock a small share of
// the time (bench/RESULTS.md).
//
// One case is not covered: a message received in a transaction of the caller (ReceiveTx) that is
// debounced by a notification whose own transaction commits much later waits until that commit or
// the pool's next poll, whichever comes first.

// DefaultNotifyInterval is Config.NotifyInterval when it is zero.
const DefaultNotifyInterval = 50 * time.Millisecond

// maxChannelBytes is the longest channel name PostgreSQL accepts (NAMEDATALEN - 1).
const maxChannelBytes = 63

// NotifyChannel returns the channel on which Clients using schema announce new messages (the
// payload is the consumer): "txinbox_" followed by the schema name, or, when that would exceed the
// 63 bytes PostgreSQL allows a channel name, "txinbox_" followed by 16 hex digits of a hash of it.
func NotifyChannel(schema string) string {
	if c := "txinbox_" + schema; len(c) <= maxChannelBytes {
		return c
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("txinbox_%016x", h.Sum64())
}

// notifier debounces the notifications of one Client. Its zero value is ready to use.
type notifier struct {
	once    sync.Once
	channel string
	last    sync.Map // consumer -> *atomic.Int64: monotonic time (ns since epoch) of its last notification
}

// epoch anchors the monotonic clock of the notifiers.
var epoch = time.Now()

// notifyGrant is a consumer allowed to notify by one statement, with the time it replaced, to give the
// slot back if the statement inserts nothing for it.
type notifyGrant struct {
	last      *atomic.Int64
	prev, now int64
	consumer  string
	inserted  bool
}

// receiveBatch runs ReceiveBatch, asking it to notify for each consumer whose interval has passed,
// and gives the turn back to consumers for which nothing was inserted (all duplicates) or the
// statement failed, so that their next new message notifies.
func (c *Client) receiveBatch(ctx context.Context, db sqlc.DBTX, p sqlc.ReceiveBatchParams) ([]sqlc.ReceiveBatchRow, error) {
	interval := c.cfg.NotifyInterval
	if interval == 0 {
		interval = DefaultNotifyInterval
	}
	var grants []notifyGrant
	if interval > 0 {
		n := &c.notify
		n.once.Do(func() { n.channel = NotifyChannel(c.cfg.Schema) })
		now := int64(time.Since(epoch)) + int64(interval) // > 0 on the first call, so 0 means never
		for _, consumer := range p.Consumers {
			if hasGrant(grants, consumer) {
				continue
			}
			v, ok := n.last.Load(consumer)
			if !ok {
				v, _ = n.last.LoadOrStore(consumer, new(atomic.Int64))
			}
			last := v.(*atomic.Int64)
			prev := last.Load()
			if now-prev >= int64(interval) && last.CompareAndSwap(prev, now) {
				grants = append(grants, notifyGrant{last: last, prev: prev, now: now, consumer: consumer})
				p.NotifyConsumers = append(p.NotifyConsumers, consumer)
			}
		}
		p.NotifyChannel = n.channel
	}
	rows, err := store.Queries.ReceiveBatch(ctx, c.st.Wrap(db), p)
	if len(grants) > 0 {
		if err == nil {
			for _, r := range rows {
				if r.Inserted && r.Ord >= 1 && int(r.Ord) <= len(p.Consumers) {
					for i := range grants {
						if grants[i].consumer == p.Consumers[r.Ord-1] {
							grants[i].inserted = true
						}
					}
				}
			}
		}
		for _, g := range grants {
			if !g.inserted {
				g.last.CompareAndSwap(g.now, g.prev) // no notification was sent: give the turn back
			}
		}
	}
	return rows, err
}

func hasGrant(gs []notifyGrant, consumer string) bool {
	for _, g := range gs {
		if g.consumer == consumer {
			return true
		}
	}
	return false
}
