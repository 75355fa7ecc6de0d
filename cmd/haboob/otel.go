package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sandstorm-go/sandstorm/otelstage"
	"github.com/sandstorm-go/sandstorm/stage"
)

// otelHelp is -otel's usage line.
const otelHelp = `OpenTelemetry tracing: "off" (default), or "stdout" (spans as JSON lines on stdout): one span per stage visit, a request's spans nested along its path; a request's W3C traceparent header continues the caller's trace`

// tracing is the tracer provider -otel asks for; its zero value (off)
// traces nothing.
type tracing struct {
	tp *sdktrace.TracerProvider
}

// newTracing builds the tracer provider of -otel's value: "off" or ""
// (none) or "stdout" (spans exported, batched, as JSON lines to out).
func newTracing(mode string, out io.Writer) (tracing, error) {
	switch mode {
	case "", "off":
		return tracing{}, nil
	case "stdout":
		exp, err := stdouttrace.New(stdouttrace.WithWriter(out))
		if err != nil {
			return tracing{}, fmt.Errorf("-otel stdout: %w", err)
		}
		return tracing{tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))}, nil
	}
	return tracing{}, fmt.Errorf("-otel %q: want off or stdout", mode)
}

// wrap has every handler of reg traced (otelstage.Handler); off, it
// leaves reg alone.
func (t tracing) wrap(reg *stage.Registry) {
	if t.tp == nil {
		return
	}
	reg.Wrap(func(h stage.Handler) stage.Handler { return otelstage.Handler(t.tp, h) })
}

// shutdown exports the spans still batched.
func (t tracing) shutdown(ctx context.Context) error {
	if t.tp == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// tracing returns the tracer provider the -otel flag asks for (off with
// no flags), exporting to standard output.
func (f *clusterFlags) tracing() (tracing, error) {
	if f == nil {
		return tracing{}, nil
	}
	return newTracing(f.otel, os.Stdout)
}
