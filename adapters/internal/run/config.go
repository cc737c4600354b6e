package run

import (
	"time"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/adapters"
)

// Defaults of adapters.BatchConfig (documented on its fields).
const (
	defaultBatchSize     = 100
	defaultBatchWait     = 20 * time.Millisecond
	defaultRetryDelay    = time.Second
	defaultMaxRetryDelay = 30 * time.Second
	// DefaultWriteTimeout is BatchConfig.WriteTimeout's default, and the webhook receiver's.
	DefaultWriteTimeout = 30 * time.Second
)

// Size is a further count of an adapter's Config that must not be negative, named as its field.
type Size struct {
	Field string
	Value int
}

// Setup is the part of every adapter's New that is the same for all: it checks b and sizes (a
// *txinbox.ConfigError naming the first negative field), fills in b's zero fields with their defaults,
// sets sink.Key to key if it is nil, and makes the Sink; *sink then holds the Sink's configuration,
// defaults included (sink.Store resolved: its Logger is the adapter's).
func Setup(b *adapters.BatchConfig, sink *adapters.SinkConfig, key adapters.KeyFunc, sizes ...Size) (*adapters.Sink, error) {
	ints := append([]Size{{"BatchSize", b.BatchSize}}, sizes...)
	for _, f := range ints {
		if f.Value < 0 {
			return nil, &txinbox.ConfigError{Field: f.Field, Reason: "must not be negative"}
		}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"BatchWait", &b.BatchWait, defaultBatchWait},
		{"RetryDelay", &b.RetryDelay, defaultRetryDelay},
		{"MaxRetryDelay", &b.MaxRetryDelay, defaultMaxRetryDelay},
		{"WriteTimeout", &b.WriteTimeout, DefaultWriteTimeout},
	} {
		if *f.v < 0 {
			return nil, &txinbox.ConfigError{Field: f.name, Reason: "must not be negative"}
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if b.BatchSize == 0 {
		b.BatchSize = defaultBatchSize
	}
	if sink.Key == nil {
		sink.Key = key
	}
	s, err := adapters.NewSink(*sink)
	if err != nil {
		return nil, err
	}
	*sink = s.Config()
	return s, nil
}

// Prefetch returns the prefetch count for a configured prefetch and batch size: 2 × batchSize when
// prefetch is 0, and never less than batchSize.
func Prefetch(prefetch, batchSize int) int {
	if prefetch == 0 {
		prefetch = 2 * batchSize
	}
	return max(prefetch, batchSize)
}
