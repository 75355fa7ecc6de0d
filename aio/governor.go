package aio

import (
	"math"
	"sync"
	"time"
)

// Governor is the read-rate governor: token buckets for bytes and packets
// per second. The socket layer asks it before handing each packet to the
// application and pauses the connection for the wait it answers. It reads
// time only from its arguments, so it can be driven by a fake clock. It is
// safe for concurrent use (one governor may pace a whole server).
type Governor struct {
	mu sync.Mutex

	byteRate, pktRate   float64 // per second; 0: unlimited
	byteDepth, pktDepth float64
	bytes, pkts         float64 // tokens
	chunk               float64 // smallest grant worth waiting for
	last                time.Time
	started             bool
}

// NewGovernor returns a governor for cfg with full buckets. readBuffer is
// the largest packet; the byte bucket holds at least that much, and a grant
// waits until it can cover min(wanted, readBuffer) bytes, so that a slow
// byte rate yields full packets rather than a trickle of tiny ones.
func NewGovernor(cfg RateConfig, readBuffer int) *Governor {
	if readBuffer <= 0 {
		readBuffer = DefaultReadBuffer
	}
	burst := cfg.Burst
	if burst <= 0 {
		burst = 100 * time.Millisecond
	}
	g := &Governor{byteRate: cfg.Bytes, pktRate: cfg.Packets, chunk: float64(readBuffer)}
	if g.byteRate > 0 {
		g.byteDepth = math.Max(g.byteRate*burst.Seconds(), float64(readBuffer))
		g.bytes = g.byteDepth
	}
	if g.pktRate > 0 {
		g.pktDepth = math.Max(g.pktRate*burst.Seconds(), 1)
		g.pkts = g.pktDepth
	}
	return g
}

// Take asks, at time now, to read a packet of up to want bytes. It returns
// how many bytes may be taken now (≥ 1), or 0 and how long to wait before
// asking again.
func (g *Governor) Take(now time.Time, want int) (grant int, wait time.Duration) {
	if want <= 0 {
		return 0, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refill(now)
	var w float64 // seconds
	if g.pktRate > 0 && g.pkts < 1 {
		w = (1 - g.pkts) / g.pktRate
	}
	grant = want
	if g.byteRate > 0 {
		need := math.Min(float64(want), g.chunk)
		if g.bytes < need {
			w = math.Max(w, (need-g.bytes)/g.byteRate)
		} else {
			grant = int(math.Min(float64(want), math.Floor(g.bytes)))
		}
	}
	if w > 0 {
		// Whole microseconds: pacing needs no finer grain, and rounding
		// keeps float noise out of the answer.
		d := time.Duration(math.Round(w*1e6)) * time.Microsecond
		return 0, max(d, time.Microsecond)
	}
	if g.byteRate > 0 {
		g.bytes -= float64(grant)
	}
	if g.pktRate > 0 {
		g.pkts--
	}
	return grant, 0
}

func (g *Governor) refill(now time.Time) {
	if !g.started {
		g.started, g.last = true, now
		return
	}
	dt := now.Sub(g.last).Seconds()
	if dt <= 0 {
		return
	}
	g.last = now
	if g.byteRate > 0 {
		g.bytes = math.Min(g.byteDepth, g.bytes+g.byteRate*dt)
	}
	if g.pktRate > 0 {
		g.pkts = math.Min(g.pktDepth, g.pkts+g.pktRate*dt)
	}
}
