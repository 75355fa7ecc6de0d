package batching

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"full", Config{Enabled: true, Min: 2, Max: 64, Interval: time.Second, Decrease: 2, Increase: 1.5,
			Keep: 0.8, Recover: 1, ResetBelow: 0.1, ResetAbove: 3, Window: 5}, true},
		{"min only below default max", Config{Min: 500}, true},
		{"negative min", Config{Min: -1}, false},
		{"negative max", Config{Max: -1}, false},
		{"min above max", Config{Min: 10, Max: 5}, false},
		{"min above default max", Config{Min: 2000}, false},
		{"negative interval", Config{Interval: -time.Second}, false},
		{"decrease not above 1", Config{Decrease: 1}, false},
		{"increase below 1", Config{Increase: 0.5}, false},
		{"infinite increase", Config{Increase: math.Inf(1)}, false},
		{"keep 1", Config{Keep: 1}, false},
		{"NaN keep", Config{Keep: math.NaN()}, false},
		{"recover above 1", Config{Recover: 1.1}, false},
		{"resetBelow 1", Config{ResetBelow: 1}, false},
		{"resetBelow above keep", Config{ResetBelow: 0.95}, false},
		{"resetAbove not above 1", Config{ResetAbove: 0.5}, false},
		{"negative window", Config{Window: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
		})
	}
}

func TestNewPanicsOnInvalidConfig(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New did not panic on min > max")
		}
	}()
	New(Config{Min: 10, Max: 5})
}

func TestDefaults(t *testing.T) {
	c := New(Config{})
	want := Config{Min: 1, Max: 1000, Interval: time.Second, Decrease: 1.2, Increase: 1.2, Keep: 0.9,
		Recover: 0.98, ResetBelow: 0.2, ResetAbove: 2, Window: 30}
	if got := c.Config(); got != want {
		t.Fatalf("Config() = %+v, want %+v", got, want)
	}
	if got := c.BatchSize(); got != 1000 {
		t.Fatalf("BatchSize() = %d, want 1000", got)
	}
}

// TestObserveDecision checks single decisions: each rate is observed one
// second after the previous one (after a baseline observation), and the
// returned factors are compared.
func TestObserveDecision(t *testing.T) {
	on := Config{Enabled: true, Max: 100}
	tests := []struct {
		name       string
		cfg        Config
		rates      []float64
		want       []int
		wantResets uint64
		wantBest   float64
	}{
		{"first observation shrinks from max", on, []float64{100}, []int{83}, 0, 100},
		{"keeps shrinking above keep·best", on, []float64{100, 95, 91}, []int{83, 69, 58}, 0, 100},
		{"a better rate raises best and keeps shrinking", on, []float64{100, 150}, []int{83, 69}, 0, 150},
		{"dip below keep·best grows", on, []float64{100, 100, 85}, []int{83, 69, 83}, 0, 100},
		{"growth continues until recover·best", on, []float64{100, 100, 85, 90, 97}, []int{83, 69, 83, 100, 100}, 0, 100},
		{"recovery holds for one interval then shrinks", on, []float64{100, 100, 85, 98, 98}, []int{83, 69, 83, 83, 69}, 0, 100},
		{"growth that lowers the rate shrinks again", on, []float64{100, 100, 85, 80}, []int{83, 69, 83, 69}, 0, 100},
		{"drop below resetBelow·best resets to max", on, []float64{100, 100, 19}, []int{83, 69, 100}, 1, 0},
		{"rise above resetAbove·best resets to max", on, []float64{100, 100, 201}, []int{83, 69, 100}, 1, 0},
		{"search restarts after a reset", on, []float64{100, 19, 19}, []int{83, 100, 83}, 1, 19},
		{"idle stage with no estimate holds", on, []float64{0, 0}, []int{100, 100}, 0, 0},
		{"disabled stays at max", Config{Max: 100}, []float64{100, 100, 10, 500}, []int{100, 100, 100, 100}, 0, 0},
		{"factor stops at min", Config{Enabled: true, Min: 50, Max: 60}, []float64{10, 10, 10}, []int{50, 50, 50}, 0, 10},
		{"each step moves at least one", Config{Enabled: true, Max: 3}, []float64{10, 10, 10}, []int{2, 1, 1}, 0, 10},
		{"growth stops at max", Config{Enabled: true, Max: 100}, []float64{100, 50, 50, 50}, []int{83, 100, 100, 100}, 0, 100},
		{"best is forgotten after the window", Config{Enabled: true, Max: 100, Window: 2},
			[]float64{100, 60, 60, 60}, []int{83, 100, 100, 83}, 0, 60},
		{"custom steps", Config{Enabled: true, Max: 100, Decrease: 2, Increase: 1.5, Keep: 0.5},
			[]float64{100, 60, 40}, []int{50, 25, 38}, 0, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.cfg)
			now, processed := t0, uint64(0)
			if got := c.Observe(now, processed); got != c.Config().Max {
				t.Fatalf("baseline Observe = %d, want max %d", got, c.Config().Max)
			}
			var got []int
			for _, r := range tt.rates {
				now = now.Add(time.Second)
				processed += uint64(r)
				got = append(got, c.Observe(now, processed))
				if got[len(got)-1] != c.BatchSize() {
					t.Fatalf("Observe returned %d but BatchSize() is %d", got[len(got)-1], c.BatchSize())
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("factors = %v, want %v", got, tt.want)
			}
			if r := c.Resets(); r != tt.wantResets {
				t.Errorf("Resets() = %d, want %d", r, tt.wantResets)
			}
			if b := c.Best(); b != tt.wantBest {
				t.Errorf("Best() = %v, want %v", b, tt.wantBest)
			}
		})
	}
}

