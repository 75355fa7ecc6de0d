package enqueuepred_test

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/enqueuepred"
)

// TestDegraderRetarget: after Retarget the Degrader reads the new
// ResponseTime's p90 and target, applies its admission wish to it at once
// and from then on, keeps its quality, and leaves the old one alone;
// with no ResponseTime it keeps the quality.
func TestDegraderRetarget(t *testing.T) {
	c := &clock{t: time.Unix(2000, 0)}
	newRT := func(target time.Duration) *enqueuepred.ResponseTime {
		rt, err := enqueuepred.NewResponseTime(enqueuepred.RTConfig{Target: target, Mode: "thesis", NReq: 10, Now: c.now})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	old := newRT(time.Second)
	d, err := enqueuepred.NewDegrader(old, enqueuepred.DegraderConfig{Min: 0.1, Interval: time.Second, Admission: true})
	if err != nil {
		t.Fatal(err)
	}
	// 100ms completions: under the old 1s target, full quality.
	complete(old, c, 10, 100*time.Millisecond)
	c.advance(time.Second)
	if q := d.Observe(c.now()); q != 1 {
		t.Fatalf("under the old target: quality %v", q)
	}

	next := newRT(10 * time.Millisecond) // starts with admission on
	d.Retarget(next)
	if d.ResponseTime() != next || next.Enabled() {
		t.Fatalf("after Retarget: drives the new rt %v, its admission %v; want true, off", d.ResponseTime() == next, next.Enabled())
	}
	// The same 100ms completions are over the new 10ms target.
	complete(next, c, 10, 100*time.Millisecond)
	for i := 0; i < 100 && !next.Enabled(); i++ {
		c.advance(time.Second)
		d.Observe(c.now())
	}
	if !next.Enabled() || d.Quality() != 0.1 || old.Enabled() {
		t.Fatalf("over the new target: quality %v, new admission %v, old admission %v; want 0.1, on, off",
			d.Quality(), next.Enabled(), old.Enabled())
	}

	// The wish (on) applies at once to a predicate installed later.
	third := newRT(10 * time.Millisecond)
	third.Disable()
	d.Retarget(third)
	if !third.Enabled() {
		t.Error("Retarget did not apply the admission wish (on) to the new rt")
	}

	d.Retarget(nil)
	c.advance(time.Second)
	if q := d.Observe(c.now()); q != 0.1 || d.ResponseTime() != nil {
		t.Errorf("without an rt: quality %v, want it kept at 0.1", q)
	}
}
