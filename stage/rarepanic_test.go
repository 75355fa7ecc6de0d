package stage_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// rarePanics runs n events (the ints 0..n-1) through a supervised stage,
// with batches of one, whose handler panics on every event i with
// i%every == every-1 (every 0: never), and shuts the manager down (which
// drains). It returns the events the handlers handled, the stage's
// statistics after the shutdown and the time from the first enqueue to
// the last event's handling or panic.
func rarePanics(tb testing.TB, n, every int) (handled uint64, st stage.Stats, elapsed time.Duration) {
	tb.Helper()
	m := stage.NewManager(stage.Options{})
	var ok, seen atomic.Uint64
	var end atomic.Int64
	last := func() {
		if seen.Add(1) == uint64(n) {
			end.Store(time.Now().UnixNano())
		}
	}
	s, err := m.CreateSupervised("S", func() stage.Handler {
		return stage.HandlerFunc(func(b []sink.Event) error {
			for _, e := range b {
				if every > 0 && e.(int)%every == every-1 {
					last()
					panic("poison event")
				}
				ok.Add(1)
				last()
			}
			return nil
		})
	}, stage.StageConfig{
		Batching: stage.BatchingConfig{Max: 1}, // each event's fate is known
		// A poison event per 100 is far beyond the default intensity (3
		// restarts in 5s): that stage would rightly be given up on.
		Supervisor: &stage.SupervisorConfig{MaxRestarts: n, Period: time.Minute},
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	for i := range n {
		if err := sink.EnqueueWait(ctx, s.Sink(), i); err != nil {
			tb.Fatalf("enqueue %d: %v", i, err)
		}
	}
	if err := m.Shutdown(ctx); err != nil {
		tb.Fatalf("Shutdown: %v", err)
	}
	if seen.Load() != uint64(n) {
		return ok.Load(), s.Stats(), time.Since(start) // the test reports what was lost
	}
	return ok.Load(), s.Stats(), time.Duration(end.Load() - start.UnixNano())
}

// TestRarePanicsLoseNothing: a stage whose handler panics on 1 % of
// 100,000 events handles or reports every one of them: each poison event
// is a failure (and restarts the handler), every other event is handled,
// nothing is dropped. A rare poison event is no crash loop, so no restart backs off
// (BenchmarkRarePanics measures the rate against a clean run).
func TestRarePanicsLoseNothing(t *testing.T) {
	const n, every = 100_000, 100
	handled, st, _ := rarePanics(t, n, every)
	t.Logf("handled %d, failures %d, restarts %d, removed %d", handled, st.Failures, st.Restarts, st.Removed)
	if handled+st.Failures != n {
		t.Fatalf("handled %d + failures %d = %d, want %d", handled, st.Failures, handled+st.Failures, n)
	}
	// Two poison events may fail the same handler on two of the pool's
	// goroutines: one restart then replaces it for both.
	if st.Failures != n/every || st.Restarts == 0 || st.Restarts > st.Failures {
		t.Fatalf("failures %d, restarts %d; want %d failures and as many restarts or fewer", st.Failures, st.Restarts, n/every)
	}
	if st.Removed != 0 {
		t.Fatalf("%d events removed unhandled", st.Removed)
	}
}

// BenchmarkRarePanics measures, in the same run, the rate of a stage
// whose handler panics on 1 % of 100,000 events against the same stage
// without panics (batches of one, default pool). ratio is the panicking
// run's rate over the clean one's (issue 23 asks for at least 0.5).
func BenchmarkRarePanics(b *testing.B) {
	const n = 100_000
	b.ReportAllocs()
	var clean, panicky time.Duration
	for b.Loop() {
		_, _, d := rarePanics(b, n, 0)
		clean += d
		_, _, d = rarePanics(b, n, 100)
		panicky += d
	}
	b.ReportMetric(float64(n)*float64(b.N)/clean.Seconds(), "clean-events/s")
	b.ReportMetric(float64(n)*float64(b.N)/panicky.Seconds(), "panic1%-events/s")
	b.ReportMetric(clean.Seconds()/panicky.Seconds(), "ratio")
}
