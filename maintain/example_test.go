package maintain_test

import (
	"context"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/maintain"
)

// A runner (package runner) runs the schema's maintainer candidate; a process may also run one on its
// own. Any number of processes may, one leads.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/postgres")
	if err != nil {
		panic(err)
	}
	m, err := maintain.New(txinbox.Store{DB: pool, Schema: "billing"}, maintain.Config{})
	if err != nil {
		panic(err)
	}
	if err := m.Start(ctx); err != nil {
		panic(err) // txinbox.ErrNotMigrated without migration 00010
	}
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	<-sigCtx.Done()
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = m.Stop(stopCtx) // ends the lease: another maintainer takes over at its next look
}

// More jobs run like the built-in ones (the outbox's rotation is one of them), by the leader only,
// at most once per period: here a job of the service's own, the deletion of its expired sessions
// (give the same Config.Jobs to every maintainer of the schema: runner.Config.Maintenance where a
// runner runs it).
func ExampleJob() {
	var store txinbox.Store // the Store of the service's pools
	cfg := maintain.Config{Jobs: []maintain.Job{{
		Name:     "expire-sessions",
		Interval: time.Minute,
		Run: func(ctx context.Context) error {
			_, err := store.DB.Exec(ctx, "DELETE FROM sessions WHERE expires_at < now()")
			return err
		},
	}}}
	_ = cfg
}
