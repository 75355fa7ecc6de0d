package enqueuepred

import (
	"math"
	"slices"
	"sync/atomic"

	"github.com/sandstorm-go/sandstorm/internal/ring"
)

// waitModel is the fast mode's admission rule. It limits the wait of a new
// arrival instead of the arrival rate: the stage's response time is
// wait + service, so an event is admitted while the events queued ahead of
// it can be served within the wait budget target − p90(service):
//
//	admit  iff  queued == 0  or  queued < capacity × budget
//
// capacity (events/s) is the completion rate measured while the queue was
// never empty, which holds for one worker or many, batched or not (with N
// workers of service S it is N/S); queued is the bound queue's length (the
// events not yet in service), or, unbound, the events in the stage minus
// capacity × mean service (Little's law on the workers).
//
// Because the rule looks at the queue itself, a burst is cut at the
// event that would wait too long, not a control period later, and a fresh
// stage admits everything while its queue is empty: there is no starting
// rate to climb from. A slow feedback loop corrects the model: the budget
// is multiplied by a gain that falls while the measured p90 of response
// times is above the target and rises while it is below and events are
// being refused (the target is a 90th percentile: a tenth of the events
// may exceed it).
//
// All fields but the atomics are guarded by the owning ResponseTime's
// mutex.
type waitModel struct {
	limit atomic.Int64 // events queued ahead beyond which arrivals are refused; <= 0: no limit yet
	busy  atomic.Int64 // unbound queue: estimated events in service
	bound boundSink

	capacity float64 // events/s while saturated; 0: unknown
	gain     float64 // feedback factor on the wait budget
	budget   float64 // current wait budget (s)
	svcP90   float64 // p90 of recent service times (s)
	svcMean  float64
	est      float64 // p90 of recent response times (s)
	thr      float64 // smoothed completion rate (events/s)

	svc  *ring.Ring[int64]     // recent service times (ns)
	resp *ring.Ring[completed] // recent response times

	done    int // completions since the last run
	lastQ   int // queue length at the last run
	fb      []float64
	fbRej   uint64
	fbStart int64
	scratch []int64 // sorting buffer of run
}

// completed is one completion: its time (ns since the clock's origin)
// and its response time (ns).
type completed struct{ at, rt int64 }

const (
	waitSvcSamples  = 256
	waitRespSamples = 2048
	// waitGainMin and waitGainMax bound the feedback gain.
	waitGainMin = 0.1
	waitGainMax = 4
	// waitFBSamples is how many completions a feedback step needs.
	waitFBSamples = 20
)

func newWaitModel(initialCapacity float64) *waitModel {
	return &waitModel{
		capacity: initialCapacity,
		gain:     1,
		svc:      ring.New[int64](waitSvcSamples),
		scratch:  make([]int64, 0, waitRespSamples),
		resp:     ring.New[completed](waitRespSamples),
	}
}

// queued returns the events waiting ahead of a new arrival.
func (w *waitModel) queued(inSystem int64) int64 {
	if n := w.bound.len(); n >= 0 {
		return int64(n)
	}
	return max(0, inSystem-w.busy.Load())
}

// allow decides for one arrival (any goroutine).
func (w *waitModel) allow(inSystem int64) bool {
	q := w.queued(inSystem)
	if q == 0 {
		return true
	}
	l := w.limit.Load()
	return l <= 0 || q < l
}

// add records a completion (under the mutex).
func (w *waitModel) add(now int64, queued, service int64) {
	w.done++
	w.svc.Push(service)
	w.resp.Push(completed{at: now, rt: queued + service})
	if len(w.fb) < 4096 {
		w.fb = append(w.fb, float64(queued+service)/1e9)
	}
}

