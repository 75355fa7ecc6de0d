package profiler_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metrics "github.com/rcrowley/go-metrics"

	"github.com/sandstorm-go/sandstorm/profiler"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// forward is a handler that passes its events on to the stage named next
// (none: it swallows them). It registers a value of its own with the
// profiler.
type forward struct {
	next string
	out  sink.Sink
	seen atomic.Int64
}

func (f *forward) Init(c *stage.Context) error {
	c.Profile("seen", func() float64 { return float64(f.seen.Load()) })
	if f.next == "" {
		return nil
	}
	s, err := c.Sink(f.next)
	f.out = s
	return err
}

func (f *forward) HandleEvents(batch []sink.Event) error {
	f.seen.Add(int64(len(batch)))
	if f.out == nil {
		return nil
	}
	return f.out.EnqueueMany(batch)
}

// pipeline builds stages named names[0] → names[1] → ... on m.
func pipeline(t testing.TB, m *stage.Manager, cfg stage.StageConfig, names ...string) []*stage.Stage {
	t.Helper()
	var out []*stage.Stage
	for i, n := range names {
		next := ""
		if i+1 < len(names) {
			next = names[i+1]
		}
		s, err := m.CreateStage(n, &forward{next: next}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func start(t testing.TB, m *stage.Manager) {
	t.Helper()
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, m) })
}

// stop shuts m down (again: a no-op returning ErrManagerClosed).
func stop(t testing.TB, m *stage.Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = m.Shutdown(ctx)
}

func newProfiler(t testing.TB, m *stage.Manager, cfg profiler.Config) *profiler.Profiler {
	t.Helper()
	p, err := profiler.New(m, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func value(t testing.TB, s *profiler.Sample, st, name string) float64 {
	t.Helper()
	ss, ok := s.Stage(st)
	if !ok {
		t.Fatalf("sample has no stage %q", st)
	}
	v, ok := ss.Get(name)
	if !ok {
		t.Fatalf("stage %q has no value %q (has %v)", st, name, ss.Values)
	}
	return v
}

func newCounter(n int64) metrics.Counter {
	c := metrics.NewCounter()
	c.Inc(n)
	return c
}
