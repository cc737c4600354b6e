// Package tracing is the OpenTelemetry set-up of the ledger's processes (serve, work, relay): with
// --trace-file, a process appends every span it ends to that file, and its Store gets txotel's
// Tracer, so that one trace runs from a request of the ledger's API to the notifier's handler.
//
// The file holds one JSON object a line, as the OpenTelemetry stdout exporter (stdouttrace) writes
// them; spans are written when they end (a synchronous span processor), so that a process that is
// killed loses only the spans it had not ended. The resource names the process: service.name
// ("ledger"), process.command (e.g. "ledger relay") and process.pid. The demo reads these files
// (package outboxdemo).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/txinbox/txinbox"
	"github.com/txinbox/txinbox/txotel"
)

// Service is the service.name of the ledger's spans.
const Service = "ledger"

// Tracing is one process's tracing. A nil *Tracing traces nothing: its methods return nil.
type Tracing struct {
	provider *sdktrace.TracerProvider
	tracer   *txotel.Tracer
	file     *os.File
}

// Open returns the tracing of the process named command (e.g. "ledger serve") whose spans are
// appended to path (created if missing). path "" returns nil: no tracing.
func Open(path, command string) (*Tracing, error) {
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
		attribute.String("service.name", Service), attribute.String("process.command", command),
		attribute.Int("process.pid", os.Getpid()))))
	return &Tracing{provider: tp, tracer: txotel.New(txotel.Config{TracerProvider: tp}), file: f}, nil
}

// StoreTracer returns the tracer to give as txinbox.Store.Tracer (nil without tracing).
func (t *Tracing) StoreTracer() txinbox.OperationTracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

// TracerProvider returns the provider of the process's own spans, such as the API's request spans
// (nil without tracing).
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// Close ends the provider (spans started later are not recorded) and closes the file.
func (t *Tracing) Close(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return errors.Join(t.provider.Shutdown(ctx), t.file.Close())
}
