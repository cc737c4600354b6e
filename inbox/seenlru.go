package inbox

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Defaults of LRUCacheConfig.
const (
	DefaultLRUMaxEntries = 100_000
	DefaultLRUMaxBytes   = 32 << 20
)

// lruEntryOverhead is what an entry costs beside its schema, consumer and key strings: the entry,
// its deadline and epoch, the list element and the map slot, roughly.
const lruEntryOverhead = 160

// LRUCacheConfig bounds an LRUCache. The zero value is valid.
type LRUCacheConfig struct {
	// MaxEntries is the most entries kept. Default: DefaultLRUMaxEntries (100,000).
	MaxEntries int
	// MaxBytes bounds the memory of the entries: each counts its schema, consumer and key bytes plus
	// 160 bytes of bookkeeping. Default: DefaultLRUMaxBytes (32 MiB).
	MaxBytes int64
}

// LRUCache is an in-process SeenCache: the least recently used entries are dropped when it holds
// MaxEntries entries or MaxBytes bytes, and each entry expires at its own TTL (measured on this
// process's monotonic clock). Invalidate empties it. It only knows what its own process received:
// give every Client of a process the same LRUCache, and see Config.SeenCache for what it cannot see.
type LRUCache struct {
	mu       sync.Mutex
	lru      *simplelru.LRU[SeenKey, lruEntry]
	bytes    int64
	maxBytes int64
	epoch    uint64
	now      func() time.Time // time.Now; tests replace it
}

type lruEntry struct {
	SeenEntry
	deadline time.Time
}

func lruSize(k SeenKey) int64 {
	return int64(len(k.Schema)+len(k.Consumer)+len(k.Key)) + lruEntryOverhead
}

// NewLRUCache returns an empty LRUCache bounded by cfg. Negative bounds return a *ConfigError.
func NewLRUCache(cfg LRUCacheConfig) (*LRUCache, error) {
	if cfg.MaxEntries < 0 || cfg.MaxBytes < 0 {
		return nil, &ConfigError{Field: "MaxEntries/MaxBytes", Reason: "must not be negative"}
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = DefaultLRUMaxEntries
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultLRUMaxBytes
	}
	c := &LRUCache{maxBytes: cfg.MaxBytes, now: time.Now}
	l, err := simplelru.NewLRU(cfg.MaxEntries, func(k SeenKey, _ lruEntry) { c.bytes -= lruSize(k) })
	if err != nil {
		return nil, &ConfigError{Field: "MaxEntries", Reason: err.Error()}
	}
	c.lru = l
	return c, nil
}

// Get implements SeenCache. It never fails.
func (c *LRUCache) Get(_ context.Context, keys []SeenKey) ([]SeenEntry, []bool, uint64, error) {
	entries := make([]SeenEntry, len(keys))
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

// Put implements SeenCache: entries of an older epoch are dropped. It never fails.
func (c *LRUCache) Put(_ context.Context, epoch uint64, keys []SeenKey, entries []SeenEntry, ttls []time.Duration) error {
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

// Invalidate implements SeenCache: it empties the cache and starts a new epoch. It never fails.
func (c *LRUCache) Invalidate(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	c.lru.Purge()
	return nil
}

// Len returns the number of entries held (some may have expired and not been dropped yet).
func (c *LRUCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Bytes returns the bytes the entries are counted for (see LRUCacheConfig.MaxBytes).
func (c *LRUCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
