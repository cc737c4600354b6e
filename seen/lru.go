package seen

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/txinbox/txinbox"
)

// Defaults of LRUConfig (documented on its fields).
const (
	defaultLRUMaxEntries = 100_000
	defaultLRUMaxBytes   = 32 << 20
)

// lruEntryOverhead is what an entry costs beside its schema, consumer and key strings: the entry,
// its deadline and epoch, the list element and the map slot, roughly.
const lruEntryOverhead = 160

// LRUConfig bounds an LRU. The zero value is valid.
type LRUConfig struct {
	// MaxEntries is the most entries kept. Default: 100,000.
	MaxEntries int
	// MaxBytes bounds the memory of the entries: each counts its schema, consumer and key bytes plus
	// 160 bytes of bookkeeping. Default: 32 MiB.
	MaxBytes int64
}

// LRU is an in-process [txinbox.SeenCache]: the least recently used entries are dropped when it holds
// MaxEntries entries or MaxBytes bytes, and each entry expires at its own TTL (measured on this
// process's monotonic clock). Invalidate empties it. It only knows what its own process received:
// give every Store of a process the same LRU, and see [txinbox.Store].SeenCache for what it cannot see.
type LRU struct {
	mu       sync.Mutex
	lru      *simplelru.LRU[txinbox.SeenKey, lruEntry]
	bytes    int64
	maxBytes int64
	epoch    uint64
	now      func() time.Time // time.Now; tests replace it
}

type lruEntry struct {
	txinbox.SeenEntry
	deadline time.Time
}

func lruSize(k txinbox.SeenKey) int64 {
	return int64(len(k.Schema)+len(k.Consumer)+len(k.Key)) + lruEntryOverhead
}

// NewLRU returns an empty LRU bounded by cfg. Negative bounds return a *[txinbox.ConfigError].
func NewLRU(cfg LRUConfig) (*LRU, error) {
	if cfg.MaxEntries < 0 || cfg.MaxBytes < 0 {
		return nil, &txinbox.ConfigError{Field: "MaxEntries/MaxBytes", Reason: "must not be negative"}
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = defaultLRUMaxEntries
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = defaultLRUMaxBytes
	}
	c := &LRU{maxBytes: cfg.MaxBytes, now: time.Now}
	l, err := simplelru.NewLRU(cfg.MaxEntries, func(k txinbox.SeenKey, _ lruEntry) { c.bytes -= lruSize(k) })
	if err != nil {
		return nil, &txinbox.ConfigError{Field: "MaxEntries", Reason: err.Error()}
	}
	c.lru = l
	return c, nil
}

// Get implements txinbox.SeenCache. It never fails.
func (c *LRU) Get(_ context.Context, keys []txinbox.SeenKey) ([]txinbox.SeenEntry, []bool, uint64, error) {
	entries := make([]txinbox.SeenEntry, len(keys))
	found := make([]bool, len(keys))
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for i, k := range keys {
		e, ok := c.lru.Get(k)
		if !ok {
			continue
		}
		if !now.Before(e.deadline) {
			c.lru.Remove(k)
			continue
		}
		entries[i], found[i] = e.SeenEntry, true
	}
	return entries, found, c.epoch, nil
}

// Put implements txinbox.SeenCache: entries of an older epoch are dropped. It never fails.
func (c *LRU) Put(_ context.Context, epoch uint64, keys []txinbox.SeenKey, entries []txinbox.SeenEntry, ttls []time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch {
		return nil
	}
	now := c.now()
	for i, k := range keys {
		if ttls[i] <= 0 || lruSize(k) > c.maxBytes {
			continue
		}
		c.lru.Remove(k) // so that bytes counts it once
		c.lru.Add(k, lruEntry{SeenEntry: entries[i], deadline: now.Add(ttls[i])})
		c.bytes += lruSize(k)
		for c.bytes > c.maxBytes {
			c.lru.RemoveOldest()
		}
	}
	return nil
}

// Invalidate implements txinbox.SeenCache: it empties the cache and starts a new epoch. It never fails.
func (c *LRU) Invalidate(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.lru.Purge()
	return nil
}

// Len returns the number of entries held (some may have expired and not been dropped yet).
func (c *LRU) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// bytesHeld returns the bytes the entries are counted for (see LRUConfig.MaxBytes).
func (c *LRU) bytesHeld() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
