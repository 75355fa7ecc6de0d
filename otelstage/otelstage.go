// Package otelstage traces stage visits with OpenTelemetry.
//
// Start with Handler: it wraps a stage's handler so that every event that
// carries a context (stage.ContextEvent: a stage.Request, for one) gets a
// span for its visit of the stage, a child of the span in that context.
// When the event can take a new context (stage.ContextSetter: a
// stage.Request, an http.Request) the span's context replaces it before
// the handler runs, so spans nest: the spans the handler starts from the
// event's Context() are children of its stage span, and so is the span of
// the next stage the handler passes the event to. A request's visits of
// every stage it passes through are thus one trace under the caller's span
// (with nethttp behind otelhttp, the HTTP server span):
//
//	tp := sdktrace.NewTracerProvider(...)
//	reg.Register("orders.Price", func() stage.Handler {
//		return otelstage.Handler(tp, stage.Typed[*Call](&price{}))
//	})
//
// Each span records the event's queue wait, the time from its enqueue to
// the start of the batch, as the attribute sandstorm.queue_wait_ns (the
// stage's queue then reads the clock for every event; stage.WrapWaits).
//
// An event without a span in its context that carries a W3C
// `traceparent` header (HeaderCarrier: an http.Request) continues the
// remote caller's trace: its first stage's span (Haboob's HttpRecv) is a
// child of the caller's span, and has its trace ID.
//
// Without a TracerProvider (nil) Handler returns the handler as it is.
// Events without a context are not traced; events whose context cannot be
// replaced get sibling spans, as before. A span covers the batch the
// event was handled in (the runtime hands handlers batches), and is
// marked as an error when the handler failed the event (stage.EventError)
// or the batch.
package otelstage

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/sandstorm-go/sandstorm/otelstage"

// Handler returns h with a span per visit of an event that carries a
// context; see the package documentation. The spans are named after the
// stage and have the attributes sandstorm.stage, sandstorm.batch_size and
// sandstorm.queue_wait_ns.
func Handler(tp trace.TracerProvider, h stage.Handler) stage.Handler {
	if tp == nil {
		return h
	}
	tracer := tp.Tracer(ScopeName)
	name := "stage"
	init := func(c *stage.Context) error {
		name = c.Stage().Name()
		return nil
	}
	return stage.WrapWaits(h, init, func(batch []sink.Event, waits []time.Duration) error {
		var spans []trace.Span
		var idx []int // batch index of each span's event
		for i, e := range batch {
			ce, ok := e.(stage.ContextEvent)
			if !ok {
				continue
			}
			ctx := ce.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx = continueRemote(ctx, e)
			attrs := []attribute.KeyValue{attribute.String("sandstorm.stage", name), attribute.Int("sandstorm.batch_size", len(batch))}
			if waits[i] >= 0 {
				attrs = append(attrs, attribute.Int64(QueueWaitKey, int64(waits[i])))
			}
			ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
			if cs, ok := e.(stage.ContextSetter); ok {
				cs.SetContext(ctx) // before the handler: it owns the event from then on
			}
			spans, idx = append(spans, span), append(idx, i)
		}
		err := h.HandleEvents(batch)
		if err != nil && len(spans) > 0 {
			failed := failedEvents(err, len(batch))
			for k, span := range spans {
				if failed == nil || failed[idx[k]] != nil {
					cause := err
					if failed != nil {
						cause = failed[idx[k]]
					}
					span.RecordError(cause)
					span.SetStatus(codes.Error, cause.Error())
				}
			}
		}
		for _, span := range spans {
			span.End()
		}
		return err
	})
}

// HeaderCarrier is implemented by events that carry a remote caller's
// trace context in header fields: an http.Request, whose W3C
// `traceparent` and `tracestate` fields (TraceContext) continue the
// caller's trace.
type HeaderCarrier interface {
	TraceHeader(key string) string
}

// traceContext is the W3C Trace Context propagator the stage spans of a
// HeaderCarrier event without a span continue from.
var traceContext = propagation.TraceContext{}

// continueRemote returns ctx with the remote span context of e's
// `traceparent` field when ctx has no span yet (the event's first stage:
// Haboob's HttpRecv), so that its span is a child of the caller's.
func continueRemote(ctx context.Context, e sink.Event) context.Context {
	hc, ok := e.(HeaderCarrier)
	if !ok || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return traceContext.Extract(ctx, headerCarrier{hc})
}

// headerCarrier adapts a HeaderCarrier to the propagator's read side.
type headerCarrier struct{ h HeaderCarrier }

func (c headerCarrier) Get(key string) string { return c.h.TraceHeader(key) }
func (c headerCarrier) Set(string, string)    {} // extraction never sets
func (c headerCarrier) Keys() []string        { return nil }

// QueueWaitKey is the span attribute holding the event's queue wait in
// nanoseconds: from its enqueue on the stage to the start of its batch.
const QueueWaitKey = "sandstorm.queue_wait_ns"

// failedEvents maps the batch indices an error names (stage.EventError,
// alone or joined) to their errors; nil when it names none (the whole
// batch failed).
func failedEvents(err error, n int) map[int]error {
	out := map[int]error{}
	var walk func(error) bool
	walk = func(err error) bool {
		switch e := err.(type) {
		case *stage.EventError:
			if e.Index < 0 || e.Index >= n {
				return false
			}
			out[e.Index] = e
			return true
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				if !walk(x) {
					return false
				}
			}
			return true
		}
		return false
	}
	if !walk(err) || len(out) == 0 {
		return nil
	}
	return out
}
