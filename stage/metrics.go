package stage

import (
	"sync/atomic"
	"time"

	metrics "github.com/rcrowley/go-metrics"
)

// stageMetrics registers a stage's values in the manager's go-metrics
// registry under "<stage>.<name>".
type stageMetrics struct {
	reg         metrics.Registry
	prefix      string
	names       []string
	pending     []pendingMetric // built, registered by publish
	published   bool
	serviceTime metrics.Histogram // nanoseconds per batch
	queueTime   metrics.Histogram // nanoseconds the oldest event of a batch waited
	batchSize   metrics.Histogram
	// Prometheus-style histograms of every timed batch (histogram.go).
	serviceHist, waitHist, batchHist *histogram
	last                             atomic.Int64 // sink.Nanotime of the last histogram update
}

func newStageMetrics(reg metrics.Registry, s *Stage) *stageMetrics {
	m := &stageMetrics{reg: reg, prefix: s.name + ".",
		serviceHist: newHistogram(LatencyBuckets, 1e-9),
		waitHist:    newHistogram(LatencyBuckets, 1e-9),
		batchHist:   newHistogram(BatchBuckets, 1),
	}
	gauge := func(name string, f func() int64) {
		m.register(name, metrics.NewFunctionalGauge(f))
	}
	gauge("queue.length", func() int64 { return int64(s.queue.Len()) })
	gauge("enqueued", func() int64 { return int64(s.queue.Stats().Enqueued) })
	gauge("rejected.full", func() int64 { return int64(s.queue.Stats().RejectedFull) })
	gauge("rejected.predicate", func() int64 { return int64(s.queue.Stats().RejectedPredicate) })
	gauge("rejected.closed", func() int64 { return int64(s.queue.Stats().RejectedClosed) })
	gauge("dropped", func() int64 { return int64(s.queue.Stats().Dropped) })
	gauge("expired", func() int64 { return int64(s.queue.Expired()) })
	gauge("shed", func() int64 { return int64(s.queue.Shed()) })
	gauge("handled", func() int64 { return int64(s.handled()) })
	gauge("batches", func() int64 { return int64(s.queue.Stats().Batches) })
	gauge("failures", func() int64 { return int64(s.failures.Load()) })
	gauge("expired", func() int64 { return int64(s.expired.Load()) })
	gauge("pool.size", func() int64 {
		if s.runner == nil {
			return 0
		}
		return int64(s.runner.Size())
	})
	gauge("batching.factor", func() int64 { return int64(s.batchSize.Load()) })
	if p := s.pool; p != nil && p.Config().Controller.Enabled {
		c := p.Controller()
		m.register("pool.throughput", metrics.NewFunctionalGaugeFloat64(c.Throughput))
		gauge("pool.best.size", func() int64 { size, _ := c.Best(); return int64(size) })
		m.register("pool.best.throughput", metrics.NewFunctionalGaugeFloat64(func() float64 { _, t := c.Best(); return t }))
	}
	if b := s.batcher; b != nil {
		m.register("batching.best", metrics.NewFunctionalGaugeFloat64(b.ctrl.Best))
		m.register("batching.throughput", metrics.NewFunctionalGaugeFloat64(b.ctrl.Throughput))
	}
	m.serviceTime = metrics.NewHistogram(metrics.NewExpDecaySample(1028, 0.015))
	m.queueTime = metrics.NewHistogram(metrics.NewExpDecaySample(1028, 0.015))
	m.batchSize = metrics.NewHistogram(metrics.NewExpDecaySample(1028, 0.015))
	m.register("service.ns", m.serviceTime)
	m.register("queue.wait.ns", m.queueTime)
	m.register("batch.size", m.batchSize)
	return m
}

type pendingMetric struct {
	name string
	v    any
}

// publish registers the values built so far; later ones are registered at
// once. The stage's name must be its own by then: registering replaces a
// value of the same name.
func (m *stageMetrics) publish() {
	m.published = true
	for _, p := range m.pending {
		m.register(p.name, p.v)
	}
	m.pending = nil
}

func (m *stageMetrics) register(name string, v any) {
	if !m.published {
		m.pending = append(m.pending, pendingMetric{name, v})
		return
	}
	full := m.prefix + name
	m.reg.Unregister(full)
	if err := m.reg.Register(full, v); err == nil {
		m.names = append(m.names, full)
	}
}

// Register adds a handler's own value under "<stage>.<name>" (Sandstorm's
// ProfilableIF): f is sampled by the profiler.
func (m *stageMetrics) Register(name string, f func() float64) {
	m.register(name, metrics.NewFunctionalGaugeFloat64(f))
}

// histogramGap is the least time between two histogram updates: go-metrics'
// exponentially decaying samples cost a few hundred nanoseconds per update,
// so a busy stage records at most ~1,000 batches a second into them (each
// reservoir holds 1,028 samples, so that is still a fresh distribution).
const histogramGap = time.Millisecond

// observe records one timed batch (see timingEvery) at monotonic time now:
// the hot path stays a few atomic adds while the distributions remain
// representative. stamp is the first event's enqueue stamp (0: unstamped, no queueing
// time recorded).
func (m *stageMetrics) observe(now int64, n int, stamp int64, service time.Duration) {
	m.serviceHist.observe(int64(service))
	if stamp != 0 {
		m.waitHist.observe(now - stamp)
	}
	m.batchHist.observe(int64(n))
	last := m.last.Load()
	if now-last < int64(histogramGap) || !m.last.CompareAndSwap(last, now) {
		return
	}
	m.serviceTime.Update(int64(service))
	if stamp != 0 {
		m.queueTime.Update(now - stamp)
	}
	m.batchSize.Update(int64(n))
}

func (m *stageMetrics) unregister() {
	for _, n := range m.names {
		m.reg.Unregister(n)
	}
	m.names = nil
}
