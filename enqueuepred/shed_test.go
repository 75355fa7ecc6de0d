package enqueuepred

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestSojournShedControlLaw steps CoDel's dequeue-side law on a fake
// clock: nothing is shed until events have waited above target for an
// interval; then one, the next after interval/sqrt(2), and so on, until an
// event waited less than the target.
func TestSojournShedControlLaw(t *testing.T) {
	clk := newClock()
	s := newSojourn(SojournConfig{Target: 5 * time.Millisecond, Interval: 100 * time.Millisecond, Shed: true, Now: clk.Now})
	q := &lenSink{n: 10}
	sink.Bind(s, q)
	slow := 20 * time.Millisecond
	steps := []struct {
		advance time.Duration
		waited  time.Duration
		want    bool
	}{
		{0, slow, false},                     // first above: drops may start in 100 ms
		{50 * time.Millisecond, slow, false}, // not yet
		{50 * time.Millisecond, slow, true},  // an interval above target: drop, next in 100 ms
		{10 * time.Millisecond, slow, false},
		{90 * time.Millisecond, slow, true},  // count 2: next in 100/sqrt(2) = 70.7 ms
		{70 * time.Millisecond, slow, false}, // 70 < 70.7
		{1 * time.Millisecond, slow, true},
		{0, time.Millisecond, false}, // below target: leave dropping
		{0, slow, false},             // and start over
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		if got := s.Shed(ev{}, st.waited); got != st.want {
			t.Fatalf("step %d: Shed = %v, want %v", i, got, st.want)
		}
	}
	if got := inspectMap(s)["shed"]; got != 3 {
		t.Fatalf("shed %v, want 3", got)
	}
	// An empty queue, a non-rejectable event or Shed off: never shed.
	q.n = 0
	clk.Advance(time.Second)
	if s.Shed(ev{}, slow) {
		t.Fatal("shed with an empty queue")
	}
	q.n = 10
	if s.Shed(ev{must: true}, time.Hour) {
		t.Fatal("shed a non-rejectable event")
	}
	off := newSojourn(SojournConfig{Now: clk.Now})
	sink.Bind(off, q)
	for range 3 {
		clk.Advance(time.Second)
		if off.Shed(ev{}, time.Hour) {
			t.Fatal("shed without Shed set")
		}
	}
}
