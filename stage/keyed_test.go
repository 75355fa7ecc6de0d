package stage_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// msg is an event of a connection (its key) or a session (its principal).
type msg struct {
	key     string
	session string
	seq     int
	prio    int
	class   int
	size    int
}

func (m msg) Key() string { return m.key }
func (m msg) Principal() enqueuepred.Principal {
	return enqueuepred.Principal{ID: m.session, Priority: m.prio, Class: m.class}
}
func (m msg) Size() int { return m.size }

// TestKeyedSequentialUnderLoad: several workers, many producers; the
// events of one key never run at once and keep their order.
func TestKeyedSequentialUnderLoad(t *testing.T) {
	for _, tm := range []string{"pool", "shared"} {
		t.Run(tm, func(t *testing.T) {
			const keys, perKey = 16, 1500
			m := stage.NewManager(stage.Options{ThreadManager: stage.ThreadManagerConfig{Type: tm, Threads: 4}})
			var active [keys]atomic.Int32
			var last [keys]atomic.Int64
			var overlaps, disorders, handled atomic.Int64
			var concurrent, maxConcurrent atomic.Int32
			h := stage.HandlerFunc(func(b []sink.Event) error {
				c := concurrent.Add(1)
				for {
					mx := maxConcurrent.Load()
					if c <= mx || maxConcurrent.CompareAndSwap(mx, c) {
						break
					}
				}
				seenInBatch := map[string]bool{}
				for _, e := range b {
					ev := e.(msg)
					if seenInBatch[ev.key] {
						overlaps.Add(1) // two events of a key in one batch
					}
					seenInBatch[ev.key] = true
					k := ev.class
					if active[k].Add(1) != 1 {
						overlaps.Add(1)
					}
					for i := 0; i < 50; i++ { // a little work, so batches overlap
						_ = fmt.Sprint(i)
					}
					if prev := last[k].Swap(int64(ev.seq)); prev != int64(ev.seq)-1 {
						disorders.Add(1)
					}
					active[k].Add(-1)
				}
				handled.Add(int64(len(b)))
				concurrent.Add(-1)
				return nil
			})
			st, err := m.CreateStage("Conns", h, stage.StageConfig{
				Keyed:      true,
				ThreadPool: stage.ThreadPoolConfig{Min: 4, Max: 4},
				Batching:   stage.BatchingConfig{Max: 8},
				Queue:      stage.QueueConfig{Threshold: 4096},
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range last {
				last[i].Store(-1)
			}
			started(t, m)
			var wg sync.WaitGroup
			for p := 0; p < 4; p++ { // each producer owns keys p, p+4, ...
				wg.Add(1)
				go func() {
					defer wg.Done()
					for seq := 0; seq < perKey; seq++ {
						for k := p; k < keys; k += 4 {
							ev := msg{key: fmt.Sprint("conn", k), class: k, seq: seq}
							if err := sink.EnqueueWait(t.Context(), st.Sink(), ev); err != nil {
								t.Error(err)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			shutdown(t, m)
			if overlaps.Load() != 0 || disorders.Load() != 0 {
				t.Fatalf("%d overlaps, %d out-of-order events", overlaps.Load(), disorders.Load())
			}
			if handled.Load() != keys*perKey {
				t.Fatalf("handled %d of %d", handled.Load(), keys*perKey)
			}
			t.Logf("at most %d batches ran at once", maxConcurrent.Load())
		})
	}
}

// TestKeyedDifferentKeysInParallel: two events of different keys must be
// in the handler at the same time to finish (a rendezvous), which only
// works if different keys run in parallel.
func TestKeyedDifferentKeysInParallel(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	a, b := make(chan struct{}), make(chan struct{})
	var failed atomic.Bool
	h := stage.HandlerFunc(func(batch []sink.Event) error {
		for _, e := range batch {
			mine, other := a, b
			if e.(msg).key == "b" {
				mine, other = b, a
			}
			close(mine)
			select {
			case <-other:
			case <-time.After(20 * time.Second): // hang guard only
				failed.Store(true)
			}
		}
		return nil
	})
	st, _ := m.CreateStage("Conns", h, stage.StageConfig{
		Keyed: true, ThreadPool: stage.ThreadPoolConfig{Min: 2, Max: 2}, Batching: stage.BatchingConfig{Max: 1},
	})
	started(t, m)
	_ = st.Sink().Enqueue(msg{key: "a"})
	_ = st.Sink().Enqueue(msg{key: "b"})
	shutdown(t, m)
	if failed.Load() {
		t.Fatal("events of different keys did not run in parallel")
	}
}

// TestLinkedFailure: when an event of a principal fails, that principal's
// other queued events are cancelled and reported; others go on.
func TestLinkedFailure(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	var mu sync.Mutex
	var handled []string
	h := stage.HandlerFunc(func(b []sink.Event) error {
		ev := b[0].(msg)
		if ev.seq < 0 {
			return errBad
		}
		mu.Lock()
		handled = append(handled, fmt.Sprintf("%s%d", ev.session, ev.seq))
		mu.Unlock()
		return nil
	})
	st, err := m.CreateStage("Sessions", h, stage.StageConfig{
		Ordering: stage.OrderingConfig{Key: stage.KeyPrincipal, Linked: true},
		Batching: stage.BatchingConfig{Max: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	mon := newChanSink(10)
	_, _ = m.Monitor("Sessions", mon)
	for _, ev := range []msg{
		{session: "p", seq: -1}, {session: "q", seq: 1}, {session: "p", seq: 2}, {session: "q", seq: 2}, {session: "p", seq: 3},
	} {
		_ = st.Sink().Enqueue(ev)
	}
	started(t, m)
	first := mon.next(t).(stage.StageFailed)
	if !errors.Is(first.Err, errBad) || first.Events[0].(msg).session != "p" {
		t.Fatalf("first failure %+v", first)
	}
	linked := mon.next(t).(stage.StageFailed)
	var le *stage.LinkedError
	if !errors.Is(linked.Err, stage.ErrLinked) || !errors.As(linked.Err, &le) || !errors.Is(le.Cause, errBad) || !slices.Equal(le.Principals, []string{"p"}) {
		t.Fatalf("linked failure %+v", linked)
	}
	if got := []int{linked.Events[0].(msg).seq, linked.Events[1].(msg).seq}; len(linked.Events) != 2 || !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("cancelled %v, want p2 and p3 in order", linked.Events)
	}
	shutdown(t, m)
	if !slices.Equal(handled, []string{"q1", "q2"}) {
		t.Fatalf("handled %v", handled)
	}
	if s := st.Stats(); s.Linked != 2 || s.Failures != 1 || s.Removed != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestOrderingConfigErrors(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	noop := stage.HandlerFunc(func([]sink.Event) error { return nil })
	for i, cfg := range []stage.StageConfig{
		{Ordering: stage.OrderingConfig{Key: "colour"}},
		{Keyed: true, Ordering: stage.OrderingConfig{Key: stage.KeyPrincipal}},
		{Scheduler: stage.SchedulerConfig{Type: "random"}},
		{Scheduler: stage.SchedulerConfig{Type: stage.SchedulerStride}},
		{Scheduler: stage.SchedulerConfig{Type: stage.SchedulerStride, Tickets: map[int]int{0: -1}}},
		{Scheduler: stage.SchedulerConfig{Type: stage.SchedulerLIFO, Tickets: map[int]int{0: 1}}},
	} {
		if _, err := m.CreateStage(fmt.Sprint("S", i), noop, cfg); !errors.Is(err, stage.ErrInvalidConfig) {
			t.Errorf("config %d: %v, want ErrInvalidConfig", i, err)
		}
	}
}
