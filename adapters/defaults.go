package adapters

import "time"

// Defaults of [BatchConfig], shared by the broker packages' Config types.
const (
	// DefaultBatchSize is the most records stored (and acknowledged) together.
	DefaultBatchSize = 100
	// DefaultBatchWait is how long a batch waits for more records after its first one arrived.
	DefaultBatchWait = 20 * time.Millisecond
	// DefaultRetryDelay is the wait after the first failure to store a batch (the database is down);
	// it doubles after each further failure in a row, up to DefaultMaxRetryDelay.
	DefaultRetryDelay = time.Second
	// DefaultMaxRetryDelay caps RetryDelay and reconnect delays.
	DefaultMaxRetryDelay = 30 * time.Second
	// DefaultWriteTimeout bounds storing one batch.
	DefaultWriteTimeout = 30 * time.Second
	// IdempotencyKeyHeader is the header the default key strategies read after the broker's own
	// message id.
	IdempotencyKeyHeader = "x-idempotency-key"
)
