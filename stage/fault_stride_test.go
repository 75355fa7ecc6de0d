package stage_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestStrideShareMultiThreaded: two classes backlogged with 1:3 tickets,
// served by a handler running on four goroutines at once, get 1:3 service
// over a long run: at every tenth of the time both are backlogged, the
// cumulative count of events served is within 2% of 3:1. Counted in the
// order batches were taken (a ticket drawn on entry), never timed.
func TestStrideShareMultiThreaded(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) { testStrideShareMultiThreaded(t, tm) })
	}
}

type strideBatch struct {
	ticket int64
	served [2]int
}

func testStrideShareMultiThreaded(t *testing.T, tm string) {
	const n = 200000 // half of each class
	m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 4}})
	var (
		tickets  atomic.Int64
		mu       sync.Mutex
		batches  []strideBatch
		entered  atomic.Int32
		together = make(chan struct{})
		apart    atomic.Bool
	)
	h := stage.HandlerFunc(func(b []sink.Event) error {
		rec := strideBatch{ticket: tickets.Add(int64(len(b))) - int64(len(b))}
		// The first two batches wait for each other: the handler does
		// run on several goroutines at once.
		switch entered.Add(1) {
		case 1:
			select {
			case <-together:
			case <-time.After(20 * time.Second): // hang guard only
				apart.Store(true)
			}
		case 2:
			close(together)
		}
		for _, e := range b {
			rec.served[e.(msg).class]++
		}
		mu.Lock()
		batches = append(batches, rec)
		mu.Unlock()
		return nil
	})
	st, err := m.CreateStage("S", h, stage.StageConfig{
		Scheduler:  stage.SchedulerConfig{Type: stage.SchedulerStride, Tickets: map[int]int{0: 1, 1: 3}},
		Batching:   stage.BatchingConfig{Max: 16},
		ThreadPool: stage.ThreadPoolConfig{Min: 4, Max: 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := st.Sink().Enqueue(msg{seq: i, class: i % 2}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	shutdown(t, m)
	if apart.Load() {
		t.Fatal("the handler never ran on two goroutines at once")
	}
	slices.SortFunc(batches, func(a, b strideBatch) int { return int(a.ticket - b.ticket) })
	// Class 1 runs out after n/2 of its events and about n/6 of class 0:
	// up to n/2 events served, both classes are backlogged.
	var served [2]int
	next := n / 20
	total := 0
	for _, b := range batches {
		served[0] += b.served[0]
		served[1] += b.served[1]
		total += b.served[0] + b.served[1]
		if total < next {
			continue
		}
		ratio := float64(served[1]) / float64(served[0])
		if ratio < 3*0.98 || ratio > 3*1.02 {
			t.Fatalf("after %d events: served %v, ratio %.4f, want 3 within 2%%", total, served, ratio)
		}
		if next >= n/2 {
			t.Logf("after %d events: served %v, ratio %.4f", total, served, ratio)
			break
		}
		next += n / 20
	}
	if total < n/2 {
		t.Fatalf("served %d events", total)
	}
}
