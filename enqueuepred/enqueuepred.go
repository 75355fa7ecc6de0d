package enqueuepred

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/sandstorm-go/sandstorm/sink"
)

// Classed is implemented by events that belong to a service class. Higher
// classes are more important (thesis §7.2.3: lower classes are cut first).
type Classed interface {
	Class() int
}

// Principal is the entity on whose behalf an event is processed (Whirlwind
// §III.C): a session, a connection or a user. It is shared by all the events
// of that entity, across stages, so that admission control and scheduling
// treat them consistently.
type Principal struct {
	ID       string  // session or user identity; "" means anonymous
	Class    int     // service class; higher is more important
	Priority int     // scheduling / admission priority; higher is more important
	Cost     float64 // estimated relative cost of its requests (0: unknown)
}

// Principaled is implemented by events that carry a principal.
type Principaled interface {
	Principal() Principal
}

// Inspector reports a predicate's state as name/value pairs for the
// profiler. Durations are reported in seconds; an unlimited value (rate,
// tokens) is reported as -1.
type Inspector interface {
	Inspect(report func(name string, value float64))
}

// charger is implemented by this package's predicates, which hold
// per-event resources (credits, tokens) or count admissions: charge
// accounts for e as admitted without deciding. It is used for
// non-rejectable events and by composites (Any charges the children that
// did not decide; Session and Saturated charge the inner predicate when
// they admit on their own), so that the later sink.Done or sink.Cancel
// for e balances. It is not a runtime hook: the sink never calls it.
type charger interface {
	charge(e sink.Event)
}

// scalable is implemented by regulators whose limit (rate, count, queue
// length) can be scaled down by an overload degree; see NewModified. f is in
// [0, 1]; 1 restores the nominal limit.
type scalable interface {
	sink.Predicate
	Scale(f float64)
}

// ClassOf returns e's class: Classed, else its principal's class, else 0.
func ClassOf(e sink.Event) int {
	switch v := e.(type) {
	case Classed:
		return v.Class()
	case Principaled:
		return v.Principal().Class
	}
	return 0
}

// PrincipalOf returns e's principal, if it carries one.
func PrincipalOf(e sink.Event) (Principal, bool) {
	if v, ok := e.(Principaled); ok {
		return v.Principal(), true
	}
	return Principal{}, false
}

// PriorityOf returns e's principal's priority, or 0.
func PriorityOf(e sink.Event) int {
	if v, ok := e.(Principaled); ok {
		return v.Principal().Priority
	}
	return 0
}

// charge charges e to p if p implements charger.
func charge(p sink.Predicate, e sink.Event) {
	if c, ok := p.(charger); ok {
		c.charge(e)
	}
}

// inspect reports p's state through report if p implements Inspector, and
// reports whether it did.
func inspect(p sink.Predicate, report func(name string, value float64)) bool {
	if in, ok := p.(Inspector); ok {
		in.Inspect(report)
		return true
	}
	return false
}

// counts tallies a predicate's decisions, on striped counters: producers
// on different cores deciding at once do not fight over one cache line.
type counts struct {
	accepted stripedCounter
	rejected stripedCounter
}

func (c *counts) yes() bool { c.accepted.Add(1); return true }
func (c *counts) no() bool  { c.rejected.Add(1); return false }

// Accepted returns how many events the predicate admitted (charged
// non-rejectable events included).
func (c *counts) Accepted() uint64 { return c.accepted.Load() }

// Rejected returns how many events the predicate refused.
func (c *counts) Rejected() uint64 { return c.rejected.Load() }

func (c *counts) inspect(report func(string, float64)) {
	report("accepted", float64(c.accepted.Load()))
	report("rejected", float64(c.rejected.Load()))
}

// monoClock reads time as nanoseconds since its creation. Without a Now
// function it uses the monotonic clock alone (time.Since), which costs about
// half of time.Now.
type monoClock struct {
	now    func() time.Time // nil: monotonic clock
	origin time.Time
}

func newMonoClock(now func() time.Time) monoClock {
	if now == nil {
		return monoClock{origin: time.Now()}
	}
	return monoClock{now: now, origin: now()}
}

// ns returns nanoseconds since the clock's origin.
func (c *monoClock) ns() int64 {
	if c.now == nil {
		return int64(time.Since(c.origin))
	}
	return int64(c.now().Sub(c.origin))
}

// at converts ns back to a time.
func (c *monoClock) at(ns int64) time.Time { return c.origin.Add(time.Duration(ns)) }

func nowFunc(f func() time.Time) func() time.Time {
	if f == nil {
		return time.Now
	}
	return f
}

// prefixed returns a report function that prefixes names.
func prefixed(prefix string, report func(string, float64)) func(string, float64) {
	return func(name string, v float64) { report(prefix+name, v) }
}

func childPrefix(i int, p sink.Predicate) string {
	return fmt.Sprintf("%d.%s.", i, sink.PredicateName(p))
}

// boundSink holds the sink a length-based predicate guards.
type boundSink struct {
	s atomic.Pointer[sinkBox]
}

type sinkBox struct{ s sink.Sink }

// Bind records s; sink.Queue.SetPredicate calls it.
func (b *boundSink) Bind(s sink.Sink) {
	if s == nil {
		b.s.Store(nil)
		return
	}
	b.s.Store(&sinkBox{s})
}

// len returns the bound sink's length, or -1 if unbound.
func (b *boundSink) len() int {
	if x := b.s.Load(); x != nil {
		return x.s.Len()
	}
	return -1
}

func seconds(d time.Duration) float64 { return d.Seconds() }

// finite maps +Inf (unlimited) to -1 for Inspect, whose consumers (JSON,
// Prometheus text) want finite numbers.
func finite(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return -1
	}
	return v
}

// stripedCounter is a counter written from many goroutines at once: adds
// go to one of several cache lines picked at random (math/rand/v2's
// per-thread generator), so concurrent writers rarely contend.
type stripedCounter struct {
	stripes [8]struct {
		n atomic.Uint64
		_ [56]byte
	}
}

func (c *stripedCounter) add(n uint64) { c.stripes[rand.Uint32()&7].n.Add(n) }

// Add and Load make a stripedCounter a drop-in for an atomic.Uint64 that
// is only added to.
func (c *stripedCounter) Add(n uint64) { c.add(n) }
func (c *stripedCounter) Load() uint64 { return c.load() }

func (c *stripedCounter) load() uint64 {
	var t uint64
	for i := range c.stripes {
		t += c.stripes[i].n.Load()
	}
	return t
}
