// Package worker runs handlers over the inbox so that each message takes effect exactly once.
//
// A Pool claims a batch of its consumer's ready messages (SELECT ... FOR UPDATE SKIP LOCKED on the
// small inbox_queue table; the claim commits, counting the attempt and bumping the message's fencing
// token in that narrow queue row only), then runs the whole batch in one transaction: it locks the
// claims (dropping any whose token changed, that is, taken over by another worker after the lease
// ended), runs each handler in a savepoint of its own with the transaction in hand, and records every
// outcome in one statement before the single commit, the only write of each message's inbox row. A handler's writes and its message's "completed" mark therefore commit or roll
// back together, a failing message rolls back only its own savepoint, and many messages share one
// commit.
//
// Failures are retried after Backoff until MaxAttempts attempts have started; Permanent errors,
// undecodable payloads and exhausted attempts make the message dead. A panic is recovered and recorded
// as a failure with its stack.
//
// # Crash recovery
//
// A claim that never finished (its process died, hung or lost its connection) leaves its messages
// claimed; when its lease ends they are suspects, and each pool's rescuer takes them over in groups
// (one takeover is one claim statement and one batch transaction), as soon as the lease ends and
// group after group without waiting, so that a killed process's messages drain at about the speed
// of a normal drain. The isolation is by halving: a suspect runs in a group of at most half the
// group its unfinished claim ran (a claim's batch, or an earlier takeover's group); a group that does
// not finish either is halved again at its next takeover, down to one message alone. Takeovers take
// the oldest suspects first, so the messages of one claim stay together. A message taken over alone
// runs as the only such message of its consumer across processes (groups of more than one run side
// by side). A batch handler call that left the transaction unusable holds its messages, which are
// taken over alone, one by one, after their lease.
//
// Attempts of crashes: every claim and every takeover counts an attempt, except that the crashes of
// groups of more than one message count only once per message. So a message that kills its process
// is dead after about log2(its claim's size) + MaxAttempts crashes (the halvings, then MaxAttempts
// attempts alone), and the messages that shared its groups are charged one attempt for all of those
// crashes, whatever their number: an innocent message is never made dead by another's crashes.
// (A message taken over alone is charged for a crash while it runs even if another handler of the
// same process caused it: the process runs other batches beside it.) Each takeover is logged at Warn
// ("taking over messages whose claim never finished") with its counts, and told to an Observer that
// implements [TakeoverObserver].
//
// A batch handler ([HandleBatch]) is handed many messages of its kind in one call, in one savepoint,
// so that one statement applies them all; when a call fails, the pool calls it again on halves of the
// set, each in its own savepoint, and charges only the messages that fail alone (see
// [BatchHandlerFunc]). Single and batch handlers share one batch transaction.
//
// Guarantee: a handler's database writes made through the given pgx.Tx are applied once per message
// (once per key and consumer within the dedup window). Effects outside that transaction (an e-mail, an
// HTTP call) may happen more than once: pass Message.Key on to them as their own idempotency key.
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
// lost). After any activity one runner polls every HotPollInterval for HotWindow, which covers the
// messages whose notification was debounced. Polling at PollInterval stays as the fallback: with
// DisableListen (PgBouncer in transaction mode), when a check after LISTEN shows that notifications
// do not arrive, and while the listening connection is down. A message that becomes due later (a
// NotBefore, a retry) is found by polling.
//
// # Maintenance
//
// A pool starts the schema's maintainer (package maintain) unless Config.DisableMaintainer: one is
// elected among all the pools and processes of the schema, and it alone rotates the inbox's
// generations (the inbox stays bounded with no retention.Cleaner), deletes expired idempotency keys,
// runs the vacuum and statistics safety nets and the health warnings, and folds the console's
// roll-ups, which each batch's finish counts in its own transaction. A pool also keeps a heartbeat
// (table inbox_pools) and, when it has claimed nothing for Config.IdleWarnAfter while messages of
// consumers that no pool serves are waiting, says so once, naming them.
//
// # Observability
//
// Config.Logger receives the pool's logs (log/slog). Config.Observer is told about every finished
// attempt (package metrics counts them for Prometheus). Each handler call runs in an OpenTelemetry
// span, "txinbox.handle", whose parent is the trace context in the message's headers (traceparent),
// and the handler's ctx carries it (Config.TracerProvider, Config.Propagator).
package worker
