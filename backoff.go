package txinbox

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff chooses the delay before the next attempt of a message (worker.Config.Backoff,
// worker.HandlerConfig.Backoff) or of an event (outbox.RelayConfig.Backoff) after failures failed
// attempts (1 or more). It must be safe for concurrent use.
type Backoff interface {
	Delay(failures int) time.Duration
}

// BackoffFunc adapts a function to Backoff.
type BackoffFunc func(failures int) time.Duration

// Delay calls f.
func (f BackoffFunc) Delay(failures int) time.Duration { return f(failures) }

// Exponential is exponential backoff with jitter: Base * 2^(failures-1), capped at Max, then moved by a
// random amount of up to ±Jitter of itself. Its zero value is the default Backoff of worker pools and
// outbox relays: 1s, 2s, 4s ... capped at 10 minutes, ±20%.
type Exponential struct {
	Base   time.Duration // first delay. Default: 1s.
	Max    time.Duration // cap. Default: 10m.
	Jitter float64       // 0 to 1. Default: 0.2. Negative means none.
}

// Delay implements Backoff.
func (e Exponential) Delay(failures int) time.Duration {
	base, maxd, jitter := e.Base, e.Max, e.Jitter
	if base <= 0 {
		base = time.Second
	}
	if maxd <= 0 {
		maxd = 10 * time.Minute
	}
	if jitter == 0 {
		jitter = 0.2
	}
	if failures < 1 {
		failures = 1
	}
	d := float64(base) * math.Pow(2, float64(min(failures-1, 62)))
	d = min(d, float64(maxd))
	if jitter > 0 {
		d *= 1 + jitter*(2*rand.Float64()-1)
	}
	if d >= math.MaxInt64 { // a Max near the largest Duration: converting would wrap to a negative delay
		return math.MaxInt64
	}
	return time.Duration(d)
}
