package threadpool

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeStage feeds a controller with samples on a fake clock: every step
// advances time by dt and the processed counter by rate·dt.
type fakeStage struct {
	c         *Controller
	now       time.Time
	processed float64
}

func newFakeStage(c *Controller) *fakeStage {
	return &fakeStage{c: c, now: t0}
}

// step advances the clock by dt during which the stage completed events at
// rate events/s, then ticks the controller.
func (f *fakeStage) step(dt time.Duration, rate float64, s Sample) int {
	f.now = f.now.Add(dt)
	f.processed += rate * dt.Seconds()
	s.Now = f.now
	s.Processed = uint64(math.Round(f.processed))
	return f.c.Tick(s)
}

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func TestControllerConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  ControllerConfig
		ok   bool
	}{
		{"zero", ControllerConfig{}, true},
		{"full", ControllerConfig{Enabled: true, Interval: 2 * time.Second, QueueThreshold: 1000, Idle: time.Second,
			AutoMaxDetect: true, Smoothing: 1, Margin: 0.5, ResetEvery: 3, MaxRandomDrop: -1}, true},
		{"negative interval", ControllerConfig{Interval: -1}, false},
		{"negative threshold", ControllerConfig{QueueThreshold: -1}, false},
		{"negative idle", ControllerConfig{Idle: -time.Second}, false},
		{"smoothing above 1", ControllerConfig{Smoothing: 1.5}, false},
		{"negative smoothing", ControllerConfig{Smoothing: -0.1}, false},
		{"NaN smoothing", ControllerConfig{Smoothing: math.NaN()}, false},
		{"margin 1", ControllerConfig{Margin: 1}, false},
		{"negative resetEvery", ControllerConfig{ResetEvery: -2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidControllerConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidControllerConfig", err)
			}
		})
	}
}

func TestNewControllerPanicsOnBadInput(t *testing.T) {
	tests := []struct {
		name     string
		cfg      ControllerConfig
		min, max int
	}{
		{"min above max", ControllerConfig{}, 5, 4},
		{"negative min", ControllerConfig{}, -1, 4},
		{"zero max", ControllerConfig{}, 0, 0},
		{"bad config", ControllerConfig{Margin: 2}, 1, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("NewController did not panic")
				}
			}()
			NewController(tt.cfg, tt.min, tt.max, nil)
		})
	}
}

func TestControllerDefaults(t *testing.T) {
	got := NewController(ControllerConfig{Enabled: true}, 1, 20, nil).Config()
	want := ControllerConfig{Enabled: true, Interval: time.Second, QueueThreshold: 100, Idle: 5 * time.Second,
		Smoothing: 0.3, Margin: 0.2, ResetEvery: 10, MaxRandomDrop: 4,
		Whirlwind: WhirlwindConfig{IdleTime: 50 * time.Millisecond, QueueLatency: 20 * time.Millisecond, LockLatency: 5 * time.Millisecond}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Config() = %+v, want %+v", got, want)
	}
	if got := NewController(ControllerConfig{MaxRandomDrop: -1}, 1, 20, nil).Config().MaxRandomDrop; got != 0 {
		t.Fatalf("MaxRandomDrop -1 normalized to %d, want 0", got)
	}
}

