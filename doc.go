// Package txinbox is the shared base of txinbox's packages: the [Store] that says once where the
// tables are and how long dedup records live, the errors and name checks every package uses, the
// [Service] shape of every background job, and the words the worker and the outbox share: a
// [Permanent] error, a [Backoff] ([Exponential] by default), the [Outcome] of an attempt, the
// [ValidationError] of a rejected message, and the one hook of tracing and metrics, the
// [OperationTracer] (with [Tracers] and the optional [Injector]).
//
// txinbox turns at-least-once delivery into exactly-once effects on PostgreSQL. Its packages each do
// one job:
//
//   - package inbox receives messages: an inbox table deduplicates them by (consumer, key);
//   - package worker applies each stored message once, its handler and the message's status update in
//     one transaction;
//   - package idempotency applies each HTTP request once (Idempotency-Key);
//   - package admin lets an operator inspect, replay and discard stored messages;
//   - package retention deletes expired dedup records and idempotency keys;
//   - package migrate creates and upgrades the tables;
//   - package seen is the optional seen-key cache in front of the inbox table;
//   - package metrics exports Prometheus metrics.
//
// This package imports nothing of txinbox: every other package builds on it.
package txinbox
