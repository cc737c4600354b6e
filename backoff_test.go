package txinbox_test

import (
	"math"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
)

func TestExponentialBackoff(t *testing.T) {
	t.Parallel()
	noJitter := txinbox.Exponential{Base: time.Second, Max: time.Minute, Jitter: -1}
	// First failure: the base; a count below 1 counts as the first.
	for _, n := range []int{1, 0, -5} {
		if d := noJitter.Delay(n); d != time.Second {
			t.Errorf("Delay(%d) = %v, want 1s", n, d)
		}
	}
	// Doubling up to the cap, then the cap, however many failures.
	for n, want := range map[int]time.Duration{2: 2 * time.Second, 3: 4 * time.Second, 6: 32 * time.Second,
		7: time.Minute, 8: time.Minute, 64: time.Minute, 1000: time.Minute, math.MaxInt: time.Minute} {
		if d := noJitter.Delay(n); d != want {
			t.Errorf("Delay(%d) = %v, want %v", n, d, want)
		}
	}
	// A base above the cap is capped.
	if d := (txinbox.Exponential{Base: time.Hour, Max: time.Minute, Jitter: -1}).Delay(1); d != time.Minute {
		t.Errorf("base above cap: %v, want 1m", d)
	}
	// The zero value's defaults: 1s, ±20%, capped at 10m (then ±20%).
	def := txinbox.Exponential{}
	within := func(name string, b txinbox.Backoff, n int, lo, hi time.Duration) (minD, maxD time.Duration) {
		t.Helper()
		minD, maxD = time.Duration(math.MaxInt64), 0
		for range 5000 {
			d := b.Delay(n)
			if d < lo || d > hi {
				t.Fatalf("%s: Delay(%d) = %v, outside [%v, %v]", name, n, d, lo, hi)
			}
			minD, maxD = min(minD, d), max(maxD, d)
		}
		return minD, maxD
	}
	within("default, first", def, 1, 800*time.Millisecond, 1200*time.Millisecond)
	within("default, third", def, 3, 3200*time.Millisecond, 4800*time.Millisecond)
	within("default, capped", def, 50, 8*time.Minute, 12*time.Minute)
	// Jitter spreads over its whole range (5000 draws: a miss of either end is vanishingly unlikely).
	lo, hi := within("jitter 0.5", txinbox.Exponential{Base: 10 * time.Second, Jitter: 0.5}, 1, 5*time.Second, 15*time.Second)
	if lo > 6*time.Second || hi < 14*time.Second {
		t.Errorf("jitter 0.5 drew only %v to %v of 5s to 15s", lo, hi)
	}
	within("jitter 1", txinbox.Exponential{Base: time.Second, Jitter: 1}, 1, 0, 2*time.Second)
	// A cap at the largest Duration (no cap, in effect) never wraps around to a negative delay.
	for _, j := range []float64{-1, 0.2, 1} {
		b := txinbox.Exponential{Base: time.Second, Max: time.Duration(math.MaxInt64), Jitter: j}
		for _, n := range []int{62, 63, 64, 100, math.MaxInt} {
			if d := b.Delay(n); d <= 0 {
				t.Errorf("Exponential{Max: MaxInt64, Jitter: %v}.Delay(%d) = %v, want a positive delay", j, n, d)
			}
		}
	}
}
