package pooler_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/internal/pooler"
	"github.com/txinbox/txinbox/txinboxtest/pgbouncer"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

func newPool(t *testing.T, url, mode string) *pgxpool.Pool {
	t.Helper()
	if mode != "" {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		url += sep + "default_query_exec_mode=" + mode
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func probe(t *testing.T, pool *pgxpool.Pool) pooler.Finding {
	t.Helper()
	ctx := context.Background()
	a, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release()
	f, err := pooler.Probe(ctx, a.Conn(), func(ctx context.Context) (*pgx.Conn, func()) {
		b, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return b.Conn(), b.Release
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestProbe runs the probe directly against PostgreSQL and through a real PgBouncer 1.18 in each
// mode, several times each: what it proves must hold every time.
func TestProbe(t *testing.T) {
	server := testdb.URL(t)
	cases := []struct {
		name string
		url  string
		want pooler.Finding
	}{
		{"direct", server, pooler.Finding{}},
		{"session", pgbouncer.Start(t, server, pgbouncer.Config{Mode: "session"}), pooler.Finding{Pooler: true}},
		{"transaction", pgbouncer.Start(t, server, pgbouncer.Config{}), pooler.Finding{Pooler: true, Shared: true, Statements: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pool := newPool(t, c.url, "")
			for i := range 5 {
				f := probe(t, pool)
				f.SearchPath = ""
				if f != c.want {
					t.Fatalf("probe %d: %+v, want %+v", i, f, c.want)
				}
			}
		})
	}
}

// TestCheckPool: through PgBouncer in transaction mode, a pgxpool in pgx's default query exec mode is
// refused with txinbox.ErrPooler, and one in exec mode is not; nor is any pool on a direct
// connection or through session mode.
func TestCheckPool(t *testing.T) {
	server := testdb.URL(t)
	transaction := pgbouncer.Start(t, server, pgbouncer.Config{})
	session := pgbouncer.Start(t, server, pgbouncer.Config{Mode: "session"})
	for _, c := range []struct {
		name, url, mode string
		refused         bool
	}{
		{"direct", server, "", false},
		{"session", session, "", false},
		{"transaction", transaction, "", true},
		{"transaction describe_exec", transaction, "describe_exec", true},
		{"transaction exec", transaction, "exec", false},
		{"transaction cache_describe", transaction, "cache_describe", false},
		{"transaction simple_protocol", transaction, "simple_protocol", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := pooler.CheckPool(context.Background(), newPool(t, c.url, c.mode))
			if got := errors.Is(err, txinbox.ErrPooler); got != c.refused || (!c.refused && err != nil) {
				t.Fatalf("CheckPool = %v, want refused %v", err, c.refused)
			}
			if c.refused {
				t.Log(err)
			}
		})
	}
}
