package enqueuepred

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Sampler reads one load indicator (JOBS §5, §7.8) for a Modifier;
// NewSampler makes the built-in ones. Samplers are called from one
// goroutine at a time. An error keeps the modifier's last degree (and is
// logged once per distinct message).
//
// A sampler may also be fed the guarded stage's own events (JOBS:
// samplers triggered by events): if it has the methods
//
//	Arrived(e sink.Event)
//	Completed(e sink.Event, queued, service time.Duration)
//
// the regulator made by NewModified calls Arrived for every event it
// decides on (admitted or not) and Completed for every completion
// (sink.Done), and Sample then reports what the events since the previous
// sample showed.
type Sampler interface {
	Name() string
	Sample(now time.Time) (float64, error)
}

// samplerKinds are the kinds NewSampler knows.
const samplerKinds = "arrivals, cpu, goroutines, heap, queue, rt, service, wait"

// NewSampler returns a built-in sampler, the one a YAML modifier's
// `sampler:` names (units in brackets):
//
//	cpu         the process's CPU use since the previous sample [percent of the machine's CPUs]
//	heap        the Go heap in use [MiB]
//	goroutines  the number of goroutines
//	queue       the queue length of stage, found through env.Lookup at each sample [events]
//	rt          the response time of stage [ms]: env.ResponseTime's, else the p90
//	            of the first rt predicate of its predicate tree
//	arrivals    events offered to the guarded stage, admitted or not [events/s]
//	service     mean handler time of the guarded stage's completions [ms]
//	wait        mean queue wait of the guarded stage's completions [ms]
//
// The last three are fed by the events of the stage whose regulator the
// modifier modifies (see Sampler). stage is required by queue and rt and
// refused by the others. Errors wrap ErrBadConfig.
func NewSampler(kind, stage string, env Env) (Sampler, error) {
	switch kind {
	case "queue", "rt":
		if stage == "" {
			return nil, fmt.Errorf("%w: sampler %q needs a stage", ErrBadConfig, kind)
		}
	case "cpu", "heap", "goroutines", "arrivals", "service", "wait":
		if stage != "" {
			return nil, fmt.Errorf("%w: sampler %q takes no stage", ErrBadConfig, kind)
		}
	default:
		return nil, fmt.Errorf("%w: unknown sampler %q (known: %s)", ErrBadConfig, kind, samplerKinds)
	}
	return newSampler(kind, stage, env), nil
}

// newSampler returns the sampler of a kind and stage NewSampler checked.
func newSampler(kind, stage string, env Env) Sampler {
	switch kind {
	case "cpu":
		return newCPUSampler()
	case "heap":
		return newHeapSampler()
	case "goroutines":
		return goroutineSampler{}
	case "queue":
		return queueSampler{Stage: stage, Lookup: env.Lookup}
	case "rt":
		return rtSampler{Stage: stage, Lookup: env.Lookup, ResponseTime: env.ResponseTime}
	case "arrivals":
		return newEventSampler(kindArrivals)
	case "service":
		return newEventSampler(kindService)
	default: // "wait"
		return newEventSampler(kindWait)
	}
}

// errNoSample is wrapped by samplers that cannot produce a value yet (the
// first CPU reading, a stage not created yet).
var errNoSample = errors.New("enqueuepred: no sample")

// cpuSampler reports the process's CPU use since the previous sample, in
// percent of the machine's CPUs (0-100), from /proc/self/stat where there is
// one, otherwise from the Go runtime's CPU estimates.
type cpuSampler struct {
	mu       sync.Mutex
	lastCPU  float64 // seconds
	lastWall time.Time
	proc     bool
	rt       []metrics.Sample
}

// newCPUSampler returns a CPU sampler.
func newCPUSampler() *cpuSampler {
	_, err := procCPU()
	return &cpuSampler{
		proc: err == nil,
		rt:   []metrics.Sample{{Name: "/cpu/classes/user:cpu-seconds"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}},
	}
}

// Name implements Sampler.
func (s *cpuSampler) Name() string { return "cpu" }

// Sample implements Sampler. The first call only records a starting point
// and returns an error wrapping errNoSample.
func (s *cpuSampler) Sample(now time.Time) (float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cpu, err := s.read()
	if err != nil {
		return 0, err
	}
	lastCPU, lastWall := s.lastCPU, s.lastWall
	s.lastCPU, s.lastWall = cpu, now
	if lastWall.IsZero() {
		return 0, fmt.Errorf("%w: cpu needs two readings", errNoSample)
	}
	wall := now.Sub(lastWall).Seconds()
	if wall <= 0 {
		return 0, fmt.Errorf("%w: no time elapsed", errNoSample)
	}
	return 100 * (cpu - lastCPU) / (wall * float64(runtime.NumCPU())), nil
}

