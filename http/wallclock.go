package http

import (
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// wallAnchorAge is how long a wall-clock anchor serves before the wall
// clock is read again: a clock step (NTP) shows in Date and Received
// within this time.
const wallAnchorAge = 100 * time.Millisecond

// wallAnchor is a wall-clock reading and the sink.Nanotime reading taken
// with it.
type wallAnchor struct {
	wall time.Time
	mono int64
}

// anchor is the process's current wallAnchor, shared read-only by every
// connection (replaced about ten times a second under load).
var anchor atomic.Pointer[wallAnchor]

// readWall reads the wall clock; a test counts the reads.
var readWall = time.Now

// wallAt is the wall-clock time of the sink.Nanotime reading mono (a
// packet's arrival): the anchor's time plus the monotonic time since it,
// so that a packet costs no wall-clock read. The result carries a
// monotonic reading too (time.Time.Add keeps it). The anchor is read
// again when mono is wallAnchorAge past it.
func wallAt(mono int64) time.Time {
	a := anchor.Load()
	if a == nil || mono-a.mono > int64(wallAnchorAge) {
		a = &wallAnchor{wall: readWall(), mono: sink.Nanotime()}
		anchor.Store(a)
	}
	return a.wall.Add(time.Duration(mono - a.mono))
}
