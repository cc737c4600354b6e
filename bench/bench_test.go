package bench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"
)

// These wrap the main benchmarks for `go test -bench . -benchtime 1x` (one drain per benchmark; the
// figure is the custom metric, not ns/op). The server is TXBENCH_DATABASE_URL or DefaultURL; the
// benchmarks are skipped if it does not answer. For the full comparison and RESULTS.md use
// cmd/txbench.

const testMessages = 10_000

func testEnv(b *testing.B) *Env {
	b.Helper()
	url := os.Getenv("TXBENCH_DATABASE_URL")
	if url == "" {
		url = DefaultURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := NewEnv(ctx, url, true, nil)
	if err != nil {
		b.Skipf("no PostgreSQL: %v", err)
	}
	b.Cleanup(e.Close)
	return e
}

func reportDrain(b *testing.B, f func(ctx context.Context) (float64, Footprint, error)) {
	var rates []float64
	var fp Footprint
	for b.Loop() {
		rate, f, err := f(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		rates = append(rates, rate)
		fp = f
	}
	b.ReportMetric(Median(rates), "msg/s")
	b.ReportMetric(fp.PeakRSSMB, "MiB-peak-RSS")
	b.ReportMetric(float64(fp.MaxConns), "conns")
}

func BenchmarkDrain(b *testing.B) {
	e := testEnv(b)
	b.Run("txinbox", func(b *testing.B) {
		reportDrain(b, func(ctx context.Context) (float64, Footprint, error) {
			return e.InboxDrain(ctx, testMessages, 0, InboxConfig{Concurrency: 4, BatchSize: 64})
		})
	})
	b.Run("txinbox-batch-handler", func(b *testing.B) {
		reportDrain(b, func(ctx context.Context) (float64, Footprint, error) {
			return e.InboxDrain(ctx, testMessages, 0, InboxConfig{Concurrency: 4, BatchSize: 64, HandlerBatchSize: 500})
		})
	})
	b.Run("river-jobcompletetx", func(b *testing.B) {
		reportDrain(b, func(ctx context.Context) (float64, Footprint, error) {
			return e.RiverDrain(ctx, testMessages, RiverConfig{Tx: true, MaxWorkers: 100, PoolConns: 20,
				FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond})
		})
	})
	b.Run("river-noop", func(b *testing.B) {
		reportDrain(b, func(ctx context.Context) (float64, Footprint, error) {
			return e.RiverDrain(ctx, testMessages, RiverConfig{MaxWorkers: 2000, PoolConns: 20,
				FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond})
		})
	})
	for _, per := range []int{1, 100} {
		b.Run("raw-per-tx-"+strconv.Itoa(per), func(b *testing.B) {
			reportDrain(b, func(ctx context.Context) (float64, Footprint, error) {
				return e.RawDrain(ctx, testMessages, RawConfig{Clients: 4, PerTx: per})
			})
		})
	}
}

func BenchmarkIngest(b *testing.B) {
	e := testEnv(b)
	names := map[IngestMode]string{IngestReceiveMany: "receivemany", IngestCopyNew: "copy-new-rows", IngestCopyStaging: "copy-staging"}
	for _, mode := range []IngestMode{IngestReceiveMany, IngestCopyNew, IngestCopyStaging} {
		b.Run(names[mode], func(b *testing.B) {
			var rates []float64
			for b.Loop() {
				res, err := e.Ingest(context.Background(), mode, 1, 20, 1000, 0.3)
				if err != nil {
					b.Fatal(err)
				}
				rates = append(rates, res.Rate)
			}
			b.ReportMetric(Median(rates), "rows/s")
		})
	}
}

func BenchmarkIdleWakeup(b *testing.B) {
	e := testEnv(b)
	for b.Loop() {
		res, err := e.IdleWakeup(context.Background(), 5, 1200*time.Millisecond, InboxConfig{Concurrency: 4, BatchSize: 64})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.P50)/float64(time.Millisecond), "ms-p50")
	}
}
