package inbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/internal/testkit/testdb"
)

// TestSeenTTLAtMostRetention: a seen-key cache entry must not outlive the key's dedup window, so a
// SeenTTL above Store.Retention is a *ConfigError; equal is accepted.
func TestSeenTTLAtMostRetention(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cache := newLRU(t)
	st := txinbox.Store{DB: db.Pool, Schema: db.Schema, Retention: time.Hour}
	_, err := inbox.New(st, inbox.Config{SeenCache: cache, SeenTTL: time.Hour + time.Second})
	var ce *txinbox.ConfigError
	if !errors.Is(err, txinbox.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != "SeenTTL" {
		t.Fatalf("SeenTTL above Retention: %v, want a *ConfigError for SeenTTL", err)
	}
	if _, err := inbox.New(st, inbox.Config{SeenCache: cache, SeenTTL: time.Hour}); err != nil {
		t.Fatalf("SeenTTL equal to Retention: %v", err)
	}
	if _, err := inbox.New(txinbox.Store{Schema: db.Schema}, inbox.Config{}); !errors.As(err, &ce) || ce.Field != "Store.DB" {
		t.Fatalf("no DB: %v, want a *ConfigError for Store.DB", err)
	}
}
