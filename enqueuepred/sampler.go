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

// Sampler reads one load indicator (JOBS §5, §7.8). Samplers are called
// from one goroutine at a time.
type Sampler interface {
	Name() string
	Sample(now time.Time) (float64, error)
}

// SamplerFunc adapts a function to Sampler.
type SamplerFunc struct {
	Label string
	Fn    func(now time.Time) (float64, error)
}

// Name implements Sampler.
func (s SamplerFunc) Name() string { return s.Label }

// Sample implements Sampler.
func (s SamplerFunc) Sample(now time.Time) (float64, error) { return s.Fn(now) }

// ErrNoSample is wrapped by samplers that cannot produce a value yet (the
// first CPU reading, a stage not created yet).
var ErrNoSample = errors.New("enqueuepred: no sample")

// CPUSampler reports the process's CPU use since the previous sample, in
// percent of the machine's CPUs (0-100), from /proc/self/stat where there is
// one, otherwise from the Go runtime's CPU estimates.
type CPUSampler struct {
	mu       sync.Mutex
	lastCPU  float64 // seconds
	lastWall time.Time
	proc     bool
	rt       []metrics.Sample
}

// NewCPUSampler returns a CPU sampler.
func NewCPUSampler() *CPUSampler {
	_, err := procCPU()
	return &CPUSampler{
		proc: err == nil,
		rt:   []metrics.Sample{{Name: "/cpu/classes/user:cpu-seconds"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}},
	}
}

// Name implements Sampler.
func (s *CPUSampler) Name() string { return "cpu" }

// Sample implements Sampler. The first call only records a starting point
// and returns an error wrapping ErrNoSample.
func (s *CPUSampler) Sample(now time.Time) (float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cpu, err := s.read()
	if err != nil {
		return 0, err
	}
	lastCPU, lastWall := s.lastCPU, s.lastWall
	s.lastCPU, s.lastWall = cpu, now
	if lastWall.IsZero() {
		return 0, fmt.Errorf("%w: cpu needs two readings", ErrNoSample)
	}
	wall := now.Sub(lastWall).Seconds()
	if wall <= 0 {
		return 0, fmt.Errorf("%w: no time elapsed", ErrNoSample)
	}
	return 100 * (cpu - lastCPU) / (wall * float64(runtime.NumCPU())), nil
}

func (s *CPUSampler) read() (float64, error) {
	if s.proc {
		return procCPU()
	}
	metrics.Read(s.rt)
	total := 0.0
	for _, m := range s.rt {
		if m.Value.Kind() != metrics.KindFloat64 {
			return 0, fmt.Errorf("%w: runtime metric %s unsupported", ErrNoSample, m.Name)
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

// HeapSampler reports the Go heap in use (live and not yet swept objects)
// in MiB.
type HeapSampler struct {
	mu sync.Mutex
	s  []metrics.Sample
}

// NewHeapSampler returns a heap sampler.
func NewHeapSampler() *HeapSampler {
	return &HeapSampler{s: []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}}
}

// Name implements Sampler.
func (h *HeapSampler) Name() string { return "heap" }

// Sample implements Sampler.
func (h *HeapSampler) Sample(time.Time) (float64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	metrics.Read(h.s)
	if h.s[0].Value.Kind() != metrics.KindUint64 {
		return 0, fmt.Errorf("%w: heap metric unsupported", ErrNoSample)
	}
	return float64(h.s[0].Value.Uint64()) / (1 << 20), nil
}

// GoroutineSampler reports the number of goroutines.
type GoroutineSampler struct{}

// Name implements Sampler.
func (GoroutineSampler) Name() string { return "goroutines" }

// Sample implements Sampler.
func (GoroutineSampler) Sample(time.Time) (float64, error) {
	return float64(runtime.NumGoroutine()), nil
}

// QueueSampler reports the queue length of a stage found through Lookup at
// each sample (the stage may be created later than the predicate).
type QueueSampler struct {
	Stage  string
	Lookup func(stage string) (sink.Sink, bool)
}

// Name implements Sampler.
func (q QueueSampler) Name() string { return "queue:" + q.Stage }

// Sample implements Sampler.
func (q QueueSampler) Sample(time.Time) (float64, error) {
	if q.Lookup == nil {
		return 0, fmt.Errorf("%w: no stage lookup for queue sampler of %q", ErrNoSample, q.Stage)
	}
	s, ok := q.Lookup(q.Stage)
	if !ok {
		return 0, fmt.Errorf("%w: stage %q not found", ErrNoSample, q.Stage)
	}
	return float64(s.Len()), nil
}

// p90Reporter is implemented by predicates that estimate their stage's
// 90th-percentile response time (ResponseTime).
type p90Reporter interface {
	P90() time.Duration
}

// ResponseTimeSampler reports a stage's response time in milliseconds:
// from ResponseTime when set (the runtime's own measurement), otherwise from
// the first p90Reporter in the stage's predicate tree.
type ResponseTimeSampler struct {
	Stage        string
	Lookup       func(stage string) (sink.Sink, bool)
	ResponseTime func(stage string) (time.Duration, bool)
}

// Name implements Sampler.
func (r ResponseTimeSampler) Name() string { return "rt:" + r.Stage }

// Sample implements Sampler.
func (r ResponseTimeSampler) Sample(time.Time) (float64, error) {
	if r.ResponseTime != nil {
		if d, ok := r.ResponseTime(r.Stage); ok {
			return float64(d) / float64(time.Millisecond), nil
		}
	}
	if r.Lookup == nil {
		return 0, fmt.Errorf("%w: no stage lookup for response-time sampler of %q", ErrNoSample, r.Stage)
	}
	s, ok := r.Lookup(r.Stage)
	if !ok {
		return 0, fmt.Errorf("%w: stage %q not found", ErrNoSample, r.Stage)
	}
	var rep p90Reporter
	sink.Walk(s.Predicate(), func(p sink.Predicate) {
		if x, ok := p.(p90Reporter); ok && rep == nil {
			rep = x
		}
	})
	if rep == nil {
		return 0, fmt.Errorf("%w: stage %q measures no response time (give it an rt predicate)", ErrNoSample, r.Stage)
	}
	return float64(rep.P90()) / float64(time.Millisecond), nil
}
