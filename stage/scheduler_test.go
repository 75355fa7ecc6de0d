package stage_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// recorder is a single-threaded handler recording batches in order.
type recorder struct {
	mu      sync.Mutex
	batches [][]msg
}

func (r *recorder) SingleThreaded() {}
func (r *recorder) HandleEvents(b []sink.Event) error {
	batch := make([]msg, len(b))
	for i, e := range b {
		batch[i] = e.(msg)
	}
	r.mu.Lock()
	r.batches = append(r.batches, batch)
	r.mu.Unlock()
	return nil
}

func (r *recorder) all() []msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []msg
	for _, b := range r.batches {
		out = append(out, b...)
	}
	return out
}

// backlog fills a stage before the manager starts, so that the scheduler
// decides over the whole backlog, then runs it to the end.
func backlog(t *testing.T, cfg stage.StageConfig, events []msg) *recorder {
	t.Helper()
	m := stage.NewManager(stage.Options{})
	r := &recorder{}
	st, err := m.CreateStage("S", r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if err := st.Sink().Enqueue(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	shutdown(t, m)
	if got := len(r.all()); got != len(events) {
		t.Fatalf("handled %d of %d", got, len(events))
	}
	return r
}

func seqs(ms []msg) []int {
	out := make([]int, len(ms))
	for i, m := range ms {
		out[i] = m.seq
	}
	return out
}

// TestLIFOBurst: after a burst, the newest events are served first.
func TestLIFOBurst(t *testing.T) {
	var burst []msg
	for i := 0; i < 100; i++ {
		burst = append(burst, msg{seq: i})
	}
	for _, batch := range []int{1, 10} {
		r := backlog(t, stage.StageConfig{Scheduler: stage.SchedulerConfig{Type: stage.SchedulerLIFO}, Batching: stage.BatchingConfig{Max: batch}}, burst)
		got := seqs(r.all())
		for i, s := range got {
			if s != 99-i {
				t.Fatalf("batch %d: position %d served %d, want newest first: %v", batch, i, s, got[:min(len(got), 20)])
			}
		}
	}
}

// TestStrideShare: two classes backlogged with 3:1 tickets get 3:1 service
// over a long run (counted, not timed).
func TestStrideShare(t *testing.T) {
	const n = 40000
	var events []msg
	for i := 0; i < n; i++ {
		events = append(events, msg{seq: i, class: i % 2})
	}
	r := backlog(t, stage.StageConfig{
		Scheduler: stage.SchedulerConfig{Type: stage.SchedulerStride, Tickets: map[int]int{0: 1, 1: 3}},
		Batching:  stage.BatchingConfig{Max: 16},
	}, events)
	served := map[int]int{}
	for _, m := range r.all()[:n/2] { // while both classes are backlogged
		served[m.class]++
	}
	ratio := float64(served[1]) / float64(served[0])
	if ratio < 3*0.97 || ratio > 3*1.03 {
		t.Fatalf("served %v: ratio %.3f, want 3 within 3%%", served, ratio)
	}
	t.Logf("served %v, ratio %.4f", served, ratio)
}

// TestPriorityScheduler serves higher principal priorities first, FIFO
// within one.
func TestPriorityScheduler(t *testing.T) {
	events := []msg{{seq: 0, prio: 0}, {seq: 1, prio: 2}, {seq: 2, prio: 1}, {seq: 3, prio: 2}, {seq: 4, prio: 0}}
	r := backlog(t, stage.StageConfig{Scheduler: stage.SchedulerConfig{Type: stage.SchedulerPriority}, Batching: stage.BatchingConfig{Max: 2}}, events)
	if got := seqs(r.all()); !slices.Equal(got, []int{1, 3, 2, 0, 4}) {
		t.Fatalf("served %v", got)
	}
}

// TestShortestWithinBatch sorts each batch by size; batches stay in
// arrival order.
func TestShortestWithinBatch(t *testing.T) {
	events := []msg{{seq: 0, size: 30}, {seq: 1, size: 10}, {seq: 2, size: 20}, {seq: 3, size: 1}, {seq: 4, size: 5}}
	r := backlog(t, stage.StageConfig{Scheduler: stage.SchedulerConfig{Type: stage.SchedulerShortest}, Batching: stage.BatchingConfig{Max: 3}}, events)
	if len(r.batches) != 2 || !slices.Equal(seqs(r.batches[0]), []int{1, 2, 0}) || !slices.Equal(seqs(r.batches[1]), []int{3, 4}) {
		t.Fatalf("batches %v", r.batches)
	}
}

// TestKeyedOverLIFO: ordering composes with a scheduler: keys are served
// newest first, each key's events in FIFO order.
func TestKeyedOverLIFO(t *testing.T) {
	events := []msg{{key: "a", seq: 0}, {key: "a", seq: 1}, {key: "b", seq: 2}, {key: "b", seq: 3}}
	r := backlog(t, stage.StageConfig{
		Keyed:     true,
		Scheduler: stage.SchedulerConfig{Type: stage.SchedulerLIFO},
		Batching:  stage.BatchingConfig{Max: 1},
	}, events)
	if got := seqs(r.all()); !slices.Equal(got, []int{2, 3, 0, 1}) {
		t.Fatalf("served %v", got)
	}
}
