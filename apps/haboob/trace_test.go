package haboob_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/http"
	"github.com/sandstorm-go/sandstorm/otelstage"
	"github.com/sandstorm-go/sandstorm/stage"
)

var (
	_ stage.ContextSetter = (*http.Request)(nil)
	_ stage.ContextSetter = (*http.Reply)(nil)
)

// TestRequestTracedThroughStages: with every Haboob handler wrapped by
// otelstage, each request is one trace whose spans nest along its path,
// each with its queue wait: a cache miss HttpRecv > PageCache > CacheMiss
// > HttpSend, a hit HttpRecv > PageCache > HttpSend. (http.Request
// carries a context: Context, SetContext; http.Reply the request's.)
func TestRequestTracedThroughStages(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())

	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "index.html"), []byte("<h1>home</h1>"), 0o644); err != nil {
		t.Fatal(err)
	}
	hb := haboob.New(haboob.Options{Root: root})
	plain := stage.NewRegistry()
	hb.Register(plain)
	reg := stage.NewRegistry()
	for _, name := range plain.Names() {
		f, _ := plain.Lookup(name)
		reg.Register(name, func() stage.Handler { return otelstage.Handler(tp, f()) })
	}
	// As haboob.Server.Register declares them.
	reg.StageArgs(haboob.HandlerHttpRecv, "routes.*", "static", "send")
	reg.StageArgs(haboob.HandlerPageCache, "miss", "send")
	reg.StageArgs(haboob.HandlerCacheMiss, "send")
	reg.StageArgs(haboob.HandlerChecksum, "send")
	// Combine off: cache hits go through PageCache and HttpSend as stages
	// (with it, HttpRecv answers them on the event loop, spanless).
	config := strings.Replace(testConfig, "routes: {/checksum/: Checksum, /busy/: Busy}",
		"routes: {/checksum/: Checksum, /busy/: Busy}\n      combine: false", 1)
	m, err := stage.Parse([]byte(config), reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		_ = hb.Close()
		t.Fatal(err)
	}
	s := &site{hb: hb, m: m, root: root, addr: hb.Addr().String()}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hb.Shutdown(ctx)
		_ = m.Shutdown(ctx)
	}()
	c := s.client(t)
	for range 2 { // cold (CacheMiss), then warm (a PageCache hit)
		if resp, body := s.do(t, c, "GET", "/index.html"); resp.StatusCode != 200 || body != "<h1>home</h1>" {
			t.Fatalf("GET: %d %q", resp.StatusCode, body)
		}
	}

	// Spans end when their batch is done, maybe after the client has its
	// answer: wait for them.
	chains := map[int]map[string]string{ // by the trace's length
		4: {"HttpRecv": "", "PageCache": "HttpRecv", "CacheMiss": "PageCache", "HttpSend": "CacheMiss"},
		3: {"HttpRecv": "", "PageCache": "HttpRecv", "HttpSend": "PageCache"},
	}
	var problems []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		problems = nil
		byTrace := map[trace.TraceID][]sdktrace.ReadOnlySpan{}
		for _, sp := range rec.Ended() {
			byTrace[sp.SpanContext().TraceID()] = append(byTrace[sp.SpanContext().TraceID()], sp)
		}
		seen := map[int]bool{}
		for _, spans := range byTrace {
			want, ok := chains[len(spans)]
			if !ok {
				problems = append(problems, fmt.Sprintf("a trace of %d spans", len(spans)))
				continue
			}
			seen[len(spans)] = true
			byID := map[trace.SpanID]string{}
			for _, sp := range spans {
				byID[sp.SpanContext().SpanID()] = sp.Name()
			}
			for _, sp := range spans {
				parent, ok := want[sp.Name()]
				if !ok {
					problems = append(problems, "unexpected span "+sp.Name())
					continue
				}
				if got := byID[sp.Parent().SpanID()]; got != parent {
					problems = append(problems, sp.Name()+"'s parent is "+got+", want "+parent)
				}
				hasWait := false
				for _, a := range sp.Attributes() {
					hasWait = hasWait || string(a.Key) == otelstage.QueueWaitKey
				}
				if !hasWait {
					problems = append(problems, sp.Name()+" has no queue wait")
				}
			}
		}
		if !seen[3] || !seen[4] {
			problems = append(problems, fmt.Sprintf("traces of lengths %v, want a miss (4) and a hit (3)", seen))
		}
		if len(problems) == 0 {
			break
		}
	}
	for _, p := range problems {
		t.Error(p)
	}
	if t.Failed() {
		for _, sp := range rec.Ended() {
			t.Logf("span %s trace %s parent %s", sp.Name(), sp.SpanContext().TraceID(), sp.Parent().SpanID())
		}
	}
}
