package worker

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

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

// ClaimTimeoutOf returns p's claim bound (derived from Config.Lease unless a test set it).
func ClaimTimeoutOf(p *Pool) time.Duration { return p.cfg.tune.ClaimTimeout }

// HotWindowOf returns how long p polls fast after activity (derived from Store.NotifyInterval
// unless a test set it).
func HotWindowOf(p *Pool) time.Duration { return p.cfg.tune.HotWindow }

// Listens reports whether p listens for notifications (Start opens its listening connection).
func Listens(p *Pool) bool { return !p.cfg.tune.NoListen }

// SetHotWindow sets how long a pool of c polls fast after activity (0: derived; negative: never).
func SetHotWindow(c *Config, d time.Duration) { c.tune.HotWindow = d }

// SetClaimTimeout sets the server's bound of a pool of c's claims (0: derived; negative: none).
func SetClaimTimeout(c *Config, d time.Duration) { c.tune.ClaimTimeout = d }

// SetIdleWarnAfter sets how long a pool of c is idle before it warns about consumers no pool serves
// (0: derived; negative: never).
func SetIdleWarnAfter(c *Config, d time.Duration) { c.tune.idleWarnAfter = d }

// NoListen makes a pool of c poll only: no LISTEN.
func NoListen(c *Config) { c.tune.NoListen = true }

// SetListenConnect makes a pool of c open its listening connection with connect.
func SetListenConnect(c *Config, connect func(context.Context) (*pgx.Conn, error)) {
	c.tune.ListenConnect = connect
}

// BackoffOf returns p's Config.Backoff after defaults.
func BackoffOf(p *Pool) txinbox.Backoff { return p.cfg.Backoff }

// SnoozeLockKey returns the advisory lock key between p's snoozes of blocked messages and the
// finishing of their keys' messages (LockSnooze, LockSnoozeShared).
func SnoozeLockKey(p *Pool) int64 { return p.snoozeKey }

// NoSnoozing keeps p's rescuer from snoozing blocked messages (SnoozeBlocked) for a century. Call it
// before p.Start. Tests that play a snooze themselves use it to be the only session after its lock.
func NoSnoozing(p *Pool) { p.snoozedAt = time.Now().Add(100 * 365 * 24 * time.Hour) }

// SetCursorLife sets how long after a claim from the head p's claims start at its cursor (0: the
// default, a second). Call it before p.Start. Tests whose batches may take longer than that on a
// loaded machine set it to hours.
func SetCursorLife(p *Pool, d time.Duration) { p.cursor.life = d }

// HoldTurn takes p's claim turn, as a runner whose claim of ready messages is running would, until
// the returned func gives it back: p's runners wait for it with their batch transactions begun.
func HoldTurn(p *Pool) (release func()) {
	p.turn <- struct{}{}
	return func() { <-p.turn }
}
