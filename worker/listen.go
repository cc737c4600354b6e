package worker

import (
	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/engine"
)

// Wake-ups: a pool listens (LISTEN) on Store.NotifyChannel on a connection of its own, and a
// notification whose payload is its consumer wakes its runners at once (package internal/engine
// runs the listener). Receiving Clients notify at most once per Store.NotifyInterval per consumer;
// the messages in between are found by the fast polling a pool keeps up for a while after any
// activity (Config.PollInterval). Polling at PollInterval remains the fallback: when listening is off
// (a negative Store.NotifyInterval), impossible (Store.DB is not a *pgxpool.Pool, a pooler in
// transaction mode swallows notifications) or the listening connection is down.

// listen returns where a pool of consumer's messages in store listens.
func listen(store txinbox.Store, consumer string) engine.Listen {
	return engine.Listen{Channel: store.NotifyChannel(), Wakes: func(payload string) bool { return payload == consumer }}
}