// run is one control step at now (ns), elapsed ns after the previous one.
func (w *waitModel) run(p *params, now, elapsed int64, inSystem int64, rejected uint64) {
	q := int(w.queued(inSystem))
	// Service time statistics.
	if n := w.svc.Len(); n > 0 {
		s := w.svc.AppendTo(w.scratch[:0])
		slices.Sort(s)
		w.svcP90 = float64(s[int(0.9*float64(n))]) / 1e9
		var sum int64
		for _, v := range s {
			sum += v
		}
		w.svcMean = float64(sum) / float64(n) / 1e9
	}
	// Capacity: the completion rate while the queue stayed non-empty.
	if elapsed > 0 {
		x := float64(w.done) / (float64(elapsed) / 1e9)
		if w.thr == 0 {
			w.thr = x
		} else {
			w.thr += (x - w.thr) * 0.3
		}
		switch {
		case q > 0 && w.lastQ > 0 && w.done > 0:
			if w.capacity == 0 {
				w.capacity = x
			} else {
				w.capacity += (x - w.capacity) * min(1, float64(w.done)/16)
			}
		case w.capacity == 0 && w.svcMean > 0 && q > 0 && w.bound.len() >= 0:
			// No saturated period measured yet, but events are queued,
			// so every worker is busy: workers over the mean service
			// time is the capacity (Little's law on the workers). With
			// idle workers this would be too low, so it waits for a
			// queue.
			if busy := inSystem - int64(q); busy > 0 {
				w.capacity = float64(busy) / w.svcMean
			}
		case w.done >= 16 && x > w.capacity:
			// Served more than the estimate without a queue: the
			// capacity is at least that (the pool may have grown).
			w.capacity += (x - w.capacity) * 0.5
		}
	}
	w.lastQ = q
	w.done = 0
	if w.capacity > 0 && w.svcMean > 0 {
		w.busy.Store(int64(math.Round(w.capacity * w.svcMean)))
	}
	// Response-time estimate: the p90 of the completions of the last
	// window (two targets, at least 250 ms).
	win := max(int64(2*p.target*1e9), 250e6)
	recent := w.scratch[:0]
	for _, c := range w.resp.All() {
		if now-c.at <= win {
			recent = append(recent, c.rt)
		}
	}
	w.scratch = recent[:0]
	if len(recent) > 0 {
		slices.Sort(recent)
		w.est = float64(recent[int(0.9*float64(len(recent)))]) / 1e9
	} else if inSystem == 0 {
		w.est = 0
	}
	// Feedback on the budget, once per target (at least) with enough
	// completions.
	if len(w.fb) >= waitFBSamples && now-w.fbStart >= int64(p.target*1e9) {
		slices.Sort(w.fb)
		ratio := w.fb[int(0.9*float64(len(w.fb)))] / p.target
		binding := rejected != w.fbRej
		switch {
		case ratio > 1:
			w.gain *= max(0.7, 1-0.5*(ratio-1))
		case binding && ratio < 0.9:
			w.gain *= min(1.2, 1+0.5*(0.9-ratio))
		}
		w.gain = min(max(w.gain, waitGainMin), waitGainMax)
		w.fb = w.fb[:0]
		w.fbRej = rejected
		w.fbStart = now
	}
	w.budget = max(0, p.target-w.svcP90) * w.gain
	if w.capacity > 0 {
		w.limit.Store(max(1, int64(math.Round(w.capacity*w.budget))))
	}
}

// predicted is the response time the model expects for an arrival now.
func (w *waitModel) predicted(inSystem int64) float64 {
	if w.capacity <= 0 {
		return w.svcP90
	}
	return float64(w.queued(inSystem)+1)/w.capacity + w.svcP90
}

func (w *waitModel) inspect(inSystem int64, report func(string, float64)) {
	report("capacity", w.capacity)
	report("throughput", w.thr)
	report("p90_predicted", w.predicted(inSystem))
	report("service_p90", w.svcP90)
	report("wait_budget", w.budget)
	report("gain", w.gain)
	report("queue_limit", float64(w.limit.Load()))
}
