package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/worker"
)

// An unset Lease follows the longest handler Timeout (twice it, at least DefaultLease), so that
// giving a kind more time needs no second setting; a Lease that is set is kept, and still refused
// when a Timeout is not below it. (New touches no database: the pgxpool never connects.)
func TestLeaseFollowsLongestTimeout(t *testing.T) {
	t.Parallel()
	db, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:5432/postgres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	store := txinbox.Store{DB: db}
	newPool := func(lease, poolTimeout time.Duration, kindTimeouts ...time.Duration) (*worker.Pool, error) {
		hs := worker.NewHandlers()
		worker.Handle(hs, "plain", func(context.Context, pgx.Tx, *worker.Message[credit]) error { return nil })
		for i, to := range kindTimeouts {
			worker.Handle(hs, "slow"+string(rune('a'+i)), func(context.Context, pgx.Tx, *worker.Message[credit]) error { return nil },
				worker.HandlerConfig{Timeout: to})
		}
		return worker.New(store, worker.Config{Consumer: "ledger", Handlers: hs, Lease: lease, Timeout: poolTimeout})
	}
	for _, tc := range []struct {
		name         string
		poolTimeout  time.Duration
		kindTimeouts []time.Duration
		want         time.Duration
	}{
		{"defaults", 0, nil, time.Minute},
		{"short timeouts keep the default Lease", 5 * time.Second, []time.Duration{20 * time.Second}, time.Minute},
		{"pool Timeout", 45 * time.Second, nil, 90 * time.Second},
		{"longest kind Timeout", 0, []time.Duration{2 * time.Minute, 5 * time.Minute, time.Second}, 10 * time.Minute},
	} {
		p, err := newPool(0, tc.poolTimeout, tc.kindTimeouts...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := worker.LeaseOf(p); got != tc.want {
			t.Errorf("%s: Lease = %v, want %v", tc.name, got, tc.want)
		}
	}
	p, err := newPool(3*time.Minute, 0, 2*time.Minute)
	if err != nil || worker.LeaseOf(p) != 3*time.Minute {
		t.Fatalf("Lease set to 3m: %v", err)
	}
	_, err = newPool(time.Minute, 0, 2*time.Minute)
	var ce *txinbox.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Lease" {
		t.Fatalf("Lease set to 1m below a kind's Timeout of 2m: err = %v, want a *txinbox.ConfigError on Lease", err)
	}
}
