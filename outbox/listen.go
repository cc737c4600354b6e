package outbox

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/internal/engine"
)

// Wake-ups: a relay listens (LISTEN) on schemasql.OutboxChannel of its schema on a connection of
// its own, and every notification wakes its runners (package internal/engine runs the listener, as
// for a worker pool, with the same check that notifications really come back: a pooler in
// transaction mode swallows them, and the relay then polls). Publishing Clients notify at most once
// per Store.NotifyInterval; the events in between are found by the fast polling a relay keeps up
// for a while after any activity (RelayConfig.PollInterval). Polling at PollInterval remains the
// fallback: when listening is off (a negative Store.NotifyInterval) or impossible, or while the
// listening connection is down.

// listenConnector returns how the relay opens its listening connection, or nil if it cannot.
func (r *Relay) listenConnector() func(ctx context.Context) (*pgx.Conn, error) {
	if r.cfg.tune.ListenConnect != nil {
		return r.cfg.tune.ListenConnect
	}
	return engine.Connector(r.db, "txinbox outbox listener")
}
