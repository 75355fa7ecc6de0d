package enqueuepred_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
	"github.com/sandstorm-go/sandstorm/sink"
)

func TestDegrader(t *testing.T) {
	const target = 100 * time.Millisecond
	type step struct {
		after     time.Duration // since the previous step
		p90       time.Duration
		quality   float64
		admission bool
	}
	tests := []struct {
		name  string
		cfg   enqueuepred.DegraderConfig
		steps []step
	}{
		{"over target degrades, within an interval nothing changes", enqueuepred.DegraderConfig{Min: 0.5, Decrease: 2, Increase: 0.1, Interval: time.Second}, []step{
			{time.Second, 2 * target, 0.5, false},
			{time.Millisecond, 2 * target, 0.5, false}, // too soon
			{time.Second, 2 * target, 0.5, false},      // at min, admission not allowed
			{time.Second, 0, 0.5, false},               // no measurement: no change
			{time.Second, target / 2, 0.6, false},      // under target: slow increase
			{time.Second, target, 0.7, false},          // at target counts as under
		}},
		{"admission at the lowest quality, off once well under target", enqueuepred.DegraderConfig{Min: 0.25, Decrease: 2, Increase: 0.25, Interval: time.Second, Admission: true}, []step{
			{time.Second, 3 * target, 0.5, false},
			{time.Second, 3 * target, 0.25, false},
			{time.Second, 3 * target, 0.25, true},     // still too slow at min quality
			{time.Second, target * 3 / 4, 0.25, true}, // under target but not by half: keep rejecting
			{time.Second, target / 3, 0.25, false},    // recovered: admission off
			{time.Second, target / 3, 0.5, false},     // then quality climbs
			{time.Second, target / 3, 0.75, false},
			{time.Second, target / 3, 1, false},
			{time.Second, target / 3, 1, false}, // capped
		}},
		{"defaults: 1/1.25 per 100ms down to 0.05", enqueuepred.DegraderConfig{}, []step{
			{100 * time.Millisecond, 2 * target, 0.8, false},
			{99 * time.Millisecond, 2 * target, 0.8, false},
			{time.Millisecond, 2 * target, 0.64, false},
			{100 * time.Millisecond, target, 0.66, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := enqueuepred.NewDegrader(nil, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1000, 0)
			for i, s := range tt.steps {
				now = now.Add(s.after)
				q, admit := d.Update(now, s.p90, target)
				if !approx(q, s.quality) || admit != s.admission || d.Quality() != q || d.Admission() != admit {
					t.Fatalf("step %d (p90 %v): quality %v admission %v, want %v %v", i, s.p90, q, admit, s.quality, s.admission)
				}
				if q := d.Observe(now.Add(time.Hour)); !approx(q, s.quality) {
					t.Fatalf("step %d: Observe without a ResponseTime changed the quality to %v", i, q)
				}
			}
		})
	}
}

func approx(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestDegraderConfigErrors(t *testing.T) {
	for _, cfg := range []enqueuepred.DegraderConfig{{Min: 2}, {Min: -1}, {Increase: 3}, {Increase: -0.5}, {Decrease: 0.5}, {Interval: -time.Second}} {
		if _, err := enqueuepred.NewDegrader(nil, cfg); !errors.Is(err, enqueuepred.ErrBadConfig) {
			t.Errorf("NewDegrader(%+v): %v, want ErrBadConfig", cfg, err)
		}
	}
}

// clock is a manual clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// complete passes n events through rt, each taking d.
func complete(rt *enqueuepred.ResponseTime, c *clock, n int, d time.Duration) {
	for range n {
		rt.Accept(nil)
		c.advance(time.Millisecond)
		rt.Done(nil, 0, d)
	}
}

// A Degrader with Admission reads its ResponseTime's p90, lowers the
// quality while the p90 exceeds the target, turns admission control on
// at the lowest quality and off again once the stage has recovered.
func TestDegraderDrivesResponseTime(t *testing.T) {
	c := &clock{t: time.Unix(2000, 0)}
	rt, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: 10 * time.Millisecond, Mode: "thesis", NReq: 10, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	d, err := enqueuepred.NewDegrader(rt, enqueuepred.DegraderConfig{Min: 0.1, Interval: time.Second, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Enabled() {
		t.Fatal("a Degrader with Admission must start with admission control off")
	}
	complete(rt, c, 10, 200*time.Millisecond) // far over the 10ms target
	var q float64
	for i := 0; i < 100 && !rt.Enabled(); i++ {
		c.advance(time.Second)
		q = d.Observe(c.now())
	}
	if !rt.Enabled() || q != 0.1 || !d.Admission() {
		t.Fatalf("after overload: quality %v, admission %v; want 0.1 and on", q, rt.Enabled())
	}
	for i := 0; i < 100 && rt.P90() >= 5*time.Millisecond; i++ {
		complete(rt, c, 10, time.Millisecond)
	}
	c.advance(time.Second)
	d.Observe(c.now())
	if rt.Enabled() {
		t.Fatalf("admission still on with p90 %v", rt.P90())
	}
	c.advance(time.Second)
	if q := d.Observe(c.now()); q <= 0.1 {
		t.Fatalf("quality %v did not recover", q)
	}
}

// Without Admission the Degrader never touches its ResponseTime.
func TestDegraderWithoutAdmissionLeavesRT(t *testing.T) {
	c := &clock{t: time.Unix(2000, 0)}
	rt, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: 10 * time.Millisecond, Mode: "thesis", NReq: 10, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	d, err := enqueuepred.NewDegrader(rt, enqueuepred.DegraderConfig{Min: 0.5, Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	complete(rt, c, 10, 200*time.Millisecond)
	for range 20 {
		c.advance(time.Second)
		d.Observe(c.now())
	}
	if !rt.Enabled() || d.Quality() != 0.5 || d.Admission() {
		t.Fatalf("rt enabled %v, quality %v, admission wish %v; want true, 0.5, false", rt.Enabled(), d.Quality(), d.Admission())
	}
}

func TestResponseTimeOf(t *testing.T) {
	rt, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rt2, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    sink.Predicate
		want *enqueuepred.ResponseTime
	}{
		{"nil", nil, nil},
		{"none", enqueuepred.NewThreshold(3), nil},
		{"itself", rt, rt},
		{"in a composite, the first", enqueuepred.NewAll(enqueuepred.NewCounter(3), enqueuepred.NewAny(rt2), rt), rt2},
	} {
		if got := enqueuepred.ResponseTimeOf(tc.p); got != tc.want {
			t.Errorf("%s: %p, want %p", tc.name, got, tc.want)
		}
	}
}

func ExampleDegrader() {
	now := time.Unix(0, 0)
	rt, _ := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: 100 * time.Millisecond, Now: func() time.Time { return now }})
	stage := sink.NewQueue(0)
	stage.SetPredicate(enqueuepred.NewAll(enqueuepred.NewCounter(64), rt))

	// In the handler's Init: the stage's rt predicate drives the quality.
	d, _ := enqueuepred.NewDegrader(enqueuepred.ResponseTimeOf(stage.Predicate()),
		enqueuepred.DegraderConfig{Min: 0.25, Decrease: 2, Interval: time.Second, Admission: true})
	fmt.Println("admission control:", rt.Enabled())

	// Requests take 400ms, four times the target: every second the
	// quality halves, and at the lowest quality admission control is back.
	for range 4 {
		for range 100 {
			rt.Accept(nil)
			now = now.Add(10 * time.Millisecond)
			rt.Done(nil, 0, 400*time.Millisecond)
		}
		fmt.Printf("quality %.2f, admission control %v\n", d.Observe(now), rt.Enabled())
	}
	// Output:
	// admission control: false
	// quality 0.50, admission control false
	// quality 0.25, admission control false
	// quality 0.25, admission control true
	// quality 0.25, admission control true
}
