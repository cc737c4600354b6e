package outbox

import (
	"context"
	"time"

	"github.com/txinbox/txinbox/internal/engine"
)

// SetSnooze sets how long r's claims snooze events blocked behind their key (0: the default). Call it
// before r.Start. Tests set it to hours: an event left snoozed (OutboxReadyNext missed) then never
// goes and the test fails.
func SetSnooze(r *Relay, d time.Duration) { r.snooze = d }

// ListenerPID returns the backend pid of r's listening connection while it listens, else 0.
func ListenerPID(r *Relay) uint32 { return r.eng.ListenPID() }

// Notifications returns the number of notifications r received.
func Notifications(r *Relay) int64 { return r.eng.Notifications() }

// ClaimLockKey returns the key of r's claim lock (OutboxClaimLock).
func ClaimLockKey(r *Relay) int64 { return r.lockKey }

// Stopping reports whether r's Stop has been called (its runners claim no more).
func Stopping(r *Relay) bool { return r.eng.Stopped() }

// ClaimTimeoutOf returns r's claim bound (derived from RelayConfig.Lease unless a test set it).
func ClaimTimeoutOf(r *Relay) time.Duration { return r.cfg.tune.ClaimTimeout }

// HotWindowOf returns how long r polls fast after activity (derived from Store.NotifyInterval unless
// a test set it).
func HotWindowOf(r *Relay) time.Duration { return r.cfg.tune.HotWindow }

// Listens reports whether r listens for notifications.
func Listens(r *Relay) bool { return !r.cfg.tune.NoListen }

// SetHotWindow sets how long a relay of c polls fast after activity (0: derived; negative: never).
func SetHotWindow(c *RelayConfig, d time.Duration) { c.tune.HotWindow = d }

// SetClaimTimeout sets the server's bound of a relay of c's claims (0: derived; negative: none).
func SetClaimTimeout(c *RelayConfig, d time.Duration) { c.tune.ClaimTimeout = d }

// NoListen makes a relay of c poll only: no LISTEN.
func NoListen(c *RelayConfig) { c.tune.NoListen = true }

// CheckTopicOf returns the relay's error of an event of topic for a Publisher that is tc (nil if
// tc accepts it).
func CheckTopicOf(tc TopicChecker, topic string) error { return checkTopic(tc, topic) }

// Runner is what each of a relay's runner goroutines runs (engine.Runner).
type Runner interface {
	Claim(ctx context.Context) (engine.Outcome, error)
	Run(ctx context.Context)
	Rest(ctx context.Context)
}

// NewRunner returns a runner of r, as r.Start makes them, for a test to drive step by step.
func NewRunner(r *Relay) Runner { return &runner{r: r} }
