// Package worker runs handlers over the inbox so that each message takes effect exactly once.
//
// A Pool runs batches, each in one transaction that claims its own messages: of its consumer's ready
// messages (in the small inbox_queue table), the batch transaction locks up to a batch with SELECT
// ... FOR UPDATE SKIP LOCKED and reads their payloads, in one statement that writes nothing. The row
// locks are the claim and the fence: no other worker can take those messages while the transaction
// lives, and when it ends (commit, rollback, or its session ended by the server or by the death of
// its process) they are free again. Before any handler runs, the batch records itself in a row of
// inbox_batch (its transaction's id and its messages), committed on its own: the batch's commit
// deletes that row, so a row left behind is a batch that never committed, and the rescuer charges it
// (see "Crash recovery"). The handlers then run with the transaction in hand, and one statement
// records every outcome before the single commit, the only write of each message's rows. A handler's
// writes and its message's "completed" mark therefore commit or roll back together, a failing message
// rolls back only its own writes, and many messages share one commit.
//
// Single handlers ([Handle]) run optimistically: the consecutive messages of a batch that single
// handlers handle share one savepoint, with no statement of their own beyond the handlers'. When
// one of them fails (an error, a panic, a timeout, a statement that left the transaction aborted),
// the pool rolls back to that savepoint and runs those messages again, each in a savepoint of its
// own, except the one that failed: its failure is its outcome, charged once, and it is not called
// again. So a single handler may be called twice in one attempt, its first call's writes rolled back,
// when a batch-mate fails: what it does outside the transaction must be safe to repeat (see the
// guarantee below). The messages that did not fail are never charged, and their writes commit once.
//
// Failures are retried after Backoff until MaxAttempts attempts have started; Permanent errors,
// undecodable payloads and exhausted attempts make the message dead. A panic is recovered and recorded
// as a failure with its stack. An attempt is counted by the statement that records its outcome (or,
// for a batch that never committed, by the charge of its row).
//
// # Crash recovery
//
// A batch that never committed (its process died, or its session was ended while frozen: a batch
// transaction left idle longer than the Lease is terminated by the server) leaves its inbox_batch
// row, and its messages stay out of every claim until that row is charged. Each pool's rescuer looks
// for such rows every PollInterval, asks the server whether their transaction is still in progress,
// and charges the others (a transaction too old for the server to know committed is not in progress,
// and had it committed its row would be gone): it counts the batch's attempt on its messages, isolates
// them, and deletes the row, once, whichever rescuer gets there first. Their messages are then
// suspects, taken over in groups by the rescuer, group after group without waiting, so that a killed
// process's messages drain at about the speed of a normal drain. The isolation is by halving: a
// suspect runs in a group of at most half the batch that never finished; a group that does not
// finish either is halved again, down to one message alone. Takeovers take the oldest suspects
// first, so the messages of one batch stay together. A message taken over alone runs as the only
// such message of its consumer across processes (it holds the consumer's advisory lock until its
// batch ends); groups of more than one run side by side. A batch handler call that left the
// transaction unusable holds its messages, which are then taken over alone, one by one.
//
// Attempts of crashes: every batch that never finished counts an attempt, except that the crashes of
// groups of more than one message count only once per message. So a message that kills its process
// is dead after about log2(its batch's size) + MaxAttempts crashes (the halvings, then MaxAttempts
// attempts alone), and the messages that shared its groups are charged one attempt for all of those
// crashes, whatever their number: an innocent message is never made dead by another's crashes.
// (A message taken over alone is charged for a crash while it runs even if another handler of the
// same process caused it: the process runs other batches beside it.) Each charge and each takeover is
// logged at Warn with its counts, and told to the Store's Tracer (txinbox.OpCharge, txinbox.OpTakeover).
//
// A batch handler ([HandleBatch]) is handed many messages of its kind in one call, in one savepoint,
// so that one statement applies them all; when a call fails, the pool calls it again on halves of the
// set, each in its own savepoint, and charges only the messages that fail alone (see
// [BatchHandlerFunc]). Single and batch handlers share one batch transaction.
//
// Guarantee: a handler's database writes made through the given pgx.Tx are applied once per message
// (once per key and consumer within the dedup window). Effects outside that transaction (an e-mail, an
// HTTP call) may happen more than once, even in one attempt that succeeds (a single handler called
// again after a batch-mate failed, a batch handler called again on a half): pass Message.Key on to
// them as their own idempotency key.
//
// # Ordering
//
// Messages received with the same inbox.Message.OrderingKey (for one consumer) run one at a time, in
// the order they were received: by message id, which follows the order of receive statements, and
// within one ReceiveMany call the order of the slice. (Two transactions receiving messages of one key
// at the same time have no order between them; the one that commits first may run first.) Different
// keys, and messages without a key, run in parallel. A message that fails holds back the later
// messages of its own key, and only those, until it completes or is dead; then the next one runs. A
// dead message does not stop its key: its successors run after it (replay it by hand if they depend
// on it). A claim skips, and puts off for a while, the messages blocked behind an older one of their
// key, and the worker that finishes a key's message makes the next one ready at once, so a deep
// backlog on a few keys does not slow claims down.
//
// # Delays
//
// inbox.Message.NotBefore delays a message's first attempt until that time (on the database clock).
// A delayed message keeps its place in its ordering key: the later messages of the key wait behind
// it, even if they are not delayed themselves.
//
// # Wake-ups
//
// A pool finds new messages without polling: the receiving statement sends a PostgreSQL notification
// (debounced per Client and consumer, Store.NotifyInterval), delivered when the receiving
// transaction commits, and the pool listens on a connection of its own (reopened with backoff when
// lost). A notification wakes one runner; a claim that comes back full wakes the next, and a runner
// that ran a full batch claims again at once. After any activity one runner polls every 10ms
// (Config.PollInterval if shorter) for 1s, or for twice Store.NotifyInterval if that is longer, which
// covers the messages whose notification was debounced; a runner that claimed a partial batch is
// that poller if no other runner is, and claims again 10ms after its last claim began (at once if
// woken). So at a low rate one claim every 10ms carries what arrived meanwhile. Polling at PollInterval stays as the fallback: when Store.NotifyInterval is negative
// (no notifications and no LISTEN: set it so when connections go through PgBouncer in transaction
// mode), when Store.DB is not a *pgxpool.Pool (the listening connection is opened with its
// configuration), when a check after LISTEN shows that notifications do not arrive, and while the
// listening connection is down. A message that becomes due later (a NotBefore, a retry) is found by
// polling.
//
// # Maintenance
//
// A pool runs no maintainer: a runner (package runner) runs the schema's maintainer candidate beside
// its pools and relays. One is elected among all the runners of the schema, and it alone rotates the inbox's
// generations (the inbox stays bounded with no line of the service's), deletes expired idempotency keys,
// runs the vacuum and statistics safety nets and the health warnings, and folds the console's
// roll-ups, which each batch's finish counts in its own transaction. A pool also keeps a heartbeat
// (table inbox_pools) and, when it has claimed nothing for a minute while messages of consumers that
// no pool serves are waiting (a mistyped Consumer, say), says so once at Warn, naming them; once per
// such idle stretch. Pools know which consumers are served from their heartbeats (renewed every 15 s).
//
// # Observability
//
// The Store's Logger receives the pool's logs (log/slog). The Store's Tracer (txinbox.Store.Tracer) is
// told about every finished attempt once its outcome committed (txinbox.OpHandled: package metrics
// counts them for Prometheus), and about every handler call (txinbox.OpHandle; a message called again
// after a batch-mate failed gets a second one, and OpHandled once), with the message's
// headers; the handler's ctx derives from the context it returns: package txotel makes an OpenTelemetry span,
// "txinbox.handle", whose parent is the trace context in the message's headers (traceparent), so
// that the handler's work joins the trace of whoever sent the message (for a batch handler,
// "txinbox.handle_batch", linked to each message's trace context).
package worker