// TestControllerTickDecision checks single queue/idle decisions (rules 2
// and 4), without thrashing detection.
func TestControllerTickDecision(t *testing.T) {
	on := ControllerConfig{Enabled: true}
	tests := []struct {
		name     string
		cfg      ControllerConfig
		min, max int
		s        Sample
		want     int
	}{
		{"disabled keeps size", ControllerConfig{}, 1, 20, Sample{QueueLen: 5000, Size: 7}, 7},
		{"disabled clamps to max", ControllerConfig{}, 1, 20, Sample{Size: 30}, 20},
		{"disabled clamps to min", ControllerConfig{}, 2, 20, Sample{Size: 0}, 2},
		{"queue at threshold grows", on, 1, 20, Sample{QueueLen: 100, Size: 3}, 4},
		{"queue above threshold grows by one only", on, 1, 20, Sample{QueueLen: 100000, Size: 3}, 4},
		{"queue below threshold holds", on, 1, 20, Sample{QueueLen: 99, Size: 3}, 3},
		{"growth stops at max", on, 1, 20, Sample{QueueLen: 500, Size: 20}, 20},
		{"custom threshold", ControllerConfig{Enabled: true, QueueThreshold: 10}, 1, 20, Sample{QueueLen: 10, Size: 1}, 2},
		{"idle workers retire", on, 1, 20, Sample{Size: 10, IdleWorkers: 4}, 6},
		{"idle retirement stops at min", on, 2, 20, Sample{Size: 3, IdleWorkers: 3}, 2},
		{"backlog wins over idleness", on, 1, 20, Sample{QueueLen: 200, Size: 5, IdleWorkers: 2}, 6},
		{"below min is raised", on, 3, 20, Sample{Size: 1}, 3},
		{"above max is lowered", on, 1, 20, Sample{Size: 25}, 20},
		{"min zero allows empty pool", on, 0, 20, Sample{Size: 1, IdleWorkers: 1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewController(tt.cfg, tt.min, tt.max, seeded(1))
			tt.s.Now = t0
			if got := c.Tick(tt.s); got != tt.want {
				t.Fatalf("Tick(%+v) = %d, want %d", tt.s, got, tt.want)
			}
		})
	}
}

// TestControllerThroughput checks the rate measurement and its EWMA,
// including irregular tick spacing and counter/clock resets (rule 1).
func TestControllerThroughput(t *testing.T) {
	type tick struct {
		at        time.Duration // since t0
		processed uint64
	}
	tests := []struct {
		name  string
		ticks []tick
		want  float64
	}{
		{"one sample has no rate", []tick{{0, 500}}, 0},
		{"first rate is taken as is", []tick{{0, 0}, {time.Second, 1000}}, 1000},
		{"rate uses the clock, not the tick count", []tick{{0, 0}, {4 * time.Second, 1000}}, 250},
		{"EWMA weight 0.3 per interval", []tick{{0, 0}, {time.Second, 1000}, {2 * time.Second, 3000}}, 1000 + 0.3*(2000-1000)},
		{"a late tick weighs as two", []tick{{0, 0}, {time.Second, 1000}, {3 * time.Second, 5000}},
			1000 + (1-0.7*0.7)*(2000-1000)},
		{"duplicate tick is ignored", []tick{{0, 0}, {time.Second, 1000}, {time.Second, 1700}, {2 * time.Second, 2000}}, 1000},
		{"counter reset re-baselines", []tick{{0, 0}, {time.Second, 1000}, {2 * time.Second, 10}, {3 * time.Second, 1010}}, 1000},
		{"clock going back re-baselines", []tick{{0, 0}, {time.Second, 1000}, {0, 1500}, {time.Second, 2500}}, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewController(ControllerConfig{Enabled: true}, 1, 20, seeded(1))
			for _, k := range tt.ticks {
				c.Tick(Sample{Now: t0.Add(k.at), Processed: k.processed, Size: 1})
			}
			if got := c.Throughput(); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("Throughput() = %v, want %v", got, tt.want)
			}
		})
	}
}

// detectCfg has no smoothing lag and checks every 2nd measured tick, so that
// single decisions are easy to set up.
var detectCfg = ControllerConfig{Enabled: true, AutoMaxDetect: true, Smoothing: 1, ResetEvery: 2, MaxRandomDrop: -1}

