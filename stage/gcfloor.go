package stage

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// A heap floor (what Java's -Xms or Uber's GOGC tuner do): a server whose
// live heap is a few MB but that allocates quickly (crypto/tls allocates
// about 51 KB per full handshake) collects every few hundred requests,
// because the Go runtime sets the next collection at GOGC percent over the
// live heap. A floor of N MiB raises the GC percent while the live heap is
// small, so that the next collection comes at about max(N MiB, what GOGC
// alone gives); once the live heap reaches N, GOGC is back in force.

// heapFloorMaxPercent caps the GC percent a heap floor sets. The runtime
// computes the next collection's goal from the percent in force when a
// cycle ends, before the floor sees that cycle: if the live heap grew
// within the cycle (a cache filled at once), that goal is the new live
// heap times (1 + percent/100) until the floor lowers the percent, a
// moment later. The cap bounds that overshoot to 11 times the live heap.
// It also means the floor is reached only while the live heap is at least
// floor/11 (5.8 MiB of a 64 MiB floor); under that, the goal is still 11
// times the live heap and at least the runtime's minimum heap at that
// percent (4 MiB × percent/100: 40 MiB).
const heapFloorMaxPercent = 1000

// heapFloorPercent is the GC percent that makes the next collection's
// goal about max(floor, live·(1+base/100)) bytes: (floor/live − 1)·100,
// never under base nor over heapFloorMaxPercent (unless base is over it).
// base is the GC percent otherwise in force; a negative base (GOGC=off)
// or a zero floor leaves it as it is. A live heap of 0 (no cycle yet)
// gets the cap.
func heapFloorPercent(base int, floor, live uint64) int {
	if base < 0 || floor == 0 || live >= floor {
		return base
	}
	p := heapFloorMaxPercent
	if live > 0 && (floor-live)/live < heapFloorMaxPercent/100 {
		p = int((floor - live) * 100 / live)
	}
	return max(base, p)
}

// HeapFloor holds the GC percent at (floor/live − 1)·100 after every
// collection, live being the heap that collection found live, never under
// base (the GC percent in force when it starts: GOGC, or what
// debug.SetGCPercent set) nor over 1000 (unless base is): the next
// collection comes at about max(floor, live·(1+base/100)). It notices each cycle
// with a cleanup (runtime.AddCleanup) on a sentinel object that the next
// collection frees, re-armed every time, reads the live heap the cycle
// found (runtime/metrics /gc/heap/live:bytes) and calls
// debug.SetGCPercent when the percent changes. It runs no goroutine: the
// work is a few microseconds on the runtime's cleanup goroutine, once per
// cycle. Shutdown puts base back.
//
// The floor raises the GC percent only: Go's soft memory limit
// (GOMEMLIMIT or debug.SetMemoryLimit) still bounds the heap, so the
// floor never defeats the limit; as the heap nears it, the runtime
// collects as often as the limit requires. global.memory.limitMiB is not
// a runtime limit but the memory monitor's: a configured floor must stay
// under its low mark (low × limitMiB), so that the floor's garbage alone
// never raises memory-high. With GOGC=off the floor does nothing (it
// logs so once). The GC percent is the process's: one floor runs at a
// time; a debug.SetGCPercent of the program's while it runs becomes its
// base at the next cycle (and what Shutdown puts back).
type HeapFloor struct {
	floor uint64
	log   *slog.Logger

	mu      sync.Mutex // guards the fields below; held while the percent is set
	running bool
	gen     uint64 // the current arming's; a cleanup of an older one does nothing
	base    int
	percent int    // the percent last set
	cycles  uint64 // collections seen
	lastGC  uint64 // the runtime's number of the collection last seen
	changes uint64 // debug.SetGCPercent calls
}

// ErrHeapFloorRunning is Start's error when another heap floor already
// runs in the process.
var ErrHeapFloorRunning = errors.New("stage: a heap floor already runs in this process")

// heapFloorOwner is the floor that runs, if any (the GC percent is one per
// process).
var heapFloorOwner struct {
	sync.Mutex
	running *HeapFloor
}

// NewHeapFloor returns a floor of floorBytes (0: it does nothing), logging
// to log (nil: slog.Default()).
func NewHeapFloor(floorBytes uint64, log *slog.Logger) *HeapFloor {
	if log == nil {
		log = slog.Default()
	}
	return &HeapFloor{floor: floorBytes, log: log}
}

// HeapFloorFor returns the heap floor m's `global.memory.heapFloorMiB`
// configures, or nil when it is 0. It works with or without the memory
// monitor (which needs a limit). Load and Parse run it as the service
// "memory.heapFloor"; a program that builds its manager otherwise starts
// it itself.
func HeapFloorFor(m *Manager) *HeapFloor {
	cfg := MemoryConfigFrom(m)
	if cfg.HeapFloorMiB == 0 {
		return nil
	}
	return NewHeapFloor(cfg.HeapFloorMiB<<20, m.log)
}

