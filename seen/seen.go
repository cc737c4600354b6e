// Package seen is the in-process seen-key cache in front of the inbox table: an [LRU], a
// txinbox.SeenCache that answers the redelivery of a recently accepted message as a Duplicate without
// a database round trip, and the [Result]s a lookup reports.
//
// txinbox.Store.SeenCache takes the cache: [LRU] (NewLRU) in process, or module
// github.com/txinbox/txinbox/seenredis on Redis. The cache is never the source of truth: see
// txinbox.Store.SeenCache for when keys are cached and for how long.
package seen

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
