package http

import (
	"testing"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// TestWallNow checks the connection's wall clock: the arriving packet's
// reading while it is pumped (what the requests' Received and the inline
// replies' Date use), a fresh reading otherwise.
func TestWallNow(t *testing.T) {
	packet := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		wall time.Time
		want func(before, got time.Time) bool
	}{
		{"while pumped", packet, func(_, got time.Time) bool { return got.Equal(packet) }},
		{"outside a pump", time.Time{}, func(before, got time.Time) bool { return !got.Before(before) }},
	}
	for _, tc := range tests {
		c := &Connection{}
		c.wall = tc.wall
		before := time.Now()
		if got := c.wallNow(); !tc.want(before, got) {
			t.Errorf("%s: wallNow() = %v (read at %v)", tc.name, got, before)
		}
	}
}

// TestWallAtReadsTheClockOncePerAnchor: a packet's wall time is derived
// from its monotonic arrival reading and an anchor shared by every
// connection, so the wall clock is read once per wallAnchorAge, not per
// packet; the times follow the monotonic readings exactly and lie within
// an anchor's age of the wall clock.
func TestWallAtReadsTheClockOncePerAnchor(t *testing.T) {
	reads := 0
	readWall = func() time.Time { reads++; return time.Now() }
	defer func() { readWall = time.Now }()
	anchor.Store(nil)
	first := sink.Nanotime()
	base := wallAt(first)
	const packets = 1000
	for i := range packets {
		mono := first + int64(i)*int64(wallAnchorAge)/packets // all within one anchor's age
		if got, want := wallAt(mono), base.Add(time.Duration(mono-first)); !got.Equal(want) {
			t.Fatalf("packet %d: wall %v, want %v", i, got, want)
		}
	}
	if reads != 1 {
		t.Fatalf("%d wall-clock reads for %d packets, want 1", reads, packets)
	}
	later := first + 3*int64(wallAnchorAge)
	wallAt(later)
	if reads != 2 {
		t.Fatalf("%d wall-clock reads after the anchor aged, want 2", reads)
	}
	// The derived time lies between clock readings taken around it (its
	// anchor may be up to an anchor's age old; a pause after the call
	// cannot make it look wrong).
	before := time.Now()
	w := wallAt(sink.Nanotime())
	after := time.Now()
	if w.Before(before.Add(-wallAnchorAge)) || w.After(after) {
		t.Fatalf("wall time %v outside [%v, %v]", w, before.Add(-wallAnchorAge), after)
	}
}
