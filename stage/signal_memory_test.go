package stage_test

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/stage"
)

// TestMemorySignalFiresAndClears: with a fake source (limit 1000, marks
// 0.9 and 0.8), SignalMemory is raised once when the reading crosses the
// high mark, not again while it stays high or falls between the marks,
// and MemoryOK once it falls under the low mark; while memory is high a
// stage's rt predicate is under pressure, and its Degrader serves at its
// lowest quality.
func TestMemorySignalFiresAndClears(t *testing.T) {
	const doc = `
global:
  memory: {limitMiB: 1, high: 0.9, low: 0.8, interval: 1h}
stages:
  Listener: {handler: test.Count}
  Degrading:
    handler: test.Count
    predicate: {type: rt, target: 1s}
`
	m, err := stage.Parse([]byte(doc), testRegistry(nil))
	if err != nil {
		t.Fatal(err)
	}
	if svc, ok := m.Service("memory"); !ok {
		t.Fatal("no memory service with global.memory.limitMiB set")
	} else if _, ok := svc.(*stage.MemoryMonitor); !ok {
		t.Fatalf("memory service is %T", svc)
	}
	c := &collector{got: make(chan struct{}, 10)}
	listener, err := m.CreateStage("Signals", c, stage.StageConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m.Subscribe(stage.SignalMemory, listener.Sink())
	started(t, m)

	degrading, _ := m.Stage("Degrading")
	rt := enqueuepred.ResponseTimeOf(degrading.Sink().Predicate())
	deg, err := enqueuepred.NewDegrader(rt, enqueuepred.DegraderConfig{Min: 0.1})
	if err != nil {
		t.Fatal(err)
	}

	var used uint64 // the fake source's reading, against a limit of 1000
	src := stage.MemorySourceFunc(func() (uint64, uint64) { return used, 1000 })
	mm := stage.NewMemoryMonitor(m, src, stage.MemoryConfig{High: 0.9, Low: 0.8})
	steps := []struct {
		used   uint64
		level  stage.MemoryLevel
		signal bool
	}{
		{500, stage.MemoryOK, false},
		{901, stage.MemoryHigh, true},
		{950, stage.MemoryHigh, false},
		{850, stage.MemoryHigh, false}, // between the marks: still high
		{799, stage.MemoryOK, true},
		{850, stage.MemoryOK, false}, // between the marks: still ok
		{1200, stage.MemoryHigh, true},
	}
	var want []stage.MemorySignal
	for i, s := range steps {
		used = s.used
		if got := mm.Check(); got != s.level {
			t.Fatalf("step %d (used %d): level %v, want %v", i, s.used, got, s.level)
		}
		if s.signal {
			want = append(want, stage.MemorySignal{Level: s.level, Used: s.used, Limit: 1000})
			select {
			case <-c.got:
			case <-time.After(10 * time.Second): // hang guard
				t.Fatalf("step %d: no signal delivered", i)
			}
		}
		if under := rt.Pressure(); under != (s.level == stage.MemoryHigh) {
			t.Fatalf("step %d: rt under pressure %v at %v", i, under, s.level)
		}
		q := deg.Observe(time.Unix(int64(i), 0))
		if s.level == stage.MemoryHigh && q != 0.1 {
			t.Fatalf("step %d: quality %v under memory pressure, want the lowest, 0.1", i, q)
		}
	}
	got := c.snapshot()
	if len(got) != len(want) {
		t.Fatalf("signals %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("signal %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if s := want[0].Level.String() + "," + want[1].Level.String(); s != "memory-high,memory-ok" {
		t.Errorf("level names %q", s)
	}
}

// TestMemoryWithoutLimitRaisesNothing: a source that knows no limit never
// changes the level.
func TestMemoryWithoutLimitRaisesNothing(t *testing.T) {
	m := stage.NewManager(stage.Options{})
	mm := stage.NewMemoryMonitor(m, stage.MemorySourceFunc(func() (uint64, uint64) { return 1 << 40, 0 }), stage.MemoryConfig{})
	if got := mm.Check(); got != stage.MemoryOK {
		t.Fatalf("level %v without a limit", got)
	}
}

// TestMemoryConfig: the global.memory block's mistakes name their key;
// `off: true` runs no monitor; a heap floor runs with or without the
// monitor.
func TestMemoryConfig(t *testing.T) {
	tests := []struct {
		block   string
		wantErr string // "" → loads
		service bool
		floor   bool
	}{
		{"{limitMiB: 64}", "", true, false},
		{"{limitMiB: 64, off: true}", "", false, false},
		{"{limitMiB: 64, high: 1.5}", "global.memory.high", false, false},
		{"{limitMiB: 64, high: 0.5, low: 0.6}", "global.memory.low", false, false},
		{"{limitMiB: 64, interval: 0s}", "global.memory.interval", false, false},
		{"{limit: 64}", "global.memory.limit", false, false},
		{"{heapFloorMiB: 64}", "", false, true},
		{"{heapFloorMiB: 64, off: true}", "", false, true},
		{"{limitMiB: 256, heapFloorMiB: 64}", "", true, true},
		{"{heapFloorMiB: 0}", "", false, false},
		{"{limitMiB: 64, heapFloorMiB: 64}", "global.memory.heapFloorMiB", false, false},
		{"{limitMiB: 100, low: 0.5, heapFloorMiB: 50}", "global.memory.heapFloorMiB", false, false},
		{"{limitMiB: 100, low: 0.5, heapFloorMiB: 49}", "", true, true},
		{"{heapFloorMiB: 1048577}", "global.memory.heapFloorMiB", false, false},
		{"{heapFloorMiB: -1}", "global.memory.heapFloorMiB", false, false},
		{"{heapFloorMiB: 64MiB}", "global.memory.heapFloorMiB", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.block, func(t *testing.T) {
			doc := "global:\n  memory: " + tt.block + "\nstages:\n  A: {handler: test.Count}\n"
			m, err := stage.Parse([]byte(doc), testRegistry(nil))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "line 2") {
					t.Fatalf("err %v, want one naming line 2 and %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := m.Service("memory"); ok != tt.service {
				t.Fatalf("memory service %v, want %v", ok, tt.service)
			}
			if svc, ok := m.Service("memory.heapFloor"); ok != tt.floor {
				t.Fatalf("heap floor service %v, want %v", ok, tt.floor)
			} else if _, isFloor := svc.(*stage.HeapFloor); ok && !isFloor {
				t.Fatalf("heap floor service is %T", svc)
			}
		})
	}
}

// TestRuntimeMemoryReadsGOMEMLIMIT: without a configured limit the
// runtime source holds the memory in use against debug.SetMemoryLimit's.
func TestRuntimeMemoryReadsGOMEMLIMIT(t *testing.T) {
	used, limit := stage.RuntimeMemory{Limit: 123 << 20}.Memory()
	if used == 0 || limit != 123<<20 {
		t.Fatalf("used %d, limit %d with a configured limit", used, limit)
	}
	old := debug.SetMemoryLimit(1 << 40) // what GOMEMLIMIT=1TiB sets
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	if _, limit := (stage.RuntimeMemory{}).Memory(); limit != 1<<40 {
		t.Fatalf("limit %d, want GOMEMLIMIT's %d", limit, uint64(1<<40))
	}
}
