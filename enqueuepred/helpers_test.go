package enqueuepred

import (
	"sync"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// fakeClock is a manual clock for controller tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// ev is a test event with a class, a principal and a rejectability flag.
type ev struct {
	class, prio int
	id          string
	must        bool
}

func (e ev) Class() int { return e.class }
func (e ev) Principal() Principal {
	return Principal{ID: e.id, Class: e.class, Priority: e.prio}
}
func (e ev) NonRejectable() bool { return e.must }

// lenSink is a sink.Sink whose length the test sets.
type lenSink struct {
	sink.Sink
	n int
}

func (l *lenSink) Len() int { return l.n }

// count returns how many of n Accept calls p admits.
func count(p sink.Predicate, e sink.Event, n int) int {
	k := 0
	for i := 0; i < n; i++ {
		if p.Accept(e) {
			k++
		}
	}
	return k
}

// inspectMap collects an Inspector's report.
func inspectMap(p sink.Predicate) map[string]float64 {
	m := map[string]float64{}
	inspect(p, func(k string, v float64) { m[k] = v })
	return m
}

// admitMany admits es through a sink.Admission, all or nothing, as
// EnqueueMany does: each event is asked, and those admitted are
// cancelled when one is refused.
func admitMany(p sink.Predicate, es []sink.Event) bool {
	var a sink.Admission
	a.SetPredicate(nil, p)
	_, err := a.AdmitMany(es)
	return err == nil
}

// samplerFunc adapts a function to Sampler.
type samplerFunc struct {
	Label string
	Fn    func(now time.Time) (float64, error)
}

// Name implements Sampler.
func (s samplerFunc) Name() string { return s.Label }

// Sample implements Sampler.
func (s samplerFunc) Sample(now time.Time) (float64, error) { return s.Fn(now) }
