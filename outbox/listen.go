package outbox

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/internal/engine"
)

// ListenConnectFunc opens a connection for a relay to listen on (RelayConfig.ListenConnect).
type ListenConnectFunc func(ctx context.Context) (*pgx.Conn, error)

// Wake-ups: a relay listens (LISTEN) on NotifyChannel(store) on a connection of its own, and every
// notification wakes its runners (package internal/engine runs the listener, as for a worker pool,
// with the same check that notifications really come back: a pooler in transaction mode swallows
// them, and the relay then polls). Publishing Clients notify at most once per Store.NotifyInterval;
// the events in between are found by the fast polling a relay keeps up for HotWindow after any
// activity. Polling at PollInterval remains the fallback: when listening is disabled or impossible,
// or while the listening connection is down.

// listenConnector returns how the relay opens its listening connection, or nil if it cannot.
func (r *Relay) listenConnector() ListenConnectFunc {
	if r.cfg.ListenConnect != nil {
		return r.cfg.ListenConnect
	}
	return engine.Connector(r.db, "txinbox outbox listener")
}
