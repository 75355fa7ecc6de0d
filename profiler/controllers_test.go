package profiler_test

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/batching"
	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
	"github.com/sandstorm-go/sandstorm/threadpool"
)

// registryValue reads a number from the manager's registry; false if the
// name is not registered or carries no single number.
func registryValue(m *stage.Manager, name string) (float64, bool) {
	switch v := m.Metrics().Get(name).(type) {
	case metrics.Gauge:
		return float64(v.Value()), true
	case metrics.GaugeFloat64:
		return v.Value(), true
	case metrics.Counter:
		return float64(v.Count()), true
	}
	return 0, false
}

// promFamily is one metric family of the Prometheus exposition.
type promFamily struct {
	help   string
	series []promSeries
}

type promSeries struct {
	labels map[string]string
	value  float64 // a counter's or a gauge's
}

// promFamilies scrapes and parses the profiler's Prometheus endpoint.
func promFamilies(t *testing.T, p *profiler.Profiler) map[string]promFamily {
	t.Helper()
	code, _, body := get(t, "http://"+p.Addr().String()+profiler.PrometheusPath)
	if code != http.StatusOK {
		t.Fatalf("/metrics: status %d\n%s", code, body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	parsed, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, body)
	}
	out := map[string]promFamily{}
	for name, f := range parsed {
		pf := promFamily{help: f.GetHelp()}
		for _, m := range f.GetMetric() {
			ps := promSeries{labels: map[string]string{}, value: m.GetGauge().GetValue()}
			if c := m.GetCounter(); c != nil {
				ps.value = c.GetValue()
			}
			for _, l := range m.GetLabel() {
				ps.labels[l.GetName()] = l.GetValue()
			}
			pf.series = append(pf.series, ps)
		}
		out[name] = pf
	}
	return out
}

// promValue returns the value of the family's series with exactly the
// given labels.
func promValue(fams map[string]promFamily, name string, labels map[string]string) (float64, bool) {
	for _, s := range fams[name].series {
		if len(s.labels) != len(labels) {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && s.labels[k] == v
		}
		if match {
			return s.value, true
		}
	}
	return 0, false
}

// same compares two values, NaN equal to NaN.
func same(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }

// classed is an event of a response-time class.
type classed int

func (c classed) Class() int { return int(c) }

