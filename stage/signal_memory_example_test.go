package stage_test

import (
	"fmt"

	"github.com/sandstorm-go/sandstorm/sink"
	"github.com/sandstorm-go/sandstorm/stage"
)

// A memory monitor raises SignalMemory when the memory in use crosses its
// marks (here 90% and 80% of a 1000-byte limit), once per crossing; a
// stage subscribes its sink (m.Subscribe), a service a function.
func ExampleNewMemoryMonitor() {
	m := stage.NewManager(stage.Options{})
	m.SubscribeFunc(stage.SignalMemory, func(ev sink.Event) {
		sig := ev.(stage.MemorySignal)
		fmt.Println(sig.Level, sig.Used, "of", sig.Limit)
	})
	var used uint64
	mon := stage.NewMemoryMonitor(m, stage.MemorySourceFunc(func() (uint64, uint64) { return used, 1000 }),
		stage.MemoryConfig{High: 0.9, Low: 0.8})
	for _, used = range []uint64{500, 950, 990, 850, 700} {
		mon.Check()
	}
	// Output:
	// memory-high 950 of 1000
	// memory-ok 700 of 1000
}
