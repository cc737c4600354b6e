// Package seen is the seen-key cache in front of the inbox table: a [Cache] that answers the
// redelivery of a recently accepted message as a Duplicate without a database round trip.
//
// inbox.Config.SeenCache takes a Cache: [LRU] (NewLRU) in process, or module
// github.com/txinbox/txinbox/seenredis on Redis. The cache is never the source of truth: see
// inbox.Config.SeenCache for when keys are cached and for how long.
package seen

import (
	"context"
	"crypto/sha256"
	"time"
)

// defaultTimeout is Invalidate's timeout when it is not positive.
const defaultTimeout = 100 * time.Millisecond

// Key names one dedup record in a [Cache]: the Client's schema, the consumer and the idempotency
// key. A cache shared by Clients of several databases needs one key space (a Redis prefix, say) per
// database: the schema alone does not tell them apart.
type Key struct {
	Schema, Consumer, Key string
}

// Entry is what a [Cache] keeps for a key whose inbox row has committed.
type Entry struct {
	// ID is the stored message holding the key when the entry was made.
	ID int64
	// Fingerprint is the SHA-256 of the kind, "\n" and the payload's exact bytes of a message the
	// database accepted for the key (inserted, or reported as its Duplicate). It is not the
	// database's fingerprint, which hashes the payload's jsonb text: two payloads that differ only in
	// white space or key order have different Fingerprints, and a message whose Fingerprint differs
	// from its cache entry's is sent to the database, which decides between Duplicate and Conflict.
	// So a cache hit is only ever byte-identical to an accepted message.
	Fingerprint [sha256.Size]byte
}

// Cache is a seen-key cache in front of the inbox table (inbox.Config.SeenCache). The inbox Client
// puts an entry only for a key whose row has committed, with a TTL that ends before the key's dedup
// window can, and it sends every miss, fingerprint mismatch, error or timeout to the database. [LRU]
// is an in-process implementation; module github.com/txinbox/txinbox/seenredis a shared one on Redis.
//
// Epochs make Invalidate safe against concurrent Puts: Get reports the cache's current epoch, the
// Client passes that epoch to the Put that follows its database statement, and an entry put with an
// epoch older than the current one must never be returned by Get. Implementations must be safe for
// concurrent use.
type Cache interface {
	// Get returns, for each of keys, its entry and true if one was put with the current epoch and its
	// TTL has not run out, or false; and the current epoch. On error the Client ignores the result.
	Get(ctx context.Context, keys []Key) (entries []Entry, found []bool, epoch uint64, err error)
	// Put stores entries[i] for keys[i], each for ttls[i] (always positive), as made in epoch: if the
	// cache's epoch is no longer epoch, the entries must never be returned (they may be dropped).
	Put(ctx context.Context, epoch uint64, keys []Key, entries []Entry, ttls []time.Duration) error
	// Invalidate starts a new epoch: no entry put before it, or put later with an older epoch, is
	// returned again.
	Invalidate(ctx context.Context) error
}

// Result says what the seen-key cache did for a received message: the values of
// txinbox.TraceEnd.Results for txinbox.OpSeenGet.
type Result string

// The results of a seen-key cache lookup, per message.
const (
	Hit      Result = "hit"      // answered Duplicate from the cache, no database round trip
	Miss     Result = "miss"     // no entry: sent to the database
	Mismatch Result = "mismatch" // an entry with another fingerprint: sent to the database
	Fallback Result = "fallback" // the cache failed or timed out: sent to the database
)

// Invalidate starts a new epoch of c after rows were deleted early, so that no deleted key is
// answered from it; it waits at most timeout (100ms if timeout is not positive), even if ctx has
// ended, and returns c's error, which its caller reports (admin: as txinbox.OpSeenInvalidate) but
// does not fail for. A nil c does nothing.
func Invalidate(ctx context.Context, c Cache, timeout time.Duration) error {
	if c == nil {
		return nil
	}
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	return c.Invalidate(ictx)
}
