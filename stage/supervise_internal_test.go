package stage

import (
	"context"
	"testing"
	"time"
)

// treeOwned reports whether the supervisor goroutine owns the state (it
// is not in sv.idle). Only for a test that runs nothing else meanwhile.
func (sv *supervision) treeOwned() bool {
	select {
	case st := <-sv.idle:
		sv.idle <- st
		return false
	default:
		return true
	}
}

// TestSupervisionHandsTheTreeOver: the state is in sv.idle before Start,
// owned by the supervisor goroutine while it runs, and handed back when
// it returns at Shutdown.
func TestSupervisionHandsTheTreeOver(t *testing.T) {
	m := NewManager(Options{})
	noop := func() Handler { return HandlerFunc(nil) }
	if _, err := m.CreateSupervised("A", noop, StageConfig{}); err != nil {
		t.Fatal(err)
	}
	if m.sup.treeOwned() {
		t.Fatal("owned before Start")
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !m.sup.treeOwned() {
		t.Fatal("not owned by the supervisor while running")
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.sup.done:
	default:
		t.Fatal("supervisor goroutine still running after Shutdown")
	}
	if m.sup.treeOwned() {
		t.Fatal("tree not handed back after the supervisor returned")
	}
	if got := m.Supervisors(); len(got) != 1 || got[0] != "A" {
		t.Fatalf("supervisors %v", got)
	}
}

// TestRestartDelay: the backoff decision, by table. A crash loop (the
// failed handler handled nothing, and its supervisor restarted before
// within the period) waits Backoff·2^(k-1) for its k-th restart, at most
// MaxBackoff, jittered into [d/2, d) by u; anything else waits nothing
// and ends the loop.
func TestRestartDelay(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name     string
		backoff  time.Duration // 0: default (10ms, maxBackoff 1s)
		max      time.Duration
		restarts int // restarts within the period, this one included
		loop     int // crash-loop restarts before this one
		healthy  bool
		u        float64
		want     time.Duration
		wantLoop int
	}{
		{"first restart", 0, 0, 1, 0, false, 0.5, 0, 0},
		{"first restart after a healthy run", 0, 0, 1, 0, true, 0.5, 0, 0},
		{"rare poison, many restarts before", 0, 0, 50, 0, true, 0.9, 0, 0},
		{"rare poison ends a loop", 0, 0, 5, 4, true, 0.9, 0, 0},
		{"loop 1, u 0", 0, 0, 2, 0, false, 0, 5 * ms, 1},
		{"loop 1, u 0.5", 0, 0, 2, 0, false, 0.5, 7500 * time.Microsecond, 1},
		{"loop 2", 0, 0, 3, 1, false, 0, 10 * ms, 2},
		{"loop 3", 100 * ms, 300 * ms, 4, 2, false, 0, 150 * ms, 3},
		{"loop 8, capped", 0, 0, 9, 7, false, 0.999, 999500 * time.Microsecond, 8},
		{"quiet period: no earlier restart", 0, 0, 1, 3, false, 0.5, 0, 0},
		{"off", NoBackoff, 0, 5, 0, false, 0.5, 0, 0},
		{"off, long loop", NoBackoff, 0, 9, 7, false, 0.5, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newSupNode("S", SupervisorConfig{Backoff: tc.backoff, MaxBackoff: tc.max})
			now := time.Unix(1000, 0)
			for i := range tc.restarts {
				n.history = append(n.history, now.Add(time.Duration(i)*time.Second))
			}
			n.loop = tc.loop
			got := n.restartDelay(tc.healthy, tc.u)
			if got != tc.want || n.loop != tc.wantLoop {
				t.Fatalf("delay %v, loop %d; want %v, %d", got, n.loop, tc.want, tc.wantLoop)
			}
		})
	}
}
