package txinbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// TestStoreResolve: the defaults are filled in as documented, and each invalid field is named.
func TestStoreResolve(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), testdb.LocalURL) // connects lazily: never used here
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := txinbox.Store{DB: pool}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if s.Schema != "public" || s.Retention != 7*24*time.Hour || s.NotifyInterval != 50*time.Millisecond {
		t.Fatalf("defaults: %+v", s)
	}
	if s, err := (txinbox.Store{DB: pool, NotifyInterval: -1}).Resolve(); err != nil || s.NotifyInterval != -1 {
		t.Fatalf("negative NotifyInterval (never notify): %+v %v", s, err)
	}
	for field, st := range map[string]txinbox.Store{
		"Store.DB":        {},
		"Store.Schema":    {DB: pool, Schema: "a-b"},
		"Store.Retention": {DB: pool, Retention: -1},
	} {
		_, err := st.Resolve()
		var ce *txinbox.ConfigError
		if !errors.Is(err, txinbox.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: %v, want a *ConfigError for it", field, err)
		}
	}
}

// TestStoreNames: the notify channel depends on the schema only, with the default schema for an
// empty one.
func TestStoreNames(t *testing.T) {
	t.Parallel()
	a, b := txinbox.Store{}, txinbox.Store{Schema: txinbox.DefaultSchema}
	if a.NotifyChannel() != "txinbox_public" || a.NotifyChannel() != b.NotifyChannel() {
		t.Fatalf("%q %q", a.NotifyChannel(), b.NotifyChannel())
	}
	if c := (txinbox.Store{Schema: "other"}); c.NotifyChannel() == a.NotifyChannel() {
		t.Fatal("two schemas share a name")
	}
}
