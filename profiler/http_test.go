package profiler_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

type metricsDoc struct {
	Interval float64 `json:"interval"`
	Dot      bool    `json:"dot"`
	Sample   jsonSample
	Edges    []struct {
		From, To string
		Count    uint64
	}
	Samples []jsonSample
}

type jsonSample struct {
	Seq     uint64
	Time    float64
	Process map[string]*float64
	Stages  []struct {
		Name   string
		Values map[string]*float64
	}
	Other map[string]*float64
}

func get(t *testing.T, url string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

func getMetrics(t *testing.T, url string) metricsDoc {
	t.Helper()
	code, h, body := get(t, url)
	if code != http.StatusOK || h.Get("Content-Type") != "application/json" {
		t.Fatalf("%s: %d %s\n%s", url, code, h.Get("Content-Type"), body)
	}
	var doc metricsDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("%s: %v\n%s", url, err, body)
	}
	return doc
}

// TestHTTPEndpoints serves a running manager on a real loopback listener.
func TestHTTPEndpoints(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	names := []string{"Recv", "Cache", "Send"}
	stages := pipeline(t, m, stage.StageConfig{}, names...)
	start(t, m)
	for i := 0; i < 50; i++ {
		if err := stages[0].Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	stop(t, m) // counts final
	p := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0", Interval: time.Hour})
	if p.Addr() != nil {
		t.Fatal("Addr before Start")
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := "http://" + p.Addr().String()

	doc := getMetrics(t, base+profiler.MetricsPath)
	if doc.Interval != 3600 || doc.Sample.Seq != 1 || doc.Samples != nil {
		t.Fatalf("doc: interval %v seq %d samples %v", doc.Interval, doc.Sample.Seq, doc.Samples)
	}
	if len(doc.Sample.Stages) != len(names) {
		t.Fatalf("stages %+v", doc.Sample.Stages)
	}
	for i, st := range doc.Sample.Stages {
		if st.Name != names[i] {
			t.Fatalf("stage %d is %q, want %q", i, st.Name, names[i])
		}
		for _, v := range []string{"queue.length", "pool.size", "rate.handled", "service.ns.p90"} {
			if st.Values[v] == nil {
				t.Errorf("%s: no %s", st.Name, v)
			}
		}
		if got := st.Values["enqueued"]; got == nil || *got != 50 {
			t.Errorf("%s.enqueued = %v", st.Name, got)
		}
	}
	if doc.Sample.Process["mem.heap"] == nil || *doc.Sample.Process["mem.heap"] <= 0 {
		t.Errorf("process values %v", doc.Sample.Process)
	}
	wantEdges := map[string]uint64{" -> Recv": 50, "Recv -> Cache": 50, "Cache -> Send": 50}
	if len(doc.Edges) != len(wantEdges) {
		t.Fatalf("edges %+v", doc.Edges)
	}
	for _, e := range doc.Edges {
		if wantEdges[e.From+" -> "+e.To] != e.Count {
			t.Errorf("edge %+v unexpected", e)
		}
	}

	// Long poll: a request for samples after the latest one waits for the
	// next.
	got := make(chan metricsDoc, 1)
	go func() { got <- getMetrics(t, base+profiler.MetricsPath+"?after=1") }()
	p.Sample()
	d := <-got
	if len(d.Samples) != 1 || d.Samples[0].Seq != 2 || len(d.Samples[0].Stages) != 3 {
		t.Fatalf("long poll got %+v", d.Samples)
	}
	if all := getMetrics(t, base+profiler.MetricsPath+"?after=0"); len(all.Samples) != 2 || all.Samples[0].Seq != 1 {
		t.Fatalf("history: %+v", all.Samples)
	}
	if code, _, _ := get(t, base+profiler.MetricsPath+"?after=x"); code != http.StatusBadRequest {
		t.Fatalf("after=x: %d", code)
	}

	code, h, page := get(t, base+profiler.DashboardPath)
	if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(string(page), "metrics.json") {
		t.Fatalf("dashboard: %d %s", code, h.Get("Content-Type"))
	}
	// Self-contained: no scripts, styles or images from elsewhere.
	if ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?https?:`).Find(page); ext != nil {
		t.Fatalf("dashboard loads from outside: %q", ext)
	}
	if !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Fatalf("CSP %q", h.Get("Content-Security-Policy"))
	}
	if code, _, _ := get(t, base+"/debug/sandstorm/nothing"); code != http.StatusNotFound {
		t.Fatalf("unknown path: %d", code)
	}
	if code, _, body := get(t, base+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Fatalf("pprof index: %d", code)
	}
	if code, _, body := get(t, base+"/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("pprof goroutine: %d %.100s", code, body)
	}
	if code, _, body := get(t, base+profiler.GraphDotPath); code != http.StatusOK || !strings.Contains(string(body), `"Recv" -> "Cache" [label="50"];`) {
		t.Fatalf("graph.dot: %d\n%s", code, body)
	}
	code, h, body := get(t, base+profiler.GraphSVGPath)
	if profiler.DotPath() == "" {
		if code != http.StatusNotImplemented {
			t.Fatalf("graph.svg without dot: %d", code)
		}
	} else if code != http.StatusOK || h.Get("Content-Type") != "image/svg+xml" || !strings.Contains(string(body), ">Cache<") {
		t.Fatalf("graph.svg: %d %s", code, h.Get("Content-Type"))
	}
	if doc.Dot != (profiler.DotPath() != "") {
		t.Fatalf("doc.dot = %v", doc.Dot)
	}

	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + profiler.MetricsPath); err == nil {
		t.Fatal("endpoint still serving after Shutdown")
	}
}

// TestHandlerWithoutStart: the handler mounted on an application's own
// server samples on demand.
func TestHandlerWithoutStart(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	pipeline(t, m, stage.StageConfig{}, "Only")
	p := newProfiler(t, m, profiler.Config{})
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	a := getMetrics(t, srv.URL+profiler.MetricsPath)
	b := getMetrics(t, srv.URL+profiler.MetricsPath+"?after=0")
	if len(a.Sample.Stages) != 1 || a.Sample.Stages[0].Name != "Only" || b.Sample.Seq <= a.Sample.Seq || len(b.Samples) == 0 {
		t.Fatalf("a %+v b %+v", a.Sample, b.Sample)
	}
}

// TestStartContextStopsServer: cancelling Start's context stops serving;
// Shutdown still finishes cleanly.
func TestStartContextStopsServer(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	p := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	url := "http://" + p.Addr().String() + profiler.MetricsPath
	if code, _, _ := get(t, url); code != http.StatusOK {
		t.Fatal(code)
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("still serving 10 s after the context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
