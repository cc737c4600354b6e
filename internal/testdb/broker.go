package testdb

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"
)

// Broker returns the URL of a message broker for t: the environment variable env if set, else def.
// If nothing answers at its address, t fails when CI=true (CI must not pass without the brokers it
// needs) and is skipped otherwise, with a message naming env.
func Broker(t testing.TB, name, env, def string) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		u = def
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("%s: bad URL %q: %v", env, u, err)
	}
	c, err := net.DialTimeout("tcp", pu.Host, 3*time.Second)
	if err != nil {
		msg := fmt.Sprintf("%s is not reachable at %s (%v); set %s or start it", name, pu.Host, err, env)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	_ = c.Close()
	return u
}
