package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
)

// Run starts s and stops it when t ends (waiting at most 10s; a Stop error is not reported: the
// tests that care about it stop s themselves).
func Run(t testing.TB, s txinbox.Service) {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
}
