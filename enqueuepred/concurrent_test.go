package enqueuepred

import (
	"sync"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Compile-time checks: every policy is an Inspector and a Namer.
var (
	_ Inspector  = (*threshold)(nil)
	_ Inspector  = (*Rate)(nil)
	_ Inspector  = (*GroupRate)(nil)
	_ Inspector  = (*counter)(nil)
	_ Inspector  = (*red)(nil)
	_ Inspector  = (*sojourn)(nil)
	_ Inspector  = (*ResponseTime)(nil)
	_ Inspector  = (*multiclass)(nil)
	_ Inspector  = (*session)(nil)
	_ Inspector  = (*priority)(nil)
	_ Inspector  = (*allOf)(nil)
	_ Inspector  = (*anyOf)(nil)
	_ Inspector  = (*modified)(nil)
	_ sink.Namer = (*modified)(nil)
)

// TestReconfigureWhileTrafficFlows runs producers and a consumer through a
// real queue while another goroutine replaces parameters and predicates.
// Under -race this checks that setters are safe; the invariant checked at
// the end is that every admitted event was completed and every counter
// credit came back.
func TestReconfigureWhileTrafficFlows(t *testing.T) {
	counter := newCounter(50)
	rate := NewRate(RateConfig{Rate: 1e6, Depth: 1000})
	rt, err := NewResponseTime(RTConfig{Target: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mc, err := newMulticlass(MulticlassConfig{Targets: map[int]time.Duration{0: time.Second, 1: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	th := newThreshold(100)
	red := newRED(REDConfig{Min: 50})
	soj := newSojourn(SojournConfig{})
	all := newAll(counter, rate, rt, mc, th, red, soj)
	q := sink.NewQueue(0)
	q.SetPredicate(all)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var admitted sync.Map
	for p := 0; p < 3; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for {
				select {
				case <-stop:
					admitted.Store(p, n)
					return
				default:
				}
				if q.Enqueue(ev{class: n % 2}) == nil {
					n++
				}
			}
		}()
	}
	consumed := make(chan int)
	go func() {
		buf := make([]sink.Event, 8)
		stamps := make([]int64, 8)
		n := 0
		for {
			k := q.Dequeue(buf, stamps)
			for i := 0; i < k; i++ {
				sink.Done(q.Predicate(), buf[i], time.Duration(sink.Nanotime()-stamps[i]), time.Microsecond)
			}
			n += k
			if k == 0 {
				select {
				case <-q.Closed():
					if q.Drained() {
						consumed <- n
						return
					}
				case <-q.Ready():
				case <-time.After(time.Millisecond):
				}
			}
		}
	}()
	for i := 0; i < 200; i++ {
		counter.SetLimit(10 + i%40)
		rate.SetRate(float64(1000 + i*100))
		rate.SetDepth(10 + i)
		rt.SetTarget(time.Duration(1+i%5) * time.Millisecond)
		if i%2 == 0 {
			rt.Disable()
		} else {
			rt.Enable()
		}
		mc.SetTarget(1, time.Duration(1+i%3)*time.Millisecond)
		th.SetLimit(50 + i)
		red.SetConfig(REDConfig{Min: float64(20 + i)})
		soj.SetConfig(SojournConfig{Target: time.Millisecond})
		counter.Scale(float64(i%10) / 10)
		inspect(all, func(string, float64) {})
		if i == 100 {
			q.SetPredicate(all) // re-install while traffic flows
		}
		time.Sleep(100 * time.Microsecond)
	}
	close(stop)
	wg.Wait()
	q.Close()
	n := <-consumed
	total := 0
	admitted.Range(func(_, v any) bool { total += v.(int); return true })
	if n != total {
		t.Fatalf("consumed %d, admitted %d", n, total)
	}
	if counter.InFlight() != 0 {
		t.Fatalf("counter holds %d credits after every event completed", counter.InFlight())
	}
	if in := rt.c.inSystem.Load(); in != 0 {
		t.Fatalf("rt counts %d events in the stage after every event completed", in)
	}
}
