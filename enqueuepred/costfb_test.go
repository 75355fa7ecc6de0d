package enqueuepred

import (
	"errors"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

func TestAdaptiveCost(t *testing.T) {
	clk := newClock()
	c, err := newAdaptiveCost(CostConfig{Limit: 10, Target: 100 * time.Millisecond, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	done := func(n int, rt time.Duration) {
		for range n {
			if !c.Accept(ev{}) {
				t.Fatal("refused under the limit")
			}
			clk.Advance(10 * time.Millisecond)
			sink.Done(c, ev{}, rt/2, rt/2)
		}
	}
	done(10, 300*time.Millisecond) // an interval (100 ms), p90 over target: cut
	if c.Limit() != 8 {
		t.Fatalf("limit %v, want 8", c.Limit())
	}
	done(10, 10*time.Millisecond) // far under target but nothing refused: hold
	if c.Limit() != 8 {
		t.Fatalf("limit %v, want 8 (no refusals)", c.Limit())
	}
	for range 9 {
		c.Accept(ev{}) // 8 admitted, 1 refused
	}
	if c.Rejected() != 1 {
		t.Fatalf("rejected %d", c.Rejected())
	}
	for range 8 {
		clk.Advance(10 * time.Millisecond)
		sink.Done(c, ev{}, 0, 10*time.Millisecond)
	}
	done(2, 10*time.Millisecond)
	if got := c.Limit(); got < 8.79 || got > 8.81 {
		t.Fatalf("limit %v, want 8.8", got)
	}
	if m := inspectMap(c); m["target"] != 0.1 || m["p90"] != 0.01 {
		t.Fatalf("inspect %v", m)
	}
	for _, bad := range []CostConfig{
		{}, {Target: time.Second}, {Limit: 10, Min: 1}, {Limit: 10, Target: -time.Second},
		{Limit: 10, Target: time.Second, Min: 20},
	} {
		if _, err := NewCost(bad); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%+v: error %v, want ErrBadConfig", bad, err)
		}
	}
	if _, err := NewCost(CostConfig{Limit: 10}); err != nil {
		t.Errorf("fixed limit: %v", err)
	}
}
