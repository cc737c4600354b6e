package adapters

// IdempotencyKeyHeader is the header the default key strategies read after the broker's own message
// id.
const IdempotencyKeyHeader = "x-idempotency-key"
