//go:build oldlayout

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/retention"
	"github.com/txinbox/txinbox/worker"
)

// layout names the tree this file builds in: before migration 00006 (commit b2d7f61), whose
// retention configuration has FullSweepInterval and no Generation. bench/retention.sh copies this
// directory into a worktree of that commit and builds it with -tags oldlayout.
const layout = "old"

// cleaner wraps the tree's Cleaner (package retention).
type cleaner struct{ *retention.Cleaner }

// newCleaner: the old layout's Cleaner deletes expired rows; its first pass is a full one, later
// passes are quick ones (from a cursor in id order) except one full pass per FullSweepInterval
// (--full-sweep; default 1 h). A quick pass moves its cursor past a span of ids where it found
// expired rows, so the rows of that span still in their window when it passed are left for the next
// full pass.
func newCleaner(store txinbox.Store, o options, log *slog.Logger) (*cleaner, error) {
	cl, err := retention.New(store, retention.Config{Interval: o.interval, FullSweepInterval: o.fullSweep, Logger: log})
	return &cleaner{cl}, err
}

func cleanerSettings(o options) string {
	full := "1h (default)"
	if o.fullSweep != 0 {
		full = o.fullSweep.String()
	}
	return fmt.Sprintf("retention.Config{Interval: %s, FullSweepInterval: %s}, other fields default (BatchSize 1000)", o.interval, full)
}

func (cl *cleaner) pass(ctx context.Context) (passStats, error) {
	res, _, err := cl.RunOnce(ctx)
	return passStats{deleted: res.Deleted}, err
}

// chartCommand: the charts are drawn by the new layout's build only (chart.go).
func chartCommand([]string) int {
	fmt.Fprintln(os.Stderr, "txretain chart: built with -tags oldlayout; use the new layout's build")
	return 2
}

// newPool makes the run's worker pool, logging to log (the pool's Config.Logger in that tree).
func newPool(store txinbox.Store, cfg worker.Config, log *slog.Logger) (*worker.Pool, error) {
	cfg.Logger = log
	return worker.New(store, cfg)
}
