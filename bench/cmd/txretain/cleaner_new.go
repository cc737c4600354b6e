//go:build !oldlayout

package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/retention"
)

// layout names the tree this file builds in: after migration 00006 (generations).
const layout = "new"

// cleaner wraps the tree's retention.Cleaner.
type cleaner struct{ *retention.Cleaner }

// newCleaner: the new layout's Cleaner rotates once per Generation, which the run sets to the
// retention window (the default when Generation is zero); Interval is how often a pass checks.
func newCleaner(store txinbox.Store, o options, log *slog.Logger) (*cleaner, error) {
	cl, err := retention.New(store, retention.Config{Interval: o.interval, Generation: o.retention, Logger: log})
	return &cleaner{cl}, err
}

func cleanerSettings(o options) string {
	return fmt.Sprintf("retention.Config{Interval: %s, Generation: %s}, other fields default (--full-sweep: no such field, ignored)", o.interval, o.retention)
}

func (cl *cleaner) pass(ctx context.Context) (passStats, error) {
	res, _, err := cl.RunOnce(ctx)
	r := res.Rotation
	return passStats{rotated: r.Rotated, copied: r.Copied, rotation: r.Duration}, err
}
