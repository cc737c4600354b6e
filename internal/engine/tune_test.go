package engine

import (
	"testing"
	"time"
)

// TestDerive: the hot window exceeds the notifiers' debounce whatever it is, the claim bound stays
// below the lease, a negative NotifyInterval turns LISTEN off, and a setting a test made is kept.
func TestDerive(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		notify, lease        time.Duration
		hotWindow, claimTime time.Duration
		noListen             bool
	}{
		{50 * time.Millisecond, time.Minute, time.Second, 10 * time.Second, false},
		{time.Second, time.Minute, 2 * time.Second, 10 * time.Second, false},
		{5 * time.Second, 4 * time.Second, 10 * time.Second, 2 * time.Second, false},
		{-1, time.Hour, time.Second, 10 * time.Second, true},
	} {
		got := Tune{}.Derive(c.notify, c.lease)
		if got.HotWindow != c.hotWindow || got.ClaimTimeout != c.claimTime || got.NoListen != c.noListen {
			t.Errorf("Derive(%v, %v) = %+v, want hot window %v, claim bound %v, no LISTEN %v", c.notify, c.lease, got,
				c.hotWindow, c.claimTime, c.noListen)
		}
		if c.notify > 0 && got.HotWindow <= c.notify {
			t.Errorf("Derive(%v, %v): hot window %v does not exceed NotifyInterval", c.notify, c.lease, got.HotWindow)
		}
		if got.ClaimTimeout >= c.lease {
			t.Errorf("Derive(%v, %v): claim bound %v not below the lease", c.notify, c.lease, got.ClaimTimeout)
		}
	}
	set := Tune{HotWindow: -1, ClaimTimeout: time.Millisecond}.Derive(time.Second, time.Minute)
	if set.HotWindow != -1 || set.ClaimTimeout != time.Millisecond {
		t.Errorf("Derive changed settings a test made: %+v", set)
	}
}
