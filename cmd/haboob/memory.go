package main

import (
	"context"
	"log/slog"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/stage"
)

// memoryWatch is the memory signal of a Haboob built by buildNode (whose
// manager, made by remote.NewManager, runs no services by itself): the
// monitor global.memory configures (none without a limit: neither
// global.memory.limitMiB nor GOMEMLIMIT), and the page cache shrinking
// on it; and the heap floor of global.memory.heapFloorMiB, with or
// without a monitor.
type memoryWatch struct {
	monitor     *stage.MemoryMonitor // nil: off
	unsubscribe func()
	floor       *stage.HeapFloor // nil: off
	log         *slog.Logger
}

func watchMemory(m *stage.Manager, hb *haboob.Server) memoryWatch {
	w := memoryWatch{floor: stage.HeapFloorFor(m), log: m.Logger()}
	if w.monitor = stage.MemoryMonitorFor(m); w.monitor != nil {
		w.unsubscribe = hb.ShrinkCacheOnMemory(m)
	}
	return w
}

// start begins the readings and the floor, once the stages run.
func (w memoryWatch) start() {
	if w.monitor != nil {
		_ = w.monitor.Start(context.Background()) // fails only when started twice
	}
	if w.floor != nil {
		if err := w.floor.Start(context.Background()); err != nil { // another instance's floor runs (tests)
			w.log.Info("heap floor not started", "err", err)
		}
	}
}

// stop ends the readings, the subscription and the floor.
func (w memoryWatch) stop(ctx context.Context) {
	if w.floor != nil {
		_ = w.floor.Shutdown(ctx)
	}
	if w.monitor != nil {
		_ = w.monitor.Shutdown(ctx)
		w.unsubscribe()
	}
}
