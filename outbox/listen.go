package outbox

import (
	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/engine"
	"github.com/txinbox/txinbox/internal/schemasql"
)

// Wake-ups: a relay listens (LISTEN) on schemasql.OutboxChannel of its schema on a connection of
// its own, and every notification wakes its runners (package internal/engine runs the listener, as
// for a worker pool, with the same check that notifications really come back: a pooler in
// transaction mode swallows them, and the relay then polls). Publishing Clients notify at most once
// per Store.NotifyInterval; the events in between are found by the fast polling a relay keeps up
// for a while after any activity (RelayConfig.PollInterval). Polling at PollInterval remains the
// fallback: when listening is off (a negative Store.NotifyInterval) or impossible, or while the
// listening connection is down.

// listen returns where a relay of store's outbox listens.
func listen(store txinbox.Store) engine.Listen {
	return engine.Listen{Channel: schemasql.OutboxChannel(store.Schema)}
}
