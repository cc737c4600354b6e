package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The settings that the engine's users (worker.Config, outbox.RelayConfig) derive from their
// configuration and the Store's, documented there.
const (
	// HotPoll is how often one runner polls while the engine is hot (PollInterval if shorter).
	HotPoll = 10 * time.Millisecond
	// MinHotWindow is the shortest hot window: it is the longer of this and twice the Store's
	// NotifyInterval, so that it always exceeds the notifiers' debounce.
	MinHotWindow = time.Second
	// MaxClaimTimeout bounds a claim on the server: the lesser of this and half the Lease.
	MaxClaimTimeout = 10 * time.Second
)

// Tune holds the derived settings of an engine's user, which its tests may set (the users'
// export_test.go); a zero field takes the derived value ([Tune.Derive]).
type Tune struct {
	// HotWindow is how long the engine stays hot after its last activity; negative: never.
	HotWindow time.Duration
	// ClaimTimeout bounds each claim on the server (statement_timeout); negative: no bound.
	ClaimTimeout time.Duration
	// NoListen turns LISTEN off: the runners poll only.
	NoListen bool
	// ListenConnect opens the listening connection; nil: [Connector] of the user's DB.
	ListenConnect func(ctx context.Context) (*pgx.Conn, error)
}

// Derive returns t with its zero settings derived: HotWindow the longer of MinHotWindow and twice
// notifyInterval, ClaimTimeout the lesser of MaxClaimTimeout and half the lease, NoListen when
// notifyInterval is negative (the Store's "no notifications, no LISTEN").
func (t Tune) Derive(notifyInterval, lease time.Duration) Tune {
	if t.HotWindow == 0 {
		t.HotWindow = max(MinHotWindow, 2*notifyInterval)
	}
	if t.ClaimTimeout == 0 {
		t.ClaimTimeout = min(MaxClaimTimeout, lease/2)
	}
	if notifyInterval < 0 {
		t.NoListen = true
	}
	return t
}
