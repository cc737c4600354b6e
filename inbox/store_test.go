package inbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/inbox"
	"github.com/txinbox/txinbox/txinboxtest/ledgertest"
	"github.com/txinbox/txinbox/txinboxtest/testdb"
)

// ttlSpy is a seen-key cache that records the TTLs it is given.
type ttlSpy struct {
	failingCache
	mu   sync.Mutex
	ttls []time.Duration
}

func (s *ttlSpy) Get(_ context.Context, keys []txinbox.SeenKey) ([]txinbox.SeenEntry, []bool, uint64, error) {
	return make([]txinbox.SeenEntry, len(keys)), make([]bool, len(keys)), 0, nil
}

func (s *ttlSpy) Put(_ context.Context, _ uint64, _ []txinbox.SeenKey, _ []txinbox.SeenEntry, ttls []time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ttls = append(s.ttls, ttls...)
	return nil
}

// TestSeenTTLIsRetention: a seen-key cache entry lives what remains of the Store's Retention (the
// dedup window) since its receive call started, so it never outlives the key's window.
func TestSeenTTLIsRetention(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	spy := &ttlSpy{}
	st := txinbox.Store{DB: db.Pool, Schema: db.Schema, Retention: time.Hour, SeenCache: spy}
	c, err := inbox.New(st, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Receive(context.Background(), ledgertest.Message("ttl", `1`)); err != nil || r.Outcome != inbox.Inserted {
		t.Fatalf("%+v %v", r, err)
	}
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if len(spy.ttls) != 1 || spy.ttls[0] > time.Hour || spy.ttls[0] < time.Hour-time.Minute {
		t.Fatalf("TTLs %v, want one just under the Retention (1h)", spy.ttls)
	}
}

func TestStoreWithoutDB(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	var ce *txinbox.ConfigError
	if _, err := inbox.New(txinbox.Store{Schema: db.Schema}, inbox.Config{}); !errors.As(err, &ce) || ce.Field != "Store.DB" {
		t.Fatalf("no DB: %v, want a *ConfigError for Store.DB", err)
	}
}