// TestControllerDetectDecision checks single thrashing-detection decisions
// (rule 3). Each phase runs two measured ticks (one check) at a fixed size,
// queue and rate.
func TestControllerDetectDecision(t *testing.T) {
	type phase struct {
		size  int
		queue int
		rate  float64
	}
	const full = 1000
	tests := []struct {
		name       string
		cfg        ControllerConfig
		phases     []phase
		wantTarget int // answer of the last tick
		wantBest   int
		wantBestTP float64
		wantLimit  int
	}{
		{"first saturated check records best",
			detectCfg, []phase{{8, full, 1000}}, 9, 8, 1000, 20},
		{"unsaturated window decides nothing",
			detectCfg, []phase{{8, 0, 1000}}, 8, 0, 0, 20},
		{"short queue: throughput drop is lack of demand",
			detectCfg, []phase{{8, full, 1000}, {12, 0, 100}}, 12, 8, 1000, 20},
		{"one short-queue tick spoils the window",
			ControllerConfig{Enabled: true, AutoMaxDetect: true, Smoothing: 1, ResetEvery: 4, MaxRandomDrop: -1},
			[]phase{{8, full, 1000}, {8, full, 1000}, {12, 0, 100}, {12, full, 100}}, 13, 8, 1000, 20},
		{"20% better records the new best",
			detectCfg, []phase{{8, full, 1000}, {12, full, 1200}}, 13, 12, 1200, 20},
		{"slightly better at more workers keeps best",
			detectCfg, []phase{{8, full, 1000}, {12, full, 1150}}, 13, 8, 1000, 20},
		{"slightly better at fewer workers replaces best",
			detectCfg, []phase{{8, full, 1000}, {6, full, 1100}}, 7, 6, 1100, 20},
		{"thrashing resets to best size",
			detectCfg, []phase{{8, full, 1000}, {16, full, 790}}, 8, 8, 1000, 8},
		{"within margin keeps growing",
			detectCfg, []phase{{8, full, 1000}, {16, full, 810}}, 17, 8, 1000, 20},
		{"limit caps growth after a reset",
			detectCfg, []phase{{8, full, 1000}, {16, full, 500}, {8, full, 1000}}, 9, 8, 1000, 9},
		{"limit probes one more worker per good check",
			detectCfg, []phase{{8, full, 1000}, {16, full, 500}, {8, full, 950}, {9, full, 1000}}, 10, 8, 1000, 10},
		{"thrash again at the probed size",
			detectCfg, []phase{{8, full, 1000}, {16, full, 500}, {8, full, 950}, {9, full, 700}}, 8, 8, 1000, 8},
		{"stale best is replaced at the best size",
			detectCfg, []phase{{8, full, 1000}, {16, full, 500}, {8, full, 400}}, 8, 8, 400, 8},
		{"then the limit probes against the new record",
			detectCfg, []phase{{8, full, 1000}, {16, full, 500}, {8, full, 400}, {8, full, 400}}, 9, 8, 400, 9},
		{"under-provisioned raises the limit back",
			ControllerConfig{Enabled: true, AutoMaxDetect: true, Smoothing: 1, ResetEvery: 2, MaxRandomDrop: 4},
			[]phase{{8, full, 1000}, {16, full, 500}, {5, full, 500}}, 6, 8, 1000, 8},
		{"reset respects min",
			detectCfg, []phase{{2, full, 1000}, {16, full, 100}}, 3, 2, 1000, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			min := 1
			if tt.name == "reset respects min" {
				min = 3
			}
			c := NewController(tt.cfg, min, 20, seeded(7))
			f := newFakeStage(c)
			f.step(0, 0, Sample{Size: 1}) // baseline
			var got int
			for _, p := range tt.phases {
				for range 2 {
					got = f.step(time.Second, p.rate, Sample{QueueLen: p.queue, Size: p.size})
				}
			}
			if got != tt.wantTarget {
				t.Errorf("target = %d, want %d", got, tt.wantTarget)
			}
			if size, tp := c.Best(); size != tt.wantBest || math.Abs(tp-tt.wantBestTP) > 1e-6 {
				t.Errorf("Best() = (%d, %v), want (%d, %v)", size, tp, tt.wantBest, tt.wantBestTP)
			}
			if got := c.Limit(); got != tt.wantLimit {
				t.Errorf("Limit() = %d, want %d", got, tt.wantLimit)
			}
		})
	}
}

// TestControllerRandomDrop checks that a thrash reset removes a uniform
// 0..MaxRandomDrop workers from the best size.
func TestControllerRandomDrop(t *testing.T) {
	seen := map[int]int{}
	for seed := range uint64(200) {
		cfg := detectCfg
		cfg.MaxRandomDrop = 4
		c := NewController(cfg, 1, 20, seeded(seed))
		f := newFakeStage(c)
		f.step(0, 0, Sample{Size: 1})
		f.step(time.Second, 1000, Sample{QueueLen: 1000, Size: 10})
		f.step(time.Second, 1000, Sample{QueueLen: 1000, Size: 10})
		f.step(time.Second, 100, Sample{QueueLen: 1000, Size: 18})
		got := f.step(time.Second, 100, Sample{QueueLen: 1000, Size: 18})
		if got < 6 || got > 10 {
			t.Fatalf("seed %d: reset target %d outside [6,10]", seed, got)
		}
		if c.Resets() != 1 {
			t.Fatalf("seed %d: Resets() = %d, want 1", seed, c.Resets())
		}
		seen[got]++
	}
	for v := 6; v <= 10; v++ {
		if seen[v] < 20 {
			t.Errorf("target %d chosen %d times out of 200, want a roughly uniform drop (%v)", v, seen[v], seen)
		}
	}
}

