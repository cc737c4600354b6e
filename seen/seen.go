// Package seen is the in-process seen-key cache in front of the inbox table: an [LRU], a
// txinbox.SeenCache that answers the redelivery of a recently accepted message as a Duplicate without
// a database round trip.
//
// txinbox.Store.SeenCache takes the cache: [LRU] (NewLRU) in process, or module
// github.com/txinbox/txinbox/seenredis on Redis. The cache is never the source of truth: see
// txinbox.Store.SeenCache for when keys are cached and for how long. What a lookup did for each
// message is reported to the Store's tracer (txinbox.TraceEnd.Results of txinbox.OpSeenGet).
package seen
