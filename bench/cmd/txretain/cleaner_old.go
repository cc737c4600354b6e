//go:build oldlayout

package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/retention"
)

// layout names the tree this file builds in: before migration 00006 (commit b2d7f61), whose
// retention.Config has FullSweepInterval and no Generation. bench/retention.sh copies this
// directory into a worktree of that commit and builds it with -tags oldlayout.
const layout = "old"

// cleaner wraps the tree's retention.Cleaner.
type cleaner struct{ *retention.Cleaner }

// newCleaner: the old layout's Cleaner deletes expired rows; its first pass is a full one, later
// passes are quick ones (from where the last found rows still in their window) except one full pass
// per FullSweepInterval (default 1 h: none more in a 10-minute run; messages complete in id order
// here, so quick passes find every expired row).
func newCleaner(store txinbox.Store, o options, log *slog.Logger) (*cleaner, error) {
	cl, err := retention.New(store, retention.Config{Interval: o.interval, Logger: log})
	return &cleaner{cl}, err
}

func cleanerSettings(o options) string {
	return fmt.Sprintf("retention.Config{Interval: %s}, other fields default (FullSweepInterval 1h, BatchSize 1000)", o.interval)
}

func (cl *cleaner) pass(ctx context.Context) (passStats, error) {
	res, _, err := cl.RunOnce(ctx)
	return passStats{deleted: res.Deleted}, err
}
