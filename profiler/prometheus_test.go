package profiler_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestPrometheusEndpoint parses /metrics with the Prometheus text parser and
// checks that every stage and edge is there with its exact counts.
func TestPrometheusEndpoint(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	names := []string{"Recv", "Cache", "Send"}
	stages := pipeline(t, m, stage.StageConfig{}, names...)
	start(t, m)
	for i := 0; i < 40; i++ {
		if err := stages[0].Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	stop(t, m)
	p := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0", Interval: time.Hour})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, h, body := get(t, "http://"+p.Addr().String()+profiler.PrometheusPath)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	if ct := h.Get("Content-Type"); !bytes.HasPrefix([]byte(ct), []byte("text/plain")) {
		t.Fatalf("content type %q", ct)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, body)
	}
	enq := families["sandstorm_stage_enqueued_events_total"]
	if enq == nil {
		t.Fatalf("no sandstorm_stage_enqueued_events_total in\n%s", body)
	}
	got := map[string]float64{}
	for _, mt := range enq.GetMetric() {
		got[mt.GetLabel()[0].GetValue()] = mt.GetCounter().GetValue()
	}
	for _, n := range names {
		if got[n] != 40 {
			t.Errorf("stage %s enqueued = %v, want 40 (all: %v)", n, got[n], got)
		}
	}
	if q := families["sandstorm_stage_queue_length_events"]; q == nil || len(q.GetMetric()) != len(names) {
		t.Errorf("queue length gauge missing a stage: %v", q)
	}
	edges := families["sandstorm_edge_events_total"]
	if edges == nil || len(edges.GetMetric()) != 3 {
		t.Fatalf("edges: %v", edges)
	}
	if families["go_goroutines"] == nil {
		t.Error("Go runtime metrics missing")
	}
}

// TestPrometheusRemoteStageLabel: remote's values ("remote.<stage>.<name>")
// put the stage in a label, not in the metric's name.
func TestPrometheusRemoteStageLabel(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	metrics.GetOrRegisterGauge("remote.Checksum.deadletters", m.Metrics()).Update(2)
	metrics.GetOrRegisterGauge("remote.Resize.deadletters", m.Metrics()).Update(5)
	p := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0", Interval: time.Hour})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, _, body := get(t, "http://"+p.Addr().String()+profiler.PrometheusPath)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, body)
	}
	if bytes.Contains(body, []byte("sandstorm_remote_checksum")) {
		t.Errorf("stage name in a metric name:\n%s", body)
	}
	f := families["sandstorm_remote_deadletters"]
	if f == nil {
		t.Fatalf("no sandstorm_remote_deadletters in\n%s", body)
	}
	got := map[string]float64{}
	for _, mt := range f.GetMetric() {
		if l := mt.GetLabel(); len(l) == 1 && l[0].GetName() == "stage" {
			got[l[0].GetValue()] = mt.GetGauge().GetValue()
		}
	}
	if got["Checksum"] != 2 || got["Resize"] != 5 {
		t.Errorf("by stage label: %v, want Checksum 2, Resize 5", got)
	}
}
