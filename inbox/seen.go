package inbox

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txinbox/txinbox/internal/sqlc"
)

// DefaultSeenTimeout is Config.SeenTimeout when it is zero.
const DefaultSeenTimeout = 100 * time.Millisecond

// SeenKey names one dedup record in a SeenCache: the Client's schema, the consumer and the
// idempotency key. A cache shared by Clients of several databases needs one key space (a Redis
// prefix, say) per database: the schema alone does not tell them apart.
type SeenKey struct {
	Schema, Consumer, Key string
}

// SeenEntry is what a SeenCache keeps for a key whose inbox row has committed.
type SeenEntry struct {
	// ID is the stored message holding the key when the entry was made.
	ID int64
	// Fingerprint is SeenFingerprint of the kind and payload of a message the database accepted for
	// the key (inserted, or reported as its Duplicate).
	Fingerprint [sha256.Size]byte
}

// SeenFingerprint returns the fingerprint a SeenEntry holds: SHA-256 of kind, "\n" and the payload's
// exact bytes. It is not the database's fingerprint, which hashes the payload's jsonb text: two
// payloads that differ only in white space or key order have different SeenFingerprints, and a
// message whose SeenFingerprint differs from its cache entry's is sent to the database, which decides
// between Duplicate and Conflict. So a cache hit is only ever byte-identical to an accepted message.
func SeenFingerprint(kind string, payload []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{'\n'})
	h.Write(payload)
	var f [sha256.Size]byte
	h.Sum(f[:0])
	return f
}

// SeenCache is a seen-key cache in front of the inbox table (Config.SeenCache): it answers the
// redelivery of a recently accepted message as a Duplicate without a database round trip. It is never
// the source of truth: the Client puts an entry only for a key whose row has committed, with a TTL
// that ends before the key's dedup window can, and it sends every miss, fingerprint mismatch, error or
// timeout to the database. NewLRUCache returns an in-process implementation; module
// github.com/txinbox/txinbox/seenredis a shared one on Redis.
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

// SeenOp names a SeenCache operation in SeenObserver.SeenError.
type SeenOp string

// The operations of a SeenCache.
const (
	SeenOpGet        SeenOp = "get"
	SeenOpPut        SeenOp = "put"
	SeenOpInvalidate SeenOp = "invalidate"
)

// SeenResult says what the seen-key cache did for received messages (SeenObserver.SeenLookup).
type SeenResult string

// The results of a seen-key cache lookup, per message.
const (
	SeenHit      SeenResult = "hit"      // answered Duplicate from the cache, no database round trip
	SeenMiss     SeenResult = "miss"     // no entry: sent to the database
	SeenMismatch SeenResult = "mismatch" // an entry with another fingerprint: sent to the database
	SeenFallback SeenResult = "fallback" // the cache failed or timed out: sent to the database
)

// SeenObserver is an optional interface of a Config.Observer (package metrics implements it): when
// the Client has a SeenCache, it is told how many messages of each receive call got each SeenResult,
// and about every cache error (which never reaches the caller). Its methods must be fast and safe for
// concurrent use.
type SeenObserver interface {
	SeenLookup(consumer string, result SeenResult, messages int)
	SeenError(op SeenOp, err error)
}

// seenMark is carried by a Receipt of a receive in a transaction whose key may be cached once that
// transaction has committed (Client.Remember).
type seenMark struct {
	ok    bool
	epoch uint64
	start time.Time // taken before the receive statement: the entry's TTL runs from here
}

// seenEligible reports whether a receipt the database returned may be cached, after the statement
// that made it committed, for up to SeenTTL from a time taken before that statement.
//
// The dedup window of a key ends Retention after its message completes, and completion happens in a
// worker transaction that starts after the message was claimed, and so after the start of any
// statement that saw it pending. Inserted messages and Duplicates of pending ones therefore keep
// their window for at least Retention after that start; so do dead ones, which never expire (their
// rows may be deleted early: see Config.SeenCache). A Duplicate of a completed message may be near
// the end of its window, and one of a processing message may be completing in a transaction that
// started before our statement: neither is cached.
func seenEligible(r Receipt) bool {
	switch r.Outcome {
	case Inserted:
		return true
	case Duplicate:
		return r.State == StatePending || r.State == StateDead
	}
	return false
}