// gcSentinel is the object whose cleanup marks a collection: 16 bytes with
// a pointer, so never a tiny allocation (whose cleanups may not run).
type gcSentinel struct{ _ [2]*byte }

// Start reads the GC percent in force as base, sets the floor's percent
// for the live heap of the last collection and arms the cleanup that
// follows each collection. It returns ErrHeapFloorRunning when another
// floor runs.
func (hf *HeapFloor) Start(context.Context) error {
	heapFloorOwner.Lock()
	defer heapFloorOwner.Unlock()
	switch heapFloorOwner.running {
	case nil:
	case hf:
		return errors.New("stage: heap floor started twice")
	default:
		return ErrHeapFloorRunning
	}
	base := readGCPercent()
	if hf.floor == 0 {
		return nil
	}
	if base < 0 {
		hf.log.Info("heap floor off: GOGC=off", "floorBytes", hf.floor)
		return nil
	}
	heapFloorOwner.running = hf
	hf.mu.Lock()
	defer hf.mu.Unlock()
	hf.running, hf.base, hf.percent = true, base, base
	hf.gen++
	hf.log.Info("heap floor", "floorBytes", hf.floor, "baseGCPercent", base, "maxGCPercent", heapFloorMaxPercent)
	if limit := debug.SetMemoryLimit(-1); limit > 0 && limit < math.MaxInt64 && hf.floor >= uint64(limit)/2 {
		// Validation checks the floor against limitMiB only; GOMEMLIMIT
		// is seen here. The limit still bounds the heap, but the floor's
		// garbage may keep the memory signal high.
		hf.log.Warn("heap floor is at least half the runtime's memory limit (GOMEMLIMIT): the garbage it allows may keep memory-high raised",
			"floorBytes", hf.floor, "limitBytes", limit)
	}
	hf.applyLocked()
	hf.armLocked()
	return nil
}

// Shutdown stops the floor and puts the base GC percent back.
func (hf *HeapFloor) Shutdown(context.Context) error {
	heapFloorOwner.Lock()
	defer heapFloorOwner.Unlock()
	if heapFloorOwner.running != hf {
		return nil
	}
	heapFloorOwner.running = nil
	hf.mu.Lock()
	defer hf.mu.Unlock()
	hf.running = false
	hf.gen++
	if hf.percent != hf.base {
		debug.SetGCPercent(hf.base)
		hf.percent = hf.base
		hf.changes++
	}
	return nil
}

// HeapFloorStats is what a floor did: the GC percent it last set, the
// base it started from, the collections it saw, how many times it changed
// the percent, and the runtime's number (/gc/cycles/total:gc-cycles) of
// the collection whose live heap set it last.
type HeapFloorStats struct {
	Percent, Base           int
	Cycles, Changes, LastGC uint64
}

// Stats returns what the floor did so far.
func (hf *HeapFloor) Stats() HeapFloorStats {
	hf.mu.Lock()
	defer hf.mu.Unlock()
	return HeapFloorStats{Percent: hf.percent, Base: hf.base, Cycles: hf.cycles, Changes: hf.changes, LastGC: hf.lastGC}
}

// armLocked makes the next collection call afterCycle.
func (hf *HeapFloor) armLocked() {
	runtime.AddCleanup(new(gcSentinel), hf.afterCycle, hf.gen)
}

// afterCycle runs on the runtime's cleanup goroutine once a collection
// freed the sentinel of arming gen. A sentinel armed while a collection
// marks survives it: the floor then follows the next one.
func (hf *HeapFloor) afterCycle(gen uint64) {
	hf.mu.Lock()
	defer hf.mu.Unlock()
	if !hf.running || gen != hf.gen {
		return
	}
	hf.cycles++
	if cur := readGCPercent(); cur != hf.percent {
		// The program set the percent itself (debug.SetGCPercent): that
		// is the base from now on, and what Shutdown puts back.
		hf.base, hf.percent = cur, cur
	}
	hf.applyLocked()
	hf.armLocked()
}

// applyLocked sets the percent for the live heap the last collection
// found, if it changes.
func (hf *HeapFloor) applyLocked() {
	var live uint64
	live, hf.lastGC = readLiveHeap()
	if p := heapFloorPercent(hf.base, hf.floor, live); p != hf.percent {
		debug.SetGCPercent(p)
		hf.percent = p
		hf.changes++
	}
}

// readLiveHeap is the heap the last collection found live, in bytes, and
// that collection's number (both set when a collection's marking ends,
// with the world stopped).
func readLiveHeap() (live, gc uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// readGCPercent is the GC percent in force (negative: GOGC=off).
func readGCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(int64(s[0].Value.Uint64()))
}
