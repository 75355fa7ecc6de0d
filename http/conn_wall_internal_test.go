package http

import (
	"testing"
	"time"
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
