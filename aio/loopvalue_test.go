package aio

import (
	"sync"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// loopConns returns conns accepted connections of srv's owner.
func loopConns(t *testing.T, owner *recorder, conns int) []*Connection {
	t.Helper()
	evs := owner.wait(t, "connections", func(evs []sink.Event) bool { return count[*Connection](evs) == conns })
	var out []*Connection
	for _, e := range evs {
		if c, ok := e.(*Connection); ok {
			out = append(out, c)
		}
	}
	return out
}

// A connection not attached to an event loop has no loop value: mk is not
// called and the caller gets nil, to fall back on memory of its own.
func TestLoopValueIsNilBeforeAttach(t *testing.T) {
	called := false
	c := &Connection{}
	if v := c.LoopValue(func() any { called = true; return 1 }); v != nil || called {
		t.Fatalf("LoopValue before attach = %v (mk called %v), want nil, not called", v, called)
	}
}

// The connections of one event loop share one value; those of different
// loops have different ones.
func TestLoopValueIsOnePerEventLoop(t *testing.T) {
	const loops, conns = 2, 8
	owner := newRecorder("owner")
	srv := listen(t, SocketConfig{EventLoops: loops}, owner)
	for range conns {
		defer dial(t, srv).Close()
	}
	byLoop := map[*loopTraffic]*int{}
	values := map[*int]bool{}
	for _, c := range loopConns(t, owner, conns) {
		v, ok := c.LoopValue(func() any { return new(int) }).(*int)
		if !ok {
			t.Fatalf("%v: LoopValue is not the *int mk made", c)
		}
		if w, seen := byLoop[c.traffic]; seen && w != v {
			t.Fatalf("%v: two values for one event loop", c)
		}
		byLoop[c.traffic] = v
		values[v] = true
	}
	if len(byLoop) != loops || len(values) != loops {
		t.Fatalf("%d connections: %d event loops, %d distinct values, want %d of each", conns, len(byLoop), len(values), loops)
	}
}

// First calls that race, on connections of the same loop, all get the
// same value, whichever mk made it; an mk that calls LoopValue itself
// (no lock is held around it) gets a value too, and the one kept is the
// one every caller gets.
func TestLoopValueFirstCallsAgree(t *testing.T) {
	tests := []struct {
		name string
		mk   func(c *Connection) func() any
	}{
		{"plain mk", func(*Connection) func() any { return func() any { return new(int) } }},
		{"mk calling LoopValue", func(c *Connection) func() any {
			return func() any { return c.LoopValue(func() any { return new(int) }) }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const callers = 8
			owner := newRecorder("owner")
			srv := listen(t, SocketConfig{EventLoops: 1}, owner)
			for range callers {
				defer dial(t, srv).Close()
			}
			conns := loopConns(t, owner, callers)
			got := make([]any, callers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, c := range conns {
				wg.Go(func() {
					<-start
					got[i] = c.LoopValue(tt.mk(c))
				})
			}
			close(start)
			wg.Wait()
			for i, v := range got {
				if _, ok := v.(*int); !ok || v != got[0] {
					t.Fatalf("caller %d got %v, caller 0 got %v: want one *int", i, v, got[0])
				}
			}
		})
	}
}
