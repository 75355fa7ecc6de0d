package aio

import (
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandstorm-go/sandstorm/sink"
)

// deliveredInside reports whether the calling stack runs inside fn (a
// function name suffix).
func deliveredInside(fn string) bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, fn) {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestClogEventNotDeliveredInsideEnqueue: the SinkClogged a refused write
// raises reaches its sink from the socket's own goroutines, never inside
// the writer's Enqueue: a writer holding its own lock while it writes (as
// the HTTP layer does) would otherwise deadlock when the event, or a
// completion waiting before it, comes back to it.
func TestClogEventNotDeliveredInsideEnqueue(t *testing.T) {
	checkLeaks(t)
	cfg := SocketConfig{SendBuffer: 8 << 10, WriteThreshold: WriteThreshold{Bytes: 256 << 10}, ClogPolicy: ClogReject}
	_, owner, c, client := serverConn(t, cfg)
	if err := client.SetReadBuffer(8 << 10); err != nil {
		t.Fatal(err)
	}
	var inside, clogs atomic.Int32
	owner.mu.Lock()
	owner.on = func(e sink.Event) {
		if _, ok := e.(SinkClogged); ok {
			clogs.Add(1)
			if deliveredInside("(*Connection).Enqueue") {
				inside.Add(1)
			}
		}
	}
	owner.mu.Unlock()
	chunk := pattern(1, 32<<10)
	var refusal error
	for i := 0; i < 100000 && refusal == nil; i++ { // the peer never reads
		refusal = c.Enqueue(chunk)
		if refusal == nil && i%16 == 15 {
			_ = c.Flush(newRecorder("flush"), nil)
		}
	}
	if !errors.Is(refusal, ErrClogged) {
		t.Fatalf("refusal %v, want ErrClogged", refusal)
	}
	owner.wait(t, "SinkClogged", func(evs []sink.Event) bool { return count[SinkClogged](evs) == 1 })
	if clogs.Load() != 1 || inside.Load() != 0 {
		t.Fatalf("%d SinkClogged, %d of them delivered inside the writer's Enqueue; want 1 and 0", clogs.Load(), inside.Load())
	}
}
