// Package inbox receives messages into txinbox's inbox table, where the unique constraint on
// (consumer, key) turns every redelivery into a reported duplicate.
//
// A Client stores one message (Receive) or a batch in one round trip (ReceiveMany), on its own or
// inside the caller's transaction (ReceiveTx, ReceiveManyTx), so that a service can store the
// messages it accepts atomically with its own writes. Each message gets a Receipt: Inserted,
// Duplicate (same key and same kind and payload, compared as jsonb: the stored state and result are
// reported), or Conflict (same key, different content: a *KeyConflictError, nothing overwritten).
// Invalid input gets a *ValidationError and writes nothing.
//
// The worker package then applies each message exactly once. Migrate (or the goose CLI, over the
// files of package migrations) creates the tables in a schema of your choice.
//
// Dedup window: a completed message's record is kept for the worker's Retention (default 7 days)
// after completion. Within the window a redelivery is a Duplicate; after it the key is accepted as a
// new message, whether or not the cleaner has deleted the old row yet. Pending, processing and dead
// messages never expire.
package inbox
