package adapters

import (
	"errors"
	"time"
)

// BatchConfig is the part of a broker consumer's Config that every adapter shares: it is embedded in
// [github.com/txinbox/txinbox/adapters/rabbitmq.Config], [github.com/txinbox/txinbox/adapters/natsjs.Config]
// and [github.com/txinbox/txinbox/adapters/kafka.Config], whose New checks it the same way: a negative
// field is an *txinbox.ConfigError naming that field (e.g. Field "BatchWait"), and a zero field takes the
// default documented on it.
type BatchConfig struct {
	// BatchSize is the most messages stored in one transaction and acknowledged together. Default:
	// 100.
	BatchSize int
	// BatchWait is how long a batch waits for more messages after its first one arrived. Default:
	// 20ms.
	BatchWait time.Duration
	// RetryDelay is the wait after a batch could not be stored (the database is down) before it is
	// stored again. Meanwhile the batch stays in the consumer's hand, unacknowledged (JetStream: its
	// ack deadline extended with InProgress), so that no later message is stored before it. It
	// doubles after each failure in a row, up to MaxRetryDelay. RabbitMQ also waits it before
	// reconnecting. Default: 1s.
	RetryDelay time.Duration
	// MaxRetryDelay caps RetryDelay (and RabbitMQ's reconnect delay). Default:
	// 30s.
	MaxRetryDelay time.Duration
	// WriteTimeout bounds storing one batch (and, for Kafka, committing its offsets). Default:
	// 30s.
	WriteTimeout time.Duration
}

// ErrAlreadyStarted is returned by a consumer's Start when it was started before: a consumer consumes
// once, from Start to Stop; make another with New to consume again.
var ErrAlreadyStarted = errors.New("txinbox/adapters: consumer already started")