// TestControllerDisabledStillMeasures: the profiler shows throughput even
// when the controller does not act.
func TestControllerDisabledStillMeasures(t *testing.T) {
	c := NewController(ControllerConfig{AutoMaxDetect: true}, 1, 20, seeded(1))
	f := newFakeStage(c)
	f.step(0, 0, Sample{Size: 4})
	for range 30 {
		if got := f.step(time.Second, 500, Sample{QueueLen: 1000, Size: 4}); got != 4 {
			t.Fatalf("disabled controller answered %d, want 4", got)
		}
	}
	if got := c.Throughput(); math.Abs(got-500) > 1e-6 {
		t.Fatalf("Throughput() = %v, want 500", got)
	}
	if size, _ := c.Best(); size != 0 {
		t.Fatalf("disabled controller recorded a best size %d", size)
	}
}

// burstSim is the Fig. 30 workload: a stage whose workers each serve one
// event per 10 ms step, fed by bursty arrivals. Workers are handed work
// lowest index first (like a stack of idle workers), so when capacity
// exceeds demand the high-index workers stay idle and are retired.
type burstSim struct {
	queue    int
	lastBusy []time.Time // per worker
	done     uint64
}

func (b *burstSim) resize(n int, now time.Time) {
	for len(b.lastBusy) < n {
		b.lastBusy = append(b.lastBusy, now)
	}
	b.lastBusy = b.lastBusy[:n] // highest indices are the idlest
}

func (b *burstSim) serve(now time.Time) {
	for i := range b.lastBusy {
		if b.queue == 0 {
			return
		}
		b.queue--
		b.done++
		b.lastBusy[i] = now
	}
}

func (b *burstSim) idle(now time.Time, d time.Duration) int {
	n := 0
	for _, t := range b.lastBusy {
		if now.Sub(t) >= d {
			n++
		}
	}
	return n
}

// TestFig30ThreadPoolController reproduces thesis Fig. 30: three bursts of
// increasing intensity separated by idle gaps; the queue is sampled every
// 2 s, a worker is added when it holds ≥ 100 events, max 20 workers, and
// workers idle for 5 s are removed. The pool must grow with each burst
// (to the max of 20 in the last one) and shrink back to min between bursts.
func TestFig30ThreadPoolController(t *testing.T) {
	for _, detect := range []bool{false, true} {
		name := "plain"
		if detect {
			name = "with thrashing detection"
		}
		t.Run(name, func(t *testing.T) {
			testFig30(t, detect)
		})
	}
}