// TestPredicateValuesInRegistry: what real response-time controllers
// report (p90, admitted rate, target, counts; per class for the multiclass
// one) is in the manager's go-metrics registry while the profiler runs,
// with the same values as the predicates', metrics.json's and /metrics'
// (there with a class label); it leaves with the predicate and at
// Shutdown.
func TestPredicateValuesInRegistry(t *testing.T) {
	const perClass = 30
	rt, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: 250 * time.Millisecond, Mode: "thesis", NReq: 10, InitialRate: 37, Disabled: true})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := enqueuepred.NewMulticlass(enqueuepred.MulticlassConfig{
		Targets: map[int]time.Duration{0: 500 * time.Millisecond, 1: 100 * time.Millisecond},
		RT:      enqueuepred.RTConfig{Mode: "thesis", NReq: 10, InitialRate: 11, Disabled: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := stage.NewManager(stage.Options{})
	single, err := m.CreateStage("RT", &forward{}, stage.StageConfig{Predicate: rt})
	if err != nil {
		t.Fatal(err)
	}
	multi, err := m.CreateStage("MC", &forward{}, stage.StageConfig{Predicate: mc})
	if err != nil {
		t.Fatal(err)
	}
	start(t, m)
	for i := 0; i < perClass; i++ {
		for _, e := range []sink.Event{classed(0), classed(1)} {
			if err := single.Sink().Enqueue(e); err != nil {
				t.Fatal(err)
			}
			if err := multi.Sink().Enqueue(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop(t, m) // every event completed: the values stay put from here on

	if _, ok := registryValue(m, "RT.predicate.rate"); ok {
		t.Fatal("predicate gauges registered before the profiler sampled")
	}
	p := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0", Interval: time.Hour})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	doc := getMetrics(t, "http://"+p.Addr().String()+profiler.MetricsPath)
	fams := promFamilies(t, p)
	for name := range fams {
		if strings.Contains(name, "class") {
			t.Errorf("Prometheus metric %s has the class in its name", name)
		}
	}

	check := func(st *stage.Stage, pred enqueuepred.Inspector, want map[string]float64) {
		t.Helper()
		reported := map[string]float64{}
		pred.Inspect(func(n string, v float64) { reported[n] = v })
		for n, v := range want {
			if got, ok := reported[n]; !ok || got != v {
				t.Errorf("%s: the predicate reports %s = %v (%v), want %v", st.Name(), n, got, ok, v)
			}
		}
		var jsonValues map[string]*float64
		for _, s := range doc.Sample.Stages {
			if s.Name == st.Name() {
				jsonValues = s.Values
			}
		}
		for n, v := range reported {
			full := st.Name() + ".predicate." + n
			if got, ok := registryValue(m, full); !ok || !same(got, v) {
				t.Errorf("registry %s = %v (registered %v), predicate says %v", full, got, ok, v)
			}
			if got := jsonValues["predicate."+n]; got == nil || *got != v {
				t.Errorf("metrics.json %s.predicate.%s = %v, predicate says %v", st.Name(), n, got, v)
			}
			labels := map[string]string{"stage": st.Name()}
			name := n
			if rest, ok := strings.CutPrefix(n, "class"); ok {
				class, after, _ := strings.Cut(rest, ".")
				labels["class"], name = class, after
			}
			metric := map[string]string{
				"accepted":   "sandstorm_stage_predicate_accepted_events_total",
				"rejected":   "sandstorm_stage_predicate_rejected_events_total",
				"rate":       "sandstorm_stage_admission_rate_events_per_second",
				"target":     "sandstorm_stage_rt_target_seconds",
				"enabled":    "sandstorm_stage_rt_enabled",
				"p90":        "sandstorm_stage_rt_p90_seconds",
				"p90_sample": "sandstorm_stage_rt_p90_sample_seconds",
				"in_system":  "sandstorm_stage_rt_in_system_events",
				"throughput": "sandstorm_stage_rt_throughput_events_per_second",
				"tokens":     "sandstorm_stage_admission_tokens",
			}[name]
			if metric == "" {
				t.Errorf("no metric name known for predicate value %s", name)
				continue
			}
			if got, ok := promValue(fams, metric, labels); !ok || got != v {
				t.Errorf("/metrics %s%v = %v (found %v), predicate says %v", metric, labels, got, ok, v)
			}
		}
	}
	check(single, rt, map[string]float64{"accepted": 2 * perClass, "rejected": 0, "rate": 37, "target": 0.25, "enabled": 0})
	check(multi, mc.(enqueuepred.Inspector), map[string]float64{
		"class0.accepted": perClass, "class1.accepted": perClass,
		"class0.target": 0.5, "class1.target": 0.1,
		"class0.rate": 11, "class1.rate": 11,
		"rejected": 0, "enabled": 0,
	})
	// Every class completed more than NReq events: each has measured a
	// p90.
	for _, n := range []string{"RT.predicate.p90", "MC.predicate.class0.p90", "MC.predicate.class1.p90"} {
		if v, ok := registryValue(m, n); !ok || !(v > 0) {
			t.Errorf("registry %s = %v (registered %v), want a measured p90", n, v, ok)
		}
	}
	// One p90 family: RT's series without a class, MC's with one per class.
	var series []string
	for _, ps := range fams["sandstorm_stage_rt_p90_seconds"].series {
		var ls []string
		for k, v := range ps.labels {
			ls = append(ls, k+"="+v)
		}
		sort.Strings(ls)
		series = append(series, strings.Join(ls, ","))
	}
	sort.Strings(series)
	if want := "class=0,stage=MC class=1,stage=MC stage=RT"; strings.Join(series, " ") != want {
		t.Errorf("sandstorm_stage_rt_p90_seconds series %q, want %q", strings.Join(series, " "), want)
	}

	// A predicate replaced by one that reports nothing: its gauges leave
	// the registry at the next sample.
	single.Sink().SetPredicate(nil)
	s := p.Sample()
	if _, ok := registryValue(m, "RT.predicate.rate"); ok {
		t.Error("RT.predicate.rate still registered after the predicate was removed")
	}
	if ss, _ := s.Stage("RT"); ss != nil {
		for _, v := range ss.Values {
			if strings.HasPrefix(v.Name, "predicate.") {
				t.Errorf("RT still samples %s", v.Name)
			}
		}
	}
	if got := value(t, &s, "MC", "predicate.class1.target"); got != 0.1 {
		t.Errorf("MC.predicate.class1.target = %v after RT's predicate left", got)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.Metrics().Each(func(name string, _ any) {
		if strings.Contains(name, ".predicate.") {
			t.Errorf("%s still registered after the profiler's Shutdown", name)
		}
	})
}

// TestControllerMetrics drives a real stage's thread-pool and batching
// controllers with a fake clock through their exported Tick and Observe
// (the stage's own drivers tick hourly, so they never interfere) and checks
// their variables in the registry, the sample, metrics.json and /metrics.
func TestControllerMetrics(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	st, err := m.CreateStage("Ctl", &forward{}, stage.StageConfig{
		ThreadPool: stage.ThreadPoolConfig{Min: 1, Max: 4, Controller: threadpool.ControllerConfig{
			Enabled: true, Interval: time.Hour, QueueThreshold: 10, AutoMaxDetect: true, ResetEvery: 1, Smoothing: 1}},
		Batching: stage.BatchingConfig{Min: 2, Max: 17, Controller: batching.Config{Enabled: true, Interval: time.Hour}},
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, m)

	pc := st.Pool().Controller()
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	// A backlogged second at 500 events/s with one thread, then one at
	// 1000 events/s with two: each is recorded as the best (ResetEvery 1,
	// Smoothing 1: the throughput is the last second's rate).
	for i, s := range []threadpool.Sample{
		{Now: t0, QueueLen: 100, Processed: 0, Size: 1},
		{Now: t0.Add(time.Second), QueueLen: 100, Processed: 500, Size: 1},
		{Now: t0.Add(2 * time.Second), QueueLen: 100, Processed: 1500, Size: 2},
	} {
		pc.Tick(s)
		if i == 1 {
			if size, tp := pc.Best(); size != 1 || tp != 500 {
				t.Fatalf("after one measured tick the best is (%d, %v), want (1, 500)", size, tp)
			}
		}
	}
	bc := st.BatchingController()
	if bc == nil {
		t.Fatal("no batching controller")
	}
	// 1000 events/s, then 950: the best stays 1000, the last rate is 950.
	bc.Observe(t0, 0)
	bc.Observe(t0.Add(time.Second), 1000)
	bc.Observe(t0.Add(2*time.Second), 1950)

	want := map[string]float64{
		"pool.best.size":       2,
		"pool.best.throughput": 1000,
		"pool.throughput":      1000,
		"batching.best":        1000,
		"batching.throughput":  950,
		// The factor in effect: the stage's driver applies the
		// controller's answer at its (hourly) tick, so it is still Max.
		"batching.factor": 17,
	}
	if got := st.Stats().BatchSize; got != 17 {
		t.Fatalf("the stage's batching factor is %d, want 17", got)
	}
	p := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0", Interval: time.Hour})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s, _ := p.Latest()
	doc := getMetrics(t, "http://"+p.Addr().String()+profiler.MetricsPath)
	fams := promFamilies(t, p)
	for n, v := range want {
		if got, ok := registryValue(m, "Ctl."+n); !ok || got != v {
			t.Errorf("registry Ctl.%s = %v (registered %v), want %v", n, got, ok, v)
		}
		if got := value(t, &s, "Ctl", n); got != v {
			t.Errorf("sample Ctl.%s = %v, want %v", n, got, v)
		}
		if got := doc.Sample.Stages[0].Values[n]; got == nil || *got != v {
			t.Errorf("metrics.json Ctl.%s = %v, want %v", n, got, v)
		}
		metric := map[string]string{
			"pool.best.size":       "sandstorm_stage_threadpool_controller_best_threads",
			"pool.best.throughput": "sandstorm_stage_threadpool_controller_best_throughput_events_per_second",
			"pool.throughput":      "sandstorm_stage_threadpool_controller_throughput_events_per_second",
			"batching.best":        "sandstorm_stage_batching_controller_best_throughput_events_per_second",
			"batching.throughput":  "sandstorm_stage_batching_controller_throughput_events_per_second",
			"batching.factor":      "sandstorm_stage_batching_factor_events",
		}[n]
		if got, ok := promValue(fams, metric, map[string]string{"stage": "Ctl"}); !ok || got != v {
			t.Errorf("/metrics %s = %v (found %v), want %v", metric, got, ok, v)
		}
	}
}

// TestDroppedHelp: the exposition says that dropped is a subset of the
// rejections.
func TestDroppedHelp(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	pipeline(t, m, stage.StageConfig{}, "Only")
	p := newProfiler(t, m, profiler.Config{HTTP: "127.0.0.1:0", Interval: time.Hour})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fams := promFamilies(t, p)
	if d := fams["sandstorm_stage_lossy_refused_events_total"]; len(d.series) != 1 || !strings.Contains(d.help, "subset of sandstorm_stage_rejected_events_total") {
		t.Fatalf("dropped: %+v", d)
	}
	if r := fams["sandstorm_stage_rejected_events_total"]; len(r.series) != 3 || !strings.Contains(r.help, "by reason") {
		t.Fatalf("rejected: %+v", r)
	}
}

func disabledRT(t *testing.T) *enqueuepred.ResponseTime {
	t.Helper()
	rt, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: 250 * time.Millisecond, Mode: "thesis", NReq: 10, InitialRate: 37, Disabled: true})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// startRTStage starts a manager with one stage, RT, guarded by
// disabledRT, and a profiler on it sampling only when asked.
func startRTStage(t *testing.T) (*stage.Manager, *profiler.Profiler) {
	t.Helper()
	m := stage.NewManager(stage.Options{})
	if _, err := m.CreateStage("RT", &forward{}, stage.StageConfig{Predicate: disabledRT(t)}); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	p := newProfiler(t, m, profiler.Config{Interval: time.Hour})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, p
}

// A stage destroyed and re-created under the same name keeps its predicate
// gauges: the gone stage's names are unregistered before the new stage's
// are registered, not after.
func TestRecreatedStageKeepsPredicateGauges(t *testing.T) {
	m, p := startRTStage(t)
	defer p.Close()
	p.Sample()
	if _, ok := registryValue(m, "RT.predicate.rate"); !ok {
		t.Fatal("not registered")
	}
	if err := m.DestroyStage("RT"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateStage("RT", &forward{}, stage.StageConfig{Predicate: disabledRT(t)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		p.Sample()
		if _, ok := registryValue(m, "RT.predicate.rate"); !ok {
			t.Errorf("sample %d: RT.predicate.rate missing from the registry after the stage was re-created", i)
		}
	}
}

// Sample after Shutdown registers no gauges, since nothing would remove
// them.
func TestSampleAfterShutdownRegistersNoGauges(t *testing.T) {
	m, p := startRTStage(t)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := registryValue(m, "RT.predicate.rate"); ok {
		t.Fatal("gauge left registered by Shutdown")
	}
	p.Sample()
	if _, ok := registryValue(m, "RT.predicate.rate"); ok {
		t.Error("gauge registered by Sample after Shutdown, never removed")
	}
}
