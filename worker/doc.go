// Package worker runs handlers over the inbox so that each message takes effect exactly once.
//
// A Pool claims a batch of its consumer's ready messages (SELECT ... FOR UPDATE SKIP LOCKED on the
// small inbox_queue table; the claim commits, counting the attempt and bumping the message's fencing
// token), then runs the whole batch in one transaction: it locks the claims (dropping any whose token
// changed, that is, taken over by another worker after the lease ended), runs each handler in a
// savepoint of its own with the transaction in hand, and records every outcome in one statement before
// the single commit. A handler's writes and its message's "completed" mark therefore commit or roll
// back together, a failing message rolls back only its own savepoint, and many messages share one
// commit.
//
// Failures are retried after Backoff until MaxAttempts attempts have started; Permanent errors,
// undecodable payloads and exhausted attempts make the message dead. A panic is recovered and recorded
// as a failure with its stack. A message whose attempt never finished (the process died, hung or lost
// its connection) is taken over when its lease ends and then run alone, one such message at a time
// per consumer, so a message that kills its process reaches the dead letters after MaxAttempts
// without charging the messages claimed with it more than once.
//
// Guarantee: a handler's database writes made through the given pgx.Tx are applied once per message
// (once per key and consumer within the dedup window). Effects outside that transaction (an e-mail, an
// HTTP call) may happen more than once: pass Message.Key on to them as their own idempotency key.
package worker
