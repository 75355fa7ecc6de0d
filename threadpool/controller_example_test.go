package threadpool_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sandstorm-go/sandstorm/threadpool"
)

// A pool drives its controller once per interval with a sample of its
// queue, completion counter and workers, and resizes itself to the answer.
func ExampleController() {
	c := threadpool.NewController(threadpool.ControllerConfig{Enabled: true, QueueThreshold: 100},
		1, 4, rand.New(rand.NewPCG(1, 2)))
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	size := 1
	for _, queue := range []int{500, 400, 300, 200, 150, 20, 0} {
		size = c.Tick(threadpool.Sample{Now: now, QueueLen: queue, Size: size})
		now = now.Add(time.Second)
	}
	fmt.Println("after the backlog:", size)
	// Three workers have been idle for the controller's Idle time.
	size = c.Tick(threadpool.Sample{Now: now, Size: size, IdleWorkers: 3})
	fmt.Println("after idling:", size)
	// Output:
	// after the backlog: 4
	// after idling: 1
}