// TestObserveMeasurement checks the rate measurement: it uses the clock,
// ignores duplicate observations and re-baselines after counter or clock
// resets.
func TestObserveMeasurement(t *testing.T) {
	type obs struct {
		at        time.Duration
		processed uint64
	}
	tests := []struct {
		name  string
		obs   []obs
		want  float64 // Throughput()
		moves int     // how many observations changed the factor
	}{
		{"baseline only", []obs{{0, 100}}, 0, 0},
		{"rate over the real spacing", []obs{{0, 0}, {4 * time.Second, 1000}}, 250, 1},
		{"duplicate observation ignored", []obs{{0, 0}, {time.Second, 100}, {time.Second, 300}}, 100, 1},
		{"counter reset re-baselines", []obs{{0, 0}, {time.Second, 100}, {2 * time.Second, 5}}, 100, 1},
		{"clock going back re-baselines", []obs{{0, 0}, {time.Second, 100}, {0, 200}, {time.Second, 290}}, 90, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Config{Enabled: true})
			prev, moves := c.BatchSize(), 0
			for _, o := range tt.obs {
				if got := c.Observe(t0.Add(o.at), o.processed); got != prev {
					moves++
					prev = got
				}
			}
			if got := c.Throughput(); got != tt.want {
				t.Errorf("Throughput() = %v, want %v", got, tt.want)
			}
			if moves != tt.moves {
				t.Errorf("factor changed %d times, want %d", moves, tt.moves)
			}
		})
	}
}

// fig32Stage is the thesis's Fig. 32 benchmark stage: the first event of
// every batch performs an expensive operation (10,000 random numbers in the
// thesis) that the rest of the batch shares, but only up to 200 events:
// every event beyond 200 forces extra expensive work (a share of the
// operation redone), so the optimal batching factor is 200.
type fig32Stage struct {
	expensive time.Duration // per batch
	perEvent  time.Duration
	overflow  time.Duration // extra cost of each event beyond optimal
	optimal   int
}

func newFig32Stage() fig32Stage {
	return fig32Stage{expensive: time.Millisecond, perEvent: time.Microsecond, overflow: 10 * time.Microsecond, optimal: 200}
}

// throughput in events/s of a stage that always has work and runs batches
// of k events back to back.
func (s fig32Stage) throughput(k int) float64 {
	cost := s.expensive + time.Duration(k)*s.perEvent + time.Duration(max(0, k-s.optimal))*s.overflow
	return float64(k) / cost.Seconds()
}

func TestFig32StagePeaksAt200(t *testing.T) {
	s := newFig32Stage()
	best := 1
	for k := 1; k <= 1000; k++ {
		if s.throughput(k) > s.throughput(best) {
			best = k
		}
	}
	if best != 200 {
		t.Fatalf("stage model peaks at %d, want 200", best)
	}
}

