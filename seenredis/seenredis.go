// Package seenredis is a seen-key cache (txinbox.SeenCache) on Redis, shared by every process that uses
// the same Redis and Prefix: a message accepted by one process is answered as a Duplicate by the
// others without a database round trip.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store := txinbox.Store{DB: pool, SeenCache: seenredis.New(rdb, seenredis.Config{Prefix: "orders:"})}
//	client, err := inbox.New(store, inbox.Config{})
//
// Each entry is one Redis string with its own expiry (PX): the cache epoch, the message id and the
// fingerprint (48 bytes). The epoch is the integer at Prefix+"epoch", without expiry; Invalidate
// increments it, and an entry holding another epoch is ignored. Use a maxmemory policy that never
// evicts it: noeviction or a volatile-* one (entries all have a TTL, the epoch key has none). Get and
// Put each take one round trip (a pipeline of GETs or SETs, so Redis Cluster works too).
//
// Redis is not the source of truth: when it is down, slow or answers nonsense, the inbox Client
// reports the error (to the Store's Tracer: txinbox.OpSeenGet, OpSeenPut) and asks PostgreSQL instead. Entries are lost when Redis restarts
// without persistence, which only costs database round trips. Run it without persistence (save "",
// appendonly no): a restart that restores an older snapshot would restore an older epoch too, and with
// it entries invalidated since (call Invalidate after such a restore).
package seenredis

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/txinbox/txinbox"
)

// DefaultPrefix is Config.Prefix when it is empty.
const DefaultPrefix = "txinbox:seen:"

// entrySize is the length of an entry's value: epoch, id, fingerprint.
const entrySize = 8 + 8 + sha256.Size

// Config configures a Cache. The zero value is valid.
type Config struct {
	// Prefix starts every Redis key the Cache uses. Give each database its own: keys name the schema,
	// consumer and idempotency key, not the database. Default: DefaultPrefix ("txinbox:seen:").
	Prefix string
}

// Cache is a txinbox.SeenCache on Redis. It is safe for concurrent use.
type Cache struct {
	rdb      redis.UniversalClient
	prefix   string
	epochKey string
}

var _ txinbox.SeenCache = (*Cache)(nil)

// New returns a Cache using rdb (a *redis.Client, *redis.ClusterClient or any UniversalClient).
// Bound its calls with short timeouts in rdb's options too: the inbox Client gives each call at most
// 100ms (see txinbox.Store.SeenCache).
func New(rdb redis.UniversalClient, cfg Config) *Cache {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	return &Cache{rdb: rdb, prefix: cfg.Prefix, epochKey: cfg.Prefix + "epoch"}
}

// Key returns the Redis key of k: Prefix, then the schema, consumer and key, each of the first two
// preceded by its length (so that no two SeenKeys share a Redis key).
func (c *Cache) Key(k txinbox.SeenKey) string {
	return c.prefix + "k:" + strconv.Itoa(len(k.Schema)) + ":" + k.Schema + strconv.Itoa(len(k.Consumer)) + ":" + k.Consumer + k.Key
}

// Get implements txinbox.SeenCache: one pipeline of the epoch and the keys' entries.
func (c *Cache) Get(ctx context.Context, keys []txinbox.SeenKey) ([]txinbox.SeenEntry, []bool, uint64, error) {
	pipe := c.rdb.Pipeline()
	epochCmd := pipe.Get(ctx, c.epochKey)
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, c.Key(k))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, 0, fmt.Errorf("txinbox/seenredis: get: %w", err)
	}
	var epoch uint64
	if s, err := epochCmd.Result(); err == nil {
		if epoch, err = strconv.ParseUint(s, 10, 64); err != nil {
			return nil, nil, 0, fmt.Errorf("txinbox/seenredis: epoch %q: %w", s, err)
		}
	} else if !errors.Is(err, redis.Nil) {
		return nil, nil, 0, fmt.Errorf("txinbox/seenredis: get epoch: %w", err)
	}
	entries := make([]txinbox.SeenEntry, len(keys))
	found := make([]bool, len(keys))
	for i, cmd := range cmds {
		b, err := cmd.Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, nil, 0, fmt.Errorf("txinbox/seenredis: get: %w", err)
		}
		if len(b) != entrySize {
			continue // not ours: ignored, as a miss
		}
		if binary.BigEndian.Uint64(b) != epoch {
			continue // put before an Invalidate
		}
		entries[i].ID = int64(binary.BigEndian.Uint64(b[8:]))
		copy(entries[i].Fingerprint[:], b[16:])
		found[i] = true
	}
	return entries, found, epoch, nil
}

// Put implements txinbox.SeenCache: one pipeline of SETs with PX expiries (whole milliseconds, rounded
// down; an entry with less than a millisecond left is not stored).
func (c *Cache) Put(ctx context.Context, epoch uint64, keys []txinbox.SeenKey, entries []txinbox.SeenEntry, ttls []time.Duration) error {
	pipe := c.rdb.Pipeline()
	n := 0
	for i, k := range keys {
		ttl := ttls[i].Truncate(time.Millisecond)
		if ttl <= 0 {
			continue
		}
		v := make([]byte, entrySize)
		binary.BigEndian.PutUint64(v, epoch)
		binary.BigEndian.PutUint64(v[8:], uint64(entries[i].ID))
		copy(v[16:], entries[i].Fingerprint[:])
		pipe.Set(ctx, c.Key(k), v, ttl)
		n++
	}
	if n == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("txinbox/seenredis: put: %w", err)
	}
	return nil
}

// Invalidate implements txinbox.SeenCache: it increments the epoch, for every process sharing it.
func (c *Cache) Invalidate(ctx context.Context) error {
	if err := c.rdb.Incr(ctx, c.epochKey).Err(); err != nil {
		return fmt.Errorf("txinbox/seenredis: invalidate: %w", err)
	}
	return nil
}