func testFig30(t *testing.T, detect bool) {
	const (
		step     = 10 * time.Millisecond
		interval = 2 * time.Second
		minSize  = 1
		maxSize  = 20
	)
	type burst struct {
		from, to time.Duration
		rate     float64 // mean arrivals/s; each worker serves 100/s
	}
	bursts := []burst{
		{20 * time.Second, 80 * time.Second, 200},
		{140 * time.Second, 200 * time.Second, 500},
		{260 * time.Second, 320 * time.Second, 2500},
	}
	end := 380 * time.Second

	cfg := ControllerConfig{Enabled: true, Interval: interval, QueueThreshold: 100, Idle: 5 * time.Second, AutoMaxDetect: detect}
	c := NewController(cfg, minSize, maxSize, seeded(30))
	arrivals := seeded(31)
	sim := &burstSim{}
	sim.resize(minSize, t0)

	peaks := make([]int, len(bursts))
	var sizeAtBurstStart []int
	nextTick := time.Duration(0)
	inBurst := -1
	for el := time.Duration(0); el < end; el += step {
		now := t0.Add(el)
		inBurst = -1
		for i, b := range bursts {
			if el >= b.from && el < b.to {
				inBurst = i
			}
			if el == b.from {
				sizeAtBurstStart = append(sizeAtBurstStart, len(sim.lastBusy))
			}
		}
		if inBurst >= 0 {
			// Extremely bursty clients: half of the 100 ms windows carry
			// the burst's load at double rate, the others nothing.
			if el/(100*time.Millisecond)%2 == 0 {
				mean := 2 * bursts[inBurst].rate * step.Seconds()
				sim.queue += int(mean*(0.5+arrivals.Float64()) + 0.5)
			}
		}
		sim.serve(now)
		if el == nextTick {
			nextTick += interval
			target := c.Tick(Sample{Now: now, QueueLen: sim.queue, Processed: sim.done,
				Size: len(sim.lastBusy), IdleWorkers: sim.idle(now, cfg.Idle)})
			if target < minSize || target > maxSize {
				t.Fatalf("t=%v: target %d outside [%d,%d]", el, target, minSize, maxSize)
			}
			sim.resize(target, now)
			if inBurst >= 0 {
				peaks[inBurst] = max(peaks[inBurst], target)
			}
		}
	}
	t.Logf("peaks per burst %v, sizes at burst starts %v, final size %d", peaks, sizeAtBurstStart, len(sim.lastBusy))

	if !(peaks[0] < peaks[1] && peaks[1] < peaks[2]) {
		t.Errorf("peak pool sizes %v do not grow with burst intensity", peaks)
	}
	if peaks[0] < 3 {
		t.Errorf("first burst (2 workers' worth of load) peaked at %d workers", peaks[0])
	}
	if peaks[2] != maxSize {
		t.Errorf("last burst peaked at %d workers, want the max %d", peaks[2], maxSize)
	}
	for i, n := range sizeAtBurstStart {
		if n != minSize {
			t.Errorf("pool had %d workers when burst %d started, want it shrunk back to %d", n, i+1, minSize)
		}
	}
	if n := len(sim.lastBusy); n != minSize {
		t.Errorf("pool has %d workers after the last gap, want %d", n, minSize)
	}
}

// contendedThroughput is the Fig. 31 workload model: CPU-bound requests on
// 4 CPUs, half of which hold a lock for their whole run. At most
// n·(1−p) = n/2 threads are runnable outside the lock, so it takes 8
// threads to keep 4 CPUs busy: ideal throughput min(n/2, 4) requests per
// unit. Each lock release wakes every waiter (thundering herd), and
// scheduling overhead grows with the number of runnable threads: both are
// modelled by the coherency term 1 + κ·n·(n−1) of the universal scalability
// law. The result peaks at n = 8.
func contendedThroughput(n int) float64 {
	const (
		cpus     = 4
		critical = 0.5
		kappa    = 0.004
		unit     = 1000 // requests/s of one CPU
	)
	x := float64(n)
	return unit * math.Min(x*(1-critical), cpus) / (1 + kappa*x*(x-1))
}

func TestContendedThroughputPeaksAtEight(t *testing.T) {
	best := 1
	for n := 1; n <= 200; n++ {
		if contendedThroughput(n) > contendedThroughput(best) {
			best = n
		}
	}
	if best != 8 {
		t.Fatalf("model peaks at %d threads, want 8", best)
	}
	if r := contendedThroughput(100) / contendedThroughput(8); r > 0.1 {
		t.Fatalf("model at 100 threads keeps %.0f%% of its peak, want a collapse", 100*r)
	}
}

type fig31Result struct {
	meanSize, meanTP, finalSize float64
	resets                      uint64
	bestSize                    int
}

// runFig31 drives a controller over a continuously overloaded stage whose
// throughput follows contendedThroughput (with ±5% noise) for ticks seconds.
func runFig31(detect bool, seed uint64, ticks int) fig31Result {
	const maxSize = 100
	c := NewController(ControllerConfig{Enabled: true, AutoMaxDetect: detect}, 1, maxSize, seeded(seed))
	noise := seeded(seed + 1000)
	f := newFakeStage(c)
	size := f.step(0, 0, Sample{QueueLen: 1 << 20, Size: 1})
	var r fig31Result
	for range ticks {
		rate := contendedThroughput(size) * (0.95 + 0.1*noise.Float64())
		r.meanSize += float64(size)
		r.meanTP += rate
		size = f.step(time.Second, rate, Sample{QueueLen: 1 << 20, Size: size})
	}
	r.meanSize /= float64(ticks)
	r.meanTP /= float64(ticks)
	r.finalSize = float64(size)
	r.resets = c.Resets()
	r.bestSize, _ = c.Best()
	return r
}

