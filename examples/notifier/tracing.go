package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txotel"
)

// tracing is the notifier's OpenTelemetry set-up (--trace-file): every span the process ends is
// appended to the file, one JSON object a line as the stdout exporter (stdouttrace) writes them, at
// once (a synchronous span processor: a killed process loses only the spans it had not ended). The
// resource names the process: service.name "notifier", process.command "notifier", process.pid.
// A nil *tracing traces nothing.
type tracing struct {
	provider *sdktrace.TracerProvider
	tracer   *txotel.Tracer
	file     *os.File
}

// openTracing returns the tracing whose spans are appended to path (created if missing); path ""
// returns nil.
func openTracing(path string) (*tracing, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--trace-file: %w", err)
	}
	exp, err := stdouttrace.New(stdouttrace.WithWriter(f))
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--trace-file: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(resource.NewSchemaless(
		attribute.String("service.name", "notifier"), attribute.String("process.command", "notifier"),
		attribute.Int("process.pid", os.Getpid()))))
	return &tracing{provider: tp, tracer: txotel.New(txotel.Config{TracerProvider: tp}), file: f}, nil
}

// storeTracer returns the txinbox.Store.Tracer: txotel's, which makes the receive span of each
// stored batch (linked to the trace context each message arrived with) and the handle span of each
// message (a child of that context); nil without tracing.
func (t *tracing) storeTracer() txinbox.OperationTracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

func (t *tracing) close(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return errors.Join(t.provider.Shutdown(ctx), t.file.Close())
}
