package stage_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/sandstorm-go/sandstorm/stage"
)

// A heap floor of 64 MiB raises the GC percent while the live heap is
// smaller (here, an example's heap of a few MiB: to the cap, 1000), so
// that the process collects about every 64 MiB allocated instead of every
// time its small heap doubles; Shutdown puts the percent in force before
// back (GOGC, 100 by default). A manager made from a file runs it with
// `global.memory: {heapFloorMiB: 64}`.
func ExampleHeapFloor() {
	floor := stage.NewHeapFloor(64<<20, slog.New(slog.DiscardHandler))
	if err := floor.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	runtime.GC()
	st := floor.Stats()
	fmt.Println("raised:", st.Percent > st.Base)
	_ = floor.Shutdown(context.Background())
	fmt.Println("back to base:", floor.Stats().Percent == st.Base)
	// Output:
	// raised: true
	// back to base: true
}
