package txinbox

import (
	"context"
	"crypto/sha256"
	"time"
)

// SeenKey names one dedup record in a [SeenCache]: the Store's schema, the consumer and the
// idempotency key. A cache shared by Stores of several databases needs one key space (a Redis prefix,
// say) per database: the schema alone does not tell them apart.
type SeenKey struct {
	Schema, Consumer, Key string
}

// SeenEntry is what a [SeenCache] keeps for a key whose inbox row has committed.
type SeenEntry struct {
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

// SeenCache is a seen-key cache in front of the inbox table ([Store.SeenCache]): package seen's LRU
// in process, module github.com/txinbox/txinbox/seenredis a shared one on Redis. An inbox Client puts
// an entry only for a key whose row has committed, with a TTL that ends before the key's dedup window
// can, and it sends every miss, fingerprint mismatch, error or timeout to the database.
//
// Epochs make Invalidate safe against concurrent Puts: Get reports the cache's current epoch, the
// Client passes that epoch to the Put that follows its database statement, and an entry put with an
// epoch older than the current one must never be returned by Get. Implementations must be safe for
// concurrent use.
type SeenCache interface {
	// Get returns, for each of keys, its entry and true if one was put with the current epoch and its
	// TTL has not run out, or false; and the current epoch. On error the Client ignores the result.
	Get(ctx context.Context, keys []SeenKey) (entries []SeenEntry, found []bool, epoch uint64, err error)
	// Put stores entries[i] for keys[i], each for ttls[i] (always positive), as made in epoch: if the
	// cache's epoch is no longer epoch, the entries must never be returned (they may be dropped).
	Put(ctx context.Context, epoch uint64, keys []SeenKey, entries []SeenEntry, ttls []time.Duration) error
	// Invalidate starts a new epoch: no entry put before it, or put later with an older epoch, is
	// returned again.
	Invalidate(ctx context.Context) error
}
