package worker

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/internal/engine"
)

// Wake-ups: a pool listens (LISTEN) on Store.NotifyChannel on a connection of its own, and a
// notification whose payload is its consumer wakes its runners at once (package internal/engine
// runs the listener). Receiving Clients notify at most once per Store.NotifyInterval per consumer;
// the messages in between are found by the fast polling a pool keeps up for a while after any
// activity (Config.PollInterval). Polling at PollInterval remains the fallback: when listening is off
// (a negative Store.NotifyInterval), impossible (Store.DB is not a *pgxpool.Pool, a pooler in
// transaction mode swallows notifications) or the listening connection is down.

// listenConnector returns how the pool opens its listening connection, or nil if it cannot.
func (p *Pool) listenConnector() func(ctx context.Context) (*pgx.Conn, error) {
	if p.cfg.tune.ListenConnect != nil {
		return p.cfg.tune.ListenConnect
	}
	return p.connector("txinbox listener")
}

// connector returns how the pool opens a connection of its own outside its pgxpool (named
// applicationName unless the pool's configuration names it), or nil if db is not a *pgxpool.Pool.
func (p *Pool) connector(applicationName string) func(ctx context.Context) (*pgx.Conn, error) {
	return engine.Connector(p.db, applicationName)
}
