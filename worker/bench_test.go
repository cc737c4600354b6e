package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/worker"
)

// BenchmarkDrain measures draining b.N pending messages whose handler inserts one row in the
// handler's transaction. (make bench runs the full comparison with River and raw SQL in bench/.)
func BenchmarkDrain(b *testing.B) {
	for _, conc := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			db := newBenchEnv(b)
			ctx := context.Background()
			const chunk = 1000
			for i := 0; i < b.N; i += chunk {
				msgs := make([]inbox.Message, 0, chunk)
				for j := i; j < min(i+chunk, b.N); j++ {
					msgs = append(msgs, inbox.Message{Consumer: "ledger", Key: fmt.Sprint(j), Kind: "credit", Payload: []byte(`{"amount":1}`)})
				}
				if _, err := db.client.ReceiveMany(ctx, msgs); err != nil {
					b.Fatal(err)
				}
			}
			hs := worker.NewHandlers()
			worker.Handle(hs, "credit", func(ctx context.Context, tx pgx.Tx, m *worker.Message[credit]) error {
				return applyCredit(ctx, tx, db.Schema, m)
			})
			p, err := worker.New(db.Store(), worker.Config{Consumer: "ledger", Handlers: hs,
				Concurrency: conc, PollInterval: 5 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			_ = p.Start(ctx)
			for db.Count(b, `SELECT count(*) FROM {schema}.inbox_queue`) > 0 {
				time.Sleep(5 * time.Millisecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			_ = p.Stop(ctx)
		})
	}
}
