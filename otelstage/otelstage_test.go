package otelstage_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandstorm-go/sandstorm/otelstage"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

type call = stage.Request[int, int]

// TestSpanPerStageVisit: a request passing through three stages gets one
// span per stage visit, nested in the caller's trace: A's is a child of
// the caller's span, B's of A's, C's of B's, and the span C's handler
// starts from the request's context a child of C's. Each stage span
// records the request's queue wait.
func TestSpanPerStageVisit(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	m := stage.NewManager(stage.Options{})
	last, err := m.CreateStage("C", otelstage.Handler(tp, stage.TypedFunc(func(batch []*call) error {
		for i, r := range batch {
			_, own := tp.Tracer("handler").Start(r.Context(), "C.work")
			own.End()
			if r.Value < 0 {
				return stage.FailEvent(i, errors.New("negative"))
			}
			r.Reply(r.Value * 2)
		}
		return nil
	})), stage.StageConfig{Batching: stage.BatchingConfig{Max: 1}})
	if err != nil {
		t.Fatal(err)
	}
	mid, err := m.CreateStage("B", otelstage.Handler(tp, stage.TypedFunc(func(batch []*call) error {
		for _, r := range batch {
			if err := last.Sink().Enqueue(r); err != nil {
				r.Fail(err)
			}
		}
		return nil
	})), stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := m.CreateStage("A", otelstage.Handler(tp, stage.TypedFunc(func(batch []*call) error {
		for _, r := range batch {
			if err := mid.Sink().Enqueue(r); err != nil {
				r.Fail(err)
			}
		}
		return nil
	})), stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())

	ctx, root := tp.Tracer("test").Start(context.Background(), "request")
	if v, err := stage.Call[int, int](ctx, first.Sink(), 21); err != nil || v != 42 {
		t.Fatalf("Call = %d, %v", v, err)
	}
	if _, err := stage.Call[int, int](ctx, first.Sink(), -1); !errors.Is(err, stage.ErrCallFailed) {
		t.Fatalf("failing call: %v", err)
	}
	root.End()
	m.Shutdown(context.Background()) // every span has ended

	byName := map[string]int{}
	errorsIn := map[string]int{}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byID[s.SpanContext().SpanID()] = s
	}
	parentName := func(s sdktrace.ReadOnlySpan) string {
		if p, ok := byID[s.Parent().SpanID()]; ok {
			return p.Name()
		}
		return "?"
	}
	want := map[string]string{"A": "request", "B": "A", "C": "B", "C.work": "C"}
	for _, s := range rec.Ended() {
		if s.Name() == "request" {
			continue
		}
		byName[s.Name()]++
		if s.SpanContext().TraceID() != root.SpanContext().TraceID() {
			t.Errorf("span %s in trace %v, want the caller's", s.Name(), s.SpanContext().TraceID())
		}
		if got := parentName(s); got != want[s.Name()] {
			t.Errorf("span %s: parent %s, want %s", s.Name(), got, want[s.Name()])
		}
		if s.Name() != "C.work" {
			found := false
			for _, a := range s.Attributes() {
				if string(a.Key) == otelstage.QueueWaitKey {
					found = a.Value.AsInt64() >= 0
				}
			}
			if !found {
				t.Errorf("span %s: no %s attribute: %v", s.Name(), otelstage.QueueWaitKey, s.Attributes())
			}
		}
		if s.Status().Code == codes.Error {
			errorsIn[s.Name()]++
		}
	}
	for _, n := range []string{"A", "B", "C", "C.work"} {
		if byName[n] != 2 {
			t.Errorf("%s: %d spans, want 2 (spans: %v)", n, byName[n], byName)
		}
	}
	if errorsIn["C"] != 1 || errorsIn["A"]+errorsIn["B"] != 0 {
		t.Errorf("error spans %v, want one in C", errorsIn)
	}
}

func TestNilProviderLeavesHandler(t *testing.T) {
	h := stage.HandlerFunc(func([]sink.Event) error { return nil })
	if got := otelstage.Handler(nil, h); got == nil {
		t.Fatal("nil")
	}
}
