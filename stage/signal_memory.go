package stage

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
)

// Whirlwind's resource signals (thesis §3.3): the runtime watches the
// process's memory against its limit and tells the stages when it runs
// high, so that they give memory back (a cache shrinks) or do less work
// per request (a degrading stage degrades) before the Go runtime has to
// collect all the time to stay under GOMEMLIMIT.

// SignalMemory is raised when the memory in use crosses the high mark
// (level MemoryHigh) and again when it falls back under the low mark
// (MemoryOK): once per crossing, with hysteresis between the marks. Its
// event is MemorySignal.
const SignalMemory = "memory"

// MemoryLevel is the state a MemorySignal announces.
type MemoryLevel int

const (
	// MemoryOK: the memory in use is back under the low mark.
	MemoryOK MemoryLevel = iota
	// MemoryHigh: the memory in use is over the high mark.
	MemoryHigh
)

// String is "memory-ok" or "memory-high".
func (l MemoryLevel) String() string {
	if l == MemoryHigh {
		return "memory-high"
	}
	return "memory-ok"
}

// MemorySignal is the event of SignalMemory.
type MemorySignal struct {
	Level MemoryLevel
	// Used and Limit are the reading that crossed the mark, in bytes.
	Used, Limit uint64
}

// MemorySource reads the memory in use and the limit it is held against,
// in bytes; a limit of 0 means none is known (no signal is raised).
type MemorySource interface {
	Memory() (used, limit uint64)
}

// MemorySourceFunc adapts a function to MemorySource (a test's fake, a
// reading of the program's own).
type MemorySourceFunc func() (used, limit uint64)

// Memory calls f.
func (f MemorySourceFunc) Memory() (used, limit uint64) { return f() }

// RuntimeMemory is the MemorySource of the Go runtime: the memory mapped
// by the runtime and not released to the OS (runtime/metrics
// /memory/classes/total:bytes less /memory/classes/heap/released:bytes,
// what GOMEMLIMIT bounds) against Limit, or when Limit is 0 the limit
// GOMEMLIMIT or debug.SetMemoryLimit set (none when unset).
type RuntimeMemory struct {
	Limit uint64
}

var runtimeMemoryMetrics = []string{"/memory/classes/total:bytes", "/memory/classes/heap/released:bytes"}

// Memory reads runtime/metrics and the limit.
func (r RuntimeMemory) Memory() (used, limit uint64) {
	samples := make([]metrics.Sample, len(runtimeMemoryMetrics))
	for i, name := range runtimeMemoryMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	total, released := samples[0].Value.Uint64(), samples[1].Value.Uint64()
	limit = r.Limit
	if limit == 0 {
		if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
			limit = uint64(l)
		}
	}
	return total - min(released, total), limit
}

// MemoryConfig is the `global.memory` block: the memory monitor's marks,
// and the heap floor.
type MemoryConfig struct {
	// Off turns the monitor off.
	Off bool `yaml:"off"`
	// LimitMiB is the limit the memory in use is held against, in MiB
	// (0: GOMEMLIMIT; without either the monitor stays off).
	LimitMiB uint64 `yaml:"limitMiB"`
	// High is the fraction of the limit over which MemoryHigh is raised
	// (default 0.9).
	High float64 `yaml:"high"`
	// Low is the fraction under which MemoryOK is raised again, below
	// High (default 0.8).
	Low float64 `yaml:"low"`
	// Interval is how often the memory is read (default 1s).
	Interval time.Duration `yaml:"interval"`
	// HeapFloorMiB is the heap floor, in MiB (0, the default: none):
	// while the live heap is under it, the GC percent is raised so that
	// the next collection comes at about this size (HeapFloor). It works
	// with or without the monitor (Off does not turn it off); GOMEMLIMIT
	// still bounds the heap, and with LimitMiB set the floor must be
	// under the low mark (Low × LimitMiB), so that its garbage alone
	// never raises MemoryHigh.
	HeapFloorMiB uint64 `yaml:"heapFloorMiB"`
}

// maxHeapFloorMiB bounds global.memory.heapFloorMiB (1 TiB): a larger
// floor is a mistake, and its bytes would overflow.
const maxHeapFloorMiB = 1 << 20

