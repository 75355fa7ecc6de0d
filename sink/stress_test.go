package sink_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

// TestKeyedStress runs producers, consumers that behave like the runtime's
// workers (wait on Ready only, release every batch), a goroutine removing
// events and one pausing and resuming the queue, all at once. Every
// accepted event must come out exactly once (handled or removed), no key
// may run on two consumers at once, the events of a key must be handled
// in order, and no consumer may sleep while events are runnable (the test
// would hang).
func TestKeyedStress(t *testing.T) {
	inners := []struct {
		name string
		new  func() sink.Scheduler
	}{
		{"fifo", func() sink.Scheduler { return nil }},
		{"lifo", sink.NewLIFO},
		{"shortest", func() sink.Scheduler { return sink.NewShortest(sizeOf) }},
	}
	for _, in := range inners {
		t.Run(in.name, func(t *testing.T) {
			const producers, perProducer, consumers, keys = 3, 3000, 3, 4
			q := sink.NewQueue(512)
			if err := q.SetScheduler(sink.NewKeyed(keyOf, in.new())); err != nil {
				t.Fatal(err)
			}
			total := producers * perProducer
			seen := make([]atomic.Int32, total)
			var accepted, removed atomic.Int64
			var running sync.Map // key → *atomic.Bool
			var orderMu sync.Mutex
			last := map[string]int{}
			fail := func(format string, args ...any) {
				t.Helper()
				t.Errorf(format, args...)
			}

			var cwg sync.WaitGroup
			for c := 0; c < consumers; c++ {
				cwg.Add(1)
				go func() {
					defer cwg.Done()
					buf := make([]sink.Event, 8)
					for {
						n := q.Dequeue(buf, nil)
						if n == 0 {
							if q.IsClosed() && q.Drained() {
								sinkrt.Of(q).Signal()
								return
							}
							<-q.Ready()
							continue
						}
						batch := append([]sink.Event(nil), buf[:n]...)
						for _, e := range batch {
							j := e.(job)
							if seen[j.id].Add(1) != 1 {
								fail("event %d handed out twice", j.id)
							}
							if j.key == "" {
								continue
							}
							v, _ := running.LoadOrStore(j.key, new(atomic.Bool))
							if !v.(*atomic.Bool).CompareAndSwap(false, true) {
								fail("key %s running twice", j.key)
							}
							orderMu.Lock()
							if prev, ok := last[j.key]; ok && prev >= j.id {
								fail("key %s: event %d after %d", j.key, j.id, prev)
							}
							last[j.key] = j.id
							orderMu.Unlock()
						}
						runtime.Gosched()
						for _, e := range batch {
							if j := e.(job); j.key != "" {
								v, _ := running.Load(j.key)
								v.(*atomic.Bool).Store(false)
							}
						}
						sinkrt.Of(q).Release(batch)
					}
				}()
			}

			stop := make(chan struct{})
			var hwg sync.WaitGroup
			hwg.Add(2)
			go func() { // remover
				defer hwg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					out := sinkrt.Of(q).RemoveIf(func(e sink.Event) bool { return e.(job).id%97 == 0 })
					for _, e := range out {
						if seen[e.(job).id].Add(1) != 1 {
							fail("event %d removed after being handed out", e.(job).id)
						}
					}
					removed.Add(int64(len(out)))
					runtime.Gosched()
				}
			}()
			go func() { // pauser
				defer hwg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					sinkrt.Of(q).Pause()
					runtime.Gosched()
					sinkrt.Of(q).Resume()
					runtime.Gosched()
				}
			}()

			var pwg sync.WaitGroup
			for p := 0; p < producers; p++ {
				pwg.Add(1)
				go func(p int) {
					defer pwg.Done()
					for i := 0; i < perProducer; i++ {
						id := p*perProducer + i
						j := job{id: id, size: float64(id % 7)}
						if i%5 != 0 {
							j.key = fmt.Sprintf("p%d-k%d", p, i%keys)
						}
						if err := sink.EnqueueWait(t.Context(), q, j); err != nil {
							fail("enqueue: %v", err)
							return
						}
						accepted.Add(1)
					}
				}(p)
			}
			pwg.Wait()
			close(stop)
			hwg.Wait()
			q.Close()
			finished := make(chan struct{})
			go func() { cwg.Wait(); close(finished) }()
			select {
			case <-finished:
			case <-time.After(60 * time.Second): // hang guard only
				t.Fatalf("consumers still waiting with %d events queued, %d runnable", q.Len(), sinkrt.Of(q).Runnable())
			}
			got := int64(0)
			for i := range seen {
				if seen[i].Load() == 1 {
					got++
				}
			}
			if got != accepted.Load() || accepted.Load() != int64(total) {
				t.Fatalf("accepted %d of %d, came out %d (removed %d)", accepted.Load(), total, got, removed.Load())
			}
			if st := q.Stats(); st.Dequeued+st.Removed != uint64(total) {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}