func (s *cpuSampler) read() (float64, error) {
	if s.proc {
		return procCPU()
	}
	metrics.Read(s.rt)
	total := 0.0
	for _, m := range s.rt {
		if m.Value.Kind() != metrics.KindFloat64 {
			return 0, fmt.Errorf("%w: runtime metric %s unsupported", errNoSample, m.Name)
		}
		total += m.Value.Float64()
	}
	return total, nil
}

const clockTicks = 100 // USER_HZ; 100 on every Linux platform Go supports

// procCPU returns user+system CPU seconds of this process.
func procCPU() (float64, error) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStat(b)
}

// parseProcStat extracts utime+stime (fields 14 and 15) from a
// /proc/<pid>/stat line, in seconds.
func parseProcStat(b []byte) (float64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("enqueuepred: malformed /proc stat")
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, errors.New("enqueuepred: short /proc stat")
	}
	u, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	s, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("enqueuepred: malformed /proc stat times")
	}
	return float64(u+s) / clockTicks, nil
}

// heapSampler reports the Go heap in use (live and not yet swept objects)
// in MiB.
type heapSampler struct {
	mu sync.Mutex
	s  []metrics.Sample
}

// newHeapSampler returns a heap sampler.
func newHeapSampler() *heapSampler {
	return &heapSampler{s: []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}}
}

// Name implements Sampler.
func (h *heapSampler) Name() string { return "heap" }

// Sample implements Sampler.
func (h *heapSampler) Sample(time.Time) (float64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	metrics.Read(h.s)
	if h.s[0].Value.Kind() != metrics.KindUint64 {
		return 0, fmt.Errorf("%w: heap metric unsupported", errNoSample)
	}
	return float64(h.s[0].Value.Uint64()) / (1 << 20), nil
}

// goroutineSampler reports the number of goroutines.
type goroutineSampler struct{}

// Name implements Sampler.
func (goroutineSampler) Name() string { return "goroutines" }

// Sample implements Sampler.
func (goroutineSampler) Sample(time.Time) (float64, error) {
	return float64(runtime.NumGoroutine()), nil
}

// queueSampler reports the queue length of a stage found through Lookup at
// each sample (the stage may be created later than the predicate).
type queueSampler struct {
	Stage  string
	Lookup func(stage string) (sink.Sink, bool)
}

// Name implements Sampler.
func (q queueSampler) Name() string { return "queue:" + q.Stage }

// Sample implements Sampler.
func (q queueSampler) Sample(time.Time) (float64, error) {
	if q.Lookup == nil {
		return 0, fmt.Errorf("%w: no stage lookup for queue sampler of %q", errNoSample, q.Stage)
	}
	s, ok := q.Lookup(q.Stage)
	if !ok {
		return 0, fmt.Errorf("%w: stage %q not found", errNoSample, q.Stage)
	}
	return float64(s.Len()), nil
}

// p90Reporter is implemented by predicates that estimate their stage's
// 90th-percentile response time (ResponseTime).
type p90Reporter interface {
	P90() time.Duration
}

// rtSampler reports a stage's response time in milliseconds:
// from ResponseTime when set (the runtime's own measurement), otherwise from
// the first p90Reporter in the stage's predicate tree.
type rtSampler struct {
	Stage        string
	Lookup       func(stage string) (sink.Sink, bool)
	ResponseTime func(stage string) (time.Duration, bool)
}

// Name implements Sampler.
func (r rtSampler) Name() string { return "rt:" + r.Stage }

// Sample implements Sampler.
func (r rtSampler) Sample(time.Time) (float64, error) {
	if r.ResponseTime != nil {
		if d, ok := r.ResponseTime(r.Stage); ok {
			return float64(d) / float64(time.Millisecond), nil
		}
	}
	if r.Lookup == nil {
		return 0, fmt.Errorf("%w: no stage lookup for response-time sampler of %q", errNoSample, r.Stage)
	}
	s, ok := r.Lookup(r.Stage)
	if !ok {
		return 0, fmt.Errorf("%w: stage %q not found", errNoSample, r.Stage)
	}
	var rep p90Reporter
	sink.Walk(s.Predicate(), func(p sink.Predicate) {
		if x, ok := p.(p90Reporter); ok && rep == nil {
			rep = x
		}
	})
	if rep == nil {
		return 0, fmt.Errorf("%w: stage %q measures no response time (give it an rt predicate)", errNoSample, r.Stage)
	}
	return float64(rep.P90()) / float64(time.Millisecond), nil
}
