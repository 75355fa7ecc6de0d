package enqueuepred

import (
	"context"
	"testing"
	"time"
)

func TestPacerArithmetic(t *testing.T) {
	clk := newClock()
	p, err := NewPacer(PacerConfig{Rate: 100, Depth: 2, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	// A burst of depth 2 goes at once, then one event every 10 ms.
	for i, want := range []time.Duration{0, 0, 10 * time.Millisecond, 20 * time.Millisecond} {
		if got := p.Reserve(1); got != want {
			t.Fatalf("event %d: wait %v, want %v", i, got, want)
		}
	}
	// 25 ms later the flow is booked until 40 ms; a batch of 3 brings it
	// to 70 ms, of which the depth (2 slots, 20 ms) may run ahead: wait
	// 70 - 25 - 20 = 25 ms.
	clk.Advance(25 * time.Millisecond)
	if got := p.Reserve(3); got != 25*time.Millisecond {
		t.Fatalf("batch of 3: wait %v, want 25ms", got)
	}
	// After a long quiet period the burst is available again, not more.
	clk.Advance(time.Second)
	if p.Reserve(2) != 0 || p.Reserve(1) != 10*time.Millisecond {
		t.Fatal("burst after quiet period")
	}
	p.SetRate(1000)
	if p.Rate() != 1000 {
		t.Fatal(p.Rate())
	}
	if _, err := NewPacer(PacerConfig{}); err == nil {
		t.Fatal("zero rate accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow, _ := NewPacer(PacerConfig{Rate: 0.001})
	slow.Reserve(1)
	if err := slow.Wait(ctx, 1); err != context.Canceled {
		t.Fatalf("Wait after cancel: %v", err)
	}
}
