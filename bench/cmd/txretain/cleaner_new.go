//go:build !oldlayout

package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/retention"
	"github.com/txinbox/txinbox/worker"
)

// layout names the tree this file builds in: after migration 00006 (generations).
const layout = "new"

// cleaner runs the tree's retention: the maintainer's two jobs, retention.Rotate and
// retention.DeleteExpiredKeys.
type cleaner struct {
	store txinbox.Store
	opts  retention.RotateOptions
}

// newCleaner: the new layout rotates once per Generation, which the run sets to the retention window
// (the default when Generation is zero); a pass (every --interval) checks whether one is due.
func newCleaner(store txinbox.Store, o options, _ *slog.Logger) (*cleaner, error) {
	return &cleaner{store: store, opts: retention.RotateOptions{Generation: o.retention}}, nil
}

func cleanerSettings(o options) string {
	return fmt.Sprintf("retention.Rotate (RotateOptions{Generation: %s}) and retention.DeleteExpiredKeys every %s (--full-sweep: no such setting, ignored)", o.retention, o.interval)
}

func (cl *cleaner) pass(ctx context.Context) (passStats, error) {
	r, err := retention.Rotate(ctx, cl.store, cl.opts)
	if err == nil {
		_, err = retention.DeleteExpiredKeys(ctx, cl.store)
	}
	return passStats{rotated: r.Rotated, copied: r.Copied, rotation: r.Duration}, err
}

// newPool makes the run's worker pool, logging to log (the Store's Logger in this tree).
func newPool(store txinbox.Store, cfg worker.Config, log *slog.Logger) (*worker.Pool, error) {
	store.Logger = log
	return worker.New(store, cfg)
}
