// Package inbox receives messages into txinbox's inbox table, where the unique constraint on
// (consumer, key) turns every redelivery into a reported duplicate.
//
// A [Client] (made by [New] from a [txinbox.Store]) stores one message ([Client.Receive]) or a batch
// in one round trip ([Client.ReceiveMany]), on its own or inside the caller's transaction
// ([Client.ReceiveTx], [Client.ReceiveManyTx]), so that a service can store the messages it accepts
// atomically with its own writes. Each message gets a [Receipt]: Inserted, Duplicate (same key and
// same kind and payload, compared as jsonb: the stored state and result are reported), or Conflict
// (same key, different content: a *[KeyConflictError], nothing overwritten). Invalid input gets a
// *[txinbox.ValidationError] and writes nothing. Concurrent Receive calls of one Client share
// statements and commits, group commit style (Config.CoalesceMax, Config.CoalesceWait), each still
// getting its own receipt. The package also holds the records a receipt and an operator
// see: [Message], [StoredMessage], [State], [Fingerprint], and the key strategies ([ProducerKey],
// [ContentKey], [CompositeKey], [BrokerKey]).
//
// The worker package then applies each message exactly once; package migrate creates the tables;
// package admin is for operators; package retention deletes expired records.
//
// Dedup window: a completed message's record is kept for Store.Retention (default 7 days) after
// completion. Within the window a redelivery is a Duplicate; after it the key is accepted as a new
// message, whether or not the retention cleaner has deleted the old row yet. Pending, processing and
// dead messages never expire.
package inbox
