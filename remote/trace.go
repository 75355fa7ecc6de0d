package remote

import (
	"context"
	"strconv"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// Trace contexts cross nodes in the NATS message headers, in W3C Trace
// Context form (DESIGN §9): the sender injects the span context of every
// event that carries one (stage.ContextEvent), and the replica sets it as
// the remote parent in the decoded event's context (stage.ContextSetter)
// before it enqueues the event, so the spans the replica's stages start
// (otelstage) are children of the sender's span. A message holds several
// events (EnqueueMany, combined Enqueues), each of its own request: the
// first event's context goes under the standard names (traceparent,
// tracestate), event i's (i > 0) under traceparent-i and tracestate-i.
// An event without a valid span context adds nothing, and a message none
// of whose events has one carries no header.
//
// This uses only otel's API packages (propagation and trace), not the SDK:
// without a TracerProvider set up, no event holds a valid span context,
// and nothing is sent.
var traceContext propagation.TraceContext

// headerCarrier is a propagation.TextMapCarrier over a message's headers
// for the event at one index of the message.
type headerCarrier struct {
	h      nats.Header
	suffix string
}

func (c headerCarrier) Get(key string) string {
	if v := c.h[key+c.suffix]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c.h[key+c.suffix] = []string{value} }

// Keys lists every header name (TraceContext does not use it).
func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c.h))
	for k := range c.h {
		keys = append(keys, k)
	}
	return keys
}

func traceSuffix(i int) string {
	if i == 0 {
		return ""
	}
	return "-" + strconv.Itoa(i)
}

// spanContextOf returns the valid span context e carries, if any.
func spanContextOf(e sink.Event) (context.Context, bool) {
	ce, ok := e.(stage.ContextEvent)
	if !ok {
		return nil, false
	}
	ctx := ce.Context()
	if ctx == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return nil, false
	}
	return ctx, true
}

// injectTrace adds the trace context of e, the i-th event of a message,
// to h, which it allocates when needed; it returns h.
func injectTrace(h nats.Header, i int, e sink.Event) nats.Header {
	ctx, ok := spanContextOf(e)
	if !ok {
		return h
	}
	if h == nil {
		h = nats.Header{}
	}
	traceContext.Inject(ctx, headerCarrier{h: h, suffix: traceSuffix(i)})
	return h
}

// injectTraces is injectTrace for every event of a message.
func injectTraces(es []sink.Event) nats.Header {
	var h nats.Header
	for i, e := range es {
		h = injectTrace(h, i, e)
	}
	return h
}

// pendingTrace is one event's trace context, taken by its own goroutine
// before a combined request carries it.
type pendingTrace struct{ parent, state string }

func tracedPending(e sink.Event) pendingTrace {
	ctx, ok := spanContextOf(e)
	if !ok {
		return pendingTrace{}
	}
	h := nats.Header{}
	traceContext.Inject(ctx, headerCarrier{h: h})
	c := headerCarrier{h: h}
	return pendingTrace{parent: c.Get(traceparentHeader), state: c.Get(tracestateHeader)}
}

const (
	traceparentHeader = "traceparent"
	tracestateHeader  = "tracestate"
)

// add puts the trace context into h for the i-th event of a message.
func (p pendingTrace) add(h nats.Header, i int) nats.Header {
	if p.parent == "" {
		return h
	}
	if h == nil {
		h = nats.Header{}
	}
	c := headerCarrier{h: h, suffix: traceSuffix(i)}
	c.Set(traceparentHeader, p.parent)
	if p.state != "" {
		c.Set(tracestateHeader, p.state)
	}
	return h
}

// extractTraces sets, on every decoded event of a message that can take a
// context, the trace context the message's headers hold for it as the
// remote parent of the event's context.
func extractTraces(h nats.Header, es []sink.Event) {
	if len(h) == 0 {
		return
	}
	for i, e := range es {
		cs, ok := e.(stage.ContextSetter)
		if !ok {
			continue
		}
		c := headerCarrier{h: h, suffix: traceSuffix(i)}
		if c.Get(traceparentHeader) == "" {
			continue
		}
		base := cs.Context()
		if base == nil {
			base = context.Background()
		}
		ctx := traceContext.Extract(base, c)
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsRemote() {
			cs.SetContext(ctx)
		}
	}
}
