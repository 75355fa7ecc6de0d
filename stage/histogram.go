package stage

import "sync/atomic"

// LatencyBuckets are the upper bounds, in seconds, of a stage's latency
// histograms (Stage.Latency), from 50µs to 10s.
var LatencyBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// BatchBuckets are the upper bounds, in events, of a stage's batch-size
// histogram.
var BatchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// Histogram is a snapshot of a cumulative histogram in the Prometheus
// sense: Counts[i] is the number of observations ≤ Bounds[i] (cumulative),
// Count all of them, Sum their total (seconds for latencies).
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// Latency is a stage's latency distributions since it was created:
// Service is the handler's time per batch, Wait the time the first event
// of a batch waited in the queue, Batch the batch sizes. They are measured
// on the batches the runtime times (those whose first event the queue
// stamped, a sample when no predicate needs every completion), so the
// counts are a sample of the batches, not all of them.
type Latency struct {
	Service, Wait, Batch Histogram
}

// Latency returns the stage's latency histograms.
func (s *Stage) Latency() Latency {
	if s.metrics == nil {
		return Latency{
			Service: (&histogram{bounds: LatencyBuckets}).snapshot(),
			Wait:    (&histogram{bounds: LatencyBuckets}).snapshot(),
			Batch:   (&histogram{bounds: BatchBuckets}).snapshot(),
		}
	}
	m := s.metrics
	return Latency{Service: m.serviceHist.snapshot(), Wait: m.waitHist.snapshot(), Batch: m.batchHist.snapshot()}
}

// histogram counts observations into fixed buckets with atomic adds.
type histogram struct {
	bounds []float64
	counts []atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sum    atomic.Uint64   // of the observed integers
	scale  float64         // units of sum per observed unit
}

func newHistogram(bounds []float64, scale float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1), scale: scale}
}

// observe records v, in the histogram's unit times 1/scale (nanoseconds
// for latencies: scale 1e-9).
func (h *histogram) observe(v int64) {
	x := float64(v) * h.scale
	i := 0
	for i < len(h.bounds) && x > h.bounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sum.Add(uint64(v))
}

func (h *histogram) snapshot() Histogram {
	out := Histogram{Bounds: h.bounds, Counts: make([]uint64, len(h.bounds))}
	if h.counts == nil {
		return out
	}
	var cum uint64
	for i := range h.bounds {
		cum += h.counts[i].Load()
		out.Counts[i] = cum
	}
	out.Count = cum + h.counts[len(h.bounds)].Load()
	out.Sum = float64(h.sum.Load()) * h.scale
	return out
}
