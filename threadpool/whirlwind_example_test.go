package threadpool_test

import (
	"fmt"
	"time"

	"github.com/sandstorm-go/sandstorm/threadpool"
)

// The Whirlwind controller (the Whirlwind paper's Fig. 1) adds a worker
// per tick while events wait in the queue longer than its queue-latency
// threshold, unless handlers wait for their locks, and gives workers back
// once they idle.
func ExampleWhirlwind() {
	w := threadpool.NewWhirlwind(threadpool.WhirlwindConfig{
		IdleTime: 50 * time.Millisecond, QueueLatency: 20 * time.Millisecond, LockLatency: 5 * time.Millisecond,
	}, 1, 8)
	size := 1
	for _, s := range []threadpool.Sample{
		{QueueLatency: 300 * time.Millisecond},
		{QueueLatency: 120 * time.Millisecond},
		{QueueLatency: 90 * time.Millisecond, LockLatency: 30 * time.Millisecond}, // contended: no use growing
		{QueueLatency: 25 * time.Millisecond},
		{QueueLatency: 2 * time.Millisecond},                                   // keeping up
		{QueueLatency: 1 * time.Millisecond, IdleTime: 400 * time.Millisecond}, // idle 40 % of the interval
	} {
		s.Size = size
		size = w.Tick(s)
		fmt.Print(size, " ")
	}
	fmt.Println()
	// Output:
	// 2 3 3 4 4 3
}

// A pool runs the developer's own controller when ControllerConfig.NewSizer
// makes one; here, one that sizes the pool to the queue, a worker per 100
// queued events.
func ExampleSizerFunc() {
	cfg := threadpool.Config{Min: 1, Max: 10, Controller: threadpool.ControllerConfig{
		NewSizer: func(min, max int) threadpool.Sizer {
			return threadpool.SizerFunc(func(s threadpool.Sample) int { return 1 + s.QueueLen/100 })
		},
	}}
	s := cfg.Controller.NewSizer(cfg.Min, cfg.Max)
	fmt.Println(s.Tick(threadpool.Sample{QueueLen: 250}))
	// Output:
	// 3
}

// Handlers report the time they wait for a shared lock to their pool's
// LockMeter, so that the Whirlwind controller does not add workers that
// would only queue on the lock.
func ExampleMutex() {
	var meter threadpool.LockMeter // in a handler's Init: stage.Context.Stage().Pool().LockMeter()
	mu := threadpool.Mutex{Meter: &meter}
	for range 3 {
		mu.Lock()
		mu.Unlock()
	}
	waited, n := meter.Totals()
	fmt.Println(n, "acquisitions, waited", waited)
	// Output:
	// 3 acquisitions, waited 0s
}