func (c *Client) seenObserver() SeenObserver {
	o, _ := c.cfg.Observer.(SeenObserver)
	return o
}

func (c *Client) seenError(op SeenOp, err error) {
	if o := c.seenObserver(); o != nil {
		o.SeenError(op, err)
	}
}

func (c *Client) seenCount(msgs []Message, res []SeenResult) {
	o := c.seenObserver()
	if o == nil {
		return
	}
	type k struct {
		consumer string
		res      SeenResult
	}
	counts := map[k]int{}
	var order []k
	for i, r := range res {
		kk := k{msgs[i].Consumer, r}
		if counts[kk] == 0 {
			order = append(order, kk)
		}
		counts[kk]++
	}
	for _, kk := range order {
		o.SeenLookup(kk.consumer, kk.res, counts[kk])
	}
}

// receiveSeen is receiveDepth behind the seen-key cache: messages whose key is cached with their
// exact fingerprint are answered Duplicate (Receipt.Cached); the others go to the database.
func (c *Client) receiveSeen(ctx context.Context, db sqlc.DBTX, msgs []Message) ([]Receipt, error) {
	start := time.Now()
	keys := make([]SeenKey, 0, len(msgs))
	index := make(map[SeenKey]int, len(msgs)) // key -> its position in keys
	for i := range msgs {
		k := SeenKey{c.cfg.Schema, msgs[i].Consumer, msgs[i].Key}
		if _, ok := index[k]; !ok {
			index[k] = len(keys)
			keys = append(keys, k)
		}
	}
	gctx, cancel := context.WithTimeout(ctx, c.cfg.SeenTimeout)
	entries, found, epoch, err := c.cfg.SeenCache.Get(gctx, keys)
	cancel()
	cacheUp := err == nil && len(entries) == len(keys) && len(found) == len(keys)
	if err == nil && !cacheUp {
		err = errSeenShortAnswer
	}
	if err != nil {
		c.seenError(SeenOpGet, err)
	}

	// A key is answered from the cache only if every occurrence of it in msgs matches its entry:
	// otherwise all of them go to the database, which compares repeats within a batch with their
	// first occurrence, so that receipts are the same with and without a cache.
	res := make([]SeenResult, len(msgs))
	keyRes := make([]SeenResult, len(keys))
	for i := range msgs {
		m := &msgs[i]
		j := index[SeenKey{c.cfg.Schema, m.Consumer, m.Key}]
		switch {
		case !cacheUp:
			res[i] = SeenFallback
		case !found[j]:
			res[i] = SeenMiss
		case entries[j].Fingerprint != SeenFingerprint(m.Kind, m.Payload):
			res[i] = SeenMismatch
		default:
			res[i] = SeenHit
		}
		if keyRes[j] == "" || keyRes[j] == SeenHit {
			keyRes[j] = res[i]
		}
	}
	out := make([]Receipt, len(msgs))
	var rest []int // indexes of the messages sent to the database
	for i := range msgs {
		m := &msgs[i]
		j := index[SeenKey{c.cfg.Schema, m.Consumer, m.Key}]
		if keyRes[j] == SeenHit {
			out[i] = Receipt{ID: entries[j].ID, Outcome: Duplicate, Cached: true}
			continue
		}
		if res[i] == SeenHit {
			res[i] = SeenMismatch // a hit sent along with its key's mismatching occurrences
		}
		rest = append(rest, i)
	}
	c.seenCount(msgs, res)
	if len(rest) == 0 {
		return out, nil
	}
	sub := make([]Message, len(rest))
	for k, i := range rest {
		sub[k] = msgs[i]
	}
	rs, err := c.receiveDepth(ctx, db, sub, 0)
	if err != nil {
		return nil, err
	}
	_, inTx := db.(pgx.Tx)
	var put []int // indexes into sub to cache now
	firsts := make(map[SeenKey]bool, len(rest))
	for k, i := range rest {
		r := rs[k]
		// Only the first occurrence of a key was compared with the stored row; a repeat within the
		// batch was compared with that first occurrence (and is a Duplicate of a Conflict, say).
		sk := SeenKey{c.cfg.Schema, sub[k].Consumer, sub[k].Key}
		first := !firsts[sk]
		firsts[sk] = true
		if cacheUp && first && seenEligible(r) {
			if inTx {
				r.seen = seenMark{ok: true, epoch: epoch, start: start}
			} else {
				put = append(put, k)
			}
		}
		out[i] = r
	}
	if len(put) > 0 {
		c.seenPut(ctx, epoch, start, sub, rs, put)
	}
	return out, nil
}

