package remote

import (
	"fmt"
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// decideCounting decides id on d, counting in decided how many times it
// was decided (not remembered).
func decideCounting(d *dedup, id string, decided map[string]int) {
	d.once(id, func() *verdict {
		decided[id]++
		return &verdict{status: statusOK}
	})
}

// TestDedupBounded: however many keys arrive within a window, a replica
// remembers at most two generations of limit keys; a key is remembered
// until limit newer keys came, the early retirements counted.
func TestDedupBounded(t *testing.T) {
	const limit = 100
	clock := &fakeClock{now: time.Unix(1e9, 0)}
	d := newDedup(2*time.Minute, limit, clock.Now)
	decided := map[string]int{}
	for i := range 10 * limit {
		decideCounting(d, fmt.Sprint(i), decided)
		clock.advance(time.Millisecond) // 1,000 keys in one second: far within the window
		if n := d.size(); n > 2*limit {
			t.Fatalf("after %d keys: %d remembered, want at most %d", i+1, n, 2*limit)
		}
	}
	// the newest limit keys are remembered: decided once
	for i := 9 * limit; i < 10*limit; i++ {
		decideCounting(d, fmt.Sprint(i), decided)
	}
	for id, n := range decided {
		if n != 1 {
			t.Fatalf("key %s decided %d times while remembered", id, n)
		}
	}
	if got := d.early.Load(); got != 9 {
		t.Fatalf("%d generations retired early, want 9 (one per %d keys after the first)", got, limit)
	}
	// the oldest one was forgotten: decided again
	decideCounting(d, "0", decided)
	if decided["0"] != 2 {
		t.Fatalf("key 0 decided %d times, want 2 (forgotten after %d newer keys)", decided["0"], 2*limit)
	}
}

// TestDedupWindow: under the limit, a key is remembered for at least one
// window and forgotten after two, with no early retirement.
func TestDedupWindow(t *testing.T) {
	tests := []struct {
		name  string
		after time.Duration // since the key was decided
		again int           // times it is decided when it comes again then
	}{
		{"at once", 0, 0},
		{"within the window", 59 * time.Second, 0},
		{"after one window", 61 * time.Second, 0},
		{"after two windows", 125 * time.Second, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := &fakeClock{now: time.Unix(1e9, 0)}
			d := newDedup(time.Minute, 100, clock.Now)
			decided := map[string]int{}
			decideCounting(d, "key", decided)
			// other keys keep arriving, one a second
			for s := time.Duration(0); s < tt.after; s += time.Second {
				clock.advance(time.Second)
				decideCounting(d, fmt.Sprint("other", s), decided)
			}
			clock.advance(tt.after % time.Second)
			decideCounting(d, "key", decided)
			if got := decided["key"] - 1; got != tt.again {
				t.Fatalf("decided again %d times, want %d", got, tt.again)
			}
			if d.early.Load() != 0 {
				t.Fatalf("%d generations retired early under the limit", d.early.Load())
			}
		})
	}
}

// TestRefRequestDecidedOnce: a request to an exported sink sent again
// with the same idempotency key (its verdict lost, or its sender waiting
// for the link) gets the first verdict and is admitted once; a new key
// is decided anew. Each imported reference numbers its keys apart, so
// that two of them never share a key.
func TestRefRequestDecidedOnce(t *testing.T) {
	n := &Node{node: "a", inst: "ia"}
	n.wire = newWire(n, NewCodecs(), 0)
	n.refSeen = newDedup(time.Minute, dedupLimit, time.Now)
	q := sink.NewQueue(2)
	ref, err := n.wire.ExportSink(q)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name, id   string
		op         byte
		groups     []int
		wantStatus byte
		wantLen    int
	}{
		{name: "first", id: "ib.r1.1", op: opEnqueue, wantStatus: statusOK, wantLen: 1},
		{name: "sent again", id: "ib.r1.1", op: opEnqueue, wantStatus: statusOK, wantLen: 1},
		{name: "combined, first", id: "ib.r1.2", op: opEach, groups: []int{1}, wantStatus: statusEach, wantLen: 2},
		{name: "combined, sent again", id: "ib.r1.2", op: opEach, groups: []int{1}, wantStatus: statusEach, wantLen: 2},
		{name: "a new key, the queue full", id: "ib.r1.3", op: opEnqueue, wantStatus: statusRejected, wantLen: 2},
		{name: "the rejected one again: the first verdict", id: "ib.r1.3", op: opEnqueue, wantStatus: statusRejected, wantLen: 2},
	}
	for _, st := range steps {
		v := n.decideRef(&request{op: st.op, id: st.id, ref: ref.ID, events: []sink.Event{st.name}, groups: st.groups}, nil)
		if v.status != st.wantStatus || q.Len() != st.wantLen {
			t.Errorf("%s: verdict %d, queue %d; want %d, %d", st.name, v.status, q.Len(), st.wantStatus, st.wantLen)
		}
		if v.status == statusEach && (len(v.each) != 1 || v.each[0] != statusOK) {
			t.Errorf("%s: each %v, want one admitted", st.name, v.each)
		}
	}
	a, b := n.refSink(ref).(*refSink), n.refSink(ref).(*refSink)
	if ka, kb := a.newID(), b.newID(); ka == kb {
		t.Errorf("two references to one sink share the key %q", ka)
	}
}
