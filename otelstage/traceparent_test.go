package otelstage_test

import (
	"context"
	"io"
	nethttp "net/http"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandstorm-go/sandstorm/aio"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/otelstage"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestTraceparentContinuesRemoteTrace: over a real socket, a request with
// a W3C traceparent reaches a traced stage (as HttpRecv), whose span is a
// child of the remote caller's span, in its trace, with its tracestate;
// the next stage's span is the first one's child. A request without the
// header, or with a malformed one, starts a trace of its own.
func TestTraceparentContinuesRemoteTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	m := stage.NewManager(stage.Options{})
	reply, err := m.CreateStage("Reply", otelstage.Handler(tp, stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			req := e.(*http.Request)
			_ = http.Respond(req, http.OK("text/plain", []byte("ok")))
		}
		return nil
	})), stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	recv, err := m.CreateStage("Recv", otelstage.Handler(tp, stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			if err := reply.Sink().Enqueue(e); err != nil {
				return err
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
	srv, err := http.Listen(http.ServerConfig{Socket: aio.SocketConfig{Addr: "127.0.0.1:0"}}, recv.Sink(), aio.Env{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Shutdown(ctx)
		_ = srv.Shutdown(ctx)
	}()
	client := &nethttp.Client{Transport: &nethttp.Transport{}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	const (
		remoteTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		remoteSpan  = "00f067aa0ba902b7"
	)
	tests := []struct {
		name, traceparent string
		continues         bool
	}{
		{"remote parent", "00-" + remoteTrace + "-" + remoteSpan + "-01", true},
		{"no header", "", false},
		{"malformed", "00-not-a-trace-01", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp.Reset()
			req, _ := nethttp.NewRequest("GET", "http://"+srv.Addr().String()+"/", nil)
			if tt.traceparent != "" {
				req.Header.Set("traceparent", tt.traceparent)
				req.Header.Set("tracestate", "vendor=abc")
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			// Spans end when their batch is done, maybe after the answer.
			var spans tracetest.SpanStubs
			for deadline := time.Now().Add(10 * time.Second); len(spans) < 2 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				spans = exp.GetSpans()
			}
			byName := map[string]tracetest.SpanStub{}
			for _, s := range spans {
				byName[s.Name] = s
			}
			first, next := byName["Recv"], byName["Reply"]
			if len(spans) != 2 || !first.SpanContext.IsValid() || !next.SpanContext.IsValid() {
				t.Fatalf("spans %v, want Recv and Reply", names(spans))
			}
			if next.Parent.SpanID() != first.SpanContext.SpanID() || next.SpanContext.TraceID() != first.SpanContext.TraceID() {
				t.Errorf("Reply's parent %v, want Recv's span %v", next.Parent.SpanID(), first.SpanContext.SpanID())
			}
			wantTrace, _ := trace.TraceIDFromHex(remoteTrace)
			wantParent, _ := trace.SpanIDFromHex(remoteSpan)
			continues := first.SpanContext.TraceID() == wantTrace && first.Parent.SpanID() == wantParent && first.Parent.IsRemote()
			if continues != tt.continues {
				t.Fatalf("Recv's span trace %v parent %v (remote %v); continues the caller's: %v, want %v",
					first.SpanContext.TraceID(), first.Parent.SpanID(), first.Parent.IsRemote(), continues, tt.continues)
			}
			if tt.continues && first.SpanContext.TraceState().Get("vendor") != "abc" {
				t.Errorf("tracestate %q not carried", first.SpanContext.TraceState())
			}
			if !tt.continues && first.Parent.IsValid() {
				t.Errorf("Recv's span has parent %v without a valid traceparent", first.Parent.SpanID())
			}
		})
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
