package enqueuepred

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// series is a sampler returning preset values, then repeating the last.
type series struct {
	vals []float64
	err  error
	i    int
}

func (s *series) Name() string { return "series" }
func (s *series) Sample(time.Time) (float64, error) {
	if s.err != nil {
		return 0, s.err
	}
	v := s.vals[min(s.i, len(s.vals)-1)]
	s.i++
	return v, nil
}

func TestTemplateDegree(t *testing.T) {
	byValue := Modifier{Value: []Step{{At: 80, Degree: 1}, {At: 90, Degree: 2}, {At: 100, Degree: 3}}}
	byDur := Modifier{Over: 1, Duration: []Step{{After: 0, Degree: 1}, {After: 30 * time.Second, Degree: 2}, {After: 45 * time.Second, Degree: 3}}}
	t0 := time.Unix(0, 0)
	tests := []struct {
		name string
		tpl  Modifier
		v    float64
		at   time.Duration // since the start of the series
		want float64
	}{
		{"value below", byValue, 79, 0, 0},
		{"value at step", byValue, 80, 0, 1},
		{"value between", byValue, 95, 0, 2},
		{"value above all", byValue, 250, 0, 3},
		{"duration starts", byDur, 1, 0, 1},
		{"duration 35s", byDur, 1, 35 * time.Second, 2},
		{"duration 60s", byDur, 5, 60 * time.Second, 3},
		{"duration ends", byDur, 0, 61 * time.Second, 0},
		{"duration restarts", byDur, 1, 62 * time.Second, 1},
	}
	var since time.Time
	for _, tt := range tests {
		if got := tt.tpl.degreeAt(tt.v, t0.Add(tt.at), &since); got != tt.want {
			t.Fatalf("%s: degree %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestModifiedScalesRegulators(t *testing.T) {
	clk := newClock()
	cpu := &series{vals: []float64{50, 85, 95, 40}}
	tests := []struct {
		name  string
		inner scalable
		limit func() float64
	}{
		{"rate", NewRate(RateConfig{Rate: 1000, Now: clk.Now}), nil},
		{"counter", newCounter(100), nil},
		{"threshold", newThreshold(100), nil},
	}
	tests[0].limit = func() float64 { return tests[0].inner.(*Rate).EffectiveRate() / 10 }
	tests[1].limit = func() float64 { return float64(tests[1].inner.(*counter).EffectiveLimit()) }
	tests[2].limit = func() float64 { return float64(tests[2].inner.(*threshold).EffectiveLimit()) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpu.i = 0
			m, err := newModified(tt.inner, ModifiedConfig{Now: clk.Now, Modifiers: []Modifier{{
				Sampler:  cpu,
				Value:    []Step{{At: 80, Degree: 1}, {At: 90, Degree: 2}},
				Factor:   25,
				Interval: time.Second,
			}}})
			if err != nil {
				t.Fatal(err)
			}
			want := []float64{100, 75, 50, 100} // 50%: 0, 85%: 1 x 25%, 95%: 2 x 25%, 40%: 0
			for i, w := range want {
				m.Accept(1)
				if got := tt.limit(); got != w {
					t.Fatalf("sample %d: limit %v, want %v", i, got, w)
				}
				sink.Cancel(m, 1)
				sink.Done(m, 1, 0, 0)
				m.Accept(1) // not due: no new sample
				if cpu.i != i+1 {
					t.Fatalf("sampled %d times, want %d", cpu.i, i+1)
				}
				clk.Advance(time.Second)
			}
			in := inspectMap(m)
			if in["mod0.value"] != 40 || in["scale"] != 1 {
				t.Fatalf("inspect %v", in)
			}
		})
	}
}

func TestModifiedDurationAndErrors(t *testing.T) {
	clk := newClock()
	busy := &series{vals: []float64{1}}
	broken := &series{err: errors.New("boom")}
	c := newCounter(100)
	m, err := newModified(c, ModifiedConfig{Now: clk.Now, Modifiers: []Modifier{
		{Sampler: busy, Over: 1, Duration: []Step{{After: 0, Degree: 1}, {After: 30 * time.Second, Degree: 5}}},
		{Sampler: broken, Value: []Step{{At: 0, Degree: 1}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	m.Accept(1)
	if m.Scale() != 0.9 || m.Degree(0) != 1 {
		t.Fatalf("scale %v degree %v", m.Scale(), m.Degree(0))
	}
	clk.Advance(31 * time.Second)
	m.Update()
	if m.Scale() != 0.5 || c.EffectiveLimit() != 50 {
		t.Fatalf("after 31 s overloaded: scale %v limit %d", m.Scale(), c.EffectiveLimit())
	}
	if in := inspectMap(m); in["mod1.errors"] != 2 {
		t.Fatalf("sampler errors not counted: %v", in)
	}
}

func TestModifiedConfigErrors(t *testing.T) {
	good := []Step{{At: 1, Degree: 1}}
	bad := []ModifiedConfig{
		{Modifiers: []Modifier{{Value: good}}},
		{Modifiers: []Modifier{{Sampler: goroutineSampler{}}}},
		{Modifiers: []Modifier{{Sampler: goroutineSampler{}, Value: good, Duration: []Step{{After: 0, Degree: 1}}}}},
		{Modifiers: []Modifier{{Sampler: goroutineSampler{}, Value: good, Factor: -1}}},
	}
	for i, c := range bad {
		if _, err := newModified(newCounter(1), c); !errors.Is(err, ErrBadConfig) {
			t.Fatalf("config %d: %v", i, err)
		}
	}
	if _, err := newModified(nil, ModifiedConfig{}); err == nil {
		t.Fatal("nil regulator accepted")
	}
}

func TestSamplers(t *testing.T) {
	now := time.Now()
	q := sink.NewQueue(0)
	_ = q.Enqueue(1)
	_ = q.Enqueue(2)
	rt, _ := NewResponseTime(RTConfig{Target: time.Second, Mode: "thesis"})
	q2 := sink.NewQueue(0)
	q2.SetPredicate(newAll(newThreshold(10), rt))
	for i := 0; i < 100; i++ {
		sink.Done(rt, 1, 0, 200*time.Millisecond)
	}
	lookup := func(name string) (sink.Sink, bool) {
		switch name {
		case "A":
			return q, true
		case "B":
			return q2, true
		}
		return nil, false
	}
	tests := []struct {
		s       Sampler
		want    float64
		wantErr bool
	}{
		{queueSampler{Stage: "A", Lookup: lookup}, 2, false},
		{queueSampler{Stage: "nope", Lookup: lookup}, 0, true},
		{queueSampler{Stage: "A"}, 0, true},
		{rtSampler{Stage: "B", Lookup: lookup}, 60, false}, // 0.7*0 + 0.3*200ms
		{rtSampler{Stage: "A", Lookup: lookup}, 0, true},
		{rtSampler{Stage: "X", ResponseTime: func(string) (time.Duration, bool) { return 3 * time.Millisecond, true }}, 3, false},
		{samplerFunc{Label: "f", Fn: func(time.Time) (float64, error) { return 7, nil }}, 7, false},
	}
	for i, tt := range tests {
		v, err := tt.s.Sample(now)
		if (err != nil) != tt.wantErr || (err == nil && v != tt.want) {
			t.Fatalf("case %d (%s): %v, %v", i, tt.s.Name(), v, err)
		}
		if err != nil && !errors.Is(err, errNoSample) {
			t.Fatalf("case %d: error %v does not wrap ErrNoSample", i, err)
		}
	}
	if g, _ := (goroutineSampler{}).Sample(now); g < 1 {
		t.Fatal("goroutines")
	}
	if h, err := newHeapSampler().Sample(now); err != nil || h <= 0 {
		t.Fatalf("heap %v %v", h, err)
	}
	cpu := newCPUSampler()
	if _, err := cpu.Sample(now); !errors.Is(err, errNoSample) {
		t.Fatal("first CPU sample must report ErrNoSample")
	}
	for i := 0; i < 1e6; i++ { // burn a little CPU
		_ = i * i
	}
	if v, err := cpu.Sample(now.Add(time.Second)); err != nil || v < 0 || v > 100 {
		t.Fatalf("cpu %v %v", v, err)
	}
}

func TestParseProcStat(t *testing.T) {
	line := []byte("1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 150 0 0 20 0 8 0 100 0 0")
	v, err := parseProcStat(line)
	if err != nil || v != 4 {
		t.Fatalf("utime+stime = %v (%v), want 4 s", v, err)
	}
	for _, bad := range []string{"no paren", "1 (x) S 1", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x y"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}

// samplerCalls counts Sample calls, and those made from inside a decision
// (Modified.Accept on the call stack).
type samplerCalls struct {
	total, inAccept atomic.Int64
}

func (s *samplerCalls) Name() string { return "calls" }
func (s *samplerCalls) Sample(time.Time) (float64, error) {
	s.total.Add(1)
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "(*modified).Accept") {
			s.inAccept.Add(1)
		}
		if !more {
			return 0, nil
		}
	}
}

// TestModifiedRunSamplesOutsideDecisions: without Run a decision samples a
// due modifier itself; while Run runs, decisions never sample (a sampler
// may be slow, and a decision holds the stage's queue lock), Run does.
func TestModifiedRunSamplesOutsideDecisions(t *testing.T) {
	clk := newClock()
	calls := &samplerCalls{}
	m, err := newModified(newCounter(100), ModifiedConfig{Now: clk.Now, Modifiers: []Modifier{{
		Sampler: calls, Value: []Step{{At: 80, Degree: 1}}, Interval: time.Second,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	m.Accept(1) // lazy: the first decision samples
	if calls.inAccept.Load() != 1 {
		t.Fatalf("samples from a decision without Run: %d, want 1", calls.inAccept.Load())
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	for m.background.Load() == 0 {
		runtime.Gosched()
	}
	before := calls.total.Load()
	for i := 0; i < 5; i++ {
		clk.Advance(2 * time.Second) // a modifier is due at every decision
		for j := 0; j < 100; j++ {
			m.Accept(j)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for calls.total.Load() == before { // Run samples the due modifier
		if time.Now().After(deadline) {
			t.Fatal("Run did not sample a due modifier")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if n := calls.inAccept.Load(); n != 1 {
		t.Fatalf("decisions sampled %d times while Run ran, want none", n-1)
	}
}