// seenPut caches the keys of msgs[i] for i in idx, with the ids of rs[i], for what remains of SeenTTL
// since start. Errors are reported to the SeenObserver only.
func (c *Client) seenPut(ctx context.Context, epoch uint64, start time.Time, msgs []Message, rs []Receipt, idx []int) {
	ttl := c.cfg.SeenTTL - time.Since(start)
	if ttl <= 0 {
		return
	}
	keys := make([]SeenKey, 0, len(idx))
	entries := make([]SeenEntry, 0, len(idx))
	ttls := make([]time.Duration, 0, len(idx))
	seen := make(map[SeenKey]bool, len(idx))
	for _, i := range idx {
		m := &msgs[i]
		k := SeenKey{c.cfg.Schema, m.Consumer, m.Key}
		if seen[k] {
			continue // a repeat within the batch: the first occurrence is the one stored
		}
		seen[k] = true
		keys = append(keys, k)
		entries = append(entries, SeenEntry{ID: rs[i].ID, Fingerprint: SeenFingerprint(m.Kind, m.Payload)})
		ttls = append(ttls, ttl)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.SeenTimeout)
	defer cancel()
	if err := c.cfg.SeenCache.Put(pctx, epoch, keys, entries, ttls); err != nil {
		c.seenError(SeenOpPut, err)
	}
}

// Remember caches the keys of msgs whose receipts rs were returned for them by ReceiveTx or
// ReceiveManyTx of this Client, in a transaction that has since committed: call it right after the
// commit succeeded, never before or after a rollback. It does nothing without a Config.SeenCache.
// Only receipts the seen-key cache may hold are cached (Inserted, and Duplicates of pending or dead
// messages), for what remains of Config.SeenTTL since the receive call started; receipts from calls
// outside a transaction (already cached), answered from the cache, or from another Client are
// skipped. Cache errors are reported to the Observer (SeenObserver) only. msgs and rs must have the
// same length.
func (c *Client) Remember(ctx context.Context, msgs []Message, rs []Receipt) {
	if c.cfg.SeenCache == nil || len(msgs) != len(rs) {
		return
	}
	// Receipts of one call share their mark; calls are cached one mark at a time.
	var idx []int
	var mark seenMark
	flush := func() {
		if len(idx) > 0 {
			c.seenPut(ctx, mark.epoch, mark.start, msgs, rs, idx)
		}
		idx = idx[:0]
	}
	for i, r := range rs {
		if !r.seen.ok || !seenEligible(r) {
			continue
		}
		if r.seen != mark {
			flush()
			mark = r.seen
		}
		idx = append(idx, i)
	}
	flush()
}

// seenInvalidate starts a new cache epoch after this Client deleted rows early (admin deletions), so
// that it never answers a deleted key from the cache.
func (c *Client) seenInvalidate(ctx context.Context) {
	if c.cfg.SeenCache == nil {
		return
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.SeenTimeout)
	defer cancel()
	if err := c.cfg.SeenCache.Invalidate(ictx); err != nil {
		c.seenError(SeenOpInvalidate, err)
	}
}

type seenError string

func (e seenError) Error() string { return string(e) }

const errSeenShortAnswer = seenError("txinbox: seen-key cache returned fewer entries than keys")
