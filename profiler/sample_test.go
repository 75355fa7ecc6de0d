package profiler_test

import (
	"errors"
	"testing"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// inspecting is a predicate that reports its state like enqueuepred's do.
type inspecting struct {
	sink.PredicateFunc
	limit float64
}

func (p inspecting) Inspect(report func(string, float64)) {
	report("limit", p.limit)
	report("p90", 0.25)
}

// TestCountersMatchWorkload runs a known workload and checks the counters
// the profiler reports, exactly.
func TestCountersMatchWorkload(t *testing.T) {
	const (
		n        = 1000 // events offered to the predicate stage
		rejectOf = 4    // it rejects every 4th event
		lossy    = 100  // offered with EnqueueLossy
		capacity = 5    // the bounded stage's queue threshold
		offered  = 20   // events offered to it before it starts
	)
	m := stage.NewManager(stage.Options{})
	pred := inspecting{
		PredicateFunc: func(e sink.Event) bool { return e.(int)%rejectOf != 0 },
		limit:         42,
	}
	gate, err := m.CreateStage("Gate", &forward{}, stage.StageConfig{Predicate: pred})
	if err != nil {
		t.Fatal(err)
	}
	bounded, err := m.CreateStage("Bounded", &forward{}, stage.StageConfig{Queue: stage.QueueConfig{Threshold: capacity}})
	if err != nil {
		t.Fatal(err)
	}
	// Before Start nothing consumes: the bounded queue takes exactly its
	// capacity.
	full := 0
	for i := 0; i < offered; i++ {
		if err := bounded.Sink().Enqueue(i); errors.Is(err, sink.ErrRejected) {
			full++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	start(t, m)
	rejected, dropped := 0, 0
	for i := 0; i < n; i++ {
		if err := gate.Sink().Enqueue(i); errors.Is(err, sink.ErrRejected) {
			rejected++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < lossy; i++ {
		if !gate.Sink().EnqueueLossy(i) {
			dropped++
		}
	}
	stop(t, m)

	if rejected != n/rejectOf || dropped != lossy/rejectOf || full != offered-capacity {
		t.Fatalf("workload itself is off: rejected %d dropped %d full %d", rejected, dropped, full)
	}
	p := newProfiler(t, m, profiler.Config{})
	s := p.Sample()
	accepted := float64(n + lossy - rejected - dropped)
	for _, c := range []struct {
		stage, name string
		want        float64
	}{
		{"Gate", "enqueued", accepted},
		{"Gate", "rejected.predicate", float64(rejected + dropped)},
		{"Gate", "rejected.full", 0},
		{"Gate", "dropped", float64(dropped)},
		{"Gate", "handled", accepted},
		{"Gate", "seen", accepted}, // the handler's own value (Context.Profile)
		{"Gate", "queue.length", 0},
		{"Gate", "predicate.limit", 42},
		{"Gate", "predicate.p90", 0.25},
		{"Bounded", "enqueued", capacity},
		{"Bounded", "rejected.full", float64(full)},
		{"Bounded", "rejected.predicate", 0},
		{"Bounded", "handled", capacity},
		{"Bounded", "seen", capacity},
	} {
		if got := value(t, &s, c.stage, c.name); got != c.want {
			t.Errorf("%s.%s = %v, want %v", c.stage, c.name, got, c.want)
		}
	}
	for _, name := range []string{"pool.size", "batching.factor", "service.ns.p90", "queue.wait.ns.p90", "batch.size.max",
		"rate.enqueued", "rate.handled", "rate.rejected"} {
		value(t, &s, "Gate", name) // present
	}
	if _, ok := s.Stage("Bounded"); !ok || len(s.Stages) != 2 || s.Stages[0].Name != "Gate" {
		t.Fatalf("stages not in creation order: %+v", s.Stages)
	}
	for _, v := range []string{"mem.heap", "mem.total", "goroutines", "gc.cycles"} {
		found := false
		for _, pv := range s.Process {
			found = found || (pv.Name == v && pv.Value >= 0)
		}
		if !found {
			t.Errorf("process value %s missing from %v", v, s.Process)
		}
	}
}

func TestOtherRegistryValues(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	pipeline(t, m, stage.StageConfig{}, "A.B") // a stage name with a dot
	m.Metrics().Register("app.requests", newCounter(7))
	m.Metrics().Register("A.B.extra", newCounter(3))
	p := newProfiler(t, m, profiler.Config{})
	s := p.Sample()
	if got := value(t, &s, "A.B", "extra"); got != 3 {
		t.Fatalf("A.B.extra = %v", got)
	}
	if len(s.Other) != 1 || s.Other[0] != (profiler.Value{Name: "app.requests", Value: 7}) {
		t.Fatalf("Other = %v", s.Other)
	}
}
