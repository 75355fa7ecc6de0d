package remote

import (
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fakeBatches is a batchSender that answers every request at once,
// accepting each event, and records what it saw when each was sent.
type fakeBatches struct {
	mu       sync.Mutex
	sizes    []int // callers per request
	awayLeft []int // callers the request before answered not returned yet, when each was sent
	last     []*pending
}

func (f *fakeBatches) sendEach(c *combiner, batch []*pending) {
	f.mu.Lock()
	f.sizes = append(f.sizes, len(batch))
	away := 0
	for _, p := range f.last {
		if p.away {
			away++
		}
	}
	f.awayLeft = append(f.awayLeft, away)
	f.last = append(f.last[:0], batch...)
	f.mu.Unlock()
	for _, p := range batch {
		p.err = nil
	}
}

func (f *fakeBatches) combinedLimit() int { return 1 << 20 }

// TestCombinerWaitsForAnsweredCallers: callers enqueuing again as soon
// as they have their verdict, each request is sent only once every
// caller the one before answered has returned (the leader sleeps until
// then, rather than sending the first few back and splitting the callers
// into groups of their own), every caller gets its verdict, and no event
// is sent twice or lost.
func TestCombinerWaitsForAnsweredCallers(t *testing.T) {
	for _, tc := range []struct{ callers, rounds int }{{1, 50}, {2, 50}, {8, 200}, {64, 50}} {
		c := &combiner{}
		f := &fakeBatches{}
		var wg sync.WaitGroup
		var verdicts atomic.Int64
		for range tc.callers {
			wg.Go(func() {
				for range tc.rounds {
					p := &pending{wake: make(chan struct{}, 1), enc: []byte{1}}
					if err := c.enqueue(f, p); err != nil {
						t.Error(err)
						return
					}
					verdicts.Add(1)
				}
			})
		}
		wg.Wait()
		if got, want := verdicts.Load(), int64(tc.callers*tc.rounds); got != want {
			t.Fatalf("%d callers: %d verdicts, want %d", tc.callers, got, want)
		}
		if sum(f.sizes) != tc.callers*tc.rounds {
			t.Fatalf("%d callers: requests carried %d events, want %d", tc.callers, sum(f.sizes), tc.callers*tc.rounds)
		}
		for i, away := range f.awayLeft {
			if away != 0 {
				t.Fatalf("%d callers: request %d (of %d events) sent while %d callers answered before had not returned",
					tc.callers, i, f.sizes[i], away)
			}
		}
		if c.waiting != 0 || len(c.rounds) != 0 || c.woken != 0 || c.leaders != 0 || c.inFlight != 0 {
			t.Fatalf("%d callers: left waiting %d in %d rounds (%d woken), %d leaders, %d in flight",
				tc.callers, c.waiting, len(c.rounds), c.woken, c.leaders, c.inFlight)
		}
	}
}

// quietBatches is a batchSender that accepts every event and records
// nothing.
type quietBatches struct{}

func (quietBatches) sendEach(_ *combiner, batch []*pending) {
	for _, p := range batch {
		p.err = nil
	}
}

func (quietBatches) combinedLimit() int { return 1 << 20 }

// TestCombinerAllocations: a caller alone allocates one object per
// Enqueue through the combiner, its round's done channel (its pending
// and its round come from pools, the callers' slice is reused).
func TestCombinerAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	c := &combiner{}
	enc := []byte{1}
	allocs := testing.AllocsPerRun(1000, func() {
		p := pendingPool.Get().(*pending)
		p.enc = append(p.enc[:0], enc...)
		if err := c.enqueue(quietBatches{}, p); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("%.1f allocations per Enqueue, want at most 1", allocs)
	}
}

// BenchmarkCombiner measures the combiner's own cost per Enqueue (time
// and CPU are both the callers' parking and waking, mostly), callers
// enqueuing concurrently through a sender that answers at once, and, as
// its floor in the same run (floor-64), what parking and waking alone
// cost: 64 goroutines that each lock a mutex, join a group and sleep on
// its channel until the 64th closes it, no leader and no request. Each
// reports the process's CPU time per Enqueue too (cpu-ns/op, getrusage),
// which moves less than the time on a shared machine.
//
//	go test ./remote -run xxx -bench Combiner -count 5
func BenchmarkCombiner(b *testing.B) {
	b.Run("floor-64", func(b *testing.B) {
		defer reportCPU(b, processCPU())
		parkFloor(b, 64)
	})
	for _, callers := range []int{64, 256} {
		b.Run(strconv.Itoa(callers), func(b *testing.B) {
			defer reportCPU(b, processCPU())
			c := &combiner{}
			var next atomic.Int64
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						p := pendingPool.Get().(*pending)
						p.enc = append(p.enc[:0], 1)
						if err := c.enqueue(quietBatches{}, p); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// parkFloor runs b.N (rounded up to a multiple of callers) joins of
// callers goroutines to groups of callers: each joins the open group
// under a mutex and sleeps on its channel, and the last to join closes
// it. Every goroutine joins as many times, so every group fills.
func parkFloor(b *testing.B, callers int) {
	type group struct {
		joined int
		done   chan struct{}
	}
	var mu sync.Mutex
	open := &group{done: make(chan struct{})}
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range (b.N + callers - 1) / callers {
				mu.Lock()
				g := open
				g.joined++
				if g.joined == callers {
					open = &group{done: make(chan struct{})}
					mu.Unlock()
					close(g.done)
					continue
				}
				mu.Unlock()
				<-g.done
			}
		})
	}
	wg.Wait()
}

// reportCPU reports the process's CPU time per operation since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time the process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
