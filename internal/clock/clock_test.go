package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/internal/clock"
)

func TestSleep(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want bool
	}{
		{"zero, live", live, 0, true},
		{"negative, live", live, -time.Second, true},
		{"zero, done", done, 0, false},
		{"short, live", live, time.Millisecond, true},
		{"long, done", done, time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			if got := clock.Sleep(tc.ctx, tc.d); got != tc.want {
				t.Errorf("Sleep(%v) = %v, want %v", tc.d, got, tc.want)
			}
			if el := time.Since(start); el > time.Minute {
				t.Errorf("Sleep(%v) took %v", tc.d, el)
			}
			if tc.want && time.Since(start) < tc.d {
				t.Errorf("Sleep(%v) returned true early", tc.d)
			}
		})
	}
}

// A Sleep cut short by its context returns at once, not after d.
func TestSleepCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan bool)
	go func() { res <- clock.Sleep(ctx, time.Hour) }()
	cancel()
	select {
	case ok := <-res:
		if ok {
			t.Fatal("a cancelled Sleep reported that d passed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Sleep did not return after its context was cancelled")
	}
}
