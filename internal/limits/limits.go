// Package limits holds the bounds txinbox puts on its input and on its calls to a seen-key cache,
// for the packages that enforce them and for those (the txinbox command, the console, the adapters)
// that must check the same input first. Each is documented on the field or function it bounds.
package limits

import "time"

// SeenTimeout bounds each call to a seen-key cache (txinbox.Store.SeenCache): a Get or a Put by an
// inbox Client, an Invalidate by an admin.Admin.
const SeenTimeout = 100 * time.Millisecond

// Headers of an inbox message (inbox.Message.Headers).
const (
	// HeaderNameBytes is the longest header name.
	HeaderNameBytes = 256
	// HeaderValueBytes is the longest header value.
	HeaderValueBytes = 8192
	// HeadersBytes bounds the total size of one message's header names and values.
	HeadersBytes = 1 << 20
)

// Admin calls (package admin).
const (
	// DeadListLimit is the largest admin.DeadFilter.Limit (admin.Admin.ListDead).
	DeadListLimit = 1000
	// AdminIDs is the largest number of ids one admin call taking ids accepts.
	AdminIDs = 10000
)

// Keys and batches.
const (
	// KeyBytes is the longest idempotency key (txinbox.ValidateKey), and the longest outbox event key.
	KeyBytes = 512
	// TopicBytes is the longest outbox topic (outbox.Message.Topic: an AMQP routing key's limit).
	TopicBytes = 255
	// RelayBatchSize is the largest outbox.RelayConfig.BatchSize.
	RelayBatchSize = 1000
	// PoolBatchSize is the largest worker.Config.BatchSize (64 subtransactions per transaction).
	PoolBatchSize = 64
	// HandlerBatchSize is the largest worker.HandlerConfig.BatchSize of a batch handler.
	HandlerBatchSize = 1000
	// CleanBatchSize is the largest retention.CleanOptions.BatchSize.
	CleanBatchSize = 100_000
)

// Console pages (package console).
const (
	// ConsoleDeadPageSize is the number of dead letters (or dead outbox events) per page.
	ConsoleDeadPageSize = 50
	// ConsoleBulk is the most messages one confirmed action changes.
	ConsoleBulk = 100_000
)
