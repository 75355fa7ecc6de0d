package enqueuepred

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

func TestLimitVegasArithmetic(t *testing.T) {
	l, err := NewLimit(LimitConfig{Algorithm: "vegas", Initial: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got := count(l, ev{}, 15); got != 10 {
		t.Fatalf("admitted %d of 15 with limit 10", got)
	}
	if !l.Accept(ev{must: true}) || l.InFlight() != 11 {
		t.Fatalf("non-rejectable: in flight %d", l.InFlight())
	}
	// rt = 2 × service: queue estimate = 10 × (1 − 1/2) = 5 > 6·log10(10)?
	// no (6): inside [3, 6], unchanged.
	sink.Done(l, ev{}, 10*time.Millisecond, 10*time.Millisecond)
	if l.Limit() != 10 {
		t.Fatalf("limit %d, want 10 (queue 5 within [3, 6])", l.Limit())
	}
	// A long queue: the averages move towards rt = 10 × service; the
	// estimated queue passes 6 and the limit falls by log10(limit) per
	// completion.
	for range 9 {
		sink.Done(l, ev{}, 90*time.Millisecond, 10*time.Millisecond)
	}
	if l.Limit() >= 10 {
		t.Fatalf("limit %d after slow completions, want < 10", l.Limit())
	}
	sink.Cancel(l, ev{})
	if l.InFlight() != 0 {
		t.Fatalf("in flight %d after every completion", l.InFlight())
	}
	// No queue while busy: +6·log10(limit).
	l2, _ := NewLimit(LimitConfig{Algorithm: "vegas", Initial: 10})
	count(l2, ev{}, 10)
	sink.Done(l2, ev{}, 0, 10*time.Millisecond)
	if l2.Limit() != 16 {
		t.Fatalf("limit %d, want 16 (10 + 6·log10 10)", l2.Limit())
	}
	// Application-limited (1 of 16 in flight): no increase.
	l3, _ := NewLimit(LimitConfig{Algorithm: "vegas", Initial: 16})
	l3.Accept(ev{})
	sink.Done(l3, ev{}, 0, 10*time.Millisecond)
	if l3.Limit() != 16 {
		t.Fatalf("limit %d grew while application-limited", l3.Limit())
	}
}

func TestLimitGradientArithmetic(t *testing.T) {
	clk := newClock()
	l, _ := NewLimit(LimitConfig{Algorithm: "gradient", Initial: 16, Now: clk.Now})
	count(l, ev{}, 16)
	// A window of 10 completions at rt = 3 × service: gradient =
	// max(0.5, 1.5/3) = 0.5; next = 16·0.5 + 4 = 12; smoothed 0.8·16 +
	// 0.2·12 = 15.2.
	for range 10 {
		clk.Advance(12 * time.Millisecond) // 10 completions over >= 100 ms
		sink.Done(l, ev{}, 20*time.Millisecond, 10*time.Millisecond)
	}
	if got := l.Limit(); got != 15 {
		t.Fatalf("limit %d, want 15 (15.2)", got)
	}
	m := inspectMap(l)
	if m["rt"] < 0.029 || m["rt"] > 0.031 || m["service"] < 0.0099 || m["service"] > 0.0101 {
		t.Fatalf("inspect %v", m)
	}
}

func TestLimitConfigErrors(t *testing.T) {
	for _, c := range []LimitConfig{
		{Algorithm: "reno"}, {Min: 5, Max: 2}, {Initial: 2000}, {Tolerance: 0.5, Algorithm: "gradient"},
		{Smoothing: 2}, {Window: -1},
	} {
		if _, err := NewLimit(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
