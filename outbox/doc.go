// Package outbox is the transactional outbox, the other half of txinbox: the events a service
// publishes leave once per commit, and their ids become the idempotency keys of the inboxes
// downstream.
//
// A [Client] (made by [New] from a [txinbox.Store]) writes events with [Client.Publish] inside the
// caller's transaction, in the same schema as the inbox (migration 00009): the events exist if and
// only if that transaction commits, together with the service's own writes. A [Relay] (made by
// [NewRelay]) claims the committed events, hands them to a [Publisher] (a broker adapter) and records
// their outcome; it has the [txinbox.Service] shape (Start, Stop). [Rotate] removes the events sent
// longer ago than a retention window (the schema's maintainer runs it: see Retention below).
//
// # Semantics
//
// Atomicity: an event is written by the caller's transaction. If it rolls back, the event never
// existed and is never handed to a Publisher; if it commits, the event is.
//
// Delivery: at least once. Every committed event is handed to a Publisher until a call acknowledges
// it and that is recorded (it is then sent), or until it is dead. It may be handed over again after
// an acknowledgment: when its relay dies or loses the database before recording it, or when a
// Publish call outlives its lease and another relay takes the event over. Every hand-over carries
// the same [Event].ID, a UUID drawn by Publish, which the Publisher sends as the message's
// idempotency key; a consumer that deduplicates by it (txinbox's inbox, with the id as
// inbox.Message.Key) applies each event once.
//
// Event ids: a UUID of version 7 (time-ordered, 74 random bits), not the table's bigint: it is unique
// across schemas, services, databases, and restores or re-creations of any of them, so that two
// services publishing to one consumer, or a restored outbox whose sequence starts over, can never
// hand a consumer an id it already saw for another event (it would drop that event as a duplicate).
// Its text form has 36 characters, a valid inbox key.
//
// Order: the events of one [Message].Key are handed over one at a time, in id order (the order of
// the Publish calls that wrote them, and within a call, of its messages), across topics: a key's next
// event is handed over only after the previous one was sent or became dead. So if a transaction that
// published event A committed before event B of the same key was published, A is handed over, and
// acknowledged, before B; two transactions publishing a key at once have no order between them, as
// their commits have none (lock the aggregate the key names, as usual, to order them). A failed event
// holds back the later events of its key until it is sent or dead; a dead event does not stop its
// key. Events without a key, and events of different keys, go in parallel, and the events of one
// Publish call to a Publisher have distinct keys. Downstream, the first arrival of each event of a key
// follows this order; a repeated arrival (the at-least-once case above) may come later, and is
// dropped by deduplication. Order holds across relay restarts, crashes and takeovers.
//
// Retries: an event whose Publish failed is handed over again after RelayConfig.Backoff, until
// RelayConfig.MaxAttempts attempts have started; then, or at once for a [txinbox.Permanent] error, it is
// dead: kept in the outbox (state dead) and never handed over again. A Publisher that is a
// [TopicChecker] refuses topics it cannot deliver before any hand-over: such an event is dead at
// once ([ErrTopicRefused]), never handed to Publish.
//
// Retention: sent events are kept for a window (by default Store.Retention) for audit and replay,
// then leave with their generation: the outbox table is a ring of three partitions, as the inbox's
// is (migration 00006), emptied by TRUNCATE, never by row DELETEs. Unsent and dead events are never
// removed by a rotation. The schema's maintainer (package maintain, which every runner runs)
// rotates the outbox by itself, as its built-in job outbox-rotate, with the window
// maintain.Config.OutboxWindow: a service whose pools run the default maintainer keeps its outbox
// bounded with no line of its own. Where no maintainer rotates the outbox (no pool, or a negative
// OutboxWindow), call [Rotate] periodically (RotateOptions.Window).
//
// Wake-up: Publish also sends a PostgreSQL notification (debounced: at most once
// per Store.NotifyInterval per Client) that wakes idle relays when the transaction commits; a relay
// keeps polling fast for a while after any activity, which covers the debounced events, and polls
// every RelayConfig.PollInterval otherwise (see there). A negative Store.NotifyInterval turns
// notifications and LISTEN off: relays then poll only.
//
// The outbox's tables are not distributed by migrate.Distribute (Citus): they have no consumer
// column, and are written in the application's transactions.
package outbox
