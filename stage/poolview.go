package stage

import (
	"time"

	"github.com/sandstorm-go/sandstorm/threadpool"
)

var _ threadpool.WaitReporter = runtimeView{}

// QueueWait reports to the stage's thread pool the queueing time the
// stage measures already (the wait of the first event of every timed
// batch, Stage.Latency's Wait), for the Whirlwind controller's queue
// latency. It adds nothing to the event path.
func (v runtimeView) QueueWait() (time.Duration, uint64) {
	m := v.s.metrics
	if m == nil || m.waitHist == nil {
		return 0, 0
	}
	return m.waitHist.totals()
}

// totals returns the sum of the observations (in their own unit) and their
// count; read while observations are recorded, the two may disagree by
// those being recorded at that moment.
func (h *histogram) totals() (time.Duration, uint64) {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return time.Duration(h.sum.Load()), n
}
