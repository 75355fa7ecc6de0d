package remote

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestIdleHomesForgotten: a home's combiner is forgotten once its
// replica is (out of rotation for forgetAfter), or for a home never
// heard from once forgetAfter has passed since its last caller, and
// only while no caller waits or is in flight: a home in rotation keeps
// its combiner, idle or not, and so does a forgotten one with a request
// in flight. On the fake clock, swept every heartbeat.
func TestIdleHomesForgotten(t *testing.T) {
	s, clock, _ := watchedSender(t, StageConfig{})
	answered := &heldBatches{release: make(chan struct{})}
	close(answered.release)
	held := &heldBatches{release: make(chan struct{})}
	send := func(home string, f *heldBatches) error {
		p := &pending{wake: make(chan struct{}, 1), enc: []byte{0}}
		return s.combinerFor(home).enqueue(f, p)
	}
	for _, home := range []string{"live", "gone", "busy"} {
		s.heard(home, "w"+home)
	}
	for _, home := range []string{"live", "gone", "never"} {
		if err := send(home, answered); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- send("busy", held) }()
	waitUntil(t, "the busy home's request held", func() bool { return held.holding() == 1 })
	combiners := map[string]*combiner{}
	for _, home := range []string{"live", "gone", "never", "busy"} {
		combiners[home] = s.combinerFor(home)
	}
	kept := func(home string) bool {
		c, ok := s.homes.Load(home)
		return ok && c == combiners[home]
	}
	tests := []struct {
		after time.Duration // swept for, since the start
		kept  map[string]bool
	}{
		{forgetAfter - time.Minute, map[string]bool{"live": true, "gone": true, "never": true, "busy": true}},
		{forgetAfter + time.Minute, map[string]bool{"live": true, "gone": false, "never": false, "busy": true}},
	}
	var swept time.Duration
	for _, tt := range tests {
		for ; swept < tt.after; swept += 100 * time.Millisecond {
			clock.advance(100 * time.Millisecond)
			s.heard("live", "wlive")
			s.sweep()
		}
		for home, want := range tt.kept {
			if got := kept(home); got != want {
				t.Errorf("after %v: %s's combiner kept %v, want %v", tt.after, home, got, want)
			}
		}
	}
	close(held.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRetiredCombinerRefusesCallers: a caller that took a home's
// combiner just before the sweep retired it is refused by it, sending
// nothing, and takes the home's new combiner; callers racing sweeps
// that retire idle combiners all get their verdicts, each request sent
// once, never two at once (as many callers fill no round: one combiner
// has one request in flight).
func TestRetiredCombinerRefusesCallers(t *testing.T) {
	s, clock, _ := watchedSender(t, StageConfig{})
	f := &heldBatches{release: make(chan struct{})}
	close(f.release)
	newPending := func(i int) *pending { return &pending{wake: make(chan struct{}, 1), enc: []byte{byte(i % 2)}} }
	if err := s.enqueueTo(f, "h", newPending(0)); err != nil {
		t.Fatal(err)
	}
	old := s.combinerFor("h")
	sweepFor(s, clock, forgetAfter+time.Minute)
	if err := old.enqueue(f, newPending(0)); err != errRetired {
		t.Fatalf("the retired combiner's verdict %v, want errRetired", err)
	}
	if f.events != 1 {
		t.Fatalf("%d callers sent, want the first alone", f.events)
	}
	if s.combinerFor("h") == old {
		t.Fatal("the home kept its retired combiner")
	}

	// Callers racing the sweep's pruning, which finds every combiner
	// idle at two looks in a row idle for forgetAfter, until it has
	// retired 50 of them and at least one caller was refused by a
	// combiner retired after it took it (and took the new one). A caller
	// yields in that gap, so that the race happens with one P too.
	const callers, retirements = 4, 50
	s.testHookCombinerTaken = runtime.Gosched
	var sent atomic.Int64
	errs := make(chan error, callers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				err := s.enqueueTo(f, "h", newPending(g+i))
				if want := map[bool]error{false: nil, true: errOdd}[(g+i)%2 == 1]; err != want {
					errs <- fmt.Errorf("caller %d.%d: verdict %v, want %v", g, i, err, want)
					return
				}
				sent.Add(1)
				runtime.Gosched()
			}
		})
	}
	retired := 0
	for deadline := time.Now().Add(time.Minute); (retired < retirements || s.retiredRetries.Load() == 0) && len(errs) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("in a minute, %d combiners retired (want %d), %d callers refused by a retired one (want some)", retired, retirements, s.retiredRetries.Load())
		}
		before, _ := s.homes.Load("h")
		clock.advance(forgetAfter)
		s.pruneHomes(clock.Now())
		if after, _ := s.homes.Load("h"); after != before {
			retired++
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if want := 1 + int(sent.Load()); f.events != want {
		t.Fatalf("%d callers sent, want %d", f.events, want)
	}
	t.Logf("%d combiners retired, %d callers refused by a retired one", retired, s.retiredRetries.Load())
	if f.most != 1 {
		t.Fatalf("%d requests to the home at once, want 1 (a retired combiner's beside its successor's)", f.most)
	}
}

// BenchmarkIdleHomes: the heap a home's combiner holds (one home per
// iteration, each used once, never heard from), and what is left once
// the sweep found them idle for forgetAfter.
func BenchmarkIdleHomes(b *testing.B) {
	s, clock, _ := watchedSender(b, StageConfig{})
	f := &heldBatches{release: make(chan struct{})}
	close(f.release)
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	base := heap()
	for i := range b.N {
		home := fmt.Sprintf("inst%016x", i)
		if err := s.enqueueTo(f, home, &pending{wake: make(chan struct{}, 1), enc: []byte{0}}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	held := heap()
	s.pruneHomes(clock.Now())
	clock.advance(forgetAfter)
	s.pruneHomes(clock.Now())
	left := 0
	s.homes.Range(func(any, any) bool { left++; return true })
	b.ReportMetric(float64(held-base)/float64(b.N), "B/home")
	b.ReportMetric(float64(heap()-base)/float64(b.N), "B-left/home")
	b.ReportMetric(float64(left), "homes-left")
}