// TestFig31ThrashingDetection reproduces thesis Fig. 31: a single stage,
// continuously overloaded with lock-contended CPU-bound requests on 4 CPUs.
// Without thrashing detection the controller keeps adding threads up to the
// max and throughput collapses; with it the pool stays small (around the
// model's optimum of 8) and throughput stays near the peak.
func TestFig31ThrashingDetection(t *testing.T) {
	const ticks = 600
	peak := contendedThroughput(8)

	t.Run("a/without detection", func(t *testing.T) {
		r := runFig31(false, 1, ticks)
		t.Logf("mean size %.1f, final size %.0f, mean throughput %.0f%% of peak", r.meanSize, r.finalSize, 100*r.meanTP/peak)
		if r.finalSize != 100 {
			t.Errorf("final size %.0f, want the max 100", r.finalSize)
		}
		if r.meanTP > 0.4*peak {
			t.Errorf("mean throughput %.0f is %.0f%% of the peak, want a collapse below 40%%", r.meanTP, 100*r.meanTP/peak)
		}
	})
	t.Run("b/with detection", func(t *testing.T) {
		for seed := uint64(1); seed <= 5; seed++ {
			r := runFig31(true, seed, ticks)
			t.Logf("seed %d: mean size %.1f, final size %.0f, best size %d, %d resets, mean throughput %.0f%% of peak",
				seed, r.meanSize, r.finalSize, r.bestSize, r.resets, 100*r.meanTP/peak)
			if r.meanSize > 14 {
				t.Errorf("seed %d: mean pool size %.1f, want it small (≤ 14 of max 100)", seed, r.meanSize)
			}
			if r.meanTP < 0.8*peak {
				t.Errorf("seed %d: mean throughput %.0f%% of the peak, want ≥ 80%%", seed, 100*r.meanTP/peak)
			}
			if r.resets == 0 {
				t.Errorf("seed %d: thrashing detection never reset the pool", seed)
			}
			if r.bestSize < 6 || r.bestSize > 11 {
				t.Errorf("seed %d: best size %d, want near the model's optimum 8", seed, r.bestSize)
			}
		}
	})
}

// TestControllerRefusesToGrowCPUBoundStage: a backlogged CPU-bound stage
// on two cores (two workers do twice one's work, more add nothing) grows
// 1, 2, 3, is taken back to 2 one interval later, and from then on only
// probes a third worker now and then, taken back the next interval: the
// controller never keeps a goroutine that adds no throughput. All on
// samples with fake times.
func TestControllerRefusesToGrowCPUBoundStage(t *testing.T) {
	for _, cfg := range []ControllerConfig{
		{Enabled: true, AutoMaxDetect: true},
		{Enabled: true, AutoMaxDetect: true, Interval: 100 * time.Millisecond, ResetEvery: 3},
	} {
		c := NewController(cfg, 1, 20, seeded(9))
		f := newFakeStage(c)
		size := f.step(0, 0, Sample{QueueLen: 1 << 20, Size: 1})
		var sizes []int
		for range 200 {
			rate := 1000 * float64(min(size, 2))
			size = f.step(c.Config().Interval, rate, Sample{QueueLen: 1 << 20, Size: size})
			sizes = append(sizes, size)
		}
		if want := []int{3, 2}; !slices.Equal(sizes[:2], want) {
			t.Errorf("%+v: first sizes %v, want %v (grow to 3, taken back the next interval)", cfg, sizes[:2], want)
		}
		above := 0
		for i, n := range sizes {
			if n > 3 {
				t.Fatalf("%+v: size %d at tick %d; sizes %v", cfg, n, i+1, sizes)
			}
			if n == 3 {
				above++
				if i+1 < len(sizes) && sizes[i+1] != 2 {
					t.Fatalf("%+v: a third worker kept past one interval at tick %d: %v", cfg, i+1, sizes)
				}
			}
		}
		// One probe per thrashing check (every ResetEvery ticks).
		if every := c.Config().ResetEvery; above > len(sizes)/every+1 {
			t.Errorf("%+v: %d of %d ticks at 3 workers, want one probe per %d ticks", cfg, above, len(sizes), every)
		}
		if best, _ := c.Best(); best != 2 {
			t.Errorf("%+v: best size %d, want 2", cfg, best)
		}
	}
}