// DefaultMemoryConfig is the monitor's configuration when the file has no
// `global.memory` block.
var DefaultMemoryConfig = MemoryConfig{High: 0.9, Low: 0.8, Interval: time.Second}

// validate checks the marks, interval and heap floor, naming the key at
// fault.
func (c MemoryConfig) validate(d Decoder) error {
	switch {
	case !(c.High > 0 && c.High <= 1):
		return d.Key("high").Errorf("high must be a fraction of the limit in (0, 1], got %v", c.High)
	case !(c.Low > 0 && c.Low < c.High):
		return d.Key("low").Errorf("low must be in (0, high=%v), got %v", c.High, c.Low)
	case c.Interval <= 0:
		return d.Key("interval").Errorf("interval must be positive, got %v", c.Interval)
	case c.HeapFloorMiB > maxHeapFloorMiB:
		return d.Key("heapFloorMiB").Errorf("heapFloorMiB must be at most %d (1 TiB), got %d", maxHeapFloorMiB, c.HeapFloorMiB)
	case c.LimitMiB > 0 && float64(c.HeapFloorMiB) >= c.Low*float64(c.LimitMiB):
		return d.Key("heapFloorMiB").Errorf("heapFloorMiB must be under the low mark, low × limitMiB = %v × %d, got %d", c.Low, c.LimitMiB, c.HeapFloorMiB)
	}
	return nil
}

// MemoryMonitor reads a MemorySource and raises SignalMemory on the
// manager when the reading crosses a mark. Check takes one reading; Start
// runs Check every Interval until Shutdown. A manager made by Load or
// Parse runs one (unless `global.memory: {off: true}` or no limit is
// known) as its service "memory".
//
// On MemoryHigh the monitor also puts every stage's admission predicates
// that take resource pressure (enqueuepred.PressureTaker: a
// ResponseTime, whose Degrader then serves at its lowest quality) under
// pressure, and lifts it on MemoryOK.
type MemoryMonitor struct {
	m   *Manager
	src MemorySource
	cfg MemoryConfig

	check sync.Mutex // serializes Check: crossings are raised in order
	mu    sync.Mutex // guards level, stop and done
	level MemoryLevel
	stop  chan struct{}
	done  chan struct{}
}

// NewMemoryMonitor returns a monitor of src for m, at MemoryOK. Zero
// fields of cfg take DefaultMemoryConfig's values.
func NewMemoryMonitor(m *Manager, src MemorySource, cfg MemoryConfig) *MemoryMonitor {
	if cfg.High == 0 {
		cfg.High = DefaultMemoryConfig.High
	}
	if cfg.Low == 0 {
		cfg.Low = min(DefaultMemoryConfig.Low, cfg.High*0.9)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultMemoryConfig.Interval
	}
	return &MemoryMonitor{m: m, src: src, cfg: cfg}
}

// Level returns the level last announced.
func (mm *MemoryMonitor) Level() MemoryLevel {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	return mm.level
}

// Check takes one reading. Over High·limit at MemoryOK it raises
// MemoryHigh; under Low·limit at MemoryHigh it raises MemoryOK; between
// the marks the level stays. It returns the level after the reading.
func (mm *MemoryMonitor) Check() MemoryLevel {
	mm.check.Lock()
	defer mm.check.Unlock()
	used, limit := mm.src.Memory()
	level := mm.Level()
	next := level
	switch {
	case limit == 0:
	case level == MemoryOK && float64(used) > mm.cfg.High*float64(limit):
		next = MemoryHigh
	case level == MemoryHigh && float64(used) < mm.cfg.Low*float64(limit):
		next = MemoryOK
	}
	if next == level {
		return next
	}
	mm.mu.Lock()
	mm.level = next
	mm.mu.Unlock()
	mm.m.log.Info("memory "+next.String(), "used", used, "limit", limit)
	mm.m.setPressure(next == MemoryHigh)
	mm.m.raiseLogged(SignalMemory, MemorySignal{Level: next, Used: used, Limit: limit})
	return next
}

// Start runs Check every Interval until Shutdown.
func (mm *MemoryMonitor) Start(context.Context) error {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	if mm.stop != nil {
		return fmt.Errorf("stage: memory monitor started twice")
	}
	mm.stop, mm.done = make(chan struct{}), make(chan struct{})
	go mm.run(mm.stop, mm.done)
	return nil
}

