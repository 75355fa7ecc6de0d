package enqueuepred

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

func feed(p sink.Predicate, clk *fakeClock, n int, rt time.Duration, e sink.Event) {
	for i := 0; i < n; i++ {
		sink.Done(p, e, rt/2, rt-rt/2)
	}
}

func TestRTThesisAlgorithm(t *testing.T) {
	clk := newClock()
	r, err := NewResponseTime(RTConfig{Target: time.Second, Mode: "thesis", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if r.Rate() != 10 {
		t.Fatalf("initial rate %v, want 10", r.Rate())
	}
	// Fig. 50 worked by hand: cur = 0.7 cur + 0.3 samp; err = (cur-T)/T.
	steps := []struct {
		rt       time.Duration
		n        int
		wantCur  float64 // seconds
		wantRate float64
	}{
		// samp 0.1: cur 0.03, err -0.97 < -0.5: rate += 2*(0.97-0.1) = 1.74
		{100 * time.Millisecond, 100, 0.03, 11.74},
		// 99 samples do not trigger the controller
		{100 * time.Millisecond, 99, 0.03, 11.74},
		// the 100th does: samp 0.1, cur 0.051, err -0.949: += 1.698
		{100 * time.Millisecond, 1, 0.051, 13.438},
		// samp 2: cur 0.6357, err -0.3643: within [-0.5, 0]: unchanged
		{2 * time.Second, 100, 0.6357, 13.438},
		// samp 2: cur 1.04499, err 0.045 > 0: rate /= 1.2
		{2 * time.Second, 100, 1.04499, 13.438 / 1.2},
	}
	for i, st := range steps {
		feed(r, clk, st.n, st.rt, 1)
		if got := r.P90().Seconds(); math.Abs(got-st.wantCur) > 1e-6 {
			t.Fatalf("step %d: p90 %v, want %v", i, got, st.wantCur)
		}
		if got := r.Rate(); math.Abs(got-st.wantRate) > 1e-9 {
			t.Fatalf("step %d: rate %v, want %v", i, got, st.wantRate)
		}
	}
}

func TestRTThesisPercentileTimeoutAndBounds(t *testing.T) {
	clk := newClock()
	r, _ := NewResponseTime(RTConfig{Target: 100 * time.Millisecond, Mode: "thesis", Alpha: 0.7, Now: clk.Now})
	// Percentile: the (0.9 n)-th of sorted samples 1..100 ms is 91 ms.
	for i := 100; i >= 1; i-- {
		sink.Done(r, 1, 0, time.Duration(i)*time.Millisecond)
	}
	if got, want := r.P90().Seconds(), 0.3*0.091; math.Abs(got-want) > 1e-9 {
		t.Fatalf("p90 %v, want %v", got, want)
	}
	// Timeout: 10 samples then 1 s: the controller runs on the next Done.
	rate := r.Rate()
	feed(r, clk, 10, time.Second, 1)
	if r.Rate() != rate {
		t.Fatal("ran before nreq or timeout")
	}
	clk.Advance(time.Second)
	feed(r, clk, 1, time.Second, 1)
	if r.Rate() >= rate {
		t.Fatalf("timeout run should have cut the rate: %v -> %v", rate, r.Rate())
	}
	// Lower bound 0.05.
	for i := 0; i < 200; i++ {
		feed(r, clk, 100, 10*time.Second, 1)
	}
	if r.Rate() != 0.05 {
		t.Fatalf("rate %v, want the 0.05 floor", r.Rate())
	}
	// Upper bound 5000: let the estimate decay, then push past the cap.
	for i := 0; i < 100; i++ {
		feed(r, clk, 100, 0, 1)
	}
	r.SetRate(4999)
	for i := 0; i < 2; i++ {
		feed(r, clk, 100, 0, 1)
	}
	if r.Rate() != 5000 {
		t.Fatalf("rate %v, want the 5000 cap", r.Rate())
	}
}

func TestRTBucketEnableDisable(t *testing.T) {
	clk := newClock()
	r, _ := NewResponseTime(RTConfig{Target: time.Second, Mode: "thesis", Now: clk.Now})
	if got := count(r, 1, 100); got != 10 {
		t.Fatalf("initial bucket admitted %d, want depth 10", got)
	}
	clk.Advance(time.Second)
	if got := count(r, 1, 100); got != 10 {
		t.Fatalf("after 1 s at 10/s admitted %d", got)
	}
	r.Disable()
	if r.Enabled() || count(r, 1, 100) != 100 {
		t.Fatal("disabled controller must admit everything")
	}
	rate := r.Rate()
	feed(r, clk, 100, 10*time.Second, 1)
	if r.Rate() != rate {
		t.Fatal("thesis mode does not adjust while disabled")
	}
	if r.P90() == 0 {
		t.Fatal("measurement must go on while disabled")
	}
	r.Enable()
	if count(r, 1, 100) != 0 {
		t.Fatal("re-enabled bucket should be empty")
	}
	if !r.Accept(ev{must: true}) {
		t.Fatal("non-rejectable refused")
	}
	r.SetTarget(2 * time.Second)
	if r.Target() != 2*time.Second || r.Mode() != "thesis" {
		t.Fatal("SetTarget")
	}
	m := inspectMap(r)
	if m["enabled"] != 1 || m["rejected"] != 280 || m["target"] != 2 {
		t.Fatalf("inspect %v", m)
	}
}

func TestRTConfigErrors(t *testing.T) {
	bad := []RTConfig{
		{},
		{Target: time.Second, Mode: "turbo"},
		{Target: time.Second, Alpha: 1},
		{Target: time.Second, AdjDec: 0.5},
		{Target: time.Second, RateMin: 10, RateMax: 5},
		{Target: time.Second, ErrInc: 0.5},
		{Target: time.Second, Headroom: 0.5},
	}
	for i, c := range bad {
		if _, err := NewResponseTime(c); err == nil {
			t.Fatalf("config %d accepted", i)
		}
	}
	if _, err := parseMode("turbo"); err == nil {
		t.Fatal("bad mode parsed")
	}
}

// sim drives a predicate with a single-server FIFO stage on the fake clock:
// arrivals at rate(t) per second, deterministic service time.
type sim struct {
	admitted, rejected []int             // per class, per second
	rts                [][]time.Duration // per second (by completion)
	byClass            map[int][2]int    // class -> admitted, rejected
}

func simulate(p sink.Predicate, clk *fakeClock, rate func(t time.Duration) float64, class func(i int, now time.Duration) int,
	service time.Duration, dur time.Duration) *sim {
	secs := int(dur / time.Second)
	s := &sim{admitted: make([]int, secs+1), rejected: make([]int, secs+1), rts: make([][]time.Duration, secs+1), byClass: map[int][2]int{}}
	type item struct {
		arr time.Duration
		e   ev
	}
	var queue []item
	var cur *item
	var svcStart time.Duration
	now, nextArr := time.Duration(0), time.Duration(0)
	inf := time.Duration(math.MaxInt64)
	for i := 0; now < dur; i++ {
		nextDone := inf
		if cur != nil {
			nextDone = svcStart + service
		}
		next := min(nextArr, nextDone)
		clk.Advance(next - now)
		now = next
		if next == nextDone {
			sink.Done(p, cur.e, svcStart-cur.arr, service)
			s.rts[int(now/time.Second)] = append(s.rts[int(now/time.Second)], now-cur.arr)
			cur = nil
		} else {
			e := ev{class: class(i, now)}
			bc := s.byClass[e.class]
			if p.Accept(e) {
				queue = append(queue, item{now, e})
				s.admitted[int(now/time.Second)]++
				bc[0]++
			} else {
				s.rejected[int(now/time.Second)]++
				bc[1]++
			}
			s.byClass[e.class] = bc
			nextArr += time.Duration(float64(time.Second) / rate(now))
		}
		if cur == nil && len(queue) > 0 {
			it := queue[0]
			queue = queue[1:]
			cur, svcStart = &it, now
		}
	}
	return s
}

func p90(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(0.9*float64(len(s)))]
}

// spike is Fig. 55 in miniature: 20 requests/s for 5 s, then 5000/s against
// a stage that serves 1000/s.
func spike(t time.Duration) float64 {
	if t < 5*time.Second {
		return 20
	}
	return 5000
}

func TestRTFastConvergesAfterSpike(t *testing.T) {
	clk := newClock()
	target := 100 * time.Millisecond
	r, err := NewResponseTime(RTConfig{Target: target, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	s := simulate(r, clk, spike, func(int, time.Duration) int { return 0 }, time.Millisecond, 20*time.Second)
	// Within 5 s of the spike (t=5 s) throughput is >= 80% of capacity and
	// stays there, with the admitted requests' p90 within 1.5x the target.
	for sec := 9; sec < 20; sec++ {
		if s.admitted[sec] < 800 {
			t.Errorf("second %d: admitted %d/s, want >= 800 (80%% of capacity)", sec, s.admitted[sec])
		}
		if got := p90(s.rts[sec]); got > target*3/2 {
			t.Errorf("second %d: p90 %v, want <= %v", sec, got, target*3/2)
		}
	}
	if first := s.admitted[5] + s.admitted[6]; first < 1000 {
		t.Errorf("first 2 s of the spike admitted only %d", first)
	}
	if t.Failed() {
		t.Logf("admitted/s %v", s.admitted)
		for sec := range s.rts {
			t.Logf("second %d: p90 %v", sec, p90(s.rts[sec]))
		}
	}
}

func TestRTThesisIsSlowAfterSpike(t *testing.T) {
	// The paper's additive increase from 10/s: minutes to reach capacity.
	clk := newClock()
	r, _ := NewResponseTime(RTConfig{Target: 100 * time.Millisecond, Mode: "thesis", Now: clk.Now})
	s := simulate(r, clk, spike, func(int, time.Duration) int { return 0 }, time.Millisecond, 15*time.Second)
	if s.admitted[14] > 300 {
		t.Fatalf("thesis mode admitted %d/s 10 s after the spike; expected far below capacity", s.admitted[14])
	}
	if p := p90(s.rts[14]); p > 150*time.Millisecond {
		t.Fatalf("thesis mode p90 %v", p)
	}
}

func TestRTFastNoSpikeNoRejects(t *testing.T) {
	clk := newClock()
	r, _ := NewResponseTime(RTConfig{Target: 100 * time.Millisecond, Now: clk.Now})
	// Steady 500/s against 1000/s capacity after a gentle ramp.
	ramp := func(t time.Duration) float64 { return min(500, 20+float64(t)/float64(time.Second)*100) }
	s := simulate(r, clk, ramp, func(int, time.Duration) int { return 0 }, time.Millisecond, 15*time.Second)
	rej := 0
	for _, n := range s.rejected {
		rej += n
	}
	total := rej
	for _, n := range s.admitted {
		total += n
	}
	if float64(rej) > 0.01*float64(total) {
		t.Fatalf("rejected %d of %d under capacity", rej, total)
	}
}

func TestMulticlassThesisRules(t *testing.T) {
	clk := newClock()
	m, err := newMulticlass(MulticlassConfig{
		Targets: map[int]time.Duration{0: time.Second, 1: time.Second},
		RT:      RTConfig{Mode: "thesis", Now: clk.Now},
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Rate(0) != 100 || m.Rate(1) != 100 {
		t.Fatal("Sandstorm's multiclass initial rate is 100")
	}
	hi, lo := ev{class: 1}, ev{class: 0}
	// High class misses its target: the low class is cut by 10, not itself.
	for i := 0; i < 4; i++ {
		feed(m, clk, 100, 5*time.Second, hi)
	}
	// cur after 4 rounds of samp 5: 1.5, 2.55, 3.285, 3.80 -> all over target.
	if got := m.Rate(0); math.Abs(got-0.05) > 1e-9 && got != 100/1e4 {
		t.Fatalf("low class rate %v, want 100/10^4 or the floor", got)
	}
	if m.Rate(1) != 100 {
		t.Fatalf("high class cut early: %v", m.Rate(1))
	}
	// Low class at the floor: 20 more misses before the high class is cut.
	for m.Rate(0) > 0.05 {
		feed(m, clk, 100, 5*time.Second, hi)
	}
	for i := 0; i < 19; i++ {
		feed(m, clk, 100, 5*time.Second, hi)
	}
	if m.Rate(1) != 100 {
		t.Fatalf("high class cut before lcThresh: %v", m.Rate(1))
	}
	feed(m, clk, 100, 5*time.Second, hi)
	if got := m.Rate(1); math.Abs(got-100/1.2) > 1e-9 {
		t.Fatalf("high class rate %v, want 100/1.2", got)
	}
	// The low class is preempted: its next increase is skipped.
	rate0 := m.Rate(0)
	feed(m, clk, 100, 0, lo)
	if m.Rate(0) != rate0 {
		t.Fatal("preempted class increased")
	}
	feed(m, clk, 100, 0, lo)
	if m.Rate(0) <= rate0 {
		t.Fatal("low class should increase once no longer preempted")
	}
	// Unlisted classes map to the nearest lower listed class.
	if m.index(7) != 1 || m.index(-3) != 0 {
		t.Fatal("class mapping")
	}
	in := inspectMap(m)
	if _, ok := in["class1.p90"]; !ok {
		t.Fatalf("inspect %v", in)
	}
}

func TestMulticlassFastDifferentiates(t *testing.T) {
	// Fig. 59 in miniature: two classes offer 2000/s each against 1000/s.
	clk := newClock()
	m, err := newMulticlass(MulticlassConfig{
		Targets: map[int]time.Duration{0: 100 * time.Millisecond, 1: 100 * time.Millisecond},
		RT:      RTConfig{Now: clk.Now},
	})
	if err != nil {
		t.Fatal(err)
	}
	rate := func(time.Duration) float64 { return 4000 }
	s := simulate(m, clk, rate, func(i int, _ time.Duration) int { return i % 2 }, time.Millisecond, 20*time.Second)
	lo, hi := s.byClass[0], s.byClass[1]
	loRej := float64(lo[1]) / float64(lo[0]+lo[1])
	hiRej := float64(hi[1]) / float64(hi[0]+hi[1])
	if hiRej >= loRej {
		t.Fatalf("high class rejected %.2f, low class %.2f: want high < low", hiRej, loRej)
	}
	if m.Rejected(1) >= m.Rejected(0) || m.Accepted(1) <= m.Accepted(0) {
		t.Fatal("per-class counters disagree")
	}
	total := 0
	for sec := 10; sec < 20; sec++ {
		total += s.admitted[sec]
	}
	if total < 8000 {
		t.Fatalf("admitted %d in the last 10 s, want >= 80%% of capacity", total)
	}
}

func TestRTFastTrace(t *testing.T) {
	if !testing.Verbose() {
		t.Skip("trace only with -v")
	}
	clk := newClock()
	r, _ := NewResponseTime(RTConfig{Target: 100 * time.Millisecond, Now: clk.Now})
	s := simulate(r, clk, spike, func(int, time.Duration) int { return 0 }, time.Millisecond, 12*time.Second)
	for sec := range s.rts {
		t.Logf("second %d: admitted %d rejected %d p90 %v", sec, s.admitted[sec], s.rejected[sec], p90(s.rts[sec]))
	}
}

func TestMulticlassLowClassRecovers(t *testing.T) {
	// The high class comes and goes; the low class, cut to the floor
	// meanwhile, must get the stage back at once afterwards.
	for _, mode := range []rtMode{modeFast, modeThesis} {
		t.Run(mode.String(), func(t *testing.T) {
			clk := newClock()
			m, err := newMulticlass(MulticlassConfig{
				Targets: map[int]time.Duration{0: 100 * time.Millisecond, 1: 100 * time.Millisecond},
				RT:      RTConfig{Mode: mode.String(), Now: clk.Now},
			})
			if err != nil {
				t.Fatal(err)
			}
			rate := func(time.Duration) float64 { return 3000 }
			class := func(i int, now time.Duration) int {
				if now >= 5*time.Second && now < 15*time.Second && i%2 == 1 {
					return 1
				}
				return 0
			}
			s := simulate(m, clk, rate, class, time.Millisecond, 40*time.Second)
			if m.Rate(0) <= 1 {
				t.Fatalf("low class rate still %v after the high class left", m.Rate(0))
			}
			if mode == modeFast && s.admitted[20] < 800 {
				t.Fatalf("5 s after the high class left the low class gets %d/s, want >= 800", s.admitted[20])
			}
			if mode == modeThesis && s.admitted[39] <= s.admitted[16] {
				t.Fatalf("thesis mode low class does not recover: %v", s.admitted)
			}
		})
	}
}
