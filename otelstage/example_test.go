package otelstage_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandstorm-go/sandstorm/otelstage"
	"github.com/sandstorm-go/sandstorm/stage"
)

// ExampleHandler traces a request's visit of a stage as a child of the
// caller's span.
func ExampleHandler() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	m := stage.NewManager(stage.Options{})
	double, _ := m.CreateStage("Double", otelstage.Handler(tp, stage.TypedFunc(func(batch []*stage.Request[int, int]) error {
		for _, r := range batch {
			r.Reply(2 * r.Value)
		}
		return nil
	})), stage.StageConfig{})
	_ = m.Start(context.Background())

	ctx, span := tp.Tracer("example").Start(context.Background(), "GET /double")
	v, _ := stage.Call[int, int](ctx, double.Sink(), 21)
	span.End()
	_ = m.Shutdown(context.Background())

	fmt.Println(v)
	var lines []string // the two spans end in either order
	for _, s := range rec.Ended() {
		parent := "none"
		if s.Parent().SpanID() == span.SpanContext().SpanID() {
			parent = "the caller's span"
		}
		lines = append(lines, fmt.Sprintf("span %q, parent: %s", s.Name(), parent))
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// 42
	// span "Double", parent: the caller's span
	// span "GET /double", parent: none
}
