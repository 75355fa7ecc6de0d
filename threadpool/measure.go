package threadpool

import (
	"time"

	"github.com/sandstorm-go/sandstorm/internal/sinkrt"
)

// measurement turns the pool's cumulative counters into the interval
// averages of a Sample (IdleTime, QueueLatency, LockLatency). It is owned
// by the control goroutine, and reads no clock: the workers and the queue
// keep nothing for it beyond what they keep anyway.
//
// How each average is measured:
//
//   - IdleTime: the number of workers parked on the queue at the tick
//     (sinkrt Parked, an atomic load), as a fraction of the pool's size,
//     times the interval. It is a point sample of the time-average, as
//     the SEDA controller's idle count is; a worker parked across the
//     whole interval counts in full, which a per-wait average would miss
//     until the wait ended.
//   - QueueLatency: the mean wait of the events the stage timed during the
//     interval (WaitReporter: package stage times a sample of the batches
//     from the stamps the queue already gives them, and reports the wait
//     of each timed batch's first event). When the stage reports none,
//     Little's law on the queue: queue length at the tick × interval ÷
//     events completed in it; the interval itself if the queue is not
//     empty and nothing completed.
//   - LockLatency: the mean wait per acquisition reported to the pool's
//     LockMeter during the interval; zero if none was.
type measurement struct {
	at                  time.Time
	processed           uint64
	waitTotal, lockWait time.Duration
	waitN, lockN        uint64
}

// start sets the baseline at now.
func (m *measurement) start(p *Pool, now time.Time) {
	m.at, m.processed = now, p.Processed()
	if r, ok := p.st.(WaitReporter); ok {
		m.waitTotal, m.waitN = r.QueueWait()
	}
	m.lockWait, m.lockN = p.locks.Totals()
}

// sample fills s's interval averages and moves the baseline to s.Now.
func (m *measurement) sample(p *Pool, s *Sample) {
	dt := s.Now.Sub(m.at)
	if dt <= 0 {
		return // an empty interval: keep the baseline
	}
	done := uint64(0)
	if s.Processed > m.processed {
		done = s.Processed - m.processed
	}
	if s.Size > 0 {
		parked := min(sinkrt.Of(p.st.Queue()).Parked(), s.Size)
		s.IdleTime = dt * time.Duration(parked) / time.Duration(s.Size)
	}
	s.QueueLatency = -1
	if r, ok := p.st.(WaitReporter); ok {
		total, n := r.QueueWait()
		if n > m.waitN && total >= m.waitTotal {
			s.QueueLatency = (total - m.waitTotal) / time.Duration(n-m.waitN)
		}
		m.waitTotal, m.waitN = total, n
	}
	if s.QueueLatency < 0 {
		s.QueueLatency = littleWait(s.QueueLen, done, dt)
	}
	lw, ln := p.locks.Totals()
	if ln > m.lockN && lw >= m.lockWait {
		s.LockLatency = (lw - m.lockWait) / time.Duration(ln-m.lockN)
	}
	m.lockWait, m.lockN = lw, ln
	m.at, m.processed = s.Now, s.Processed
}

// littleWait estimates the mean queueing time by Little's law: queued
// events over the rate at which events left, done in dt.
func littleWait(queued int, done uint64, dt time.Duration) time.Duration {
	switch {
	case queued <= 0:
		return 0
	case done == 0:
		return dt
	}
	w := float64(dt) * float64(queued) / float64(done)
	return time.Duration(min(w, float64(1<<62)))
}
