package profiler_test

import (
	"math"
	"net/http/httptest"
	"testing"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestIdleStageHasNoSamples: a distribution (service.ns, queue.wait.ns,
// a handler's own histogram) that nothing was added to since the previous
// sample reads null in metrics.json and NaN in the Sample, not the last
// busy window's numbers; counters keep their values.
func TestIdleStageHasNoSamples(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	stages := pipeline(t, m, stage.StageConfig{}, "Busy", "Sink")
	pipeline(t, m, stage.StageConfig{}, "Idle")
	own := metrics.NewHistogram(metrics.NewUniformSample(100))
	if err := m.Metrics().Register("Busy.own", own); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	for i := 0; i < 50; i++ {
		if err := stages[0].Sink().Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	stop(t, m) // the runtime's histograms are final
	own.Update(7)

	p := newProfiler(t, m, profiler.Config{})
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	get := func() map[string]map[string]*float64 {
		t.Helper()
		doc := getMetrics(t, srv.URL+profiler.MetricsPath)
		out := map[string]map[string]*float64{}
		for _, st := range doc.Sample.Stages {
			out[st.Name] = st.Values
		}
		return out
	}
	dists := []string{"service.ns", "queue.wait.ns", "batch.size"}
	check := func(when string, vs map[string]*float64, name string, samples bool) {
		t.Helper()
		for _, suf := range []string{".mean", ".p50", ".p90", ".p99", ".max"} {
			v, ok := vs[name+suf]
			if !ok {
				t.Errorf("%s: no %s%s", when, name, suf)
			} else if samples != (v != nil) {
				t.Errorf("%s: %s%s = %v, want samples %v", when, name, suf, v, samples)
			}
		}
	}

	// Window 1: Busy and Sink handled 50 events; Idle never ran.
	w1 := get()
	for _, d := range dists {
		check("window 1 Busy", w1["Busy"], d, true)
		check("window 1 Sink", w1["Sink"], d, true)
		check("window 1 Idle", w1["Idle"], d, false)
	}
	check("window 1 Busy", w1["Busy"], "own", true)
	if v := w1["Busy"]["own.p90"]; v == nil || *v != 7 {
		t.Errorf("window 1: own.p90 = %v, want 7", v)
	}

	// Window 2: nothing happened; the distributions have no samples, the
	// counters still count.
	w2 := get()
	for _, d := range dists {
		check("window 2 Busy", w2["Busy"], d, false)
		check("window 2 Sink", w2["Sink"], d, false)
	}
	check("window 2 Busy", w2["Busy"], "own", false)
	if v := w2["Busy"]["handled"]; v == nil || *v != 50 {
		t.Errorf("window 2: handled = %v, want 50", v)
	}

	// Window 3: a value arrives in one distribution only.
	own.Update(9)
	w3 := get()
	check("window 3 Busy", w3["Busy"], "own", true)
	check("window 3 Busy", w3["Busy"], "service.ns", false)

	// The Go API says the same with NaN.
	s := p.Sample()
	if v := value(t, &s, "Busy", "service.ns.p90"); !math.IsNaN(v) {
		t.Errorf("Sample: idle service.ns.p90 = %v, want NaN", v)
	}
}