func (mm *MemoryMonitor) run(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(mm.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			mm.Check()
		}
	}
}

// Shutdown stops the readings Start began.
func (mm *MemoryMonitor) Shutdown(ctx context.Context) error {
	mm.mu.Lock()
	stop, done := mm.stop, mm.done
	mm.stop = nil
	mm.mu.Unlock()
	if stop == nil {
		return nil
	}
	close(stop)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pressureState is the memory pressure last announced. Its mutex
// serializes announcing it to the stages' predicates with installing a
// predicate (a stage created, a reload replacing a predicate), so that a
// predicate installed at any moment ends up with the current state.
type pressureState struct {
	mu sync.Mutex
	on bool
}

// setPressure puts the admission predicates of every stage that take
// resource pressure under it (or lifts it), and remembers the state for
// the predicates installed later.
func (m *Manager) setPressure(on bool) {
	ps := &m.signals.memory
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.on = on
	for _, s := range m.Stages() {
		pressPredicate(s.queue.Predicate(), on)
	}
}

// applyPressure gives a newly published stage's predicates the current
// pressure state.
func (m *Manager) applyPressure(s *Stage) {
	ps := &m.signals.memory
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.on {
		pressPredicate(s.queue.Predicate(), true)
	}
}

// installPredicate puts p in stage s's queue as its admission predicate
// (stageSink.SetPredicate: a Reload, or a program), starting it with the
// current pressure state.
func (m *Manager) installPredicate(s *Stage, p sink.Predicate) {
	ps := &m.signals.memory
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.on {
		pressPredicate(p, true)
	}
	s.queue.SetPredicate(p)
}

// pressPredicate sets the pressure of every predicate in p's tree that
// takes it.
func pressPredicate(p sink.Predicate, on bool) {
	sink.Walk(p, func(q sink.Predicate) {
		if pt, ok := q.(enqueuepred.PressureTaker); ok {
			pt.SetPressure(on)
		}
	})
}

// memorySection is the `global.memory` block's name.
const memorySection = "memory"

// MemoryConfigFrom returns m's `global.memory` block with its defaults
// (DefaultMemoryConfig for a manager not made from a file).
func MemoryConfigFrom(m *Manager) MemoryConfig {
	if cfg := m.Config(); cfg != nil {
		if v, ok := cfg.Global.Section(memorySection); ok {
			return v.(MemoryConfig)
		}
	}
	return DefaultMemoryConfig
}

func init() {
	RegisterSection(memorySection, SectionFunc(func(d Decoder) (any, error) {
		cfg := DefaultMemoryConfig
		if err := d.Decode(&cfg); err != nil {
			return nil, err
		}
		if err := cfg.validate(d); err != nil {
			return nil, err
		}
		return cfg, nil
	}))
	RegisterService(memorySection, func(m *Manager) (Service, error) {
		if mm := MemoryMonitorFor(m); mm != nil {
			return mm, nil
		}
		return nil, nil // a nil *MemoryMonitor is not a nil Service
	})
	RegisterService(heapFloorService, func(m *Manager) (Service, error) {
		if hf := HeapFloorFor(m); hf != nil {
			return hf, nil
		}
		return nil, nil
	})
}

// heapFloorService is the service name of the heap floor
// global.memory.heapFloorMiB configures.
const heapFloorService = memorySection + ".heapFloor"

// MemoryMonitorFor returns the monitor of the Go runtime's memory that
// m's `global.memory` block configures, or nil when the block turns it
// off or no limit is known (neither limitMiB nor GOMEMLIMIT). Load and
// Parse run it as the service "memory"; a program that builds its
// manager otherwise (NewFromConfig) starts it after the manager and shuts
// it down before.
func MemoryMonitorFor(m *Manager) *MemoryMonitor {
	cfg := MemoryConfigFrom(m)
	src := RuntimeMemory{Limit: cfg.LimitMiB << 20}
	if _, limit := src.Memory(); cfg.Off || limit == 0 {
		return nil
	}
	return NewMemoryMonitor(m, src, cfg)
}
