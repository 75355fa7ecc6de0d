package main

import (
	"context"

	"github.com/sandstorm-go/sandstorm/apps/haboob"
	"github.com/sandstorm-go/sandstorm/stage"
)

// memoryWatch is the memory signal of a Haboob built by buildNode (whose
// manager, made by remote.NewManager, runs no services by itself): the
// monitor global.memory configures (none without a limit: neither
// global.memory.limitMiB nor GOMEMLIMIT), and the page cache shrinking
// on it.
type memoryWatch struct {
	monitor     *stage.MemoryMonitor // nil: off
	unsubscribe func()
}

func watchMemory(m *stage.Manager, hb *haboob.Server) memoryWatch {
	mon := stage.MemoryMonitorFor(m)
	if mon == nil {
		return memoryWatch{}
	}
	return memoryWatch{monitor: mon, unsubscribe: hb.ShrinkCacheOnMemory(m)}
}

// start begins the readings, once the stages run.
func (w memoryWatch) start() {
	if w.monitor != nil {
		_ = w.monitor.Start(context.Background()) // fails only when started twice
	}
}

// stop ends the readings and the subscription.
func (w memoryWatch) stop(ctx context.Context) {
	if w.monitor != nil {
		_ = w.monitor.Shutdown(ctx)
		w.unsubscribe()
	}
}
