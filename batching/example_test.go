package batching_test

import (
	"fmt"
	"time"

	"github.com/sandstorm-go/sandstorm/batching"
)

// The stage observes its completion counter once per interval; workers
// read BatchSize before each dequeue.
func ExampleController() {
	c := batching.New(batching.Config{Enabled: true, Max: 100})
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	var processed uint64
	c.Observe(now, processed) // baseline
	var factors []int
	for _, rate := range []uint64{1000, 1000, 1000, 700} {
		now = now.Add(time.Second)
		processed += rate
		factors = append(factors, c.Observe(now, processed))
	}
	fmt.Println(factors)
	// A sudden collapse of throughput means the workload changed: start over.
	now = now.Add(time.Second)
	processed += 100
	fmt.Println(c.Observe(now, processed), c.BatchSize())
	// Output:
	// [83 69 58 69]
	// 100 100
}
