package threadpool

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
	"github.com/sandstorm-go/sandstorm/sink"
)

const ms = time.Millisecond

// TestWhirlwindTick checks Fig. 1 of the Whirlwind paper one sample at a
// time, with thresholds idle 50ms, queue 20ms, lock 5ms and bounds 2..6.
func TestWhirlwindTick(t *testing.T) {
	tests := []struct {
		name              string
		size              int
		idle, queue, lock time.Duration
		want              int
	}{
		{"grow on queue latency", 3, 0, 21 * ms, 0, 4},
		{"queue latency at the threshold", 3, 0, 20 * ms, 0, 3},
		{"no growth while lock latency is high", 3, 0, 500 * ms, 5 * ms, 3},
		{"grow while lock latency is below", 3, 0, 500 * ms, 5*ms - 1, 4},
		{"no growth at max", 6, 0, time.Second, 0, 6},
		{"shrink on idle time", 4, 51 * ms, 0, 0, 3},
		{"idle time at the threshold", 4, 50 * ms, 0, 0, 4},
		{"idle wins over queue latency", 4, 200 * ms, time.Second, 0, 3},
		{"idle at min: no growth either", 2, 200 * ms, time.Second, 0, 2},
		{"quiet: keep", 4, 10 * ms, 10 * ms, 0, 4},
		{"size below min is raised", 0, 0, 0, 0, 2},
		{"size above max is cut", 9, 0, 0, 0, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWhirlwind(WhirlwindConfig{}, 2, 6)
			got := w.Tick(Sample{Size: tt.size, IdleTime: tt.idle, QueueLatency: tt.queue, LockLatency: tt.lock})
			if got != tt.want {
				t.Fatalf("Tick = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestWhirlwindSequence: under a steady queue latency the pool climbs one
// worker per tick to max, and once idle steps back down to min.
func TestWhirlwindSequence(t *testing.T) {
	w := NewWhirlwind(WhirlwindConfig{IdleTime: 100 * ms, QueueLatency: 10 * ms, LockLatency: time.Second}, 1, 4)
	size := 1
	var got []int
	for range 5 {
		size = w.Tick(Sample{Size: size, QueueLatency: 50 * ms})
		got = append(got, size)
	}
	for range 4 {
		size = w.Tick(Sample{Size: size, IdleTime: 900 * ms})
		got = append(got, size)
	}
	want := []int{2, 3, 4, 4, 4, 3, 2, 1, 1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("sizes %v, want %v", got, want)
		}
	}
	if st := w.Stats(); st.Grows != 3 || st.Shrinks != 3 || st.Last.IdleTime != 900*ms {
		t.Fatalf("Stats() = %+v, want 3 grows, 3 shrinks, last idle 900ms", st)
	}
}

func TestWhirlwindConfig(t *testing.T) {
	if got, want := NewWhirlwind(WhirlwindConfig{}, 1, 2).Config(), (WhirlwindConfig{50 * ms, 20 * ms, 5 * ms}); got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	for _, tt := range []struct {
		cfg ControllerConfig
		key string
	}{
		{ControllerConfig{Type: "whirl"}, "type"},
		{ControllerConfig{Type: TypeWhirlwind, Whirlwind: WhirlwindConfig{IdleTime: -1}}, "idleTime"},
		{ControllerConfig{Whirlwind: WhirlwindConfig{QueueLatency: -1}}, "queueLatency"},
		{ControllerConfig{Whirlwind: WhirlwindConfig{LockLatency: -1}}, "lockLatency"},
		{ControllerConfig{Interval: -1}, "interval"},
	} {
		err := tt.cfg.Validate()
		fe, ok := errors.AsType[*FieldError](err)
		if !ok || fe.Key != tt.key || !errors.Is(err, ErrInvalidControllerConfig) {
			t.Errorf("Validate(%+v) = %v, want a FieldError for %s wrapping ErrInvalidControllerConfig", tt.cfg, err, tt.key)
		}
	}
	for _, typ := range append(ControllerTypes(), "") {
		if err := (ControllerConfig{Type: typ}).Validate(); err != nil {
			t.Errorf("type %q: %v", typ, err)
		}
	}
	for _, bad := range [][2]int{{-1, 1}, {0, 0}, {3, 2}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewWhirlwind with bounds %v did not panic", bad)
				}
			}()
			NewWhirlwind(WhirlwindConfig{}, bad[0], bad[1])
		}()
	}
}

// TestLittleWait checks the queue-latency fallback.
func TestLittleWait(t *testing.T) {
	for _, tt := range []struct {
		queued int
		done   uint64
		dt     time.Duration
		want   time.Duration
	}{
		{0, 100, time.Second, 0},
		{50, 100, time.Second, 500 * ms}, // 50 queued at 100/s
		{10, 0, time.Second, time.Second},
		{1 << 40, 1, time.Hour, time.Duration(1 << 62)},
	} {
		if got := littleWait(tt.queued, tt.done, tt.dt); got != tt.want {
			t.Errorf("littleWait(%d, %d, %v) = %v, want %v", tt.queued, tt.done, tt.dt, got, tt.want)
		}
	}
}

func TestLockMeterMutex(t *testing.T) {
	var m LockMeter
	mu := Mutex{Meter: &m}
	mu.Lock()
	mu.Unlock()
	if !mu.TryLock() {
		t.Fatal("TryLock failed on an unlocked Mutex")
	}
	if mu.TryLock() {
		t.Fatal("TryLock succeeded on a locked Mutex")
	}
	// A Lock behind the holder counts once, contended or not (how long
	// it waited depends on the scheduler and is not checked).
	done := make(chan struct{})
	go func() {
		mu.Lock()
		mu.Unlock()
		close(done)
	}()
	mu.Unlock()
	<-done
	if waited, n := m.Totals(); n != 3 || waited < 0 {
		t.Fatalf("Totals() = %v, %d; want 3 acquisitions", waited, n)
	}
	m.Observe(3 * ms)
	if waited, n := m.Totals(); n != 4 || waited < 3*ms {
		t.Fatalf("Totals() = %v, %d after a 3ms wait; want at least 3ms, 4", waited, n)
	}
	var plain Mutex // no meter
	plain.Lock()
	plain.Unlock()
}

// measureStage is a testStage that reports queue waits the test sets.
type measureStage struct {
	*testStage
	wait  atomic.Int64
	waits atomic.Uint64
}

func (s *measureStage) QueueWait() (time.Duration, uint64) {
	return time.Duration(s.wait.Load()), s.waits.Load()
}

// TestPoolSampleMeasures: the pool turns the stage's counters into a
// Sample's interval averages — queue latency from the stage's reported
// waits, else Little's law; lock latency from the LockMeter; idle time
// from the parked workers — all on the fake clock.
func TestPoolSampleMeasures(t *testing.T) {
	release := make(chan struct{})
	st := &measureStage{testStage: newTestStage(func([]sink.Event) { <-release })}
	st.batch = 1
	var mu sync.Mutex
	var samples []Sample
	clock := newFakeClock()
	p := NewPool(st, Config{Min: 1, Max: 2, Initial: 2, Clock: clock,
		Controller: ControllerConfig{Interval: time.Second, NewSizer: func(min, max int) Sizer {
			return SizerFunc(func(s Sample) int {
				mu.Lock()
				defer mu.Unlock()
				samples = append(samples, s)
				return s.Size
			})
		}}})
	p.Start(context.Background())

	// Interval 1: both workers parked, the stage reports 2 waits of 30ms
	// in all, a handler waited 4ms for one of two lock acquisitions.
	waitParked(t, st.q, 2)
	st.wait.Add(int64(30 * ms))
	st.waits.Add(2)
	p.LockMeter().Observe(4 * ms)
	p.LockMeter().Observe(0)
	clock.tick(time.Second)
	clock.tick(0) // an empty interval, and the previous tick is applied
	// Interval 2: both workers busy, 8 events queued, none finished, no
	// waits reported: Little's law falls back to the interval.
	for i := range 10 {
		_ = st.q.Enqueue(i)
	}
	waitParked(t, st.q, 0)
	clock.tick(time.Second)
	clock.tick(0)
	// Interval 3: 4 of the events finish (the workers take 4 more, so
	// 4 stay queued): Little's law gives 4 queued / 4 per second = 1s.
	for range 4 {
		release <- struct{}{}
	}
	for sinkrt.Of(st.q).Finished() != 4 || st.q.Len() != 4 {
		time.Sleep(time.Millisecond)
	}
	clock.tick(time.Second)
	clock.tick(0)

	mu.Lock()
	got := slices.Clone(samples)
	mu.Unlock()
	want := []Sample{
		{IdleTime: time.Second, QueueLatency: 15 * ms, LockLatency: 2 * ms},
		{IdleTime: 0, QueueLatency: time.Second},
		{IdleTime: 0, QueueLatency: time.Second},
	}
	// The samples of the empty intervals measure nothing.
	var full []Sample
	for i, s := range got {
		if i > 0 && s.Now.Equal(got[i-1].Now) {
			if s.IdleTime != 0 || s.QueueLatency != 0 || s.LockLatency != 0 {
				t.Errorf("an empty interval measured %+v, want zero averages", s)
			}
			continue
		}
		full = append(full, s)
	}
	if len(full) != len(want) {
		t.Fatalf("%d samples of full intervals, want %d", len(full), len(want))
	}
	for i, w := range want {
		s := full[i]
		if s.IdleTime != w.IdleTime || s.QueueLatency != w.QueueLatency || s.LockLatency != w.LockLatency {
			t.Errorf("interval %d (%+v): idle %v, queue %v, lock %v; want %v, %v, %v", i+1, s,
				s.IdleTime, s.QueueLatency, s.LockLatency, w.IdleTime, w.QueueLatency, w.LockLatency)
		}
	}
	close(release)
	st.q.Close()
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func parkedOn(q *sink.Queue) int { return sinkrt.Of(q).Parked() }

// waitParked waits until n workers are parked on q; the deadline only
// guards against a hang.
func waitParked(t *testing.T, q *sink.Queue, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for parkedOn(q) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers parked, want %d", parkedOn(q), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPoolWhirlwindOnFakeClock: a Whirlwind-sized pool grows one worker per
// tick while its events wait longer than the queue-latency threshold, not
// at all while its handlers report lock waits above the lock-latency
// threshold, and shrinks back to min once its workers sit idle.
func TestPoolWhirlwindOnFakeClock(t *testing.T) {
	release := make(chan struct{})
	st := newTestStage(func([]sink.Event) { <-release })
	st.batch = 1
	clock := newFakeClock()
	p := NewPool(st, Config{Min: 1, Max: 4, Clock: clock,
		Controller: ControllerConfig{Type: TypeWhirlwind, Interval: time.Second}})
	if _, ok := p.Sizer().(*Whirlwind); !ok || !p.Config().Controller.Enabled {
		t.Fatalf("sizer %T (enabled %v), want an enabled *Whirlwind", p.Sizer(), p.Config().Controller.Enabled)
	}
	p.Start(context.Background())
	for i := range 100 {
		if err := st.q.Enqueue(i); err != nil {
			t.Fatal(err)
		}
	}
	// The one worker is stuck in its first event: nothing finishes, 99
	// events wait, the queue latency is the whole interval.
	// Lock contention first: handlers report 10ms waits per lock.
	p.LockMeter().Observe(10 * ms)
	clock.tick(time.Second)
	clock.tick(0)
	if got := p.target.Load(); got != 1 {
		t.Fatalf("grew to %d under lock contention", got)
	}
	for want := 2; want <= 4; want++ {
		clock.tick(time.Second)
		waitSize(t, p, want)
	}
	clock.tick(time.Second) // still waiting, but at max
	clock.tick(0)
	if got := p.target.Load(); got != 4 {
		t.Fatalf("target %d at max, want 4", got)
	}

	close(release) // the backlog drains; the workers park
	waitParked(t, st.q, 4)
	for want := 3; want >= 1; want-- {
		clock.tick(time.Second) // every worker idle the whole second
		waitSize(t, p, want)
		waitParked(t, st.q, want)
	}
	clock.tick(time.Second) // at min
	clock.tick(0)
	waitSize(t, p, 1)
	if got := p.Processed(); got != 100 {
		t.Fatalf("processed %d, want 100", got)
	}
	if w := p.Sizer().(*Whirlwind).Stats(); w.Grows != 3 || w.Shrinks != 3 {
		t.Fatalf("stats %+v, want 3 grows and 3 shrinks", w)
	}
	st.q.Close()
	if err := p.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
}
