package remote_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandstorm-go/sandstorm/otelstage"
	"github.com/sandstorm-go/sandstorm/remote"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// traced is an event that carries a context and can take a new one, as
// stage.Request and http.Request do; only N travels in its bytes.
type traced struct {
	N   int
	ctx context.Context
}

func (e *traced) Context() context.Context       { return e.ctx }
func (e *traced) SetContext(ctx context.Context) { e.ctx = ctx }

func init() {
	remote.RegisterFunc(testCodecs, "test.traced",
		func(_ *remote.Wire, e *traced) ([]byte, error) { return strconv.AppendInt(nil, int64(e.N), 10), nil },
		func(_ *remote.Wire, b []byte) (*traced, error) {
			n, err := strconv.Atoi(string(b))
			return &traced{N: n}, err
		})
}

const traceGraph = `
global:
  cluster: {node: a}
stages:
  Front: {handler: t.Front, nodes: [a]}
  Work:
    handler: t.Work
    nodes: [b]
    remote: {mode: %s, timeout: 2s}
`

// headerSpy records the trace headers of every message on the cluster's
// NATS server.
type headerSpy struct {
	mu   sync.Mutex
	seen []nats.Header
}

func spy(t *testing.T, url string) *headerSpy {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s := &headerSpy{}
	if _, err := nc.Subscribe(">", func(m *nats.Msg) {
		for k := range m.Header {
			if strings.HasPrefix(strings.ToLower(k), "trace") {
				s.mu.Lock()
				s.seen = append(s.seen, m.Header)
				s.mu.Unlock()
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *headerSpy) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// TestTraceAcrossNodes sends an event through an otelstage stage on node
// a, a remote sink and an otelstage stage on node b (each node with its
// own TracerProvider, as two processes would have): the three spans are
// one trace, each the parent of the next. An event without a context
// sends no trace header.
func TestTraceAcrossNodes(t *testing.T) {
	for _, mode := range []string{"request", "durable"} {
		t.Run(mode, func(t *testing.T) {
			graph := fmt.Sprintf(traceGraph, mode)
			frontRec, workRec := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
			frontTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(frontRec))
			workTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(workRec))
			t.Cleanup(func() { _ = frontTP.Shutdown(context.Background()); _ = workTP.Shutdown(context.Background()) })

			c := &cluster{t: t}
			var work sink.Sink // set before the first event reaches Front
			forward := stage.HandlerFunc(func(batch []sink.Event) error {
				for _, e := range batch {
					if err := work.Enqueue(e); err != nil {
						t.Errorf("remote enqueue: %v", err)
					}
				}
				return nil
			})
			ma, _ := c.node(graph, "a", map[string]stage.Handler{"Front": otelstage.Handler(frontTP, forward)})
			got := &recorder{}
			_, _ = c.node(graph, "b", map[string]stage.Handler{"Work": otelstage.Handler(workTP, got)})
			work = remoteSink(t, ma, "Work")
			headers := spy(t, c.url)
			front, _ := ma.Stage("Front")

			// Without a context (sent past Front, whose span would give it
			// one): handled, no trace header on the wire.
			if err := work.Enqueue(&traced{N: 0}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the untraced event handled", func() bool { return got.count() == 1 })
			if n := headers.count(); n != 0 {
				t.Fatalf("%d messages with trace headers for an event without a context", n)
			}

			ctx, root := frontTP.Tracer("test").Start(context.Background(), "GET /checksum")
			if err := front.Sink().Enqueue(&traced{N: 1, ctx: ctx}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the traced event handled", func() bool { return got.count() == 2 })
			root.End()
			waitFor(t, "the Work span ended", func() bool { return len(workRec.Ended()) == 2 })
			// Front's span ends when its handler returns, which may be
			// after Work handled the event.
			waitFor(t, "the Front span ended", func() bool {
				return slices.ContainsFunc(frontRec.Ended(), func(s sdktrace.ReadOnlySpan) bool { return s.Name() == "Front" })
			})
			// The spy is a connection of its own: it may see the message
			// after node b handled it.
			waitFor(t, "a message with a trace header", func() bool { return headers.count() > 0 })

			var frontSpan, workSpan sdktrace.ReadOnlySpan
			for _, s := range frontRec.Ended() {
				if s.Name() == "Front" && s.SpanContext().TraceID() == root.SpanContext().TraceID() {
					frontSpan = s
				}
			}
			for _, s := range workRec.Ended() {
				if s.Name() == "Work" && s.Parent().IsValid() {
					workSpan = s
				}
			}
			if frontSpan == nil || workSpan == nil {
				t.Fatalf("spans: front %v, work %v", frontRec.Ended(), workRec.Ended())
			}
			if frontSpan.Parent().SpanID() != root.SpanContext().SpanID() {
				t.Fatalf("Front's parent %v, want the root span %v", frontSpan.Parent().SpanID(), root.SpanContext().SpanID())
			}
			if workSpan.SpanContext().TraceID() != root.SpanContext().TraceID() {
				t.Fatalf("Work in trace %v, want %v", workSpan.SpanContext().TraceID(), root.SpanContext().TraceID())
			}
			if workSpan.Parent().SpanID() != frontSpan.SpanContext().SpanID() || !workSpan.Parent().IsRemote() {
				t.Fatalf("Work's parent %v (remote %v), want Front's span %v", workSpan.Parent().SpanID(), workSpan.Parent().IsRemote(), frontSpan.SpanContext().SpanID())
			}
			// The untraced event's Work span has no parent: a trace of its own.
			for _, s := range workRec.Ended() {
				if s != workSpan && s.Parent().IsValid() {
					t.Fatalf("the untraced event's span has a parent %v", s.Parent())
				}
			}
		})
	}
}

// TestTraceOfEachCombinedEvent sends concurrent Enqueues (which a remote
// sink may combine into one message) and EnqueueMany, each event in its
// own trace: every Work span on the replica is a child of its own event's
// span.
func TestTraceOfEachCombinedEvent(t *testing.T) {
	graph := fmt.Sprintf(traceGraph, "request")
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := &cluster{t: t}
	ma, _ := c.node(graph, "a", nil)
	got := &recorder{}
	_, _ = c.node(graph, "b", map[string]stage.Handler{"Work": otelstage.Handler(tp, got)})
	work := remoteSink(t, ma, "Work")

	const n = 32
	parents := map[int]trace.SpanContext{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	tracer := tp.Tracer("test")
	for i := range n {
		wg.Go(func() {
			ctx, span := tracer.Start(context.Background(), "caller")
			defer span.End()
			mu.Lock()
			parents[i] = span.SpanContext()
			mu.Unlock()
			if err := work.Enqueue(&traced{N: i, ctx: ctx}); err != nil {
				t.Errorf("enqueue %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	var many []sink.Event
	for i := n; i < n+3; i++ {
		ctx, span := tracer.Start(context.Background(), "caller")
		span.End()
		parents[i] = span.SpanContext()
		many = append(many, &traced{N: i, ctx: ctx})
	}
	many = append(many, &traced{N: n + 3}) // no context: no parent
	if err := work.EnqueueMany(many); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every event handled", func() bool { return got.count() == n+4 })
	for _, e := range got.events() {
		ev := e.(*traced)
		sc := trace.SpanContextFromContext(ev.ctx) // the Work span's, set by otelstage
		var span sdktrace.ReadOnlySpan
		waitFor(t, "the event's span ended", func() bool {
			for _, s := range rec.Ended() {
				if s.Name() == "Work" && s.SpanContext().SpanID() == sc.SpanID() {
					span = s
					return true
				}
			}
			return false
		})
		want, traced := parents[ev.N]
		switch {
		case !traced && span.Parent().IsValid():
			t.Errorf("event %d without a context: span has parent %v", ev.N, span.Parent())
		case traced && (span.Parent().SpanID() != want.SpanID() || span.SpanContext().TraceID() != want.TraceID()):
			t.Errorf("event %d: span in trace %v under %v, want %v under %v", ev.N,
				span.SpanContext().TraceID(), span.Parent().SpanID(), want.TraceID(), want.SpanID())
		}
	}
}