// TestThrashingDetectionLetsScalableStagesGrow: when more threads always
// help (an I/O-bound stage), detection never cuts the pool and it reaches
// max as without detection.
func TestThrashingDetectionLetsScalableStagesGrow(t *testing.T) {
	c := NewController(ControllerConfig{Enabled: true, AutoMaxDetect: true}, 1, 40, seeded(3))
	f := newFakeStage(c)
	size := f.step(0, 0, Sample{QueueLen: 1 << 20, Size: 1})
	for range 200 {
		size = f.step(time.Second, 100*float64(size), Sample{QueueLen: 1 << 20, Size: size})
	}
	if size != 40 || c.Resets() != 0 {
		t.Fatalf("size %d after 200 ticks with %d resets, want 40 and none", size, c.Resets())
	}
}

// TestThrashingDetectionAdaptsToHeavierWork: when the work per request
// suddenly doubles, the stale best record is replaced instead of pinning
// the pool below its optimum forever.
func TestThrashingDetectionAdaptsToHeavierWork(t *testing.T) {
	c := NewController(ControllerConfig{Enabled: true, AutoMaxDetect: true}, 1, 100, seeded(4))
	f := newFakeStage(c)
	size := f.step(0, 0, Sample{QueueLen: 1 << 20, Size: 1})
	scale := 1.0
	var sizes float64
	for i := range 800 {
		if i == 300 {
			scale = 0.5
		}
		size = f.step(time.Second, scale*contendedThroughput(size), Sample{QueueLen: 1 << 20, Size: size})
		if i >= 500 {
			sizes += float64(size)
		}
	}
	_, bestTP := c.Best()
	peak := 0.5 * contendedThroughput(8)
	if bestTP > 1.25*peak || bestTP < 0.75*peak {
		t.Errorf("best throughput %.0f after the change, want near the new peak %.0f", bestTP, peak)
	}
	if mean := sizes / 300; mean < 6 || mean > 14 {
		t.Errorf("mean size %.1f after the change, want near the optimum 8", mean)
	}
}

// FuzzController: any valid configuration and any samples give a target in
// [min, max], and the limit found by detection never leaves [min, max].
func FuzzController(f *testing.F) {
	f.Add(true, true, 1, 20, 100, 0.0, 0.0, 0, 0, []byte{1, 200, 5, 3, 9, 0, 255, 4})
	f.Add(true, true, 0, 3, 1, 1.0, 0.5, 1, -1, []byte{255, 255, 255, 0, 0, 0, 7, 7})
	f.Add(false, true, 2, 2, 0, 0.0, 0.0, 0, 0, []byte{3, 3})
	f.Fuzz(func(t *testing.T, enabled, detect bool, min, max, threshold int, smoothing, margin float64,
		resetEvery, drop int, steps []byte) {
		cfg := ControllerConfig{Enabled: enabled, AutoMaxDetect: detect, QueueThreshold: threshold,
			Smoothing: smoothing, Margin: margin, ResetEvery: resetEvery % 100, MaxRandomDrop: drop % 100}
		if cfg.Validate() != nil || min < 0 || max < 1 || min > max || max > 1000 {
			return
		}
		c := NewController(cfg, min, max, seeded(1))
		now, processed, size := t0, uint64(0), min
		for i := 0; i+2 < len(steps); i += 3 {
			now = now.Add(time.Duration(steps[i]%3) * time.Second)
			processed += uint64(steps[i+1]) * 10
			s := Sample{Now: now, QueueLen: int(steps[i+2]) * 4, Processed: processed, Size: size,
				IdleWorkers: int(steps[i]) % (size + 1)}
			target := c.Tick(s)
			if target < min || target > max {
				t.Fatalf("Tick(%+v) = %d outside [%d,%d]", s, target, min, max)
			}
			if l := c.Limit(); l < min || l > max {
				t.Fatalf("Limit() = %d outside [%d,%d]", l, min, max)
			}
			size = target
		}
	})
}
