package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/txinbox/txinbox/bench"
)

// recoveryRow is one configuration of the recovery rows: the normal drains of its messages, and the
// recoveries without and with a poison.
type recoveryRow struct {
	cfg   bench.RecoveryConfig // Poison false
	drain []time.Duration      // normal drains of the same messages, one per run
	runs  []bench.RecoveryResult
}

// recoveryConfigs are the configurations of the recovery rows: a batch handler at the defaults, whose
// process holds Concurrency claims of HandlerConfig.BatchSize (4 × 500), and a single handler at the
// defaults, whose process holds at most Concurrency claims of BatchSize (4 × 32 = 128): a runner
// whose handler blocks claims nothing more.
func recoveryConfigs() []bench.RecoveryConfig {
	return []bench.RecoveryConfig{
		{Batch: true, N: bench.WorkerConcurrency * bench.WorkerHandlerBatchSize},
		{N: bench.WorkerConcurrency * bench.WorkerBatchSize},
	}
}

// runRecovery measures, for each configuration, the normal drains (runs of them) and one recovery
// without a poison and one with (not in quick mode: each crash costs a lease).
func (r *report) runRecovery(ctx context.Context, env *bench.Env, progress func(string, ...any)) error {
	for _, cfg := range recoveryConfigs() {
		row := &recoveryRow{cfg: cfg}
		for run := 1; run <= r.opts.runs; run++ {
			progress("recovery reference %d/%d: normal drain of %d, %s", run, r.opts.runs, cfg.N, cfg.Reference())
			rate, _, err := env.InboxDrain(ctx, cfg.N, 0, cfg.Reference())
			if err != nil {
				return fmt.Errorf("recovery reference drain: %w", err)
			}
			row.drain = append(row.drain, time.Duration(float64(cfg.N)/rate*float64(time.Second)))
			progress("  %s", row.drain[len(row.drain)-1].Round(time.Millisecond))
		}
		for _, poison := range []bool{false, true} {
			if poison && r.opts.quick {
				continue
			}
			c := cfg
			c.Poison = poison
			progress("recovery: %s, %d claims killed, poison %v", handlerName(c), c.N, poison)
			res, err := env.Recovery(ctx, c)
			if err != nil {
				return fmt.Errorf("recovery (%s, poison %v): %w", handlerName(c), poison, err)
			}
			progress("  lease end → last applied %s, poison dead %s, %d crashes, %d takeovers",
				res.Applied.Round(time.Millisecond), res.PoisonDead.Round(time.Millisecond), res.Crashes, len(res.Takeovers))
			row.runs = append(row.runs, res)
		}
		r.recovery = append(r.recovery, row)
	}
	return nil
}

func handlerName(c bench.RecoveryConfig) string {
	if c.Batch {
		return fmt.Sprintf("batch handler (HandleBatch, BatchSize %d)", bench.WorkerHandlerBatchSize)
	}
	return fmt.Sprintf("single handler (Handle, BatchSize %d)", bench.WorkerBatchSize)
}

// medianDuration returns the median of ds.
func medianDuration(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(bench.Median(xs))
}

// groupSizes lists the takeovers' group sizes, largest first, with their counts: "250×8, 1×3".
func groupSizes(ts []bench.Takeover) string {
	counts := map[int]int{}
	var sizes []int
	for _, t := range ts {
		if counts[t.Messages] == 0 {
			sizes = append(sizes, t.Messages)
		}
		counts[t.Messages]++
	}
	slices.Sort(sizes)
	slices.Reverse(sizes)
	parts := make([]string, len(sizes))
	for i, n := range sizes {
		parts[i] = fmt.Sprintf("%d×%d", n, counts[n])
	}
	return strings.Join(parts, ", ")
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func (r *report) recoveryMD(p func(string, ...any)) {
	r.provenance(p, "recovery", fmt.Sprintf("Lease %s, Timeout %s, every other setting the default; normal drain: %s",
		bench.RecoveryLease, bench.RecoveryLease/2, runsMD(r.opts.runs)))
	p("| Handler (defaults) | Batches killed (messages) | Poison | Kill → last innocent applied | Kill → poison dead | Crashes (expected) | Takeovers: group sizes | Kill → first takeover; then per takeover | Normal drain of N | After the kill ÷ normal drain |")
	p("|---|---|---|---:|---:|---:|---|---:|---:|---:|")
	for _, row := range r.recovery {
		drain := medianDuration(row.drain)
		for _, x := range row.runs {
			poison, dead, crashes, ratio := "none", "–", "–", fmt.Sprintf("%.1f×", float64(x.Applied)/float64(drain))
			if x.Config.Poison {
				poison = fmt.Sprintf("1 (attempts %d)", x.PoisonAttempts)
				dead = "**" + secs(x.PoisonDead) + "**"
				crashes = fmt.Sprintf("%d (%d)", x.Crashes, x.Config.ExpectedCrashes())
				ratio = "–"
			}
			wake := "–"
			if n := len(x.Takeovers); n > 0 {
				first := x.Takeovers[0].At.Sub(x.Killed)
				wake = ms(first)
				if !x.Config.Poison {
					wake += "; " + ms((x.Applied-first)/time.Duration(n))
				}
			}
			p("| %s | %d (%d) | %s | **%s** | %s | %s | %s | %s | %s | %s |", handlerName(x.Config), x.Claims, x.Held, poison,
				secs(x.Applied), dead, crashes, groupSizes(x.Takeovers), wake, ms(drain), ratio)
		}
	}
	p("")
	for _, row := range r.recovery {
		if !row.cfg.Batch {
			continue
		}
		for _, x := range row.runs {
			if !x.Config.Poison {
				drain := medianDuration(row.drain)
				p("The %d claims of the killed process with the defaults: the last applied %s after the kill (no lease to wait: its batches end with it), %.1f× a normal drain of %d (%s).\n",
					x.Held, secs(x.Applied), float64(x.Applied)/float64(drain), x.Held, ms(drain))
			}
		}
	}
}
