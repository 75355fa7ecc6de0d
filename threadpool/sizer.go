package threadpool

import "time"

// A Sizer decides how many workers a [Pool] should have: it is the pool's
// controller. The pool calls Tick from its control goroutine once per
// [ControllerConfig.Interval] with a [Sample] of the stage and resizes
// itself to the answer, clamped to its [Config.Min] and [Config.Max].
// Tick reads the time only from Sample.Now, so a Sizer can be driven by a
// fake clock in tests.
//
// [*Controller] (the SEDA thesis's, the default) and [*Whirlwind] (the
// Whirlwind paper's Fig. 1) are Sizers; [ControllerConfig.NewSizer] plugs
// in the developer's own.
type Sizer interface {
	Tick(s Sample) (size int)
}

// SizerFunc adapts a function to [Sizer].
type SizerFunc func(Sample) int

// Tick returns f(s).
func (f SizerFunc) Tick(s Sample) int { return f(s) }

var (
	_ Sizer = (*Controller)(nil)
	_ Sizer = (*Whirlwind)(nil)
)

// WaitReporter is an optional interface of a [Stage]: it measures how long
// its events wait in the queue, and the pool derives
// [Sample.QueueLatency] from it. Package stage's stages implement it with
// the waits they already time (a sample of the batches; see
// stage.Latency).
type WaitReporter interface {
	// QueueWait returns the total time the measured events waited in the
	// queue before a worker took them, and how many there were, since the
	// stage was created. Both only grow.
	QueueWait() (total time.Duration, events uint64)
}
