package threadpool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestRetune: bounds move the running pool's size into them at once,
// controller settings reach the controller, and what cannot change in
// place is refused with ErrNotRetunable while the rest applies.
func TestRetune(t *testing.T) {
	tests := []struct {
		name     string
		from, to Config
		size     int  // workers once retuned
		limit    int  // Limit once retuned
		refused  bool // ErrNotRetunable
	}{
		{"pinned pool grows", Config{Min: 2, Max: 2}, Config{Min: 4, Max: 4}, 4, 4, false},
		{"pinned pool shrinks", Config{Min: 4, Max: 4}, Config{Min: 1, Max: 1}, 1, 1, false},
		{"min raised under a controller", Config{Min: 1, Max: 4}, Config{Min: 3, Max: 6}, 3, 6, false},
		{"max lowered under a controller", Config{Min: 1, Max: 8, Initial: 6}, Config{Min: 1, Max: 2}, 2, 2, false},
		{"controller turned off", Config{Min: 1, Max: 4}, Config{Min: 2, Max: 4, Controller: ControllerConfig{Disabled: true}}, 2, 4, true},
		{"controller turned on", Config{Min: 2, Max: 2}, Config{Min: 1, Max: 4}, 2, 2, true},
		{"single-threaded", Config{SingleThreaded: true}, Config{Min: 3, Max: 3}, 1, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newTestStage(func([]sink.Event) {})
			p := NewPool(st, tc.from)
			p.Start(context.Background())
			defer func() { st.q.Close(); _ = p.Wait(context.Background()) }()
			err := p.Retune(tc.to)
			if got := errors.Is(err, ErrNotRetunable); got != tc.refused {
				t.Fatalf("Retune: %v, want refused %v", err, tc.refused)
			}
			waitSize(t, p, tc.size)
			if got := p.Limit(); got != tc.limit {
				t.Errorf("Limit %d, want %d", got, tc.limit)
			}
			if !tc.from.SingleThreaded {
				lo, hi := p.bounds()
				want := tc.to.withDefaults()
				if lo != want.Min || hi != want.Max {
					t.Errorf("bounds %d..%d, want %d..%d", lo, hi, want.Min, want.Max)
				}
				if c := p.Config(); c.Min != want.Min || c.Max != want.Max {
					t.Errorf("Config bounds %d..%d", c.Min, c.Max)
				}
			}
		})
	}
}

// TestRetuneControllerSettings: the controller ticks with the new
// settings (here a queue threshold it grows the pool at), and keeps
// running on its clock.
func TestRetuneControllerSettings(t *testing.T) {
	st := newTestStage(func([]sink.Event) {})
	p := NewPool(st, Config{Min: 1, Max: 4, Controller: ControllerConfig{QueueThreshold: 50, Interval: time.Hour}})
	if err := p.Retune(Config{Min: 1, Max: 4, Controller: ControllerConfig{QueueThreshold: 7, Idle: time.Minute, Interval: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	c := p.Controller().Config()
	if c.QueueThreshold != 7 || c.Idle != time.Minute || !c.Enabled {
		t.Errorf("controller settings %+v", c)
	}
	if got := p.Config().Controller.QueueThreshold; got != 7 {
		t.Errorf("pool's Config threshold %d", got)
	}
	if err := p.Retune(Config{Min: 1, Max: 4, Controller: ControllerConfig{QueueThreshold: -1}}); err == nil {
		t.Error("an invalid controller configuration was taken")
	}
	w := NewPool(st, Config{Min: 1, Max: 4, Controller: ControllerConfig{Type: TypeWhirlwind}})
	if err := w.Retune(Config{Min: 1, Max: 4}); !errors.Is(err, ErrNotRetunable) {
		t.Errorf("whirlwind to seda: %v", err)
	}
}