// TestFig32BatchingController reproduces thesis Fig. 32: a single stage on
// a continuous stream of events, observed once per second on a fake clock
// with ±3% measurement noise. The controller must walk the factor down from
// 1000 to around the optimum of 200 and keep throughput near the peak; a
// sudden drop in throughput (the work per batch becomes 10 times heavier)
// must reset the factor to the maximum, after which it settles again.
func TestFig32BatchingController(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		stage := newFig32Stage()
		peak := stage.throughput(200)
		c := New(Config{Enabled: true})
		noise := rand.New(rand.NewPCG(seed, 32))
		now, processed := t0, 0.0
		c.Observe(now, 0)

		const phase = 150
		var factors, rates []float64
		var resetAt int = -1
		for i := range 2 * phase {
			if i == phase {
				stage.expensive *= 10
				stage.perEvent *= 10
				stage.overflow *= 10
			}
			k := c.BatchSize()
			rate := stage.throughput(k) * (0.97 + 0.06*noise.Float64())
			now = now.Add(time.Second)
			processed += rate
			got := c.Observe(now, uint64(processed))
			factors = append(factors, float64(k))
			rates = append(rates, rate)
			if i >= phase && resetAt < 0 && got == 1000 {
				resetAt = i
			}
		}
		check := func(what string, from, to int, peak float64) {
			last := slices.Clone(factors[from:to])
			slices.Sort(last)
			median := last[len(last)/2]
			mean := 0.0
			for _, r := range rates[from:to] {
				mean += r
			}
			mean /= float64(to - from)
			t.Logf("seed %d, %s: median factor %.0f (range %.0f..%.0f), mean throughput %.1f%% of peak",
				seed, what, median, last[0], last[len(last)-1], 100*mean/peak)
			if median < 150 || median > 260 {
				t.Errorf("seed %d, %s: median batching factor %.0f, want within [150,260]", seed, what, median)
			}
			if mean < 0.85*peak {
				t.Errorf("seed %d, %s: mean throughput %.1f%% of the peak, want ≥ 85%%", seed, what, 100*mean/peak)
			}
		}
		check("before the drop", phase-50, phase, peak)
		if resetAt != phase {
			t.Errorf("seed %d: factor reset to max at interval %d, want %d (right after the drop)", seed, resetAt, phase)
		}
		check("after the drop", 2*phase-50, 2*phase, stage.throughput(200))
		if c.Resets() != 1 {
			t.Errorf("seed %d: %d resets, want exactly 1", seed, c.Resets())
		}
	}
}

// TestBatchSizeConcurrent reads the factor from many goroutines while the
// controller observes (meaningful under -race).
func TestBatchSizeConcurrent(t *testing.T) {
	c := New(Config{Enabled: true, Max: 500})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if n := c.BatchSize(); n < 1 || n > 500 {
					t.Errorf("BatchSize() = %d outside [1,500]", n)
					return
				}
			}
		})
	}
	now, processed := t0, uint64(0)
	for i := range 200 {
		now = now.Add(time.Second)
		processed += uint64(1000 + i%7*50)
		c.Observe(now, processed)
		_ = c.Best()
		_ = c.Throughput()
	}
	close(stop)
	wg.Wait()
}

func BenchmarkBatchSize(b *testing.B) {
	c := New(Config{Enabled: true})
	b.ReportAllocs()
	n := 0
	for range b.N { // not b.Loop: it would keep BatchSize from being inlined as on the hot path
		n += c.BatchSize()
	}
	if n != 1000*b.N {
		b.Fatalf("read %d, want %d", n, 1000*b.N)
	}
}

func BenchmarkBatchSizeParallel(b *testing.B) {
	c := New(Config{Enabled: true})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			n += c.BatchSize()
		}
		if n%1000 != 0 {
			b.Errorf("read a batch size other than 1000")
		}
	})
}

func BenchmarkObserve(b *testing.B) {
	c := New(Config{Enabled: true})
	now, processed := t0, uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		processed += 1000
		c.Observe(now, processed)
	}
}

// FuzzController: any valid configuration and any sequence of
// observations keep the factor within [Min, Max], and Observe agrees with
// BatchSize.
func FuzzController(f *testing.F) {
	f.Add(true, 0, 0, 0.0, 0.0, 0.0, 0.0, 0, []byte{10, 20, 30, 5, 200, 0, 0, 90})
	f.Add(true, 3, 7, 2.0, 1.1, 0.5, 0.99, 2, []byte{255, 1, 255, 1, 0, 0})
	f.Add(false, 1, 1, 0.0, 0.0, 0.0, 0.0, 1, []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, enabled bool, min, max int, dec, inc, keep, recover float64, window int, steps []byte) {
		cfg := Config{Enabled: enabled, Min: min, Max: max, Decrease: dec, Increase: inc, Keep: keep, Recover: recover, Window: window % 1000}
		if cfg.Validate() != nil {
			return
		}
		c := New(cfg)
		lo, hi := c.Config().Min, c.Config().Max
		now, processed := t0, uint64(0)
		for i, s := range steps {
			// Even bytes advance time (sometimes not at all), odd ones add work.
			if i%2 == 0 {
				now = now.Add(time.Duration(s%4) * time.Second)
				continue
			}
			processed += uint64(s) * uint64(s)
			got := c.Observe(now, processed)
			if got < lo || got > hi || got != c.BatchSize() {
				t.Fatalf("Observe = %d, BatchSize = %d, want equal and within [%d,%d]", got, c.BatchSize(), lo, hi)
			}
			if !enabled && got != hi {
				t.Fatalf("disabled controller moved to %d", got)
			}
		}
	})
}
