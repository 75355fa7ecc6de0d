package threadpool

import (
	"context"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestPoolRefusesToGrowCPUBoundStage runs a real Pool, configured with
// nothing but its bounds, on the fake clock over a stage that behaves like
// a CPU-bound one on two cores: in every interval it completes 100 events
// per worker up to two workers, and no more with more workers. The queue
// stays backlogged, so the controller adds workers; the growth check takes
// the third back one interval later, and later probes are taken back too:
// the pool never keeps a goroutine that adds no throughput.
func TestPoolRefusesToGrowCPUBoundStage(t *testing.T) {
	const perWorker = 100
	permits := make(chan struct{}, 1<<16)
	st := newTestStage(func(es []sink.Event) {
		for range es {
			<-permits
		}
	})
	st.batch = 1
	clock := newFakeClock()
	p := NewPool(st, Config{Max: 8, Clock: clock})
	if c := p.Controller().Config(); !c.Enabled || !c.AutoMaxDetect {
		t.Fatalf("controller %+v: want it on, with thrashing detection, by default", c)
	}
	p.Start(context.Background())
	for i := 0; i < 20000; i++ {
		if err := st.q.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	waitProcessed := func(want uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second) // a hang guard, not a timing
		for p.Processed() < want {
			if time.Now().After(deadline) {
				t.Fatalf("processed %d, want %d", p.Processed(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var released uint64
	var sizes []int
	for tick := 0; tick < 30; tick++ {
		// The interval before this tick ran at the target set by the
		// last one: that many workers complete min(n, 2)·100 events.
		n := uint64(perWorker * min(int(p.target.Load()), 2))
		for i := uint64(0); i < n; i++ {
			permits <- struct{}{}
		}
		released += n
		waitProcessed(released)
		clock.tick(time.Second)
		applied := clock.Now().UnixNano()
		deadline := time.Now().Add(10 * time.Second) // a hang guard
		for p.lastTick.Load() != applied {
			if time.Now().After(deadline) {
				t.Fatal("tick not applied")
			}
			time.Sleep(time.Millisecond)
		}
		sizes = append(sizes, int(p.target.Load()))
	}
	t.Logf("targets %v", sizes)
	for i, n := range sizes {
		if n > 3 {
			t.Fatalf("target %d workers at tick %d: %v", n, i+1, sizes)
		}
		if n == 3 && i+1 < len(sizes) && sizes[i+1] != 2 {
			t.Fatalf("third worker kept past one interval at tick %d: %v", i+1, sizes)
		}
	}
	if best, _ := p.Controller().Best(); best != 2 {
		t.Errorf("best size %d, want 2", best)
	}
	close(permits) // let the rest drain
	st.q.Close()
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}
